#!/usr/bin/env bash
# On a machine with a package index: download the wheels an offline GPU node lacks into .whl/ (ignored by git,
# carried with the checkout), for the node's Python and platform; scripts/gpu-check.sh installs them there.
#
#   scripts/prepare-device.sh            # CPython 3.12, manylinux x86_64 (the H200 node: docs/gpu-check.md)
#   PY_VERSION=3.11 scripts/prepare-device.sh
#
# The node has torch, pytest, pytest-benchmark, pandas, matplotlib, jinja2, pyyaml, nvidia-ml-py, ...; it lacks
# pydantic and what pydantic needs. jsonschema is not carried: the one test that uses it skips without it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.whl"
python=${PYTHON:-python3}
py_version=${PY_VERSION:-3.12}
# pydantic pins pydantic-core exactly; pip resolves that pin and the rest for the target platform. This is
# the version the project is tested with (a newer one works too: set PYDANTIC).
pydantic=${PYDANTIC:-pydantic==2.14.4}
# Also carried: typing-extensions, newer than some images have (pydantic needs a recent one); a newer one is
# backward compatible, so shadowing the node's copy on PYTHONPATH is safe.
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

rm -rf "$dest"
mkdir -p "$dest"
args=(download --only-binary=:all: --python-version "$py_version" --implementation cp --dest "$dest"
      --disable-pip-version-check --no-cache-dir)
for p in "${platforms[@]}"; do args+=(--platform "$p"); done
echo "+ $python -m pip ${args[*]} $pydantic"
"$python" -m pip "${args[@]}" "$pydantic"

# Check what came: one version of each package, and pydantic-core at exactly pydantic's pin.
"$python" - "$dest" <<'EOF'
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

dest = Path(sys.argv[1])
wheels = sorted(dest.glob("*.whl"))
names = [re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in wheels]
versions = {n: w.name.split("-")[1] for n, w in zip(names, wheels)}
twice = [n for n, c in Counter(names).items() if c > 1]
if twice:
    sys.exit(f"prepare-device: two versions of {', '.join(twice)} in {dest}: keep one (pip install would refuse)")
need = {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions"}
if need - set(versions):
    sys.exit(f"prepare-device: missing {', '.join(sorted(need - set(versions)))} in {dest}")
(pyd,) = [w for n, w in zip(names, wheels) if n == "pydantic"]
with zipfile.ZipFile(pyd) as z:
    meta = z.read(next(f for f in z.namelist() if f.endswith(".dist-info/METADATA"))).decode()
pin = re.search(r"^Requires-Dist: pydantic-core==([\w.]+)", meta, re.M)
if pin is None or pin.group(1) != versions["pydantic-core"]:
    sys.exit(f"prepare-device: pydantic {versions['pydantic']} pins pydantic-core "
             f"{pin.group(1) if pin else '?'}, but {versions['pydantic-core']} was downloaded")
total = sum(w.stat().st_size for w in wheels)
for w in wheels:
    print(f"  {w.name}  ({w.stat().st_size / 2**20:.1f} MiB)")
print(f"prepare-device: {len(wheels)} wheels, {total / 2**20:.1f} MiB in {dest}; pydantic-core matches "
      f"pydantic's pin ({versions['pydantic-core']})")
EOF
