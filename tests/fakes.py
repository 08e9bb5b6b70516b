"""Fakes behind the device seam: a multi-GPU machine on a CPU-only box, and an asynchronous device whose work
finishes only when synchronised (driven by a fake clock)."""

from __future__ import annotations

import torch

from suite.devices import Platform


# What a device of each fake kind says about itself, as Platform.properties gives it ("rocm": torch's "cuda"
# devices on a ROCm build).
KIND_PROPERTIES = {
    "cuda": {"name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "multiprocessors": 132},
    "rocm": {"name": "AMD Instinct MI300X", "capability": "9.4", "multiprocessors": 304,
             "gcn_arch": "gfx942:sramecc+:xnack-"},
    "xpu": {"name": "Intel(R) Data Center GPU Max 1550"},
    "mps": {"name": "Apple M3 Max (MPS)"},
}
# torch's device type of each fake kind.
KIND_DEVICE_TYPE = {"cuda": "cuda", "rocm": "cuda", "xpu": "xpu", "mps": "mps"}


class FakePlatform(Platform):
    """`gpus` CUDA devices named like H100s; peer access from `peer` (a set of (i, j) pairs) or all/none; the
    link of a pair from `links` ((i, j) -> 'NV18', 'SYS'; a pair not in it: NVML tells nothing).

    `kind` makes them other accelerators: "rocm" (MI300X as a ROCm build's "cuda" devices, with ROCm's
    software versions), "xpu" (Intel GPUs) or "mps" (one Apple GPU, whatever `gpus` says beyond 1)."""

    def __init__(self, gpus: int = 0, peer: bool | set[tuple[int, int]] = True, memory: int = 80 * 2**30,
                 links: dict[tuple[int, int], str] | None = None, kind: str = "cuda"):
        if kind not in KIND_PROPERTIES:
            raise ValueError(f"kind {kind!r}: one of {', '.join(KIND_PROPERTIES)}")
        self.gpus = gpus
        self.peer = peer
        self.memory = memory
        self.links = links or {}
        self.kind = kind
        # GPU index -> NVML's clock-limit counters in seconds; tests advance them
        self.held: dict[int, dict[str, float]] = {}
        self.synchronized: list[str] = []

    def count(self, kind: str) -> int:
        if kind != KIND_DEVICE_TYPE[self.kind]:
            return 0
        return min(self.gpus, 1) if kind == "mps" else self.gpus

    def synchronize(self, device: torch.device) -> None:
        self.synchronized.append(str(device))

    def properties(self, device: torch.device) -> dict:
        props = KIND_PROPERTIES[self.kind]
        return {"name": props["name"], "memory_bytes": self.memory, **props}

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        if a == b:
            return False
        if isinstance(self.peer, bool):
            return self.peer
        return (a.index, b.index) in self.peer

    def clock_limits(self, device: torch.device) -> dict[str, float] | None:
        counters = self.held.get(device.index) if device.type == "cuda" else None
        return dict(counters) if counters is not None else None

    def link(self, a: torch.device, b: torch.device) -> str | None:
        return self.links.get((a.index, b.index)) if a != b else None

    def mem_get_info(self, device: torch.device):
        return (self.memory // 2, self.memory) if device.type == "cuda" else None

    def empty_cache(self, device: torch.device) -> None:
        pass

    def supports_pinned_memory(self) -> bool:
        return False

    def software(self) -> dict:
        if self.kind == "rocm":
            return {"torch": torch.__version__, "cuda": None, "hip": "6.4.43482", "miopen": "30400",
                    "rccl": "2.22.3", "python": "3.11"}
        if self.kind in ("xpu", "mps"):
            return {"torch": torch.__version__, "python": "3.11"}
        return {"torch": torch.__version__, "cuda": "12.8", "cudnn": "91000", "nccl": "2.27.3", "python": "3.11"}


class FakeClock:
    """A clock that moves only when told to, plus `tick` per read (a real clock's resolution)."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


class FakeAsyncDevice:
    """Launching work costs `launch_s` of host time at once; the work itself (`work_s`) completes only when
    the device is synchronised, which is when the clock advances past it."""

    def __init__(self, clock: FakeClock, launch_s: float = 1e-6, work_s: float = 1e-3) -> None:
        self.clock, self.launch_s, self.work_s = clock, launch_s, work_s
        self.pending = 0.0

    def launch(self) -> None:
        self.clock.now += self.launch_s
        self.pending += self.work_s

    def synchronize(self, *devices) -> None:
        self.clock.now += self.pending
        self.pending = 0.0


class JitteryAsyncDevice(FakeAsyncDevice):
    """A FakeAsyncDevice whose work takes `work_s` x (1 + a normal draw of relative sd `jitter`), seeded."""

    def __init__(self, clock: FakeClock, launch_s: float = 1e-6, work_s: float = 1e-3, jitter: float = 0.005,
                 seed: int = 0) -> None:
        import random

        super().__init__(clock, launch_s, work_s)
        self.jitter = jitter
        self.random = random.Random(seed)
        self.base_work_s = work_s

    def launch(self) -> None:
        self.work_s = self.base_work_s * (1 + self.random.gauss(0.0, self.jitter))
        super().launch()
