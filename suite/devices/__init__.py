"""Devices: which ones (try_gpu, specs), the seam to them (Platform), NVML, NUMA and the machine inventory.

Everything that differs between CUDA, MPS, XPU and the CPU goes through `Platform`, one small class per kind
behind it, so the rest of the suite has a single code path and tests swap in a fake multi-GPU machine
(`use_platform`).
"""

from suite.devices.clocks import ClockWatch
from suite.devices.host import bound_host_node, host_near
from suite.devices.machine import inventory
from suite.devices.platform import Platform, current_platform, synchronize, use_platform
from suite.devices.specs import (accelerators, available_devices, check_spec, device_id, missing_devices,
                                 missing_reason, present_devices, resolve_spec, try_all_gpus, try_gpu)

__all__ = ["ClockWatch", "Platform", "accelerators", "available_devices", "bound_host_node", "check_spec",
           "current_platform", "device_id", "host_near", "inventory", "missing_devices", "missing_reason",
           "present_devices", "resolve_spec", "synchronize", "try_all_gpus", "try_gpu", "use_platform"]
