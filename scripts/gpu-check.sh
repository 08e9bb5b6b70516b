#!/usr/bin/env bash
# The GPU check in one command on a bare, offline GPU node: carried wheels into a temporary target (never the
# system), the suite from this checkout via PYTHONPATH, everything written into OUTDIR, the table printed last.
#
#   scripts/gpu-check.sh [--dry-run] [--only STEP,STEP...] OUTDIR     # --only: rerun just those steps
#
# OUTDIR gets at most six files: table.txt, check.json (every row and step, the node's facts), results.json
# (every suite run of the check merged: one pytest-benchmark file), quick.json (configs/quick.yaml's CUDA
# cases), gpu-check.log, and quick.partial.jsonl only if the quick run was cut short. Exit status: 0 every
# check that ran passed (steps out of time are NOT RUN, said in the table, and no failure), 1 a check failed,
# 2 no GPU (without --dry-run), 3 the carried wheels could not be installed or the suite's requirements are
# not met (suite/tools/requirements.py names each and its fix), 124 the hard stop killed it.
# Environment: PYTHON (default python3), GPU_CHECK_WHEELS (default .whl), GPU_CHECK_BUDGET_S (default 265),
# GPU_CHECK_HARD_STOP_S (default budget + 25). docs/gpu-check.md.
set -uo pipefail

# The check starts no step that no longer fits its budget (suite.tools.gpu_check.BUDGET_S); the hard stop kills
# it, whatever it does, soon after, so that the whole command ends before 6 minutes and a rerun fits the lease.
BUDGET_S=${GPU_CHECK_BUDGET_S:-265}
HARD_STOP_MARGIN_S=25
KILL_AFTER_S=15

usage() { echo "usage: $0 [--dry-run] [--only STEP,STEP...] OUTDIR" >&2; exit 64; }
dry=()
only=()
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=(--dry-run) ;;
        --only) [ $# -ge 2 ] || usage; only=(--only "$2"); shift ;;
        --only=*) only=(--only "${1#--only=}") ;;
        -h|--help) usage ;;
        -*) echo "$0: unknown option $1" >&2; usage ;;
        *) [ -z "$out" ] || usage; out=$1 ;;
    esac
    shift
done
[ -n "$out" ] || usage
case "$BUDGET_S" in
    ''|*[!0-9]*) echo "$0: GPU_CHECK_BUDGET_S=$BUDGET_S: expected whole seconds, e.g. 265" >&2; exit 64 ;;
esac
HARD_STOP_S=${GPU_CHECK_HARD_STOP_S:-$((BUDGET_S + HARD_STOP_MARGIN_S))}
case "$HARD_STOP_S" in
    ''|*[!0-9]*) echo "$0: GPU_CHECK_HARD_STOP_S=$HARD_STOP_S: expected whole seconds" >&2; exit 64 ;;
esac

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
    echo "machine: $(uname -m) (carried wheels are for x86_64; an aarch64 node, a GH200, needs others)"
    "$python" --version
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,pcie.link.gen.max \
        --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
    "$python" - <<'EOF'
import importlib.metadata as md
for name in ("torch", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
             "jsonschema", "pytest", "pytest-benchmark", "pytest-timeout", "pandas", "matplotlib", "jinja2",
             "pyyaml", "nvidia-ml-py", "py-cpuinfo", "hypothesis", "pyarrow", "pip"):
    try:
        print(f"  {name:<20} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name:<20} MISSING")
EOF
    shopt -s nullglob
    wheel_dir=${GPU_CHECK_WHEELS:-$root/.whl}
    [ ! -d "$wheel_dir" ] || wheel_dir=$(cd "$wheel_dir" && pwd)
    wheels=("$wheel_dir"/*.whl)
    if [ ${#wheels[@]} -gt 0 ]; then
        # Only what the node lacks or has older (suite/tools/requirements.py): a newer package of the node's own
        # stays in front, where the node's other packages expect it.
        echo "== choosing among ${#wheels[@]} carried wheel(s) in $wheel_dir"
        # From the checkout: `python -m` looks in the current folder first, where another `suite` may be.
        chosen=$(cd "$root" && PYTHONPATH="$root" "$python" -m suite.tools.requirements wheels "$wheel_dir") \
            || { echo "gpu-check: could not read the carried wheels in $wheel_dir"; exit 3; }
        wheels=()
        [ -z "$chosen" ] || mapfile -t wheels <<< "$chosen"
    else
        echo "== no carried wheels in $wheel_dir (scripts/prepare-device.sh makes them); using what is installed"
    fi
    if [ ${#wheels[@]} -gt 0 ]; then
        echo "== installing ${#wheels[@]} carried wheel(s) into $site (not the system)"
        if "$python" -m pip --version >/dev/null 2>&1; then
            "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --disable-pip-version-check --root-user-action=ignore --target "$site" "${wheels[@]}" \
                || { echo "gpu-check: pip could not install the carried wheels (see above)"; exit 3; }
        else
            # No pip on the node: a wheel is a zip of importable files (the carried ones need no build step).
            echo "   (no pip here: unpacking each wheel with python -m zipfile)"
            for w in "${wheels[@]}"; do
                "$python" -m zipfile -e "$w" "$site" || { echo "gpu-check: could not unpack $w"; exit 3; }
            done
        fi
        ls "$site"
    fi
    # Whatever was carried, the suite must find what pyproject asks for; if not, nothing below could run.
    echo "== the suite's requirements, with the carried wheels in front"
    (cd "$root" && PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}" "$python" -m suite.tools.requirements check \
        --extra test) \
        || { echo "gpu-check: the suite's requirements are not met here (above); nothing was run"; exit 3; }
} 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"

export PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
cd "$root" || exit 1
echo "== suite.tools.gpu_check ${dry[*]} ${only[*]} (budget ${BUDGET_S} s, hard stop after ${HARD_STOP_S} s)" \
    | tee -a "$log"
# Its output goes to the console as well as the log: if the command is killed from outside, what it printed
# up to then is still on the console.
timeout --kill-after="$KILL_AFTER_S" "$HARD_STOP_S" "$python" -m suite.tools.gpu_check "${dry[@]}" "${only[@]}" \
    --out "$out" --budget-s "$BUDGET_S" --no-table 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
echo "== finished with status $status after $((SECONDS - start)) s; log: $log" | tee -a "$log"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "gpu-check: HARD STOP after ${HARD_STOP_S} s; the table below holds the steps finished before it" \
        | tee -a "$log"
    status=124
fi
# The table last, as the check wrote it (after every step, so a hard stop still leaves one).
if [ -f "$out/table.txt" ]; then
    echo | tee -a "$log"
    tee -a "$log" < "$out/table.txt"
else
    echo "gpu-check: no table was written; see the log above"
fi
exit "$status"
