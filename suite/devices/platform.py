"""The device seam, `Platform`: what torch can see, asked of one small class per device kind (kinds.py)."""

from __future__ import annotations

import contextlib
import functools
import platform as _pyplatform
from typing import Iterator

import torch

from suite.devices.kinds import Cpu, Cuda, Mps, Xpu


def _by_kind(name: str, doc: str = ""):
    """A Platform method that asks the kind of its device argument."""

    def ask(self, device: torch.device):
        return getattr(self._of(device), name)(device)

    ask.__name__, ask.__doc__ = name, doc
    return ask


class Platform:
    """What torch can see on this machine; the only place that asks torch about accelerators."""

    @functools.cached_property
    def kinds(self) -> dict[str, Cpu]:
        # One set per platform: what a kind remembers (NVML handles, the Mac's chip) is this platform's.
        return {kind.name: kind for kind in (Cuda(), Xpu(), Mps(), Cpu())}

    def _of(self, device: torch.device) -> Cpu:
        return self.kinds.get(device.type) or self.kinds["cpu"]

    def count(self, kind: str) -> int:
        return self.kinds[kind].count() if kind in self.kinds else 0

    synchronize = _by_kind("synchronize")
    properties = _by_kind("properties", "Name, memory and, where the backend says, capability and multiprocessors.")
    tf32_supported = _by_kind("tf32_supported", "Whether torch says this CUDA or ROCm GPU has TF32 math; None where "
                              "this torch cannot tell.")
    clock_limits = _by_kind("clock_limits", "Seconds, counted by NVML since the driver loaded, that each of "
                            "suite.limits.CLOCK_LIMITS held this GPU's clocks down; None where NVML cannot tell.")
    mem_get_info = _by_kind("mem_get_info", "(free, total) bytes on an accelerator, None where it cannot tell.")
    empty_cache = _by_kind("empty_cache")
    numa_node = _by_kind("numa_node", "The NUMA node of a GPU's PCI slot; None where the platform does not say.")

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        """Peer access joins two distinct devices of one kind only."""
        return a.type == b.type and a != b and self._of(a).can_access_peer(a, b)

    def link(self, a: torch.device, b: torch.device) -> str | None:
        """What connects two GPUs, named as `nvidia-smi topo -m` names it ('NV18', 'PIX', 'SYS'); None where
        NVML cannot tell (no nvidia-ml-py or driver, a MIG instance, not two distinct CUDA devices)."""
        return self._of(a).link(a, b) if a.type == b.type and a != b else None

    def supports_pinned_memory(self) -> bool:
        return any(kind.pinned_memory and self.count(name) > 0 for name, kind in self.kinds.items())

    def software(self) -> dict:
        cuda = torch.version.cuda
        hip = getattr(torch.version, "hip", None)
        dnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        ccl = None
        if (cuda or hip) and torch.distributed.is_available() and torch.distributed.is_nccl_available():
            with contextlib.suppress(Exception):
                ccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        # On ROCm torch's cudnn and nccl modules answer with MIOpen's and RCCL's versions: recorded under
        # those names, so that no one compares an MIOpen number with a cuDNN one. RCCL numbers its releases
        # after the NCCL API it implements (2.22.3), which is what torch.cuda.nccl.version() gives.
        versions = {"torch": torch.__version__, "cuda": cuda, "hip": hip,
                    "cudnn": None, "miopen": None, "nccl": None, "rccl": None, "python": _pyplatform.python_version()}
        dnn_name, ccl_name = ("miopen", "rccl") if hip else ("cudnn", "nccl")
        return versions | {dnn_name: str(dnn) if dnn else None, ccl_name: ccl}


_platform: Platform = Platform()


def current_platform() -> Platform:
    return _platform


@contextlib.contextmanager
def use_platform(platform: Platform) -> Iterator[Platform]:
    """Swap the platform (tests: a fake multi-GPU machine), restoring the real one afterwards."""
    global _platform
    previous, _platform = _platform, platform
    try:
        yield platform
    finally:
        _platform = previous


def synchronize(*devices: torch.device | str) -> None:
    """Wait until all work queued on the given devices has finished."""
    plat = current_platform()
    for dev in devices:
        plat.synchronize(torch.device(dev))
