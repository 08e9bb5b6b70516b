#!/usr/bin/env bash
# A CPU stand-in of the offline H200 node (docs/gpu-check.md), to run the GPU check's dry run under the node's
# Python and package versions before a scarce GPU minute does: Python 3.12, torch 2.11 (the CUDA build, run on
# the CPU), the packages the node has, without pydantic or jsonschema, and a pytest-benchmark older than the
# suite needs (the node's version is not known: the worst case).
#
#   scripts/node-standin.sh DIR                  # makes a venv in DIR (~4 GB: torch's CUDA libraries)
#   PYTHON=DIR/bin/python scripts/gpu-check.sh --dry-run OUT
#
# Environment: PYTHON312 (default python3.12), NODE_TORCH (default torch==2.11.0), NODE_PYTEST_BENCHMARK
# (default pytest-benchmark==5.2.3), NODE_PANDAS (default "pandas<3").
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 64; }
python=${PYTHON312:-python3.12}
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
    || { echo "$0: $python is not Python 3.12 (set PYTHON312)" >&2; exit 64; }
"$python" -m venv "$1"
"$1/bin/python" -m pip install -q --disable-pip-version-check "${NODE_TORCH:-torch==2.11.0}" \
    "${NODE_PYTEST_BENCHMARK:-pytest-benchmark==5.2.3}" "${NODE_PANDAS:-pandas<3}" pytest pytest-timeout \
    matplotlib jinja2 pyyaml nvidia-ml-py py-cpuinfo hypothesis pyarrow numpy
"$1/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
    | grep -iE '^(torch|pytest|pytest-benchmark|pandas|numpy|matplotlib|pydantic|jsonschema) ' || true
echo "node-standin: $1 ready; now: PYTHON=$1/bin/python scripts/gpu-check.sh --dry-run OUT"
