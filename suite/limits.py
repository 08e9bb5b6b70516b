"""NVML's clock limits, as the results record them: which limits, and how a result's shares are read back.
Torch-free: the measurement side (suite.devices.ClockWatch) writes them, the analysis side reads them."""

from __future__ import annotations

import math

# NVML's performance policies (nvmlPerfPolicyType_t) whose violation counters (nvmlDeviceGetViolationStatus,
# nanoseconds since the driver loaded) count the time they held a GPU's clocks down, by the name the results
# use. The power limit holding a GPU under full load is its normal state on many parts (DCGM's power
# violation counter grows on almost any busy GPU); thermal (the driver's software thermal slowdown), board
# and reliability limits are not. Left out: sync boost, and low utilisation (clocks lowered because the GPU
# waits on the host, the benchmark's own doing). NVML lists the call as deprecated in CUDA 13, to be removed
# in 14: the same counters are read as field values (POLICY_FIELDS) wherever it does not answer.
CLOCK_LIMITS = {"power": 0, "thermal": 1, "board_limit": 3, "reliability": 5}
# The same counters as NVML field values (nvmlDeviceGetFieldValues; NVML_FI_DEV_PERF_POLICY_*, nanoseconds).
POLICY_FIELDS = {"power": 74, "thermal": 75, "board_limit": 77, "reliability": 79}
# What the policies do not count: the hardware's own slowdowns, each of which cuts the clocks by half or more
# (nvml.h's clock-event reasons): hardware thermal slowdown (the GPU too hot) and the hardware power brake (an
# external signal, such as the system's power supply). NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN and
# _HW_POWER_BRAKE_SLOWDOWN, nanoseconds since the driver loaded (DCGM's *_NS fields mirror them); by number,
# since an older nvidia-ml-py named other numbers so. Drivers before these fields answer NOT_SUPPORTED per
# field, and nothing is recorded for them.
HW_SLOWDOWN_FIELDS = {"hw_thermal": 270, "hw_power_brake": 271}
# Every limit a result may record as clocks_held_<name>.
LIMITS = (*CLOCK_LIMITS, *HW_SLOWDOWN_FIELDS)
# A limit holding the clocks for less than this share of a benchmark's warm-up and timing is not recorded
# by name (counter noise).
CLOCKS_HELD_NAMED_FROM = 0.01


def limits_held(info) -> dict[str, float]:
    """limit -> share of the window it held the clocks, from a result's extra_info (or a table row's
    mapping), largest first: what ClockWatch recorded as `clocks_held_<limit>`."""
    found = {}
    for name in LIMITS:
        value = info.get(f"clocks_held_{name}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
            found[name] = float(value)
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))
