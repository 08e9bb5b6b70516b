"""One small class per device kind (CPU, CUDA/ROCm, XPU, MPS): what torch (and NVML) tell `Platform`."""

from __future__ import annotations

import contextlib
import functools
import platform as _pyplatform
import subprocess

import torch

from suite.devices import numa, nvml


class Cpu:
    """The CPU, and what every kind answers where its backend has nothing to do or to tell."""

    name = "cpu"
    # Whether a device of this kind being present makes pinned (page-locked) host memory available.
    pinned_memory = False

    def count(self) -> int:
        return 0

    def properties(self, device: torch.device) -> dict:
        raise ValueError(f"not an accelerator: {device}")

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        return False

    def _nothing(self, *devices: torch.device) -> None:
        """Nothing to wait for (torch runs CPU ops synchronously) or free, or nothing the backend tells."""

    synchronize = empty_cache = _nothing
    tf32_supported = link = clock_limits = mem_get_info = numa_node = _nothing


class _Accelerator(Cpu):
    """An accelerator torch reaches through its module `torch.<name>`."""

    def module(self):
        return getattr(torch, self.name, None)

    def count(self) -> int:
        module = self.module()
        return module.device_count() if module is not None and module.is_available() else 0

    def synchronize(self, device: torch.device) -> None:
        self.module().synchronize(device)

    def empty_cache(self, device: torch.device) -> None:
        self.module().empty_cache()


class Cuda(_Accelerator):
    """NVIDIA GPUs, and AMD's on a ROCm build (torch calls both "cuda"); NVML tells links, clocks, NUMA."""

    name = "cuda"
    pinned_memory = True

    def __init__(self) -> None:
        self._handles: dict[int, object] = {}
        self._numa_nodes: dict[int | None, int | None] = {}

    def properties(self, device: torch.device) -> dict:
        p = torch.cuda.get_device_properties(device)
        info = {"name": p.name, "memory_bytes": int(p.total_memory), "capability": f"{p.major}.{p.minor}",
                "multiprocessors": int(p.multi_processor_count)}
        # On ROCm the capability is the gfx version's digits (9.4 for gfx942 and gfx940 alike); the arch
        # name tells the chip and its features (xf32 on gfx94x/gfx95x).
        arch = getattr(p, "gcnArchName", None) if getattr(torch.version, "hip", None) else None
        if arch:
            info["gcn_arch"] = str(arch)
        uuid = getattr(p, "uuid", None)
        if uuid is not None:
            info["uuid"] = nvml.nvml_uuid(str(uuid), p.name)
        # The address nvidia-smi and a technician see: cuda:N is renumbered by CUDA_VISIBLE_DEVICES.
        if address := _pci_address(p):
            info["pci_bus_id"] = "{:04x}:{:02x}:{:02x}.0".format(*address)
        return info

    def _uuid(self, index: int | None) -> str | None:
        return self.properties(torch.device("cuda", index or 0)).get("uuid")

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        return bool(torch.cuda.can_device_access_peer(a.index, b.index))

    def tf32_supported(self, device: torch.device) -> bool | None:
        """TF32 (on ROCm: xf32, gfx94x/gfx95x) as torch says; None without torch.cuda.is_tf32_supported."""
        ask = getattr(torch.cuda, "is_tf32_supported", None)
        if ask is None:
            return None
        # It asks the current device: make that the one in question, and put the old one back.
        with torch.cuda.device(device.index or 0):
            return bool(ask())

    def mem_get_info(self, device: torch.device) -> tuple[int, int]:
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)

    def link(self, a: torch.device, b: torch.device) -> str | None:
        return self._links.get((a.index or 0, b.index or 0))

    @functools.cached_property
    def _links(self) -> dict[tuple[int, int], str]:
        """link() of every ordered pair of CUDA devices, by torch index, read from NVML once (the topology of
        a running machine does not change). NVML is asked by UUID: torch's device order and
        CUDA_VISIBLE_DEVICES need not be NVML's."""
        n = self.count()
        return nvml.nvml_links(tuple(self._uuid(i) for i in range(n)) if n > 1 else ())

    def clock_limits(self, device: torch.device) -> dict[str, float] | None:
        handle = self._handle(device.index or 0)
        return nvml.held_seconds(handle) if handle is not None else None

    def _handle(self, index: int):
        """The NVML handle of cuda:<index>, found by UUID; None where NVML cannot tell (remembered)."""
        if index not in self._handles:
            self._handles[index] = None
            uuid = self._uuid(index)
            if uuid and not uuid.startswith("MIG-") and self._nvml_up:
                self._handles[index] = nvml.handle(uuid)
        return self._handles[index]

    @functools.cached_property
    def _nvml_up(self) -> bool:
        """nvmlInit once, kept for the process (its init is counted, so nvml_info's own init and shutdown do
        not end it); whether it worked."""
        return nvml.init()

    def numa_node(self, device: torch.device) -> int | None:
        """From /sys, for torch's PCI address of the GPU, else NVML's; asked once per device."""
        if device.index not in self._numa_nodes:
            address = _pci_address(torch.cuda.get_device_properties(device))
            self._numa_nodes[device.index] = (numa.numa_node_of_pci(address) if address else
                                              nvml.nvml_info(device.index or 0, self._uuid(device.index)).get("numa_node"))
        return self._numa_nodes[device.index]


def _pci_address(props) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a GPU's PCI slot as torch tells it; None where this torch does not."""
    address = tuple(getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    return address if all(isinstance(v, int) for v in address) else None  # type: ignore[return-value]


class Xpu(_Accelerator):
    """Intel GPUs."""

    name = "xpu"
    pinned_memory = True

    def properties(self, device: torch.device) -> dict:
        p = torch.xpu.get_device_properties(device)
        return {"name": p.name, "memory_bytes": int(p.total_memory)}

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        # Newer torch asks Level Zero; an older one cannot tell, and peer transfers are taken to be staged.
        ask = getattr(getattr(torch, "xpu", None), "can_device_access_peer", None)
        with contextlib.suppress(RuntimeError):  # a driver that cannot answer: as if torch could not tell
            return bool(ask(a.index or 0, b.index or 0)) if ask is not None else False
        return False


class Mps(_Accelerator):
    """Apple's GPU: one, sharing the host's unified memory."""

    name = "mps"

    def count(self) -> int:
        mps = getattr(torch.backends, "mps", None)
        return 1 if mps is not None and mps.is_available() else 0

    def synchronize(self, device: torch.device) -> None:
        torch.mps.synchronize()

    def properties(self, device: torch.device) -> dict:
        # torch reports the recommended working set of the unified memory.
        limit = getattr(torch.mps, "recommended_max_memory", lambda: 0)()
        return {"name": f"{self._chip} (MPS)" if self._chip else "Apple MPS", "memory_bytes": int(limit)}

    @functools.cached_property
    def _chip(self) -> str:
        """'Apple M3 Max': torch names no Apple GPU, and the fleet check groups devices by name, so an M1 and
        an M3 Max must not share one. The chip is the CPU's brand string (one die); '' where macOS does not
        say. Asked once per platform: sysctl is a subprocess."""
        chip = ""
        if _pyplatform.system() == "Darwin":
            with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
                done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                      text=True, timeout=2, check=True)
                chip = done.stdout.strip()
        # Only an Apple chip's name: a stray answer (an Intel Mac's CPU, an error text) keeps the old one.
        return chip if chip.startswith("Apple ") and len(chip) <= 60 else ""
