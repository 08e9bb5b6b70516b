"""How habits results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import extra_info, format_time, median_of

RATE = "gbps"  # the rate that says how fast this family is
# Seconds a benchmark costs beyond warm-up and timed rounds (suite.plan; measured as matmul's OVERHEAD_S).
OVERHEAD_S = 0.4
TITLE = "Habits"
NOTE = (
    "Each habit is measured both ways on the same work; the ratio is the slow way's median time over the "
    "fast way's."
)


def call_bytes(params: dict) -> int | None:
    """Bytes one call copies (suite.plan's call time): small_vs_batched's chunks, overlap's batch; sync_per_step
    copies none."""
    if params.get("habit") == "small_vs_batched":
        return params["chunk"] * params["chunks"]
    return params.get("size")


def verdict(ratio: float, times=lambda r: f"{r:.1f}x") -> str:
    """The slow way's time over the fast way's, in words: `2.5x slower`. The slow habit winning is no finding
    to report as "0.2x slower": said, and that it is unexpected (the terminal and the report alike)."""
    return f"{times(ratio)} slower" if ratio >= 1 else f"{times(1 / ratio)} faster (unexpected: noise?)"


def summary(benches: list[dict]) -> list[str]:
    pairs: dict = defaultdict(dict)
    for b in benches:
        i = extra_info(b)
        pairs[i.get("pair")][i.get("role")] = (i.get("variant"), median_of(b))
    lines = []
    for pair, roles in pairs.items():
        slow, fast = roles.get("slow"), roles.get("fast")
        if not slow or not fast or not slow[1] or not fast[1]:
            continue
        lines.append(f"  {pair}: {slow[0]} {format_time(slow[1])} vs {fast[0]} {format_time(fast[1])}: "
                     f"{verdict(slow[1] / fast[1])}")
    return ["habits: the slow way against the fast way, equal work", *lines] if lines else []
