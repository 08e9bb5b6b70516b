"""A run's time budget: each benchmark's share of what is left (never above its max_time); progress lines."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass

from suite.cases import Case
from suite.config import SuiteConfig
from suite.plan import (DEFAULT_OVERHEAD_S, END_RESERVE_S, budget_error, fixed_seconds, make_plan, overheads,
                        probe_seconds, runs_here, shareable, timing_of)
from suite.summary import Progress
from suite.timing import min_round_seconds, parse_duration

# The least max_time a budget hands out: pytest-benchmark still runs min_rounds, so the budget is overrun
# rather than a benchmark left unmeasured.
MIN_SHARE_S = 1e-4


@dataclass
class BudgetItem:
    family: str
    fixed_s: float  # predicted overhead + warm-up (all of it for a fixed-round case)
    shareable: bool  # its timed rounds follow max_time
    min_timed_s: float = 0.0  # min_rounds x min_time: the least its timed rounds can take, before any is seen
    max_time: float = float("inf")  # the config's max_time for it: a budget never gives more
    min_rounds: int = 1
    probe_s: float = 0.0  # the host-bound probe after its timed rounds (plan.probe_seconds)


class BudgetSchedule:
    """Shares a run's budget out over its benchmarks as they start, learning each family's costs as it goes.

    At each benchmark's start its max_time is its least timed time (min_rounds rounds) plus an equal part of
    what is left over (time left - predicted fixed costs of it and every later benchmark - their least timed
    times - END_RESERVE_S), and never more than the config's max_time: a budget only shortens a run. Time a
    benchmark leaves unused goes to the ones after it, time one overruns comes out of theirs. A family's
    overhead and round length measured so far replace the priors (its OVERHEAD_S; min_time per round) for the
    benchmarks still to come: a round is at least one call, which can be far longer than min_time.
    """

    def __init__(self, budget_s: float, items: dict[str, BudgetItem], started: float,
                 clock=time.monotonic) -> None:
        self.budget_s = budget_s
        self.items = items
        self.pending = list(items)
        self.started = started  # clock() reading at the start of the run (the process's start)
        self.clock = clock
        self.overhead = overheads()
        self.observed: dict[str, list[float]] = {}  # family -> overheads seen
        self.rounds_s: dict[str, list[float]] = {}  # family -> round lengths seen (median of each benchmark)
        # Their medians, kept up to date by finish(): start() reads them for every pending benchmark, where a
        # median taken each time would cost a run of thousands of benchmarks seconds (quadratic).
        self._overhead_median: dict[str, float] = {}
        self._round_median: dict[str, float] = {}

    @classmethod
    def for_cases(cls, budget_s: float, cases: dict[str, Case], config: SuiteConfig, started: float,
                  overrides: dict | None = None) -> "BudgetSchedule":
        """`overrides`: timing keys the command line sets over every family's (user_timing in the plugin)."""
        items = {}
        for key, case in cases.items():
            timing = timing_of(config, case.family, overrides)
            items[key] = BudgetItem(case.family, fixed_seconds(case, config), shareable(case),
                                    timing.min_rounds * min_round_seconds(case, timing), timing.max_time,
                                    timing.min_rounds, probe_seconds(case, timing))
        return cls(budget_s, items, started)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def minimum_s(self) -> float:
        """The least the run can take: what already passed, every fixed cost, min_rounds of each, the reserve.

        Before the run this is a lower bound: a round lasts at least one call, which the run learns only as it
        goes (a large matmul on a CPU: half a second a call against a min_time of milliseconds).
        """
        pending = [self.items[k] for k in self.pending]
        return (
            self.elapsed()
            + END_RESERVE_S
            + sum(self._fixed(i) + (self._least_timed(i) if i.shareable else 0.0) for i in pending)
        )

    def _fixed(self, item: BudgetItem) -> float:
        seen = self._overhead_median.get(item.family)
        if seen is None or not item.shareable:
            return item.fixed_s + item.probe_s
        # The family's measured overhead so far (the probe included) replaces the prior for the benchmarks
        # still to come.
        prior = self.overhead.get(item.family, DEFAULT_OVERHEAD_S)
        return item.fixed_s - prior + seen

    def _least_timed(self, item: BudgetItem) -> float:
        seen = self._round_median.get(item.family)
        least = item.min_timed_s
        if seen is not None:
            # pytest-benchmark runs min_rounds whatever max_time says, each at least one call long.
            least = max(least, item.min_rounds * seen)
        return least

    def start(self, key: str) -> float | None:
        """max_time for benchmark `key`, which starts now (None: not a budgeted benchmark)."""
        if key not in self.items:
            return None
        if key in self.pending:
            self.pending.remove(key)
        item = self.items[key]
        if not item.shareable:
            return None
        later = [self.items[k] for k in self.pending]
        left = self.budget_s - self.elapsed() - END_RESERVE_S
        sharing = [item, *(i for i in later if i.shareable)]
        slack = (
            left
            - self._fixed(item)
            - sum(self._fixed(i) for i in later)
            - sum(self._least_timed(i) for i in sharing)
        )
        share = self._least_timed(item) + max(0.0, slack) / len(sharing)
        return max(min(share, item.max_time), MIN_SHARE_S)

    def finish(self, key: str, overhead_s: float, round_s: float | None = None) -> None:
        """Record what benchmark `key` cost beyond its timed rounds and warm-up, and its median round."""
        item = self.items.get(key)
        if item is not None and item.shareable:
            seen = self.observed.setdefault(item.family, [])
            seen.append(max(0.0, overhead_s))
            self._overhead_median[item.family] = statistics.median(seen)
            if round_s:
                rounds = self.rounds_s.setdefault(item.family, [])
                rounds.append(round_s)
                self._round_median[item.family] = statistics.median(rounds)


def planned_seconds(cases: dict[str, Case], config: SuiteConfig, budget_s: float | None,
                    overrides: dict | None = None) -> dict[str, float]:
    """family -> the plan's seconds for the selected benchmarks of it: its estimate per benchmark, times them;
    `overrides`: the run's --benchmark-* timing (BudgetSchedule.for_cases)."""
    counts = Counter(case.family for case in cases.values())
    devices = list(dict.fromkeys(d for c in cases.values() for d in c.devices))
    plan = make_plan(config, devices, budget_s=budget_s, overrides=overrides)
    return {f: fp.estimated_s / fp.benchmarks * counts[f] for f, fp in plan.families.items()
            if fp.benchmarks and counts[f]}


class RunState:
    """This run's budget schedule, per-test clocks for progress lines, and what each benchmark timed."""

    def __init__(self, started: float) -> None:
        self.run_started = started
        self.budget_s: float | None = None
        self.budget_source = "timing.budget"
        self.schedule: BudgetSchedule | None = None
        self.progress: Progress | None = None
        self.families: dict[str, str] = {}  # nodeid -> family of the selected benchmarks
        self.started: dict[str, float] = {}
        self.timed_s: dict[str, float] = {}
        self.round_s: dict[str, float] = {}
        self.warmups: dict[str, float] = {}

    def set_budget(self, option: str | None, configured: float | None) -> None:
        """--suite-budget (its text, a ValueError where it is not a duration) over the config's timing.budget."""
        self.budget_s = parse_duration(option) if option is not None else configured
        self.budget_source = "--suite-budget" if option is not None else "timing.budget"

    def plan(self, cases: dict[str, Case], config: SuiteConfig, overrides: dict | None = None) -> None:
        """After selection (nodeid -> case): the families for progress lines; with a budget, refuse it now if
        it is too small (UserError). `overrides`: the timing the command line sets
        (BudgetSchedule.for_cases)."""
        self.families = {nodeid: case.family for nodeid, case in cases.items()}
        counts = dict(Counter(self.families.values()))
        self.progress = Progress(counts, planned_seconds(cases, config, self.budget_s, overrides))
        if self.budget_s is None or not cases:
            return
        self.schedule = BudgetSchedule.for_cases(self.budget_s, cases, config, self.run_started,
                                                 overrides=overrides)
        minimum = self.schedule.minimum_s()
        if minimum > self.budget_s:
            running = sum(1 for c in cases.values() if runs_here(c))
            raise budget_error(self.budget_s, minimum, running, self.budget_source)

    def start(self, nodeid: str) -> float | None:
        """The clock of a test that starts now; its max_time under the budget (None: no budget for it)."""
        self.started[nodeid] = time.monotonic()
        if self.schedule is None:
            return None
        return self.schedule.start(nodeid)

    def timed(self, nodeid: str, stats) -> None:
        """What a benchmark's timed rounds took (pytest-benchmark's Metadata; its data is per iteration)."""
        if stats is not None and stats.stats.data:
            self.timed_s[nodeid] = sum(stats.stats.data) * stats.iterations
            self.round_s[nodeid] = statistics.median(stats.stats.data) * stats.iterations

    def finish(self, nodeid: str) -> str | None:
        """The test ended: feed the schedule its cost; return its progress line (None: not a benchmark)."""
        started = self.started.pop(nodeid, None)
        family = self.families.get(nodeid)
        if started is None or family is None:
            return None
        wall = time.monotonic() - started
        if self.schedule is not None and nodeid in self.timed_s:
            overhead = wall - self.timed_s[nodeid] - self.warmups.get(nodeid, 0.0)
            self.schedule.finish(nodeid, overhead, self.round_s.get(nodeid))
        return self.progress.finished(family, wall) if self.progress is not None else None
