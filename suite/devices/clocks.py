"""ClockWatch: how long NVML's limits held a benchmark's GPUs' clocks down while it ran."""

from __future__ import annotations

import time

import torch

from suite.devices.platform import current_platform
from suite.limits import CLOCKS_HELD_NAMED_FROM


class ClockWatch:
    """How long NVML's power, thermal, board or reliability limits, or the hardware's own slowdowns, held a
    benchmark's GPUs' clocks down while it was warmed up and timed: counters read before the warm-up and after
    the final synchronisation.

    `stop()` gives, where NVML answered for at least one of its devices: `clocks_held`, the largest share of
    that window (0 to 1) any one limit held any one of its GPUs; `clocks_held_<limit>` (power, thermal,
    board_limit, reliability, hw_thermal, hw_power_brake), that limit's own largest share, for each limit that
    held one for at least CLOCKS_HELD_NAMED_FROM of the window; `clocks_window_s`, the window's length.
    {} where NVML tells nothing (the CPU, no nvidia-ml-py, a MIG instance).
    """

    def __init__(self, devices: list[str], clock=time.monotonic) -> None:
        plat = current_platform()
        self.clock = clock
        self.devices = [torch.device(d) for d in devices]
        self.before = {d: plat.clock_limits(d) for d in self.devices}
        self.started = clock()

    def stop(self) -> dict:
        seconds = self.clock() - self.started
        plat = current_platform()
        shares: dict[str, float] = {}
        read = False
        for device, before in self.before.items():
            after = plat.clock_limits(device) if before else None
            if not before or not after:
                continue
            read = True
            for name in before.keys() & after.keys():
                share = min(1.0, max(0.0, after[name] - before[name]) / seconds) if seconds > 0 else 0.0
                shares[name] = max(shares.get(name, 0.0), share)
        if not read:
            return {}
        held = {f"clocks_held_{n}": s for n, s in shares.items() if s >= CLOCKS_HELD_NAMED_FROM}
        return {"clocks_held": max(shares.values(), default=0.0), **held, "clocks_window_s": seconds}
