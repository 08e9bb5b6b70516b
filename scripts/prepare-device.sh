#!/usr/bin/env bash
# On a machine with a package index: download the wheels an offline GPU node lacks into .whl/ (ignored by git,
# carried with the checkout), for the node's Python and platform; scripts/gpu-check.sh installs them there.
#
#   scripts/prepare-device.sh            # CPython 3.12, manylinux x86_64 (the H200 node: docs/gpu-check.md)
#   PY_VERSION=3.11 scripts/prepare-device.sh
#
# The node has torch, pytest, pandas, matplotlib, jinja2, pyyaml, nvidia-ml-py, ...; it lacks pydantic and what
# pydantic needs. Its pytest-benchmark's version is not known, and one older than 5.3.1 cannot run the suite
# (suite/requirements.py says why): pytest-benchmark is carried too, and gpu-check.sh installs a carried wheel
# only where the node lacks the package or has an older one. jsonschema is not carried: the one test that
# uses it skips without it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.whl"
python=${PYTHON:-python3}
py_version=${PY_VERSION:-3.12}
# pydantic pins pydantic-core exactly; pip resolves that pin and the rest for the target platform. This is
# the version the project is tested with (a newer one works too: set PYDANTIC).
pydantic=${PYDANTIC:-pydantic==2.14.4}
# pyproject's floor (suite.requirements.MIN_PYTEST_BENCHMARK); pure Python. --no-deps: its py-cpuinfo2 is the
# node's py-cpuinfo under another name (same `cpuinfo` module).
pytest_benchmark=${PYTEST_BENCHMARK:-pytest-benchmark==5.3.1}
# pip adds typing-extensions (pydantic needs a recent one): gpu-check.sh installs it only where the node's is
# older, and a newer one is backward compatible.
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

rm -rf "$dest"
mkdir -p "$dest"
args=(download --only-binary=:all: --python-version "$py_version" --implementation cp --dest "$dest"
      --disable-pip-version-check --no-cache-dir)
for p in "${platforms[@]}"; do args+=(--platform "$p"); done
echo "+ $python -m pip ${args[*]} $pydantic"
"$python" -m pip "${args[@]}" "$pydantic"
echo "+ $python -m pip ${args[*]} --no-deps $pytest_benchmark"
"$python" -m pip "${args[@]}" --no-deps "$pytest_benchmark"

# Check what came: one version of each package, all that the node needs, pydantic-core at exactly pydantic's
# pin, pytest-benchmark new enough.
(cd "$root" && PYTHONPATH="$root" "$python" -m suite.tools.requirements carried "$dest")
total=0
for w in "$dest"/*.whl; do
    size=$(stat -c %s "$w")
    total=$((total + size))
    echo "  $(basename "$w")  ($((size / 1024)) KiB)"
done
echo "prepare-device: $(ls "$dest"/*.whl | wc -l) wheels, $((total / 1024)) KiB in $dest (gpu-check.sh installs" \
     "those the node lacks or has older)"
