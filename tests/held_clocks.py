"""Test-only plugin (`-p tests.held_clocks`): the CPU reports NVML-style clock-limit counters, thermal
slowdown holding it a quarter of the time, so a CPU run shows what a held GPU's results record."""

from __future__ import annotations

import time

import torch

from suite import devices as dev

SHARE = 0.25


class HeldPlatform(dev.Platform):
    def clock_limits(self, device: torch.device) -> dict[str, float] | None:
        if device.type != "cpu":
            return super().clock_limits(device)
        return {"power": 0.0, "thermal": time.monotonic() * SHARE, "board_limit": 0.0, "reliability": 0.0}


_swap = None


def pytest_configure(config):
    global _swap
    _swap = dev.use_platform(HeldPlatform())
    _swap.__enter__()


def pytest_unconfigure(config):
    if _swap is not None:
        _swap.__exit__(None, None, None)
