"""One case's run, build -> check -> warm up -> time -> record, alone or in lockstep; and what the run ended with."""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field

import pytest
import torch

from suite import devices as dev
from suite import pb_adapter
from suite.budget import RunState
from suite.cases import FAMILIES, Case, SkipCase, family_module, family_read
from suite.config import SuiteConfig
from suite.partial import PartialState
from suite.telemetry import over
from suite.timing import SyncTimer, bound_info, stopping_info, warm_up, warmup_seconds
from suite.units import gbps, tflops


@dataclass
class Outcome:
    """What the run ended with, gathered as it goes: the end-of-run lines and the exit status come from it."""

    failed: set[str] = field(default_factory=set)  # nodeids of tests that did not pass: their benchmarks are not results
    terminated: bool = False  # SIGTERM arrived: the run ends as Ctrl-C ends it, with exit status 143
    nothing: str = ""  # a run with --benchmark-json measured nothing
    not_stored: str = ""  # an interrupted run's --benchmark-save that was not stored, and why
    interrupted: str = ""  # what an interrupted run (Ctrl-C) kept, and how to go on
    unsaved: str = ""  # the results JSON could not be written, and what was kept


def skip_if_missing(case: Case) -> None:
    """Skip the test, with the reason, when one of the case's devices is not on this machine."""
    reason = next(filter(None, map(dev.missing_reason, case.devices)), None)
    if reason:
        pytest.skip(reason)


def measure_case(case: Case, benchmark, config: SuiteConfig, nodeid: str, partial: PartialState | None,
            budget: RunState, telemetry: bool = True) -> dict:
    """The `measure` fixture's call: the case's own timing, the journal's "started" line, then run_case
    (`telemetry`: read it over the timed rounds, suite.telemetry)."""
    # Imported here: benchmarks/conftest.py registers it as a plugin after this one.
    from suite import distributed

    # Under torchrun every rank runs the case in lockstep (suite.distributed): a rank that failed or skipped
    # alone would leave the others waiting in a collective, or at the next agreement, until timeout_s.
    lockstep = distributed.current()
    if lockstep is None:  # under torchrun every rank must skip it: _start_in_lockstep
        skip_if_missing(case)
        return _measure(case, benchmark, config, nodeid, partial, budget, None, telemetry)
    lockstep.begin_case(case.id)
    try:
        return _measure(case, benchmark, config, nodeid, partial, budget, lockstep, telemetry)
    finally:
        lockstep.end_case()


def _measure(case: Case, benchmark, config: SuiteConfig, nodeid: str, partial: PartialState | None,
             budget: RunState, lockstep, telemetry: bool) -> dict:
    try:
        if partial is not None:
            partial.measure_starts(nodeid)
        timing = config.timing_for(case.family)
        # The case's own timing (its family's `timing:` keys; a sustained warm-up for compute on accelerators).
        timing = timing.model_copy(update={"warmup_s": warmup_seconds(case, timing)})
        budget.warmups[nodeid] = timing.warmup_s
        pb_adapter.cap_fixed_rounds_by_time(benchmark)
        pb_adapter.cap_rounds_by_time(benchmark)
    except Exception as exc:
        if lockstep is not None:
            # This rank fails before the case starts (the partial file cannot be written, say): the other
            # ranks hear it at the case's agreements, as from a failed build, not after timeout_s.
            with contextlib.suppress(RuntimeError):  # RankTimeout, or the store is gone: this error says enough
                lockstep.ready(_problem(exc, case))
        raise
    info = run_case(case, benchmark, config.model_copy(update={"timing": timing}), lockstep, telemetry)
    max_time = pb_adapter.timed_max_time(benchmark)
    if benchmark.stats is not None and case.family in FAMILIES and max_time is not None:
        # The max_time this benchmark ran under: the config's, or less under a budget (never more).
        benchmark.extra_info["max_time"] = info["max_time"] = max_time
    return info


# torch.OutOfMemoryError is torch >= 2.4's name; torch.cuda.OutOfMemoryError (the same class there) is older.
OOM_ERRORS = (getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError, MemoryError)


def _oom_reason(exc: BaseException, case: Case) -> str | None:
    text = str(exc)
    is_oom = isinstance(exc, OOM_ERRORS) or (
        isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text.lower())
    )
    if not is_oom:
        return None
    plat = dev.current_platform()
    free = []
    gc.collect()  # what earlier cases left in reference cycles is freed before free memory is read
    for name in case.devices:
        device = torch.device(name)
        plat.empty_cache(device)
        info = plat.mem_get_info(device)
        if info:
            free.append(f"{name} has {info[0] / 2**30:.1f} GiB free of {info[1] / 2**30:.1f} GiB")
    detail = f" ({'; '.join(free)})" if free else ""
    return f"out of memory for {case.id}{detail}: use smaller sizes for this device"


def run_case(case: Case, benchmark, config: SuiteConfig, lockstep=None, telemetry: bool = True) -> dict:
    """Build; check once; warm up; time with `benchmark` (and read telemetry over it); return extra_info.
    `lockstep` (a DistState whose case has begun) when every rank runs the case at once under torchrun."""
    try:
        work, watch, bound = _build_and_time(case, benchmark, config, lockstep, telemetry)
    except BaseException:
        # The error (or skip) raised first is the one to report; a failing synchronisation must not replace it.
        with contextlib.suppress(Exception):
            dev.synchronize(*case.devices)
        raise
    held: dict = {}
    try:
        # pytest-benchmark makes one more, untimed call after the timed rounds, and side streams may still
        # copy into this case's buffers: wait for all of it, so no work of this case is queued when its
        # tensors are freed (the caching allocator would hand them to the next case) or when the next case
        # starts timing.
        dev.synchronize(*case.devices)
        held = watch.stop()
    finally:
        if lockstep is not None:
            # Rank 0 records the worst GPU of any rank (it alone writes); every rank posts, even after an
            # error here, as rank 0 waits for each.
            held = lockstep.gather_clocks(held)
    info = _extra_info(case, work, benchmark, bound, held)
    benchmark.extra_info.update(info)
    return info


def _build_and_time(case: Case, benchmark, config: SuiteConfig, lockstep, telemetry: bool) -> tuple:
    """(work, its ClockWatch, bound_info and telemetry) of the case, built, checked, warmed up and timed. Out of memory
    anywhere (inputs, check, autotuning workspaces in warm-up, allocations in the timed op) is a skip with the
    reason; pytest-benchmark drops a benchmark that raised, so nothing partial is saved."""
    family = family_module(case.family)
    try:
        if lockstep is None:
            work = family.build(case, config)
            work.check()
            # Whether a power, thermal, board or reliability limit held its GPUs' clocks down while it was
            # warmed up and timed (NVML's counters, read outside the timed rounds).
            watch = dev.ClockWatch(case.devices)
        else:
            work, watch = _start_in_lockstep(case, family, config, lockstep)
        try:
            return work, watch, _time(case, work, benchmark, config, telemetry)
        except BaseException as exc:
            if lockstep is not None:
                _failed_in_lockstep(exc, case, lockstep)
            raise
    except (SkipCase, RuntimeError, MemoryError) as exc:
        reason = _skip_reason(exc, case)
        if reason is None:
            raise
        pytest.skip(reason)


def _time(case: Case, work, benchmark, config: SuiteConfig, telemetry: bool) -> dict:
    """Warm up and time the case's work; bound_info of the timed rounds ({} for fixed rounds) and the
    telemetry read over them."""
    if work.pedantic is not None:
        # Fixed rounds and warm-up from the case (collectives: every rank must run the same calls in lockstep;
        # time-based warm-up and calibration would differ between ranks and hang them).
        with over(case.devices, telemetry) as read:
            benchmark.pedantic(work.fn, **work.pedantic)
        return read
    timer = SyncTimer([torch.device(d) for d in case.devices])
    warm_up(work.fn, timer, config.timing.warmup_s)
    with over(case.devices, telemetry) as read:
        benchmark(work.fn)
    if benchmark.stats is None:
        return read
    return {**bound_info(work.fn, timer, benchmark.stats.iterations), **read}


# What a case's work counts, and the rate each count gives over the median round: (count, rate, per second).
RATES = (("flops", "tflops", tflops), ("bytes", "gbps", gbps), ("traffic_bytes", "traffic_gbps", gbps),
         ("samples", "samples_per_s", lambda samples, seconds: samples / seconds))


def _extra_info(case: Case, work, benchmark, bound: dict, held: dict) -> dict:
    """The benchmark's extra_info: the case, its counts and their rates, the work's own, bound, clocks held,
    what the work derives from the median, and why timing stopped."""
    stats = getattr(benchmark, "stats", None)
    median = stats.stats.median if stats is not None else None
    counts = {count: getattr(work, count) for count, _, _ in RATES if getattr(work, count) is not None}
    info: dict = {"case": case.family, **case.info, **counts}
    if median:
        info.update({rate: per_s(counts[count], median) for count, rate, per_s in RATES if count in counts})
    info.update({**work.extra, **bound, **held})
    if median and work.derive is not None:
        info.update(work.derive(median))
    if stats is not None:
        info.update(stopping_info(stats, pedantic=work.pedantic is not None))
    return {**info, **_per_watt(case.family, info)}


def _per_watt(family: str, info: dict) -> dict:
    """perf_per_w: the family's rate (its read.py RATE, else the first rate it has) per watt of power_w."""
    rate = family_read(family, "RATE") or next((r for _, r, _ in RATES if r in info), None)
    value, watts = info.get(rate), info.get("power_w")
    if isinstance(value, (int, float)) and isinstance(watts, (int, float)) and watts > 0:
        return {"perf_per_w": value / watts}
    return {}


def _skip_reason(exc: BaseException, case: Case) -> str | None:
    """Why `exc` makes the case a skip (pytest's skip, SkipCase, out of memory); None when it is a failure."""
    if isinstance(exc, pytest.skip.Exception):
        return str(exc.msg)
    if isinstance(exc, SkipCase):
        return str(exc)
    return _oom_reason(exc, case)


def _problem(exc: BaseException, case: Case) -> dict:
    """A rank's own problem with a case, for the other ranks: a skip (as run_case would skip) or a failure."""
    reason = _skip_reason(exc, case)
    if reason is not None:
        return {"kind": "skip", "text": reason}
    if isinstance(exc, pytest.fail.Exception):
        return {"kind": "fail", "text": str(exc.msg)}
    lines = str(exc).strip().splitlines()
    return {"kind": "fail", "text": f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__}


def _start_in_lockstep(case: Case, family, config: SuiteConfig, lockstep):
    """Build, check and start the ClockWatch on every rank, then agree before timing: if any rank failed or
    skipped, every rank fails (or, if all of them only skipped, skips) the case with the ranks' reasons, and
    the run goes on in step with the next case. Returns (work, watch) when every rank is ready."""
    from suite.distributed import CaseAborted, RankTimeout, describe_outcome

    own: BaseException | None = None
    problem = None
    try:
        skip_if_missing(case)
        work = family.build(case, config)
        work.check()
    except (KeyboardInterrupt, SystemExit, RankTimeout):
        raise  # the run ends, or a rank is gone: the agreement below would wait for it in vain
    except CaseAborted as exc:
        own = exc  # another rank left the case: its reason comes with the agreement below
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the other ranks must hear of it
        own, problem = exc, _problem(exc, case)
    outcome = lockstep.ready(problem)
    if not outcome:
        if own is not None:
            raise own
        # Started once every rank is ready: waiting for the slowest rank is no part of the window.
        return work, dev.ClockWatch(case.devices)
    kind = "fail" if any(o["kind"] == "fail" for o in outcome.values()) else "skip"
    texts = {o["text"] for o in outcome.values()}
    if problem is not None and problem["kind"] == kind and texts == {problem["text"]}:
        raise own  # this rank's own error, alone or the same on every rank: with its traceback
    message = describe_outcome(outcome, lockstep.env.world_size)
    if kind == "skip":
        pytest.skip(message)
    raise pytest.fail.Exception(message, pytrace=False) from own


def _failed_in_lockstep(exc: BaseException, case: Case, lockstep) -> None:
    """A rank failed while timing, where no agreement is possible: the others wait for it inside a collective
    until timeout_s, then fail too. Each posts its error; a rank that sees another's names that rank first."""
    from suite.distributed import by_rank

    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return
    problem = _problem(exc, case)
    try:
        others = lockstep.timing_failed(problem["text"])
    except RuntimeError:  # the store is gone too: this rank's own error is what there is to say
        return
    if others:
        raise pytest.fail.Exception(
            f"failed while timing on {by_rank(others)}; this rank failed after it, waiting in a collective: "
            f"{problem['text']}", pytrace=False
        ) from exc
