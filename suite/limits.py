"""NVML's clock limits, as the results record them: which limits, and how a result's shares are read back.
Torch-free: the measurement side (suite.devices.ClockWatch) writes them, the analysis side reads them."""

from __future__ import annotations

# NVML's performance policies (nvmlPerfPolicyType_t) whose violation counters (nvmlDeviceGetViolationStatus,
# nanoseconds since the driver loaded) count the time they held a GPU's clocks down, by the name the results
# use. The power limit holding a GPU under full load is its normal state on many parts (DCGM's power
# violation counter grows on almost any busy GPU); thermal (the driver's software thermal slowdown), board
# and reliability limits are not. Left out: sync boost, and low utilisation (clocks lowered because the GPU
# waits on the host, the benchmark's own doing). Not counted by these policies: hardware slowdown and the
# hardware power brake, which NVML reports only as clock-event reasons. NVML lists the call as deprecated
# in CUDA 13, to be removed in 14: where it is gone, nothing is recorded (tests/test_devices.py's gpu test
# fails on a whole GPU that answers nothing, so a GPU check shows it).
CLOCK_LIMITS = {"power": 0, "thermal": 1, "board_limit": 3, "reliability": 5}
# A limit holding the clocks for less than this share of a benchmark's warm-up and timing is not recorded
# by name (counter noise).
CLOCKS_HELD_NAMED_FROM = 0.01


def limits_held(info) -> dict[str, float]:
    """limit -> share of the window it held the clocks, from a result's extra_info (or a table row's
    mapping), largest first: what ClockWatch recorded as `clocks_held_<limit>`."""
    found = {}
    for name in CLOCK_LIMITS:
        value = info.get(f"clocks_held_{name}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            found[name] = float(value)
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))
