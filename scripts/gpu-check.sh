#!/usr/bin/env bash
# The GPU check in one command on a bare, offline GPU node: carried wheels into a temporary target (never the
# system), the suite from this checkout via PYTHONPATH, everything written into OUTDIR, the table printed last.
#
#   scripts/gpu-check.sh [--dry-run] OUTDIR
#
# OUTDIR gets table.txt, check.json (every row and step, the node's facts), quick.json (configs/quick.yaml on
# every device) and gpu-check.log. Exit status: 0 all checks passed, 1 a check failed, 2 no GPU (without
# --dry-run), 124 the hard stop killed it. PYTHON picks the interpreter (default python3), GPU_CHECK_WHEELS the
# wheel folder (default .whl); docs/gpu-check.md.
set -uo pipefail

# The check budgets itself to ~5.5 minutes (suite.gpu_check.BUDGET_S); this kills it, whatever it does, well
# before 9 minutes, and the table written so far is still printed.
HARD_STOP_S=${GPU_CHECK_HARD_STOP_S:-510}
KILL_AFTER_S=15

usage() { echo "usage: $0 [--dry-run] OUTDIR" >&2; exit 64; }
dry=()
out=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry=(--dry-run) ;;
        -h|--help) usage ;;
        -*) echo "$0: unknown option $arg" >&2; usage ;;
        *) [ -z "$out" ] || usage; out=$arg ;;
    esac
done
[ -n "$out" ] || usage

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
log="$out/gpu-check.log"
site=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")
trap 'rm -rf "$site"' EXIT
start=$SECONDS

{
    echo "== node facts (before anything is installed)"
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    "$python" --version
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max --format=csv,noheader 2>&1 \
        || echo "nvidia-smi: not available"
    "$python" - <<'EOF'
import importlib.metadata as md
for name in ("torch", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
             "jsonschema", "pytest", "pytest-benchmark", "pytest-timeout", "pandas", "matplotlib", "jinja2",
             "pyyaml", "nvidia-ml-py", "py-cpuinfo", "hypothesis", "pyarrow"):
    try:
        print(f"  {name:<20} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name:<20} MISSING")
EOF
    shopt -s nullglob
    wheel_dir=${GPU_CHECK_WHEELS:-$root/.whl}
    wheels=("$wheel_dir"/*.whl)
    if [ ${#wheels[@]} -gt 0 ]; then
        echo "== installing ${#wheels[@]} carried wheel(s) into $site (not the system)"
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --root-user-action=ignore --target "$site" "${wheels[@]}" || { echo "gpu-check: installing the carried wheels failed"; exit 3; }
        ls "$site"
    else
        echo "== no carried wheels in $wheel_dir (scripts/prepare-device.sh makes them); using what is installed"
    fi
} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"

export PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
cd "$root" || exit 1
echo "== suite.gpu_check ${dry[*]} (hard stop after ${HARD_STOP_S} s)" | tee -a "$log"
timeout --kill-after="$KILL_AFTER_S" "$HARD_STOP_S" "$python" -m suite.gpu_check "${dry[@]}" --out "$out" \
    >>"$log" 2>&1
status=$?
echo "== finished with status $status after $((SECONDS - start)) s; log: $log" | tee -a "$log"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "gpu-check: HARD STOP after ${HARD_STOP_S} s; the table below holds the steps finished before it" \
        | tee -a "$log"
    status=124
fi
# The table last, as the check wrote it (after every step, so a hard stop still leaves one).
if [ -f "$out/table.txt" ]; then
    cat "$out/table.txt"
else
    echo "gpu-check: no table was written; the end of the log:"
    tail -n 40 "$log"
fi
exit "$status"
