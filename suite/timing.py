"""Timers that measure the completion of device work, not its launch, and the warm-up before timing.

pytest-benchmark times a round as `t0 = timer(); fn() x iterations; t1 = timer()`. Our timer synchronises the
case's devices before reading the clock, so t1 is taken only after every queued kernel or copy finished and
t0 only after earlier work drained. Its own cost (mostly the synchronisation) is what pytest-benchmark measures
as the timer's precision; with `calibration_precision` = N a round lasts at least N times that, so one
synchronisation is at most 1/N of a round.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

# Fewest warm-up calls even when one call outlasts warmup_s: the first call pays for context creation,
# library handles and autotuning; the second for caches the first filled.
MIN_WARMUP_CALLS = 2
# A warm-up never runs past this many calls: tiny ops would otherwise spin for millions of iterations.
MAX_WARMUP_CALLS = 10_000


class SyncTimer:
    """A clock that first waits for the given devices: a drop-in `timer` for pytest-benchmark."""

    def __init__(
        self,
        devices: Iterable = (),
        clock: Callable[[], float] = time.perf_counter,
        synchronize: Callable[..., None] | None = None,
    ) -> None:
        self.devices = tuple(devices)
        self.clock = clock
        if synchronize is None:
            from suite.devices import synchronize as _sync

            synchronize = _sync
        self._synchronize = synchronize
        # The CPU runs torch ops synchronously; a timer with only the CPU skips the call entirely so the
        # overhead of tiny CPU ops stays at a bare clock read.
        self._needs_sync = any(str(d) != "cpu" for d in self.devices)
        self.__name__ = repr(self)

    def __call__(self) -> float:
        if self._needs_sync:
            self._synchronize(*self.devices)
        return self.clock()

    def __repr__(self) -> str:
        return f"SyncTimer({','.join(str(d) for d in self.devices) or '-'})"

    # pytest-benchmark keys a cache of timer precisions by the timer: equal devices share one entry.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, SyncTimer) and (self.devices, self.clock) == (other.devices, other.clock)

    def __hash__(self) -> int:
        return hash((self.devices, self.clock))


def warm_up(fn: Callable[[], object], timer: SyncTimer, seconds: float) -> int:
    """Call `fn` for about `seconds` (at least MIN_WARMUP_CALLS times), synchronised; return the call count."""
    start = timer()
    calls = 0
    while calls < MAX_WARMUP_CALLS:
        fn()
        calls += 1
        if calls >= MIN_WARMUP_CALLS and timer() - start >= seconds:
            break
    return calls


# A reference measurement (suite.gpu_check) takes at least this many calls, however long each call is.
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
            batch = _next_batch(batch, len(pairs), calls)
        return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def host_times(fn: Callable[[], object], device, seconds: float | None = None, calls: int | None = None,
               before: Callable[[], object] | None = None, clock: Callable[[], float] = time.perf_counter,
               synchronize: Callable[..., None] | None = None) -> list[float]:
    """Seconds per call from the host clock, the device synchronised after each call: the reference of the
    GPU check's CPU dry run (on the CPU it is a plain clock read around each call)."""
    if synchronize is None:
        from suite import devices

        synchronize = devices.synchronize
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


def _next_batch(batch: int, done: int, calls: int | None) -> int:
    batch = min(2 * batch, MAX_REFERENCE_BATCH)
    return batch if calls is None else max(1, min(batch, calls - done))
