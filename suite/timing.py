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


def cuda_event_times(fn: Callable[[], object], device, iterations: int = 50, warmup: int = 10) -> list[float]:
    """Seconds per call measured with CUDA events on the current stream: an independent reference for the
    suite's host-timer-with-synchronisation measurement (used by the GPU check, never by the suite itself)."""
    import torch

    with torch.cuda.device(device):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
