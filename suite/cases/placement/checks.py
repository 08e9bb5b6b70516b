"""The placement family's part of the tooling: its accuracy round (suite/tools)."""

from __future__ import annotations

from suite.cases.placement.measure import NAME
from suite.tools.paired import Pair, Target, one, timer_seconds
from suite.units import format_size

# The sizes the accuracy round times: a clone and `.to` of each.
SMALL_BYTES, BIG_BYTES, QUICK_BIG_BYTES = 4 * 2**10, 64 * 2**20, 2**20
# `.to` of a tensor already on its device returns it: a Python call, far under this even on a slow host.
TO_SAME_LIMIT_S = 2e-6
# A 64 MiB clone reads and writes 64 MiB: at least this many times a no-op `.to`, on any host.
CLONE_OVER_TO_SAME = 50
# The dry run's stand-in for configs/quick.yaml's placement cases.
DRY_QUICK = {"sizes": ["4KiB"]}


def accuracy_round(runner, scale) -> list[Pair]:
    import torch

    from suite.cases.buffers import buffer

    small, big = SMALL_BYTES, scale.pick(BIG_BYTES, QUICK_BIG_BYTES)
    results = runner.run(NAME, {"placement": {"sizes": [small, big], "ops": ["to_same", "clone"]}})

    def median(op: str, size: int) -> float:
        return one(results, op=op, size=size)["stats"]["median"]

    def timer(stmt: str, env: dict) -> float:
        return timer_seconds(stmt, env, scale.timer_min_run_s)

    cpu = torch.device("cpu")
    x_small, x_big = buffer("cpu", small), buffer("cpu", big)
    below = Target("below", TO_SAME_LIMIT_S)
    return [
        Pair(NAME, f"{format_size(small)} clone()", "s", "Timer", Target("within", 0.15),
             median("clone", small), timer("x.clone()", {"x": x_small})),
        Pair(NAME, f"{format_size(small)} .to(same device)", "s", "Timer", below,
             median("to_same", small), timer("x.to(d)", {"x": x_small, "d": cpu})),
        Pair(NAME, f"{format_size(big)} .to(same device)", "s", "Timer", below,
             median("to_same", big), timer("x.to(d)", {"x": x_big, "d": cpu})),
        Pair(NAME, f"{format_size(big)} clone() / .to(same device)", "s", "suite .to(same)",
             Target("at_least", CLONE_OVER_TO_SAME), median("clone", big), median("to_same", big)),
    ]
