"""The copy family's part of the tooling: its GPU-check step and its accuracy round (suite/tools)."""

from __future__ import annotations

from suite.cases.copy.measure import NAME
from suite.tools.checkrow import CheckRow, judged, median, truth_s
from suite.tools.paired import Pair, Target, one, timer_seconds
from suite.units import format_size

# --- GPU check ---------------------------------------------------------------------------------------------

# Large enough that launch and synchronisation costs vanish next to the copy (nvbandwidth uses 512 MiB).
CHECK_BYTES = 256 * 2**20
# Pinned and pageable both ways and the same-device copy; three of them against events.
STEP_ESTIMATE_S = truth_s(NAME, 5, 3, False)
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 20
# The dry run's stand-in for configs/quick.yaml's copy cases.
DRY_QUICK = {"sizes": ["4KiB"]}


def gpu_checks(ctx) -> list:
    """256 MiB pinned H2D and D2H and the same-device copy against CUDA events (alternating, same process);
    pinned faster than pageable both ways."""
    gpu = ctx.device
    size = format_size(ctx.pick(CHECK_BYTES, 2**20))
    if ctx.dry_run:  # the CPU has no pinned memory: the host copy stands in for the three
        titles = {f"cpu->cpu-pageable-{size}": f"copy host {size} (dry run)"}
    else:
        titles = {f"cpu->{gpu}-pinned-{size}": f"copy H2D pinned {size}",
                  f"{gpu}->cpu-pinned-{size}": f"copy D2H pinned {size}",
                  f"{gpu}->{gpu}-device-{size}": f"copy same-device {size}"}
    pairs = ["cpu->cpu"] if ctx.dry_run else [f"cpu->{gpu}", f"{gpu}->cpu", f"{gpu}->{gpu}"]
    config = {"devices": list(dict.fromkeys(["cpu", gpu])), "cases": {"copy": {
        "sizes": [size], "memory": ["pinned", "pageable"], "non_blocking": [False], "directions": ["uni"],
        "pairs": pairs}}}
    rows, seen = ctx.timing_truth(NAME, config, "benchmarks/test_copy.py", titles)
    for name, src, dst in (("H2D", "cpu", gpu), ("D2H", gpu, "cpu")):
        pinned, pageable = (seen.get(f"{src}->{dst}-{memory}-{size}") for memory in ("pinned", "pageable"))
        title = f"copy {name} {size}: pinned vs pageable"
        if pinned and pageable:
            fast = median([b["extra_info"]["gbps"] for b in pinned])
            slow = median([b["extra_info"]["gbps"] for b in pageable])
            rows.append(CheckRow(title, fast, slow, "GB/s", judged(ctx, fast > slow),
                                 "pinned must be faster"))
        else:
            rows.append(CheckRow(title, None, None, "GB/s", judged(ctx, False),
                                 "no pinned or no pageable result (the CPU has no pinned memory)"))
    return rows


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# The CPU->CPU copy the accuracy round times (--quick: the machinery only).
ACCURACY_BYTES, QUICK_BYTES = 256 * 2**20, 2**20


def accuracy_round(runner, scale) -> list[Pair]:
    from suite.cases.buffers import buffer

    n = scale.pick(ACCURACY_BYTES, QUICK_BYTES)
    bench = one(runner.run(NAME, {"copy": {"sizes": [n], "cpu": {"sizes": [n]}}}), src="cpu", dst="cpu")
    src, dst = buffer("cpu", n), buffer("cpu", n, data=False)
    dst.copy_(src)  # first touch of dst's pages outside timing, as the suite's warm-up does
    ref = timer_seconds("dst.copy_(src)", {"src": src, "dst": dst}, scale.timer_min_run_s)
    return [Pair(NAME, f"{format_size(n)} CPU->CPU copy_", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]
