"""The host side of a host<->device case on the device's NUMA node (`host_near`), as nvbandwidth binds it."""

from __future__ import annotations

import contextlib
import gc
import os
import re
from pathlib import Path
from typing import Iterator

import torch

from suite.devices.numa import numa_nodes, numa_of_process
from suite.devices.platform import current_platform

# The host NUMA node the running case's host side is bound to (host_near), for the case to record.
_bound_node: int | None = None


def bound_host_node() -> int | None:
    """The NUMA node `host_near` bound this thread to, while inside it; None otherwise."""
    return _bound_node


def _empty_host_cache() -> None:
    """Release the pinned blocks torch's host allocator keeps for reuse: a freed buffer of another node's memory
    would otherwise come back for this one. Blocks still in use, or with copies in flight, are left alone.
    CUDA builds have had _host_emptyCache since torch 2.5; torch 2.12 added _accelerator_emptyHostCache (which
    raises where no accelerator is current): each is tried in turn until one works."""
    for name in ("_host_emptyCache", "_accelerator_emptyHostCache"):
        # Missing or raising: the next name, or the blocks stay cached (then no worse than unbound).
        with contextlib.suppress(Exception):
            getattr(torch._C, name)()
            return


# PYTORCH_CUDA_ALLOC_CONF settings under which the pinned pages are not placed by the bound thread: pages
# registered with cudaHostRegister are touched by a pool of torch's own threads, and a reserved pinned segment
# is allocated once and never released.
_HOST_ALLOC_DEFEATS = ("pinned_use_cuda_host_register", "pinned_reserve_segment_size_mb")


def _host_allocator_defeats_binding() -> str | None:
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var, "")
        for option in _HOST_ALLOC_DEFEATS:
            match = re.search(rf"{option}\s*:\s*(\w+)", conf)
            if match and match.group(1).lower() not in ("false", "0"):
                return f"{var} sets {option}"
    return None


@contextlib.contextmanager
def host_near(device: str, sys_root: Path | None = None, status: str | None = None) -> Iterator[int | None]:
    """Run the host side of a host<->device case on the CPUs of `device`'s NUMA node, as nvbandwidth does by
    default: the pages of pinned buffers are placed when they are allocated, those of pageable buffers when
    first written, and pageable copies are staged by the calling thread, each by default on the node of the
    CPU doing it. Unbound, a dual-socket node's host copies came from either socket's memory, as the scheduler
    happened to place the thread: half its GPUs might cross the sockets' interconnect, and not the same half
    every run.

    Binds this thread (not the process) to the node's CPUs that the process may use, runs torch's CPU ops on
    one thread (so that first writes come from this thread), empties torch's cache of pinned blocks, and
    restores the affinity and thread count afterwards. Near is likely, not certain, for small pageable buffers
    (the C heap reuses pages first written elsewhere) and for the driver's pageable staging buffers (placed once
    per context); nothing is bound where PYTORCH_CUDA_ALLOC_CONF registers pinned pages with torch's own
    threads or reserves a pinned segment. Yields the node, or None where nothing is bound: one
    node with CPUs, the GPU's node unknown, none of the process's CPUs on it, its memory not allowed there
    (`numactl --membind`, a cpuset's mems), or the process already confined to one node (`numactl
    --cpunodebind`, a Slurm binding): the user's choice of path stands."""
    global _bound_node
    node = None
    if hasattr(os, "sched_setaffinity") and _bound_node is None and _host_allocator_defeats_binding() is None:
        with contextlib.suppress(Exception):
            node = current_platform().numa_node(torch.device(device))
    nodes = numa_nodes(sys_root) if node is not None else {}
    try:
        allowed = set(os.sched_getaffinity(0)) if nodes else set()
    except OSError:
        allowed = set()
    cpus = nodes.get(node, set()) & allowed  # none where the node is unknown: nodes is then empty
    spanned = sum(1 for c in nodes.values() if c & allowed)
    mems = numa_of_process(sys_root, allowed, status).get("numa_mems_allowed") if cpus else None
    if spanned < 2 or not cpus or (mems is not None and node not in mems):
        yield None
        return
    # The device's context first, unbound: threads the driver starts with it would keep the node's CPUs.
    current_platform().synchronize(torch.device(device))
    # Earlier cases' buffers left in reference cycles go to the pinned free list now, to be emptied below.
    gc.collect()
    threads = torch.get_num_threads()
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        yield None
        return
    _bound_node = node
    try:
        torch.set_num_threads(1)
        _empty_host_cache()
        yield node
    finally:
        _bound_node = None
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:  # the cpuset shrank meanwhile: every CPU, which the kernel cuts to what it allows now
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, set().union(*nodes.values()))
        torch.set_num_threads(threads)
