"""The paired-check engine: the suite's figure and an independent reference, taken in alternation, one row each.

`python -m suite accuracy` and the GPU check both use it. A pair is one in-process suite run of a case and,
right after it, a reference measuring the same op; `rounds` pairs are taken seconds apart, and a row's verdict is
on the median of its paired ratios. Shared VMs switch between fast and slow phases every few seconds (the same
4 KiB clone measures 1.8 us or 3.5 us) and a GPU's clock moves with its power and temperature: only such pairs,
many times over, make two methods comparable; the ratio of two medians taken apart would not.

References are pluggable: anything that gives the op's seconds per call. Two are here:
- `timer_seconds`: torch.utils.benchmark.Timer on a statement, with the suite's thread count (accuracy);
- `event_seconds`: the same case built anew, warmed up as the suite warmed it, timed by CUDA events (the host
  clock off CUDA) for as long as the suite's timed rounds lasted (the GPU check).
- `span_seconds`: CUDA events on several streams (of one or more GPUs) around spans of calls (peer copies).
A family may pair against anything else it can time (collectives: a plain torch.distributed loop).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from suite.tools import ROOT

# A row's ratio is the median of at least this many paired ratios: the median of two is their mean, which one
# disturbed pair moves anywhere; a row with fewer shows '-' and gets no verdict.
MIN_PAIRS_FOR_RATIO = 3


def fmt_value(value: float, unit: str) -> str:
    if unit != "s":
        return f"{value:.3f} {unit}"
    for scale, name in ((1, "s"), (1e3, "ms"), (1e6, "us")):
        if value * scale >= 1:
            return f"{value * scale:.3f} {name}"
    return f"{value * 1e9:.1f} ns"


@dataclass(frozen=True)
class Target:
    """How a row is judged: 'within' |ratio - 1| <= value, 'at_least' ratio >= value, 'below' suite < value"""

    kind: str
    value: float

    def describe(self) -> str:
        if self.kind == "within":
            return f"within {self.value:.0%}"
        if self.kind == "at_least":
            return f">= {self.value:g}x"
        return f"< {fmt_value(self.value, 's')}"

    def passed(self, suite: float, ratio: float, ratios: tuple[float, ...] = ()) -> bool | None:
        """The verdict; None (not judged) where the median is within the target but the pairs' noise is too
        wide to say so: a gate never passes what it could not resolve."""
        if self.kind == "within":
            if abs(ratio - 1) > self.value:
                return False
            low, high = median_interval(ratios) if ratios else (ratio, ratio)
            return True if abs(low - 1) <= self.value and abs(high - 1) <= self.value else None
        if self.kind == "at_least":
            return ratio >= self.value
        return suite < self.value


def median_interval(values: tuple[float, ...]) -> tuple[float, float]:
    """A ~90% confidence interval of the median of `values` from their order statistics (distribution-free:
    the k-th smallest and largest, k = (n - 1.645 sqrt(n)) / 2): the whole range for 3 values, all but the
    extremes for 7 (87.5%), the middle 9 of 21."""
    ordered = sorted(values)
    k = max(0, int((len(ordered) - 1.645 * len(ordered) ** 0.5) / 2))
    return ordered[k], ordered[-1 - k]


@dataclass(frozen=True)
class Pair:
    """One round's figures of one row: the suite's and the reference's, in `unit`."""

    family: str
    title: str
    unit: str  # "s" (seconds per call), or a rate: "TFLOP/s", "GB/s"
    reference: str  # what measured the reference figure
    target: Target
    suite: float
    ref: float


@dataclass(frozen=True)
class Row:
    family: str
    title: str
    unit: str
    reference: str
    target: Target
    suite: float  # median over rounds
    ref: float
    ratio: float | None  # median of the paired ratios suite / reference: the verdict's figure (None: too few)
    low: float  # the paired ratios' range: the machine's noise
    high: float
    passed: bool | None  # None: not judged (judge=False, or too few pairs)
    ratios: tuple[float, ...] = ()  # every paired ratio, in round order


def alternate(rounds: int, one_round: Callable[[], list[Pair]]) -> list[Pair]:
    """`rounds` calls of `one_round` (a suite run, then its references): every pair, in order."""
    pairs: list[Pair] = []
    for _ in range(rounds):
        pairs += one_round()
    return pairs


def summarise(pairs: list[Pair], judge: bool = True, min_pairs: int = MIN_PAIRS_FOR_RATIO) -> list[Row]:
    """One row per (family, title), in first-seen order: medians and the median of the paired ratios (with at
    least `min_pairs` pairs; a row with fewer has no ratio and no verdict)."""
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        groups.setdefault((p.family, p.title), []).append(p)
    rows = []
    for group in groups.values():
        first = group[0]
        ratios = [p.suite / p.ref for p in group]
        enough = len(ratios) >= min_pairs
        suite = statistics.median(p.suite for p in group)
        ratio = statistics.median(ratios) if enough else None
        rows.append(Row(first.family, first.title, first.unit, first.reference, first.target, suite,
                        statistics.median(p.ref for p in group), ratio, min(ratios), max(ratios),
                        first.target.passed(suite, ratio, tuple(ratios)) if judge and enough else None,
                        tuple(ratios)))
    return rows


# --- the suite's side: pytest in this process -------------------------------------------------------------


def run_suite(tests: str | Path, cfg: Path, out: Path, args: tuple[str, ...] = (),
              quiet: bool = False) -> tuple[int, str, dict | None]:
    """`pytest <tests>` on config `cfg` in this process (its reference runs here too, on the same inputs):
    (exit code, its output where `quiet` kept it out of ours, the results JSON or None where it wrote none
    that reads)."""
    import pytest

    # --assert=plain: the suite's modules may already be imported here, so pytest could not rewrite their
    # asserts and would warn (an error under pyproject's filterwarnings); the cases' checks need none.
    argv = [str(tests if Path(tests).is_absolute() else ROOT / tests), f"--rootdir={ROOT}", "-q", "-rs",
            "-p", "no:cacheprovider", "--assert=plain", f"--suite-config={cfg}", f"--benchmark-json={out}", *args]
    log = io.StringIO()
    with contextlib.ExitStack() as stack:
        if quiet:  # the tool's own table stays readable; the output comes back for an error message
            stack.enter_context(contextlib.redirect_stdout(log))
            stack.enter_context(contextlib.redirect_stderr(log))
        code = int(pytest.main(argv))
    return code, log.getvalue(), read_results(out)


def read_results(path: Path) -> dict | None:
    """A results file a run wrote, or None where it wrote none or one that cannot be read (a run that died at
    its start can leave an empty file behind)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("benchmarks"), list) else None


def one(results: dict, **match) -> dict:
    """The single benchmark of `results` whose extra_info has every key/value of `match`."""
    found = [b for b in results["benchmarks"] if all(b["extra_info"].get(k) == v for k, v in match.items())]
    if len(found) != 1:
        raise RuntimeError(f"expected one benchmark with {match}, found {len(found)}")
    return found[0]


# A `span_seconds` reference: spans of this many calls, at least MIN_SPANS of them; a span of a few ms makes the
# microseconds between recording the start events on each stream nothing.
SPAN_CALLS = 8
MIN_SPANS = 5

# --- references -------------------------------------------------------------------------------------------


# A reference measurement (reference_times) takes at least this many calls, however long each call is.
MIN_REFERENCE_CALLS = 5
# ... and synchronises after at most this many queued calls, so it notices when its time is up without
# waiting behind a long queue (events time each call on the device; the gaps between batches cost nothing).
MAX_REFERENCE_BATCH = 64


def cuda_event_times(fn: Callable[[], object], device, seconds: float | None = None, calls: int | None = None,
                     before: Callable[[], object] | None = None) -> list[float]:
    """Seconds per call from CUDA events recorded around each call on the device's current stream: the GPU
    check's independent reference for the suite's host clock with synchronisation (never used by the suite).

    Runs for about `seconds` (at least MIN_REFERENCE_CALLS calls) or exactly `calls` calls; `before` runs
    before each call, outside the events (mamf-finder's L2 flush). The caller warms up first.
    """
    import torch

    with torch.cuda.device(device):
        torch.cuda.synchronize(device)
        pairs: list[tuple] = []
        start_clock = time.perf_counter()
        batch = 1
        while True:
            for _ in range(batch):
                if before is not None:
                    before()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                pairs.append((start, end))
            torch.cuda.synchronize(device)
            if _reference_done(len(pairs), time.perf_counter() - start_clock, seconds, calls):
                break
            batch = min(2 * batch, MAX_REFERENCE_BATCH)
            batch = batch if calls is None else max(1, min(batch, calls - len(pairs)))
        return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def host_times(fn: Callable[[], object], device, seconds: float | None = None, calls: int | None = None,
               before: Callable[[], object] | None = None, clock: Callable[[], float] = time.perf_counter,
               synchronize: Callable[..., None] | None = None) -> list[float]:
    """Seconds per call from the host clock, the device synchronised after each call: the reference of the
    GPU check's CPU dry run (on the CPU it is a plain clock read around each call)."""
    if synchronize is None:
        from suite.devices import synchronize
    times: list[float] = []
    started = clock()
    while True:
        if before is not None:
            before()
        synchronize(device)
        t0 = clock()
        fn()
        synchronize(device)
        t1 = clock()
        times.append(t1 - t0)
        if _reference_done(len(times), t1 - started, seconds, calls):
            return times


def reference_times(fn: Callable[[], object], device, seconds: float | None = None, calls: int | None = None,
                    before: Callable[[], object] | None = None) -> list[float]:
    """CUDA events on a CUDA device, the host clock elsewhere (see cuda_event_times and host_times)."""
    if str(device).startswith("cuda"):
        return cuda_event_times(fn, device, seconds, calls, before)
    return host_times(fn, device, seconds, calls, before)


def _reference_done(done: int, elapsed: float, seconds: float | None, calls: int | None) -> bool:
    if calls is not None:
        return done >= calls
    return done >= MIN_REFERENCE_CALLS and elapsed >= (seconds or 0.0)


def timer_seconds(stmt: str, env: dict, min_run_s: float) -> float:
    """Timer's median seconds per call, with the suite's thread count (Timer's default is one thread)."""
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer(stmt, globals=env, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_s).median


def event_seconds(family: str, cfg: Path, bench: dict) -> float:
    """Median seconds per call of the same case as `bench`, built anew in this process, warmed up as long
    as the suite warmed it up (suite.timing.warmup_seconds: the sustained warm-up for compute on a GPU),
    then timed by CUDA events (host clock off CUDA) for as long as its timed rounds lasted."""
    import torch

    from suite.cases import family_module
    from suite.cases.precision import mode_for
    from suite.config import load_config
    from suite.devices import resolve_spec, synchronize
    from suite.timing import SyncTimer, warm_up, warmup_seconds

    config = load_config(cfg)
    module = family_module(family)
    cases = {c.id: c for c in module.enumerate_cases(config, resolve_spec(config.devices))}
    case = cases[bench["param"]]
    device = next((d for d in case.devices if d != "cpu"), "cpu")
    # pytest-benchmark's stats are per call: its timed rounds lasted total x iterations (calls per round).
    seconds = bench["stats"]["total"] * bench["stats"].get("iterations", 1)
    # Where the family places the host side (copy: the GPU's NUMA node), the reference's buffers go too.
    host_side = getattr(module, "host_side", lambda _case: contextlib.nullcontext())
    with mode_for(case), host_side(case):
        work = module.build(case, config)
        warm_up(work.fn, SyncTimer([torch.device(d) for d in case.devices]),
                warmup_seconds(case, config.timing_for(family)))
        times = reference_times(work.fn, device, seconds=seconds)
    synchronize(*case.devices)
    del work
    return statistics.median(times)


def span_seconds(fn: Callable[[], object], streams: list, seconds: float) -> float:
    """Median seconds per call over spans of SPAN_CALLS calls, each timed by CUDA events recorded on every stream of
    `streams` (each on its own device's clock; events of different devices cannot be compared): a span is the
    slowest stream's, from its start event to its end event. Runs for about `seconds`, at least MIN_SPANS spans,
    after one untimed call."""
    import torch

    from suite.devices import synchronize

    devices = list(dict.fromkeys(str(stream.device) for stream in streams))
    fn()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < MIN_SPANS or time.perf_counter() - started < seconds:
        synchronize(*devices)  # every stream idle: its start event marks when its span begins
        marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in streams]
        for (start, _), stream in zip(marks, streams):
            start.record(stream)
        for _ in range(SPAN_CALLS):
            fn()
        for (_, end), stream in zip(marks, streams):
            end.record(stream)
        synchronize(*devices)
        times.append(max(start.elapsed_time(end) for start, end in marks) / 1e3 / SPAN_CALLS)
    return statistics.median(times)
