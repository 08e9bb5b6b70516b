"""NVML, where nvidia-ml-py and a driver load: GPU UUIDs, what joins each GPU pair, the PCIe link, clocks and
the counters of what held them down."""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import Iterator

from suite.devices.numa import numa_node_of_pci
from suite.limits import CLOCK_LIMITS, HW_SLOWDOWN_FIELDS, POLICY_FIELDS

# `nvidia-smi topo -m`'s names for the closest PCIe ancestor two GPUs share, by NVML topology level: one
# board or one PCIe switch (PIX), several switches (PXB), the CPU's host bridge (PHB), host bridges of one
# NUMA node (NODE), across the sockets' interconnect (SYS).
PCIE_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlValueType_t -> the member of nvmlValue_t that holds such a value.
_NVML_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


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


def init() -> bool:
    """nvmlInit; whether it worked (no nvidia-ml-py or driver: False)."""
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        return True
    return False


def handle(uuid: str):
    """The handle of the GPU with this UUID, NVML already initialised; None where NVML does not know it."""
    with contextlib.suppress(Exception):
        import pynvml

        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    return None


@contextlib.contextmanager
def _session(nvml=None) -> Iterator:
    """NVML initialised for the block and shut down after it (inits are counted: a longer one stays up);
    yields the module (`nvml`, or pynvml), or None where nvidia-ml-py or the driver is missing."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def held_seconds(handle, policies: dict[str, int] = CLOCK_LIMITS,
                 fields: dict[str, int] = POLICY_FIELDS) -> dict[str, float] | None:
    """Seconds, counted since the driver loaded, that each of `policies` (name -> NVML policy; CLOCK_LIMITS)
    and the hardware slowdowns held this GPU's clocks below what it was asked to run at (a limit it does not
    report is left out); None where it reports none. `fields`: the policies' counters as field values."""
    import pynvml

    held = {}
    for name, policy in policies.items():
        with contextlib.suppress(Exception):  # a policy this GPU or driver does not report is left out
            held[name] = pynvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime / 1e9
    # The hardware slowdowns, and as field values any policy the deprecated call did not answer.
    fields = {**{n: f for n, f in fields.items() if n not in held}, **HW_SLOWDOWN_FIELDS}
    held.update(nvml_field_seconds(pynvml, handle, fields))
    return held or None


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


def _address_of(nvml, handle) -> tuple[int, int, int] | None:
    try:
        return _pci_address(nvml.nvmlDeviceGetPciInfo(handle))
    except Exception:
        return None


def _pair_link(nvml, a, b, links_a: list, links_b: list, address_b) -> str | None:
    """What joins GPU a to GPU b (see nvml_links); None where NVML says nothing."""
    direct = sum(1 for far, _ in links_a if far is not None and far == address_b)
    fabric = min(sum(s for _, s in links_a), sum(s for _, s in links_b))
    p2p = None
    with contextlib.suppress(Exception):
        p2p = nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK) == nvml.NVML_P2P_STATUS_OK
    if direct:
        return f"NV{direct}"
    if fabric and p2p is not False:
        return f"NV{fabric}"
    if p2p:
        return "NVLink"
    with contextlib.suppress(Exception):
        return PCIE_LEVELS.get(int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b)))
    return None


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
    out: dict[tuple[int, int], str] = {}
    with _session(nvml) as nvml:
        try:
            handles = [nvml.nvmlDeviceGetHandleByUUID(u) for u in uuids]
        except Exception:  # no NVML (None), or a GPU it does not know
            return {}
        addresses = [_address_of(nvml, h) for h in handles]
        nvlinks = [_nvlinks(nvml, h) or [] for h in handles]
        for i, j in itertools.permutations(range(len(handles)), 2):
            link = _pair_link(nvml, handles[i], handles[j], nvlinks[i], nvlinks[j], addresses[j])
            if link is not None:
                out[(i, j)] = link
    return out


def _text(value):
    """NVML's strings: bytes from older nvidia-ml-py releases, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value


def nvml_info(index: int, uuid: str | None = None) -> dict:
    """Driver, PCIe link, clocks, power limit and board serial from NVML, where nvidia-ml-py and a driver load.

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
    info: dict = {}
    with _session() as pynvml:
        try:
            handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None
                      else pynvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:  # no NVML (None), or a GPU it does not know
            return {}
        if uuid is not None and uuid.startswith("MIG-"):
            info["mig"] = True
            with contextlib.suppress(Exception):
                handle = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
                info["mig_parent_uuid"] = _text(pynvml.nvmlDeviceGetUUID(handle))
        nvlinks = _nvlinks(pynvml, handle)
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
            # The board's serial (what a technician and the RMA form read): it follows the GPU between hosts.
            "serial": lambda: pynvml.nvmlDeviceGetSerial(handle),
        }
        for key, query in queries.items():
            with contextlib.suppress(Exception):
                value = query()
                if value is not None:
                    info[key] = _text(value)
    return info
