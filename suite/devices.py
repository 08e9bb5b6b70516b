"""Devices: try_gpu/try_all_gpus, device specs, synchronisation and the machine inventory.

Everything that differs between CUDA, MPS, XPU and the CPU goes through one seam, `Platform`, so the rest of
the suite has a single code path and tests can swap in a fake multi-GPU machine (`use_platform`).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import platform as _pyplatform
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from suite.errors import UserError
from suite.limits import CLOCK_LIMITS, CLOCKS_HELD_NAMED_FROM, HW_SLOWDOWN_FIELDS, POLICY_FIELDS

ACCELERATOR_KINDS = ("cuda", "xpu", "mps")
_DEVICE_RE = re.compile(r"^(cpu|cuda|xpu|mps)(?::(\d+))?$")
SPEC_HELP = "'all', 'cpu', 'gpus', a device such as 'cuda:1', or a list of these"


class Platform:
    """What torch can see on this machine; the only place that asks torch about accelerators."""

    def count(self, kind: str) -> int:
        if kind == "cuda":
            return torch.cuda.device_count() if torch.cuda.is_available() else 0
        if kind == "xpu":
            xpu = getattr(torch, "xpu", None)
            return xpu.device_count() if xpu is not None and xpu.is_available() else 0
        if kind == "mps":
            mps = getattr(torch.backends, "mps", None)
            return 1 if mps is not None and mps.is_available() else 0
        return 0

    def synchronize(self, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elif device.type == "xpu":
            torch.xpu.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()
        # The CPU runs torch ops synchronously: nothing to wait for.

    def properties(self, device: torch.device) -> dict:
        """Name, memory and, where the backend says, capability and multiprocessor count."""
        if device.type == "cuda":
            p = torch.cuda.get_device_properties(device)
            info = {
                "name": p.name,
                "memory_bytes": int(p.total_memory),
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": int(p.multi_processor_count),
            }
            # On ROCm the capability is the gfx version's digits (9.4 for gfx942 and gfx940 alike); the arch
            # name tells the chip and its features (xf32 on gfx94x/gfx95x).
            arch = getattr(p, "gcnArchName", None) if getattr(torch.version, "hip", None) else None
            if arch:
                info["gcn_arch"] = str(arch)
            uuid = getattr(p, "uuid", None)
            if uuid is not None:
                info["uuid"] = nvml_uuid(str(uuid), p.name)
            return info
        if device.type == "xpu":
            p = torch.xpu.get_device_properties(device)
            return {"name": p.name, "memory_bytes": int(p.total_memory)}
        if device.type == "mps":
            # MPS shares the host's unified memory; torch reports the recommended working set.
            limit = getattr(torch.mps, "recommended_max_memory", lambda: 0)()
            return {"name": self._mps_name(), "memory_bytes": int(limit)}
        raise ValueError(f"not an accelerator: {device}")

    def _mps_name(self) -> str:
        """'Apple M3 Max (MPS)': torch names no Apple GPU, and the fleet check groups devices by name, so an
        M1 and an M3 Max must not share one. The chip is the CPU's brand string (one die); 'Apple MPS' where
        macOS does not say. Asked once per platform: sysctl is a subprocess."""
        if "_mps_chip" not in self.__dict__:
            chip = ""
            if _pyplatform.system() == "Darwin":
                with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
                    done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                          text=True, timeout=2, check=True)
                    chip = done.stdout.strip()
            # Only an Apple chip's name: a stray answer (an Intel Mac's CPU, an error text) keeps the old one.
            self.__dict__["_mps_chip"] = chip if chip.startswith("Apple ") and len(chip) <= 60 else ""
        chip = self.__dict__["_mps_chip"]
        return f"{chip} (MPS)" if chip else "Apple MPS"

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        if a.type == b.type == "cuda" and a != b:
            return bool(torch.cuda.can_device_access_peer(a.index, b.index))
        if a.type == b.type == "xpu" and a != b:
            # Newer torch asks Level Zero; an older one cannot tell, and the copy is taken to be staged.
            ask = getattr(getattr(torch, "xpu", None), "can_device_access_peer", None)
            with contextlib.suppress(RuntimeError):  # a driver that cannot answer: as if torch could not tell
                return bool(ask(a.index or 0, b.index or 0)) if ask is not None else False
        return False

    def tf32_supported(self, device: torch.device) -> bool | None:
        """Whether torch says this CUDA or ROCm GPU has TF32 math (ROCm: xf32, gfx94x/gfx95x); None where
        this torch cannot tell (no torch.cuda.is_tf32_supported)."""
        ask = getattr(torch.cuda, "is_tf32_supported", None)
        if ask is None:
            return None
        # It asks the current device: make that the one in question, and put the old one back.
        with torch.cuda.device(device.index or 0):
            return bool(ask())

    def link(self, a: torch.device, b: torch.device) -> str | None:
        """What connects two GPUs, named as `nvidia-smi topo -m` names it ('NV18', 'PIX', 'SYS'); None where
        NVML cannot tell (no nvidia-ml-py or driver, a MIG instance, not two distinct CUDA devices)."""
        if a.type == b.type == "cuda" and a != b:
            return self._cuda_links().get((a.index or 0, b.index or 0))
        return None

    def _cuda_links(self) -> dict[tuple[int, int], str]:
        """link() of every ordered pair of CUDA devices, by torch index; read from NVML once per platform
        (the topology of a running machine does not change). NVML is asked by UUID: torch's device order
        and CUDA_VISIBLE_DEVICES need not be NVML's."""
        cached = self.__dict__.get("_links_by_index")
        if cached is None:
            n = self.count("cuda")
            gpus = [torch.device("cuda", i) for i in range(n)] if n > 1 else []
            uuids = tuple(self.properties(d).get("uuid") for d in gpus)
            cached = self.__dict__["_links_by_index"] = nvml_links(uuids)
        return cached

    def clock_limits(self, device: torch.device) -> dict[str, float] | None:
        """Seconds, counted by NVML since the driver loaded, that each of CLOCK_LIMITS held this GPU's clocks
        below what it was asked to run at (a limit it does not report is left out); None where NVML cannot
        tell (not CUDA, no nvidia-ml-py or driver, a MIG instance)."""
        if device.type != "cuda":
            return None
        handle = self._nvml_handle(device.index or 0)
        if handle is None:
            return None
        import pynvml

        held = {}
        for name, policy in CLOCK_LIMITS.items():
            with contextlib.suppress(Exception):  # a policy this GPU or driver does not report is left out
                held[name] = pynvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime / 1e9
        # The hardware slowdowns, and as field values any policy the deprecated call did not answer.
        fields = {**{n: f for n, f in POLICY_FIELDS.items() if n not in held}, **HW_SLOWDOWN_FIELDS}
        held.update(nvml_field_seconds(pynvml, handle, fields))
        return held or None

    def _nvml_handle(self, index: int):
        """The NVML handle of CUDA device `index`, found by UUID; NVML stays initialised for the process
        (its init is counted, so _nvml_info's own init and shutdown do not end it). None where NVML cannot
        tell, which is remembered."""
        handles = self.__dict__.setdefault("_nvml_handles", {})
        if index not in handles:
            handles[index] = None
            uuid = self.properties(torch.device("cuda", index)).get("uuid")
            if uuid and not uuid.startswith("MIG-") and self._nvml_ready():
                with contextlib.suppress(Exception):
                    import pynvml

                    handles[index] = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        return handles[index]

    def _nvml_ready(self) -> bool:
        """nvmlInit once per platform, kept for the process; whether it worked (remembered)."""
        if "_nvml_ok" not in self.__dict__:
            self.__dict__["_nvml_ok"] = False
            with contextlib.suppress(Exception):
                import pynvml

                pynvml.nvmlInit()
                self.__dict__["_nvml_ok"] = True
        return self.__dict__["_nvml_ok"]

    def mem_get_info(self, device: torch.device) -> tuple[int, int] | None:
        """(free, total) bytes on an accelerator, None where the backend cannot tell."""
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            return int(free), int(total)
        return None

    def empty_cache(self, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.empty_cache()
        elif device.type == "xpu":
            torch.xpu.empty_cache()
        elif device.type == "mps":
            torch.mps.empty_cache()

    def supports_pinned_memory(self) -> bool:
        return self.count("cuda") > 0 or self.count("xpu") > 0

    def numa_node(self, device: torch.device) -> int | None:
        """The NUMA node of a CUDA GPU's PCI slot (from /sys, for torch's PCI address of it, else NVML's);
        None where the platform does not say, and for other devices. Asked once per device (cached)."""
        if device.type != "cuda":
            return None
        cache = self.__dict__.setdefault("_numa_nodes", {})
        if device.index not in cache:
            props = torch.cuda.get_device_properties(device)
            address = tuple(getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
            if all(isinstance(v, int) for v in address):
                cache[device.index] = numa_node_of_pci(address)  # type: ignore[arg-type]
            else:
                cache[device.index] = _nvml_info(device.index or 0, self.properties(device).get("uuid")).get(
                    "numa_node")
        return cache[device.index]

    def software(self) -> dict:
        cuda = torch.version.cuda
        hip = getattr(torch.version, "hip", None)
        dnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        collectives = None
        if (cuda or hip) and torch.distributed.is_available() and torch.distributed.is_nccl_available():
            with contextlib.suppress(Exception):
                collectives = ".".join(str(v) for v in torch.cuda.nccl.version())
        # On ROCm torch's cudnn and nccl modules answer with MIOpen's and RCCL's versions: recorded under
        # those names, so that no one compares an MIOpen number with a cuDNN one. RCCL numbers its releases
        # after the NCCL API it implements (2.22.3), which is what torch.cuda.nccl.version() gives.
        return {
            "torch": torch.__version__,
            "cuda": cuda,
            "hip": hip,
            "cudnn": str(dnn) if dnn and not hip else None,
            "miopen": str(dnn) if dnn and hip else None,
            "nccl": collectives if not hip else None,
            "rccl": collectives if hip else None,
            "python": _pyplatform.python_version(),
        }


_platform: Platform = Platform()


def nvml_uuid(raw: str, name: str, visible: str | None = None) -> str:
    """The UUID as NVML and nvidia-smi spell it: 'GPU-...' for a whole GPU, 'MIG-...' for a MIG instance.

    torch gives the bare hex; a MIG instance shows as such in its name ('NVIDIA A100-SXM4-40GB MIG 1g.5gb') or
    in CUDA_VISIBLE_DEVICES (MIG-... entries).
    """
    if raw.startswith(("GPU-", "MIG-")):
        return raw
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible
    mig = " MIG " in f" {name} " or any(v.strip().startswith("MIG-") for v in visible.split(","))
    return f"{'MIG' if mig else 'GPU'}-{raw}"



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


# --- the classic helpers -------------------------------------------------------------------------------


def try_gpu(i: int = 0) -> torch.device:
    """The i-th GPU if it exists, else the CPU."""
    if current_platform().count("cuda") >= i + 1:
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def try_all_gpus() -> list[torch.device]:
    """Every GPU, or [cpu] if there is none."""
    n = current_platform().count("cuda")
    return [torch.device(f"cuda:{i}") for i in range(n)] or [torch.device("cpu")]


def accelerators() -> list[torch.device]:
    """Every accelerator torch can see (CUDA, XPU, MPS), in that order."""
    plat = current_platform()
    found: list[torch.device] = []
    for kind in ACCELERATOR_KINDS:
        n = plat.count(kind)
        if kind == "mps":
            found += [torch.device("mps")] * min(n, 1)
        else:
            found += [torch.device(f"{kind}:{i}") for i in range(n)]
    return found


def available_devices() -> list[torch.device]:
    """The CPU plus every accelerator torch can see."""
    return [torch.device("cpu"), *accelerators()]


def device_id(device: torch.device | str) -> str:
    """The suite's name for a device: 'cpu', 'cuda:0', 'mps' (torch's own spelling, index always shown)."""
    dev = torch.device(device)
    if dev.type in ("cpu", "mps"):
        return dev.type
    return f"{dev.type}:{dev.index if dev.index is not None else 0}"


def normalize_device_name(name: str) -> str:
    """Validate one device name and give its canonical spelling (`cuda` -> `cuda:0`); ValueError if malformed."""
    text = str(name).strip().lower()
    match = _DEVICE_RE.match(text)
    if not match:
        raise ValueError(f"{name!r} is not a device; expected {SPEC_HELP}")
    kind, index = match.groups()
    if kind in ("cpu", "mps"):
        if index not in (None, "0"):
            raise ValueError(f"{name!r} is not a device ({kind} has no index); expected {SPEC_HELP}")
        return kind
    return f"{kind}:{index or 0}"


def resolve_spec(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    """Expand a device spec into device ids, keeping named devices the machine lacks (they become skips).

    'all' -> the CPU and every accelerator; 'gpus' -> every accelerator, or the CPU if there is none (as
    try_all_gpus); 'cpu', 'cuda:1', or a comma-separated string / list of these.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in items:
        item = str(raw).strip().lower()
        if not item:
            continue
        if item == "all":
            names = [device_id(d) for d in available_devices()]
        elif item in ("gpus", "gpu", "accelerators"):
            names = [device_id(d) for d in accelerators()] or ["cpu"]
        else:
            names = [normalize_device_name(item)]
        out += [n for n in names if n not in out]
    if not out:
        raise ValueError(f"empty device list; expected {SPEC_HELP}")
    return out


def missing_reason(name: str) -> str | None:
    """None if the device exists here, else why not (for a skip)."""
    if name == "cpu":
        return None
    present = [device_id(d) for d in accelerators()]
    if name in present:
        return None
    have = ", ".join(present) if present else "no accelerator"
    return f"{name} is not available on this machine (it has: cpu, {have})" if present else (
        f"{name} is not available on this machine (it has the CPU only; torch {torch.__version__} sees no accelerator)"
    )


def synchronize(*devices: torch.device | str) -> None:
    """Wait until all work queued on the given devices has finished."""
    plat = current_platform()
    for dev in devices:
        plat.synchronize(torch.device(dev))


# --- inventory -----------------------------------------------------------------------------------------


def _read_proc_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _cpu_info() -> dict:
    text = _read_proc_cpuinfo()
    name = ""
    pairs: set[tuple[str, str]] = set()
    phys = core = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and not name:
            name = value
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
        elif not key and phys is not None and core is not None:
            pairs.add((phys, core))
    if phys is not None and core is not None:
        pairs.add((phys, core))
    if not name:
        with contextlib.suppress(Exception):
            import cpuinfo  # py-cpuinfo: slow (it may start a subprocess), so only where /proc lacks a name

            name = cpuinfo.get_cpu_info().get("brand_raw") or ""
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
        empty = getattr(torch._C, name, None)
        if empty is None:
            continue
        try:
            empty()
        except Exception:  # noqa: BLE001 - the next name, or the blocks stay cached (then no worse than unbound)
            continue
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
    cpus = nodes.get(node, set()) & allowed if node is not None else set()
    spanned = sum(1 for c in nodes.values() if c & allowed)
    mems = numa_of_process(sys_root, allowed, status).get("numa_mems_allowed") if cpus else None
    if len(nodes) < 2 or spanned < 2 or not cpus or (mems is not None and node not in mems):
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


def _nvml_info(index: int, uuid: str | None = None) -> dict:
    """Driver, PCIe link, clocks and power limit from NVML, where nvidia-ml-py and a driver load.

    The GPU is found by its UUID: CUDA's device numbers differ from NVML's whenever CUDA_VISIBLE_DEVICES is
    set (as under Slurm) or CUDA orders devices fastest first. Without a UUID the index is trusted only when
    CUDA_VISIBLE_DEVICES is unset, and CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA use NVML's order. A MIG
    instance ('MIG-' UUID) has no PCIe link, clocks or power limit of its own: they are read from its GPU.
    `nvlinks_active` counts the GPU's active NVLinks, `nvlinks_to_switch` those into NVSwitches.
    The PCIe link is recorded twice: `*_max` is what the link can do; `*_current` is what it ran at when read,
    which at idle is often a power-saving down-shift (gen 1), not a fault. `pcie_gen_max` is the link's: the
    lower of the GPU's and the slot's (NVML's MaxPcieLinkGeneration), what bounds host copies;
    `pcie_gen_gpu_max` is the GPU's own (a gen-5 GPU in a gen-4 slot: 5 there, 4 in pcie_gen_max).
    """
    if uuid is None and (os.environ.get("CUDA_VISIBLE_DEVICES") is not None
                         or os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"):
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    info: dict = {}
    try:
        try:
            handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None
                      else pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            return {}
        if uuid is not None and uuid.startswith("MIG-"):
            info["mig"] = True
            with contextlib.suppress(Exception):
                handle = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
                parent = pynvml.nvmlDeviceGetUUID(handle)
                info["mig_parent_uuid"] = parent.decode() if isinstance(parent, bytes) else parent
        queries = {
            "driver_version": lambda: pynvml.nvmlSystemGetDriverVersion(),
            "pcie_gen_current": lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
            "pcie_gen_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
            "pcie_gen_gpu_max": lambda: pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle),
            "pcie_width_current": lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
            "pcie_width_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
            "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0,
            "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            # Active NVLinks, and how many of them go to NVSwitches: a GPU with fewer than its peers has a
            # link down (0 on a PCIe-only GPU).
            "nvlinks_active": lambda: len(nvlinks),
            "nvlinks_to_switch": lambda: sum(switch for _, switch in nvlinks),
            # The GPU's NUMA node: host copies from another node's memory cross the sockets' interconnect.
            "numa_node": lambda: numa_node_of_pci(_pci_address(pynvml.nvmlDeviceGetPciInfo(handle))),
        }
        nvlinks = _nvlinks(pynvml, handle)
        for key, query in queries.items():
            with contextlib.suppress(Exception):
                value = query()
                if value is not None:
                    info[key] = value.decode() if isinstance(value, bytes) else value
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return info


class ClockWatch:
    """How long NVML's power, thermal, board or reliability limits, or the hardware's own slowdowns, held a
    benchmark's GPUs' clocks down while it was warmed up and timed: counters read before the warm-up and after
    the final synchronisation.

    `stop()` gives, where NVML answered for at least one of its devices: `clocks_held`, the largest share of
    that window (0 to 1) any one limit held any one of its GPUs; `clocks_held_<limit>` (power, thermal,
    board_limit, reliability, hw_thermal, hw_power_brake), that limit's own largest share, for each limit that
    held one for at least CLOCKS_HELD_NAMED_FROM of the window; `clocks_window_s`, the window's length.
    {} where NVML tells nothing (the CPU, no nvidia-ml-py, a MIG instance).
    """

    def __init__(self, devices: list[str], clock=time.monotonic) -> None:
        plat = current_platform()
        self.clock = clock
        self.devices = [torch.device(d) for d in devices]
        self.before = {d: plat.clock_limits(d) for d in self.devices}
        self.started = clock()

    def stop(self) -> dict:
        seconds = self.clock() - self.started
        plat = current_platform()
        shares: dict[str, float] = {}
        read = False
        for device, before in self.before.items():
            after = plat.clock_limits(device) if before else None
            if not before or not after:
                continue
            read = True
            for name in before.keys() & after.keys():
                share = min(1.0, max(0.0, after[name] - before[name]) / seconds) if seconds > 0 else 0.0
                shares[name] = max(shares.get(name, 0.0), share)
        if not read:
            return {}
        held = {f"clocks_held_{n}": s for n, s in shares.items() if s >= CLOCKS_HELD_NAMED_FROM}
        return {"clocks_held": max(shares.values(), default=0.0), **held, "clocks_window_s": seconds}


# `nvidia-smi topo -m`'s names for the closest PCIe ancestor two GPUs share, by NVML topology level: one
# board or one PCIe switch (PIX), several switches (PXB), the CPU's host bridge (PHB), host bridges of one
# NUMA node (NODE), across the sockets' interconnect (SYS).
PCIE_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# What each name means, for the docs and the devices command.
LINK_MEANINGS = {
    "NV#": "a bonded set of # NVLinks (direct, or through NVSwitch)",
    "NVLink": "NVLink peer-to-peer, link count not reported",
    "PIX": "at most one PCIe switch",
    "PXB": "several PCIe switches, not the host bridge",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "PCIe host bridges within one NUMA node",
    "SYS": "PCIe and the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)",
}


# nvmlValueType_t -> the member of nvmlValue_t that holds such a value.
_NVML_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def nvml_field_seconds(nvml, handle, fields: dict[str, int]) -> dict[str, float]:
    """name -> seconds of the NVML field values `fields` (name -> field id) that count nanoseconds, in one
    nvmlDeviceGetFieldValues call; a field this GPU or driver does not answer is left out, and {} where the
    call itself fails (an nvidia-ml-py or driver without it)."""
    if not fields:
        return {}
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, list(fields.values()))
    except Exception:  # noqa: BLE001 - no such call here: nothing to record
        return {}
    found = {}
    for name, value in zip(fields, values):
        member = _NVML_VALUE_MEMBERS.get(int(getattr(value, "valueType", -1)))
        if getattr(value, "nvmlReturn", 1) != 0 or member is None:  # NVML_SUCCESS is 0
            continue
        number = getattr(value.value, member, None)
        if isinstance(number, (int, float)) and number >= 0:
            found[name] = number / 1e9
    return found


def _pci_address(info) -> tuple[int, int, int] | None:
    """(domain, bus, device) of an NVML PCI info: how a link's far end is matched to a GPU."""
    try:
        return int(info.domain), int(info.bus), int(info.device)
    except (AttributeError, TypeError, ValueError):
        return None


def _nvlinks(nvml, handle) -> list[tuple[tuple[int, int, int] | None, bool]] | None:
    """(far end's PCI address, far end is an NVSwitch) of each active NVLink of one GPU; [] on a GPU without
    NVLink (NVML: not supported); None where NVML cannot tell (an old nvidia-ml-py, another error)."""
    links = []
    not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    invalid = getattr(nvml, "NVML_ERROR_INVALID_ARGUMENT", 2)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED
        except Exception as exc:
            code = getattr(exc, "value", None)
            if link == 0 and code == not_supported:
                return []  # a PCIe-only GPU
            if link == 0 and code != invalid:
                return None
            if code == invalid:
                break  # past this GPU's last link (nvidia-ml-py's NVML_NVLINK_MAX_LINKS is 36; H100 has 18)
            continue  # this link unreadable: the others still count
        if not active:
            continue
        remote, switch = None, False
        with contextlib.suppress(Exception):
            remote = _pci_address(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        with contextlib.suppress(Exception):
            switch = (nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
                      == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        links.append((remote, switch))
    return links


def nvml_links(uuids: tuple[str | None, ...], nvml=None) -> dict[tuple[int, int], str]:
    """What connects each ordered pair of GPUs (by position in `uuids`), as `nvidia-smi topo -m` names it.

    `NV<n>` where NVLink joins them: n links straight to the other GPU, or, through NVSwitch, the links each
    GPU has into the switches (the lower of the two), when NVML says NVLink peer-to-peer works between them.
    Otherwise the PCIe path, from NVML's closest common ancestor (PCIE_LEVELS). A pair NVML says nothing about
    is left out. Empty for fewer than two GPUs, a GPU without a UUID or a MIG instance (MIG has no peer
    copies), or where nvidia-ml-py or the driver is missing. `nvml`: the module (tests pass a fake).
    """
    if len(uuids) < 2 or any(not u or u.startswith("MIG-") for u in uuids):
        return {}
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        return {}
    out: dict[tuple[int, int], str] = {}
    try:
        try:
            handles = [nvml.nvmlDeviceGetHandleByUUID(u) for u in uuids]
        except Exception:
            return {}
        addresses = []
        for h in handles:
            try:
                addresses.append(_pci_address(nvml.nvmlDeviceGetPciInfo(h)))
            except Exception:
                addresses.append(None)
        nvlinks = [_nvlinks(nvml, h) or [] for h in handles]
        for i, j in itertools.permutations(range(len(handles)), 2):
            direct = sum(1 for far, _ in nvlinks[i] if far is not None and far == addresses[j])
            fabric = min(sum(s for _, s in nvlinks[i]), sum(s for _, s in nvlinks[j]))
            p2p = None
            with contextlib.suppress(Exception):
                status = nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                p2p = status == nvml.NVML_P2P_STATUS_OK
            if direct:
                out[(i, j)] = f"NV{direct}"
            elif fabric and p2p is not False:
                out[(i, j)] = f"NV{fabric}"
            elif p2p:
                out[(i, j)] = "NVLink"
            else:
                with contextlib.suppress(Exception):
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                    if int(level) in PCIE_LEVELS:
                        out[(i, j)] = PCIE_LEVELS[int(level)]
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


def link_matrix(devices: list[torch.device] | None = None) -> dict[str, dict[str, str]]:
    """link() for every ordered pair of distinct CUDA devices NVML tells about; {} where it tells nothing."""
    plat = current_platform()
    gpus = [d for d in (devices if devices is not None else accelerators()) if d.type == "cuda"]
    links = {device_id(a): {device_id(b): plat.link(a, b) for b in gpus if b != a} for a in gpus}
    links = {a: {b: v for b, v in row.items() if v} for a, row in links.items()}
    return {a: row for a, row in links.items() if row}


def peer_matrix(devices: list[torch.device] | None = None) -> dict[str, dict[str, bool]]:
    """can_device_access_peer for every ordered pair of distinct CUDA devices, and of distinct XPUs (peer
    access joins devices of one kind only)."""
    plat = current_platform()
    gpus = [d for d in (devices if devices is not None else accelerators()) if d.type in ("cuda", "xpu")]
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
        entry = {"id": device_id(dev), "kind": dev.type}
        entry.update(plat.properties(dev))
        if dev.type == "xpu":
            entry["peer_access"] = peers.get(device_id(dev), {})
        if dev.type == "cuda":
            entry["runtime_version"] = runtime
            entry["peer_access"] = peers.get(device_id(dev), {})
            if links.get(device_id(dev)):
                entry["links"] = links[device_id(dev)]
            entry.update(_nvml_info(dev.index or 0, entry.get("uuid")))
        entries.append(entry)
    from suite import __version__

    software = dict(plat.software(), suite=__version__)
    return Inventory(devices=entries, peer_access=peers, software=software, links=links)


# --- `python -m suite devices` -------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the inventory as JSON")


def run(args) -> int:
    import json

    inv = inventory()
    if args.json:
        print(json.dumps(inv.as_machine_info(), indent=2, default=str))
        return 0
    print(f"try_gpu()       -> {try_gpu()}")
    print(f"try_gpu(1)      -> {try_gpu(1)}")
    print(f"try_all_gpus()  -> {try_all_gpus()}")
    print(f"all devices     -> {[device_id(d) for d in available_devices()]}")
    print()
    for entry in inv.devices:
        gib = entry.get("memory_bytes", 0) / 2**30
        skip = ("id", "kind", "name", "memory_bytes", "peer_access", "links")
        extras = {k: v for k, v in entry.items() if k not in skip}
        detail = ", ".join(f"{k}={v}" for k, v in extras.items() if v is not None)
        print(f"{entry['id']:<8} {entry['name']}  {gib:.1f} GiB  {detail}")
    if inv.peer_access:
        print("\n" + "\n".join(pair_matrix_lines(inv.peer_access, inv.links)))
    print("\nsoftware: " + ", ".join(f"{k} {v}" for k, v in inv.software.items() if v))
    return 0


def pair_matrix_lines(peer_access: dict[str, dict[str, bool]], links: dict[str, dict[str, str]]) -> list[str]:
    """The GPU pairs as `python -m suite devices` prints them: peer access, and the link where NVML tells it
    ('yes NV18', 'no SYS'), row to column; then what each link name that appears means."""
    gpus = list(peer_access)
    cell = {(a, b): ("yes" if peer_access[a].get(b) else "no")
            + (f" {links[a][b]}" if links.get(a, {}).get(b) else "") for a in gpus for b in gpus if a != b}
    width = max([7, *(len(c) for c in cell.values())])
    title = "peer access and link (row to column):" if links else "peer access (row can access column):"
    lines = [title, " " * 8 + " ".join(f"{g:>{width}}" for g in gpus)]
    for a in gpus:
        lines.append(f"{a:<8}" + " ".join(f"{'-' if a == b else cell[(a, b)]:>{width}}" for b in gpus))
    used = {v for row in links.values() for v in row.values()}
    names = {"NV#" if v.startswith("NV") and v[2:].isdigit() else v for v in used}
    lines += [f"  {n:<6} {LINK_MEANINGS[n]}" for n in LINK_MEANINGS if n in names]
    return lines


def check_spec(spec, option: str = "--suite-devices") -> list[str]:
    """resolve_spec for user input: a bad spec, `gpus` without an accelerator, or a list none of whose
    devices exist here becomes a one-line UserError (some missing: they stay, each becomes a skip)."""
    try:
        devices = resolve_spec(spec)
    except ValueError as exc:
        raise UserError(f"{option}: {exc}") from None
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    if any(i.strip().lower() in ("gpus", "gpu", "accelerators") for i in items) and not accelerators():
        # try_all_gpus falls back to the CPU; a run asked for GPUs must not quietly measure the CPU instead.
        raise UserError(f"{option} {_spec_text(spec)}: no GPU visible to torch; use {option} cpu or all")
    missing = missing_devices(devices)
    if len(missing) == len(devices):
        raise UserError(
            f"{option} {_spec_text(spec)}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on "
            f"this machine (it has: {', '.join(present_devices())}); pick from those, or all"
        )
    return devices


def present_devices() -> list[str]:
    """The device ids this machine has: cpu and every accelerator torch can see."""
    return [device_id(d) for d in available_devices()]


def missing_devices(devices: list[str]) -> list[str]:
    """The devices of a resolved spec that this machine lacks (each of their cases will be a skip)."""
    return [d for d in devices if missing_reason(d)]


def _spec_text(spec) -> str:
    return spec if isinstance(spec, str) else ",".join(str(s) for s in spec)
