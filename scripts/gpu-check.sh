#!/usr/bin/env bash
# On a machine with a GPU and the project installed: gpu tests, quick config, timing truth; a table last.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m suite.gpu_check "$@"
