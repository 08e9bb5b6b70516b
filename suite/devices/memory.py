"""Host memory a case may take: the kernel's MemAvailable and the cgroup's limit, less a margin (Linux only)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

# Where the kernel tells (tests point these at fakes).
MEMINFO = Path("/proc/meminfo")
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")

# Kept free beside a case's buffers: the run's own memory grows beside them (Python, torch's libraries and
# thread pools, pytest-benchmark's samples, page tables), and MemAvailable is the kernel's estimate of what can
# be had without swapping, not a promise. 1 GiB, or this share of the bounding memory where that is more.
HOST_MEMORY_MARGIN_BYTES = 2**30
HOST_MEMORY_MARGIN_SHARE = 0.05
# A cgroup v1 limit at or above this is "no limit" (the kernel writes LONG_MAX rounded down to a page).
_CGROUP_V1_NO_LIMIT = 2**62

# Pinned buffers are bounded like pageable ones, not by RLIMIT_MEMLOCK: the CUDA driver pins cudaHostAlloc's
# and cudaHostRegister's pages itself without charging that limit (Ubuntu's default of 8 MiB would otherwise
# refuse every DataLoader with pin_memory), while the pages count against MemAvailable like any others.


@dataclass(frozen=True)
class HostMemory:
    """What bounds the memory a case may take: `free` bytes of `total`, as `source` tells."""

    free: int
    total: int
    source: str

    @property
    def margin(self) -> int:
        return max(HOST_MEMORY_MARGIN_BYTES, int(self.total * HOST_MEMORY_MARGIN_SHARE))

    @property
    def usable(self) -> int:
        return max(0, self.free - self.margin)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _read_int(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().split()[0])
    return None


def _stat(path: Path) -> dict[str, int]:
    """A `key value` file (memory.stat, or /proc/meminfo's `Key: value kB`) as a dict; empty if unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split()[:2] for line in lines if len(line.split()) >= 2)
    return {key.rstrip(":"): int(value) for key, value in pairs if value.isdigit()}


def _cgroup_dirs(controller: str | None) -> list[Path]:
    """The process's cgroup folder and its ancestors up to the mount, for cgroup v2 (`controller` None) or the
    v1 hierarchy of `controller`. Inside a container the mount may already be the container's own cgroup, the
    path /proc names then absent beneath it: the mount itself is the folder."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    root = CGROUP_ROOT if controller is None else CGROUP_ROOT / controller
    for line in lines:
        _, names, path = (line.split(":", 2) + ["", ""])[:3]
        if (controller or "") in names.split(","):  # cgroup v2's line names no controller: "0::/path"
            own = root / path.strip().lstrip("/")
            own = own if own.is_dir() else root
            return [own, *[p for p in own.parents if root in (p, *p.parents)]] if controller is None else [own]
    return []


def _cgroup_bounds() -> list[HostMemory]:
    """Each cgroup limit over this process, as what it still gives: limit - usage + inactive file cache (the
    kernel reclaims that cache before it OOM-kills; kubelet's working set counts usage the same way)."""
    bounds = []
    for folder in _cgroup_dirs(None):
        limit, usage = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
        if limit is not None and usage is not None:  # "max" (no limit) reads as None
            spare = limit - usage + _stat(folder / "memory.stat").get("inactive_file", 0)
            bounds.append(HostMemory(max(0, min(spare, limit)), limit, f"cgroup v2 memory.max of {folder}"))
    for folder in _cgroup_dirs("memory"):
        stat = _stat(folder / "memory.stat")
        # hierarchical_memory_limit is the smallest limit of this cgroup and its ancestors
        limit = stat.get("hierarchical_memory_limit") or _read_int(folder / "memory.limit_in_bytes")
        usage = _read_int(folder / "memory.usage_in_bytes")
        if limit is not None and usage is not None and limit < _CGROUP_V1_NO_LIMIT:
            spare = limit - usage + stat.get("total_inactive_file", 0)
            bounds.append(HostMemory(max(0, min(spare, limit)), limit, f"cgroup v1 memory limit of {folder}"))
    return bounds


def host_memory_free() -> HostMemory | None:
    """The tightest bound on what the host can give this process now; None where the kernel does not tell (no
    /proc/meminfo: not Linux)."""
    info = _stat(MEMINFO)
    if "MemAvailable" not in info:
        return None
    bounds = [HostMemory(info["MemAvailable"] * 1024, info.get("MemTotal", 0) * 1024, "MemAvailable")]
    return min(bounds + _cgroup_bounds(), key=lambda b: b.usable)


def host_shortfall(nbytes: int, what: str) -> str | None:
    """Why `nbytes` more of host memory for `what` would not fit (one line, naming the size and what is free),
    or None where it fits or the host does not tell."""
    memory = host_memory_free()
    if memory is None or nbytes <= memory.usable:
        return None
    return (f"out of host memory for {what} (needs {_gib(nbytes)}; the host has {_gib(memory.free)} free of "
            f"{_gib(memory.total)} ({memory.source}; {_gib(memory.margin)} of it kept spare)): use smaller "
            "sizes for this host")
