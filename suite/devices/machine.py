"""What this machine has (`inventory`): the CPU, each accelerator, peer access and links between GPUs,
software versions; recorded as the results' machine_info."""

from __future__ import annotations

import contextlib
import os
import platform as _pyplatform
from dataclasses import dataclass, field
from pathlib import Path

import torch

from suite.devices.numa import numa_of_process
from suite.devices.nvml import nvml_info
from suite.devices.platform import current_platform
from suite.devices.specs import accelerators, device_id


def _cpu_info() -> dict:
    text = ""
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    # One block of "key : value" lines per logical CPU.
    cpus = [{k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}
            for block in text.split("\n\n")]
    name = next((c["model name"] for c in cpus if c.get("model name")), "")  # the CPU's brand string
    pairs = {(c["physical id"], c["core id"]) for c in cpus if {"physical id", "core id"} <= c.keys()}
    if not name:
        with contextlib.suppress(Exception):
            import cpuinfo  # py-cpuinfo: slow (it may start a subprocess), so only where /proc lacks a name

            name = cpuinfo.get_cpu_info().get("brand_raw")
    memory = 0
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    threads = os.cpu_count() or 1
    return {
        "id": "cpu",
        "kind": "cpu",
        "name": name or _pyplatform.processor() or _pyplatform.machine(),
        "memory_bytes": int(memory),
        # Distinct (physical id, core id) pairs; the thread count where /proc does not list them.
        "cores": len(pairs) or threads,
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        **numa_of_process(),
    }


def _gpus(kinds: tuple[str, ...]) -> list[torch.device]:
    return [d for d in accelerators() if d.type in kinds]


def link_matrix() -> dict[str, dict[str, str]]:
    """link() for every ordered pair of distinct CUDA devices NVML tells about; {} where it tells nothing."""
    plat = current_platform()
    gpus = _gpus(("cuda",))
    links = {device_id(a): {device_id(b): plat.link(a, b) for b in gpus if b != a} for a in gpus}
    links = {a: {b: v for b, v in row.items() if v} for a, row in links.items()}
    return {a: row for a, row in links.items() if row}


def peer_matrix() -> dict[str, dict[str, bool]]:
    """can_device_access_peer for every ordered pair of distinct CUDA devices, and of distinct XPUs (peer
    access joins devices of one kind only)."""
    plat = current_platform()
    gpus = _gpus(("cuda", "xpu"))
    return {device_id(a): {device_id(b): plat.can_access_peer(a, b) for b in gpus
                           if b != a and b.type == a.type} for a in gpus}


@dataclass(frozen=True)
class Inventory:
    devices: list[dict]
    peer_access: dict[str, dict[str, bool]]
    software: dict
    links: dict[str, dict[str, str]] = field(default_factory=dict)

    def as_machine_info(self) -> dict:
        return {"devices": self.devices, "peer_access": self.peer_access, "links": self.links,
                "software": self.software}


def inventory() -> Inventory:
    """What this machine has: the CPU, each accelerator, the peer matrix and software versions."""
    plat = current_platform()
    entries = [_cpu_info()]
    peers = peer_matrix()
    links = link_matrix()
    runtime = torch.version.cuda or getattr(torch.version, "hip", None)
    for dev in accelerators():
        name = device_id(dev)
        entry = {"id": name, "kind": dev.type, **plat.properties(dev)}
        if dev.type == "cuda":
            entry["runtime_version"] = runtime
        if dev.type in ("cuda", "xpu"):
            entry["peer_access"] = peers.get(name, {})
        if links.get(name):
            entry["links"] = links[name]
        if dev.type == "cuda":
            entry.update(nvml_info(dev.index or 0, entry.get("uuid")))
        entries.append(entry)
    from suite import __version__

    software = dict(plat.software(), suite=__version__)
    return Inventory(devices=entries, peer_access=peers, software=software, links=links)
