"""Timers that measure the completion of device work, not its launch, and the warm-up before timing.

pytest-benchmark times a round as `t0 = timer(); fn() x iterations; t1 = timer()`. Our timer synchronises the
case's devices before reading the clock, so t1 is taken only after every queued kernel or copy finished and
t0 only after earlier work drained. Its own cost (mostly the synchronisation) is what pytest-benchmark measures
as the timer's precision; with `calibration_precision` = N a round lasts at least N times that, so one
synchronisation is at most 1/N of a round.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
import time
from typing import Callable, Iterable

from suite.cases import family_module

# Fewest warm-up calls even when one call outlasts warmup_s: the first call pays for context creation,
# library handles and autotuning; the second for caches the first filled.
MIN_WARMUP_CALLS = 2
# A short warm-up never runs past this many calls: tiny ops would otherwise spin for millions of iterations.
MAX_WARMUP_CALLS = 10_000
# A warm-up this long is the sustained compute warm-up (timing.compute_warmup_s, 1 s; warmup_s is 0.05 s): its
# job is to keep the device busy until its clock settles, so it has no call cap and synchronises only after
# doubling batches of calls (a sync after each 13 us call would idle the GPU between calls, and 10,000 calls
# would end it after ~0.14 s).
SUSTAINED_WARMUP_FROM_S = 0.5

class SyncTimer:
    """A clock that first waits for the given devices: a drop-in `timer` for pytest-benchmark."""

    def __init__(self, devices: Iterable = (), clock: Callable[[], float] = time.perf_counter,
                 synchronize: Callable[..., None] | None = None) -> None:
        self.devices = tuple(devices)
        self.clock = clock
        if synchronize is None:
            from suite.devices import synchronize
        self._synchronize = synchronize
        # The CPU runs torch ops synchronously; a timer with only the CPU skips the call entirely so the
        # overhead of tiny CPU ops stays at a bare clock read.
        self.needs_sync = any(str(d) != "cpu" for d in self.devices)
        self.__name__ = repr(self)

    def __call__(self) -> float:
        if self.needs_sync:
            self._synchronize(*self.devices)
        return self.clock()

    def __repr__(self) -> str:
        return f"SyncTimer({','.join(str(d) for d in self.devices) or '-'})"

    # pytest-benchmark keys a cache of timer precisions by the timer: equal devices share one entry.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, SyncTimer) and (self.devices, self.clock) == (other.devices, other.clock)

    def __hash__(self) -> int:
        return hash((self.devices, self.clock))


# A figure is host-bound when issuing its calls fills at least this share of a round: the device then waits for
# Python, and the rate is the host's (LeNet at batch 256 on an H200: 100% of the step was issue time).
HOST_BOUND_SHARE = 0.9
# ... and when, once the last call is issued, the device is done within this many calls' time. A device-bound
# case whose launch queue filled up also keeps the host issuing all round (each launch waits for a free slot),
# but then the device still has the whole queue to drain after the last launch.
HOST_BOUND_DRAIN_CALLS = 2
# Rounds of the probe after the timed rounds (outside them); the median share is kept.
BOUND_ROUNDS = 5


def bound_info(fn: Callable[[], object], timer: SyncTimer, calls: int) -> dict:
    """`host_share`: the share of a round of `calls` calls the host spends issuing them; `bound`: whether the
    host or the device set the round's time. Empty for the CPU, whose ops run as they are issued."""
    if not timer.needs_sync or calls < 1:
        return {}
    shares, drains, per_call = [], [], []
    for _ in range(BOUND_ROUNDS):
        start = timer()  # synchronised: nothing of this case is queued before the round
        for _ in range(calls):
            fn()
        issued = timer.clock()
        end = timer()
        if end <= start:
            return {}
        shares.append((issued - start) / (end - start))
        drains.append(end - issued)
        per_call.append((end - start) / calls)
    share = statistics.median(shares)
    host = share >= HOST_BOUND_SHARE and statistics.median(drains) <= HOST_BOUND_DRAIN_CALLS * statistics.median(per_call)
    return {"host_share": round(share, 3), "bound": "host" if host else "device"}


def warm_up(fn: Callable[[], object], timer: SyncTimer, seconds: float) -> int:
    """Call `fn` for about `seconds` (at least MIN_WARMUP_CALLS times), synchronised; return the call count.

    Below SUSTAINED_WARMUP_FROM_S: a sync after every call, at most MAX_WARMUP_CALLS calls. From it on: no cap,
    a sync after batches of 1, 2, 4, ... calls, the last batches sized to end near `seconds` (a few syncs in
    all, growing with the log of the call count).
    """
    sustained = seconds >= SUSTAINED_WARMUP_FROM_S
    start = timer()
    calls, batch = 0, 1
    while sustained or calls < MAX_WARMUP_CALLS:
        for _ in range(batch):
            fn()
        calls += batch
        if calls < MIN_WARMUP_CALLS and not sustained:
            continue
        elapsed = timer() - start
        left = seconds - elapsed
        if calls >= MIN_WARMUP_CALLS and left <= 0:
            break
        if sustained:
            # Double, but no further than the calls that fill the time left at the rate seen so far (that rate
            # includes the first calls' one-off costs, so the estimate errs short and the next batch tops it up).
            fits = math.ceil(left * calls / elapsed) if elapsed > 0 else 2 * batch
            batch = MIN_WARMUP_CALLS - calls if left <= 0 else max(1, min(2 * batch, fits))
    return calls


# Stop once the mean's relative margin of error is within +-1% at 99% confidence (pytest-benchmark's
# --benchmark-precision / --benchmark-confidence; a Student-t margin): a GPU kernel with ~0.5% round-to-round
# jitter gets there in min_rounds or one more (a fake device with that jitter: within 0.2 s, median within 1%
# of a 5 s run; bench_timing.py), while the noisy cases of a shared CPU still run to max_time and record how
# precise they got.
DEFAULT_PRECISION = 0.01
# pytest-benchmark's own default confidence for --benchmark-precision.
DEFAULT_CONFIDENCE = 0.99
# A cold GPU boosts above the clock it can hold: warmup=0 gave H100 matmuls an "unfair advantage" that "is not
# sustainable" (stas00/ml-engineering PR 59); mamf-finder's sustained (MSMF) window runs 1 s untimed before
# timing, because on an H200 a 0.3 s window read 745-752 TFLOP/s where a 4 s window held 728-735
# (ml-engineering compute/accelerator/benchmarks/README.md, "How MAMF and MSMF are defined"). So compute cases
# on an accelerator run this long before their first timed round, whatever precision stopping does after.
# mamf-finder also first runs up to 20 s of matmuls until the clock stops dropping ("settle clock"); the suite
# does not, so a ceiling measured on a GPU that was idle can read a little above its MSMF.
SUSTAINED_WARMUP_S = 1.0


# A round on an accelerator is `t0 = sync; fn() x N; sync`: the device waits while the host launches the first
# call (a cuDNN convolution: tens of microseconds of dispatch, pytorch PR 51390 measured ~52 us per conv call),
# and the closing synchronisation wakes the host after the last kernel. Later launches overlap the device's
# work, so a round measures N x the kernel plus that one gap. calibration_precision bounds only the timer's own
# cost (the synchronisation on an idle device, a few microseconds), not the gap: rounds of at least 5 ms keep a
# 50 us gap under 1%, as the GPU check's CUDA-event references demand of a 0.1 ms convolution.
ACCELERATOR_MIN_ROUND_S = 0.005


def min_round_seconds(case, timing) -> float:
    """timing.min_time, at least timing.accelerator_min_time on an accelerator (ACCELERATOR_MIN_ROUND_S)."""
    if any(d != "cpu" for d in case.devices):
        return max(timing.min_time, timing.accelerator_min_time)
    return timing.min_time


def warmup_seconds(case, timing) -> float:
    """timing.warmup_s, at least timing.compute_warmup_s (SUSTAINED_WARMUP_S) for a compute family (its measure
    module says `COMPUTE = True`: it keeps an accelerator's compute units busy) on an accelerator."""
    compute = getattr(family_module(case.family), "COMPUTE", False)
    if compute and any(d != "cpu" for d in case.devices):
        return max(timing.warmup_s, timing.compute_warmup_s)
    return timing.warmup_s


_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?$")
DURATION_HELP = "seconds or a duration such as 90s, 10m, 1h, 1h30m"


def parse_duration(value: object) -> float:
    """Seconds from `600`, `"600"`, `"90s"`, `"10m"`, `"1h30m"`; ValueError naming the value otherwise."""
    bad = ValueError(f"{value!r} is not a duration; expected {DURATION_HELP}")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad
    text = str(value).strip().lower().replace(" ", "")
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION_RE.match(text)
        if not match or not any(match.groups()):
            raise bad from None
        hours, minutes, secs = (float(g or 0) for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} is not a duration; it must be positive ({DURATION_HELP})")
    return seconds


def format_duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`: how the plan and the budget messages show a time."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with a whole number of degrees of freedom (the closed form in theta =
    atan(t / sqrt(df)); Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term = total = 1.0
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


@functools.lru_cache(maxsize=4096)
def student_t(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile at `confidence`: 4.604 at 99% for 5 rounds (df 4), where the normal
    quantile pytest-benchmark uses is 2.576. Exact (bisection on the closed-form CDF) up to 30 degrees of
    freedom; above, the Cornish-Fisher expansion in the normal quantile, within 1e-4 there."""
    if df <= 30:
        lo, hi = 0.0, 1.0
        while _t_two_sided_cdf(hi, df) < confidence:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _t_two_sided_cdf(mid, df) < confidence else (lo, mid)
        return hi
    z, v = statistics.NormalDist().inv_cdf(0.5 + confidence / 2), float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def relative_margin(data: list[float], confidence: float) -> float | None:
    """The MEAN's relative margin of error at `confidence`: the Student-t interval of the rounds (the rate the
    suite reports is their median; a margin within the target says the rounds agree, not where the median
    lies). None with fewer than two rounds or a zero mean. pytest-benchmark's normal quantile, with 5 rounds,
    claims 99% for an interval that holds ~94% of the time."""
    if len(data) < 2:
        return None
    mean = statistics.fmean(data)
    if mean <= 0:
        return None
    return t_margin(confidence, len(data), statistics.stdev(data), mean)


def t_margin(confidence: float, n: int, stdev: float, mean: float) -> float:
    """The mean's relative margin of error of n rounds (Student-t), as the precision loop stops on it."""
    return student_t(confidence, n - 1) * stdev / math.sqrt(n) / mean


def stopping_info(stats, pedantic: bool = False) -> dict:
    """Rounds, margin and what stopped one pytest-benchmark result (its `Metadata`): fixed rounds, precision,
    or time. The loop stops at the first round within the target, so a final margin within it means precision."""
    options = getattr(stats, "options", {}) or {}
    data = list(stats.stats.data)
    precision, confidence = options.get("precision"), options.get("confidence") or DEFAULT_CONFIDENCE
    margin = relative_margin(data, confidence)
    met = bool(precision) and margin is not None and margin <= precision
    return {"rounds": len(data), "margin": margin, "confidence": confidence,
            "precision_target": None if pedantic else precision,
            "stopped_on": "fixed" if pedantic else "precision" if met else "time"}


def process_age() -> float:
    """Seconds since this process started, so a run's budget covers its start-up (interpreter, torch import).

    Read from Linux's /proc; elsewhere (macOS, Windows) it is 0 and the budget's clock starts when pytest
    configures the plugin, a second or so after the process: the run may overrun its budget by that much.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = float(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        import os

        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
