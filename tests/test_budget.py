"""How a budget is shared out during a run (suite.budget), and the run-driving modules' import graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.budget import BudgetItem, BudgetSchedule
from suite.plan import END_RESERVE_S
from suite.timing import BOUND_ROUNDS
from tests.test_families import _imports

ROOT = Path(__file__).resolve().parent.parent


def _schedule(budget, fixed=0.1, n=4, clock=None, max_time=float("inf"), min_rounds=1):
    items = {f"t{i}": BudgetItem("copy", fixed, True, 0.0005, max_time, min_rounds) for i in range(n)}
    return BudgetSchedule(budget, items, started=0.0, clock=clock or (lambda: 0.0))


def test_budget_schedule_shares_what_is_left_and_passes_on_unused_time():
    now = [0.0]
    schedule = _schedule(13.4, clock=lambda: now[0])
    first = schedule.start("t0")
    assert first == pytest.approx((13.4 - END_RESERVE_S - 0.4) / 4)  # 2.5 s each
    now[0] = 0.2  # t0 stopped on precision almost at once: the others share its time
    schedule.finish("t0", 0.1)  # its overhead was 0.1 s, not the prior's 0.04 s: the plan learns that
    second = schedule.start("t1")
    assert second == pytest.approx((13.4 - 0.2 - END_RESERVE_S - 3 * (0.1 - 0.04 + 0.1)) / 3)
    assert second > first


def test_a_budget_never_gives_more_than_max_time():
    schedule = _schedule(3600, max_time=0.25)
    assert [schedule.start(f"t{i}") for i in range(4)] == [0.25] * 4


def test_the_schedule_learns_that_a_round_is_longer_than_min_time():
    # Four benchmarks of min_rounds 5; the first shows each round (one call) takes 0.5 s, not min_time.
    now = [0.0]
    schedule = _schedule(20.0, fixed=0.04, clock=lambda: now[0], min_rounds=5)  # 0.04: copy's prior overhead
    schedule.start("t0")
    now[0] = 2.5
    schedule.finish("t0", 0.0, round_s=0.5)
    # Each later one needs 5 x 0.5 s whatever its share: the minimum now says so.
    assert schedule.minimum_s() == pytest.approx(2.5 + END_RESERVE_S + 3 * 5 * 0.5)
    # ... and the share handed out is at least those 2.5 s, plus an equal part of the rest.
    share = schedule.start("t1")
    assert share == pytest.approx(2.5 + (20.0 - 2.5 - END_RESERVE_S - 3 * 2.5) / 3)


def test_the_schedule_plans_with_the_median_overhead_and_round_not_the_last():
    # One slow benchmark among fast ones (a first call that compiled, say) must not set the plan.
    schedule = _schedule(100, fixed=0.04, n=6, min_rounds=5)  # 0.04: copy's prior overhead
    for i, (overhead, round_s) in enumerate([(0.1, 0.2), (0.3, 0.4), (5.0, 9.0)]):
        schedule.start(f"t{i}")
        schedule.finish(f"t{i}", overhead, round_s=round_s)
    # Three left, each 0.3 s of overhead (the median, not 5.0) and 5 rounds of 0.4 s (not 9.0).
    assert schedule.minimum_s() == pytest.approx(END_RESERVE_S + 3 * (0.3 + 5 * 0.4))


def test_budget_schedule_minimum_counts_every_fixed_cost():
    schedule = _schedule(100, fixed=2.0, n=10)
    assert schedule.minimum_s() == pytest.approx(END_RESERVE_S + 10 * (2.0 + 0.0005))


RUN_MODULES = ["suite.plugin", "suite.budget", "suite.plan", "suite.partial", "suite.distributed",
               "suite.timing", "suite.devices", "suite.summary", "suite.config", "suite.cases"]


def test_the_run_driving_modules_import_each_other_without_circles():
    graph = {}
    for name in RUN_MODULES:
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        graph[name] = {m for m in _imports(path, name.rsplit(".", 1)[0]) if m in RUN_MODULES and m != name}

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(m == goal or (m not in seen and reaches(m, goal, seen | {m})) for m in graph[start])

    circles = [name for name in RUN_MODULES if reaches(name, name, {name})]
    assert circles == [], f"import circles through {circles}: {graph}"
    assert "suite.plugin" not in graph["suite.distributed"], "distributed must not reach into the plugin"


def test_plan_and_budget_count_an_accelerators_rounds_at_accelerator_min_time():
    # Their floors use each benchmark's shortest round: 5 ms on a GPU, min_time on the CPU.
    from suite.cases.matmul import measure as matmul
    from suite.config import parse_config
    from suite.plan import make_plan

    def config(accel):
        return parse_config({"timing": {"min_time": 0.0001, "accelerator_min_time": accel, "min_rounds": 5},
                             "cases": {"matmul": {"dtypes": ["float32"], "shapes": ["32x32x32"]}}})

    gpu = matmul.matmul_case("matmul", "cuda:0", "float32", 32, 32, 32)
    cpu = matmul.matmul_case("matmul", "cpu", "float32", 32, 32, 32)
    items = BudgetSchedule.for_cases(60, {"g": gpu, "c": cpu}, config(0.005), started=0.0).items
    assert items["g"].min_timed_s == pytest.approx(5 * 0.005) and items["c"].min_timed_s == pytest.approx(5e-4)
    from suite import devices as dev
    from suite.plan import NodePlatform

    with dev.use_platform(NodePlatform(1)):
        low, high = (make_plan(config(a), ["cpu", "cuda:0"], gpus=1).families["matmul"].minimum_s
                     for a in (0.0001, 0.005))
    # min_rounds timed rounds and the host-bound probe's rounds after them (suite.timing.bound_info)
    assert high - low == pytest.approx((5 + BOUND_ROUNDS) * (0.005 - 0.0001)), "only the GPU case's rounds lengthen"


def test_the_progress_eta_plans_with_the_command_lines_timing():
    """--benchmark-max-time / --benchmark-min-rounds (plugin.user_timing) reach the ETA's plan as the budget's."""
    from suite import devices as dev
    from suite.budget import planned_seconds
    from suite.config import parse_config
    from suite.plan import NodePlatform, select

    config = parse_config({"devices": "cpu", "timing": {"max_time": 0.1},
                           "cases": {"copy": {"sizes": ["4KiB"], "matrix_sizes": None}}})
    with dev.use_platform(NodePlatform(0)):
        cases = {c.id: c for c in select(config, ["cpu"])["copy"]}
        plain = planned_seconds(cases, config, None)["copy"]
        longer = planned_seconds(cases, config, None, {"max_time": 2.0})["copy"]
        rounds = planned_seconds(cases, config, None, {"min_rounds": 100, "min_time": 0.05})["copy"]
    assert longer - plain == pytest.approx(len(cases) * 1.9, rel=0.01)
    assert rounds >= len(cases) * 100 * 0.05
