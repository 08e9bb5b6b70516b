"""The one place that touches pytest-benchmark's private attributes; tests/test_pb_adapter.py pins each of them.

pytest-benchmark's public surface (the `benchmark` marker's keywords, `benchmark(...)`/`.pedantic`, its
`pytest_benchmark_*` hooks, `extra_info`, the fixture's `stats`) covers most of what the suite needs. Three
mechanisms the suite must own, and where each one plugs in:

- The timer: extended through the public `timer` marker keyword (suite.timing.SyncTimer); nothing private.
- The stopping loop: owned. pytest-benchmark fixes its rounds from one calibration round and stops on a
  normal-quantile margin; the suite stops at max_time of wall time and on a Student-t margin
  (cap_rounds_by_time). No hook reaches the loop, and re-implementing the fixture (calibration, Metadata,
  --benchmark-compare, cProfile) to own it from outside would copy far more than it replaces, so the suite's
  loop is put in place of the fixture's `_run_until_precise`, with `_make_stats` wrapped to route fixed rounds
  through it. A fixture whose loop has another signature keeps its own, only ended at max_time.
- The JSON write: owned. pytest-benchmark truncates --benchmark-json and then writes it (a full disk left an
  empty file) and has no hook around the write, so the session's `save_json` is replaced by the caller's
  atomic write (suite.partial.write_json_atomically); the document itself is still pytest-benchmark's, shaped
  by the public pytest_benchmark_update_json hook.

Everything else read here (the session behind `config._benchmarksession`, `safe_dumps`, the machine-info
hooks called outside a save) is read, never re-implemented.
"""

from __future__ import annotations

import inspect
import math
import time
from typing import Callable

# The pytest-benchmark releases whose private names below were checked (tests/test_pb_adapter.py): from
# pyproject's floor up to, not including, the next major release, which may rename them.
SUPPORTED = ((5, 3, 1), (6, 0, 0))

# pytest-benchmark's `_mode` of a fixture that ran `benchmark(...)`: its rounds were bounded by max_time.
TIMED_MODE = "benchmark(...)"
# The arguments of the fixture's private `_run_until_precise` that the suite's loop replaces.
PRECISE_LOOP_ARGS = ("runner", "loops_range", "stats", "max_rounds")
# The fixture's precision loop ends once the margin is within the target; a target below zero is never met, so
# with precision off the loop runs the calibrated rounds, ended at max_time by cap_rounds_by_time.
NEVER_PRECISE = -1.0


# --- the `benchmark` fixture -----------------------------------------------------------------------------


def timed_max_time(benchmark) -> float | None:
    """The max_time that bounded `benchmark`'s timed rounds, or None (fixed rounds: benchmark.pedantic)."""
    if getattr(benchmark, "_mode", None) != TIMED_MODE:
        return None
    return getattr(benchmark, "_max_time", None)


class _TimeUp(Exception):
    """Raised inside pytest-benchmark's precision loop to end it once max_time of wall time has passed."""


def cap_rounds_by_time(benchmark, clock: Callable[[], float] = time.perf_counter) -> bool:
    """Make `benchmark`'s precision loop stop, between rounds, once min_rounds are in and max_time of wall time
    has passed, and on a Student-t margin; returns whether it could.

    pytest-benchmark fixes its rounds from one calibration round: on a shared machine later rounds can be many
    times slower (17 s on a benchmark with max_time 1 s on a 2-core VM), which no time budget survives. Where the
    fixture's loop takes PRECISE_LOOP_ARGS it is replaced by the same loop (Welford's running mean and variance)
    stopping on suite.timing.t_margin (after 5 rounds, a margin 1.8x tighter than the normal quantile's);
    elsewhere the fixture's own loop runs, only ended at max_time.
    """
    from suite.timing import t_margin

    original = getattr(benchmark, "_run_until_precise", None)
    max_time, min_rounds = getattr(benchmark, "_max_time", None), getattr(benchmark, "_min_rounds", None)
    if original is None or max_time is None or min_rounds is None:
        return False
    try:
        ours = tuple(inspect.signature(original).parameters) == PRECISE_LOOP_ARGS
    except (TypeError, ValueError):
        ours = False

    def precise_loop(runner, loops_range, stats, max_rounds):
        precision, confidence = benchmark._precision, benchmark._confidence  # read when the loop starts
        start, mean, m2 = clock(), 0.0, 0.0
        for n in range(1, max_rounds + 1):
            if n - 1 >= max(min_rounds, 2) and clock() - start >= max_time:
                return
            duration = runner(loops_range)
            stats.update(duration)
            delta = duration - mean
            mean += delta / n
            m2 += delta * (duration - mean)
            if n >= min_rounds and n >= 2 and mean > 0:
                if t_margin(confidence, n, math.sqrt(m2 / (n - 1)), mean) <= precision:
                    return

    def run_until_precise(runner, *args, **kwargs):
        start, rounds = clock(), 0

        def runner_within_time(loops):
            nonlocal rounds
            if rounds >= max(min_rounds, 2) and clock() - start >= max_time:
                raise _TimeUp
            rounds += 1
            return runner(loops)

        try:
            original(runner_within_time, *args, **kwargs)
        except _TimeUp:
            pass

    benchmark._run_until_precise = precise_loop if ours else run_until_precise
    return True


def cap_fixed_rounds_by_time(benchmark) -> bool:
    """With precision off, run pytest-benchmark's fixed rounds (a plain loop cap_rounds_by_time cannot end)
    through the precision loop with a target never met, so they too stop at max_time; the result's options,
    recorded first, keep precision off."""
    from suite.timing import DEFAULT_CONFIDENCE

    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None or getattr(benchmark, "_precision", 0.0) is not None:
        return False

    def make_stats_then_loop(*args, **kwargs):
        stats = make_stats(*args, **kwargs)
        benchmark._precision, benchmark._confidence = NEVER_PRECISE, DEFAULT_CONFIDENCE
        return stats

    benchmark._make_stats = make_stats_then_loop
    return True


# --- the session (config._benchmarksession): its results, its table, its files ----------------------------


def session(config):
    """pytest-benchmark's session object, or None where the plugin is not loaded."""
    return getattr(config, "_benchmarksession", None)


def measured(config) -> list:
    """This run's benchmark fixtures (each with `.stats`, `.has_error`, `.fullname`, `.as_dict`)."""
    return list(getattr(session(config), "benchmarks", None) or [])


def disabled(config) -> bool:
    """--benchmark-disable: each benchmark ran once, untimed."""
    return bool(getattr(session(config), "disabled", False))


def write_json_with(config, save: Callable) -> None:
    """Where the session writes --benchmark-json, it calls `save(path, output_json)` instead of its own write."""
    bs = session(config)
    path = getattr(bs, "json", None)
    if path and hasattr(bs, "save_json"):
        bs.save_json = lambda output_json: save(path, output_json)


def store_nothing(config) -> bool:
    """Keep --benchmark-save / --benchmark-autosave from storing this run; returns whether either was asked."""
    bs = session(config)
    if bs is None or not (getattr(bs, "save", None) or getattr(bs, "autosave", None)):
        return False
    bs.save = bs.autosave = None
    return True


def write_no_json(config, keep_table: bool = False) -> None:
    """No --benchmark-json written by pytest-benchmark, and (unless `keep_table`) no table row for a benchmark
    that has no rounds."""
    bs = session(config)
    if bs is not None:
        bs.json = None
        if not keep_table:
            bs.benchmarks[:] = [b for b in bs.benchmarks if b.stats is not None and b.stats.data]


def quiet(config) -> None:
    """No timing table from pytest-benchmark (--benchmark-json and --benchmark-compare's checks still run)."""
    bs = session(config)
    if bs is not None:
        bs.quiet = True


def no_table(config) -> None:
    """Drop the groups pytest-benchmark would draw its table from at the terminal summary."""
    bs = session(config)
    if bs is not None:
        bs.groups = []


# --- the JSON's text and header --------------------------------------------------------------------------


def dumps(obj: dict, **options) -> str:
    """JSON text as pytest-benchmark writes it (its safe_dumps: what json cannot encode becomes a string)."""
    from pytest_benchmark.utils import safe_dumps

    return safe_dumps(obj, ensure_ascii=True, **options)


def header(config) -> dict:
    """The top of pytest-benchmark's JSON, made now as its handle_saving makes it: machine_info and commit_info
    (with the hooks that add to them), the time in its format, and its version."""
    from datetime import datetime, timezone

    from pytest_benchmark import __version__

    hook = config.hook
    machine_info = hook.pytest_benchmark_generate_machine_info(config=config)
    hook.pytest_benchmark_update_machine_info(config=config, machine_info=machine_info)
    commit_info = hook.pytest_benchmark_generate_commit_info(config=config)
    hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    return {"machine_info": machine_info, "commit_info": commit_info,
            "datetime": datetime.now(timezone.utc).isoformat(), "version": __version__}
