"""NUMA nodes as /sys tells them: the machine's, the process's, and a PCI device's."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SYS = Path("/sys")


def _cpulist(text: str) -> set[int]:
    """'0-15,32-47' -> {0, ..., 15, 32, ..., 47} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes(sys_root: Path | None = None) -> dict[int, set[int]]:
    """NUMA node -> its CPUs, for the nodes with CPUs (/sys/devices/system/node); {} where /sys does not say."""
    try:
        nodes = {int(d.name[4:]): _cpulist((d / "cpulist").read_text())
                 for d in ((sys_root or SYS) / "devices/system/node").glob("node[0-9]*")}
    except (OSError, ValueError):
        return {}
    return {n: c for n, c in nodes.items() if c}


def numa_of_process(sys_root: Path | None = None, cpus: set[int] | None = None,
                    status: str | None = None) -> dict:
    """The machine's NUMA nodes with CPUs (nodes of memory alone, as a Grace GPU's or CXL memory, are not
    counted), the nodes whose CPUs this process may run on (`numactl --cpunodebind` or a Slurm binding
    narrows them), and the nodes its memory may come from (`Mems_allowed_list` of /proc/self/status:
    `--membind`, cpusets); {} where /sys does not list NUMA nodes. Read at the end of the run."""
    nodes = numa_nodes(sys_root)
    try:
        cpus = set(os.sched_getaffinity(0)) if cpus is None else cpus
    except (OSError, AttributeError):
        return {}
    if not nodes:
        return {}
    info = {"numa_nodes": len(nodes), "numa_nodes_used": sorted(n for n, c in nodes.items() if c & cpus)}
    if status is None:
        with contextlib.suppress(OSError):
            status = Path("/proc/self/status").read_text()
    for line in (status or "").splitlines():
        if line.startswith("Mems_allowed_list:"):
            with contextlib.suppress(ValueError):
                info["numa_mems_allowed"] = sorted(_cpulist(line.partition(":")[2]))
    return info


def numa_node_of_pci(address: tuple[int, int, int] | None, sys_root: Path | None = None) -> int | None:
    """The NUMA node of the PCI device at (domain, bus, device), from /sys (whose names are
    `%04x:%02x:%02x.0`, wider for domains past 0xffff); None where the platform does not tell (-1 there:
    one node, or firmware that does not say)."""
    if address is None:
        return None
    domain, bus, device = address
    try:
        path = (sys_root or SYS) / "bus/pci/devices" / f"{domain:04x}:{bus:02x}:{device:02x}.0" / "numa_node"
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
