"""One issuing thread per device or stream: work meant for several devices reaches them at once, not at the
launch rate of one Python thread."""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

# Backends that keep a current device per host thread.
THREAD_DEVICE_KINDS = ("cuda", "xpu")


def use_device(device: str) -> None:
    """Make `device` the calling thread's current device where its backend keeps one (CUDA, XPU): the calls
    the thread then issues switch no device. A backend this torch lacks (tests' fake GPUs) has none to set."""
    kind = torch.device(device).type
    module = getattr(torch, kind, None)
    if kind in THREAD_DEVICE_KINDS and module is not None and module.is_available():
        module.set_device(device)


class Issuers:
    """A thread of its own for each of `batches`. Each thread first runs its setup (`setups`: its current
    device or streams, which CUDA and torch keep per thread), once. Calling the Issuers has every thread run
    its batch at the same time and returns their results once all have returned: the work is then issued,
    not done (the caller synchronises the devices). The threads end when the Issuers is freed."""

    def __init__(self, batches: list[Callable[[], object]],
                 setups: list[Callable[[], object]] | None = None) -> None:
        self.batches = batches
        # A one-worker pool runs every task on the same thread, so a setup holds for all its batches.
        self.pools = [ThreadPoolExecutor(1) for _ in batches]
        if setups is not None:
            self._all([pool.submit(setup) for pool, setup in zip(self.pools, setups)])

    def __call__(self, batches: list[Callable[[], object]] | None = None) -> list:
        """Run `batches` (one per thread; default: the threads' own) and return their results in order."""
        return self._all([pool.submit(b) for pool, b in zip(self.pools, batches or self.batches)])

    @staticmethod
    def _all(futures: list) -> list:
        # Every thread finishes before an error is raised: none may still issue work while the caller
        # synchronises and frees the buffers.
        concurrent.futures.wait(futures)
        return [f.result() for f in futures]
