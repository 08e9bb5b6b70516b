"""The habits family's part of the tooling: its GPU-check step and its evidence rows (suite/tools)."""

from __future__ import annotations

from suite.cases.habits.measure import NAME, VARIANTS
from suite.summary import format_time
from suite.tools.checkrow import IN_PROCESS_RUN_S, CheckRow, bench_s, judged

# The overlapped variant should take at most this share of the serialised time (ideal: max(copy, matmul) over
# copy + matmul, about 0.6 with the defaults on an H200).
OVERLAP_MAX_RATIO = 0.9
STEP_ESTIMATE_S = IN_PROCESS_RUN_S + 6 * bench_s(NAME, False)
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 30
# The dry run's stand-in for configs/quick.yaml's habits cases.
DRY_QUICK = {"habits": ["small_vs_batched"], "chunk": "1KiB", "chunks": 4}


def gpu_checks(ctx) -> list:
    """Each habit's slow/fast ratio on the GPU: the slow habit must cost time, and overlapped must beat
    serialised by OVERLAP_MAX_RATIO."""
    section = {"habits": list(VARIANTS), "readers": ["item"]}
    if ctx.dry_run:
        section.update(chunk="1KiB", chunks=8, steps=4, step_matmul=32, overlap_bytes="1MiB", overlap_matmul=64)
    benches = ctx.run_suite({"devices": [ctx.device], "cases": {"habits": section}}, "benchmarks/test_habits.py")
    medians: dict[str, dict[str, float]] = {}
    for bench in benches:
        info = bench["extra_info"]
        medians.setdefault(info["habit"], {})[info["variant"]] = bench["stats"]["median"]
    rows = []
    for habit, (slow_name, fast_name) in VARIANTS.items():
        got = medians.get(habit, {})
        title = f"habits {habit}: {slow_name} / {fast_name}"
        if set(got) != {slow_name, fast_name}:
            rows.append(CheckRow(title, None, None, "ms", judged(ctx, False),
                                 f"results for {sorted(got)} only (skipped: see the log)"))
            continue
        slow, fast = got[slow_name], got[fast_name]
        if habit == "overlap":
            ok, rule = fast <= OVERLAP_MAX_RATIO * slow, f"{fast_name} <= {OVERLAP_MAX_RATIO} x {slow_name}"
        else:
            ok, rule = slow > fast, f"{slow_name} must be slower"
        rows.append(CheckRow(title, slow * 1e3, fast * 1e3, "ms", judged(ctx, ok), rule))
    return rows


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): each habit's slow way over its fast way."""
    pairs: dict[str, dict[str, tuple[dict, dict]]] = {}
    for i, stats in results:
        if i.get("pair") and i.get("role") in ("slow", "fast"):
            pairs.setdefault(i["pair"], {})[i["role"]] = (i, stats)
    rows = []
    for _, sides in sorted(pairs.items()):
        if set(sides) == {"slow", "fast"}:
            (slow, slow_stats), (fast, fast_stats) = sides["slow"], sides["fast"]
            rows.append((f"habit {slow['habit']}: {slow['variant']} / {fast['variant']}",
                         f"{slow_stats['median'] / fast_stats['median']:.3g}×",
                         f"{format_time(slow_stats['median'])} against {format_time(fast_stats['median'])}"))
    return rows
