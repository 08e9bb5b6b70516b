"""`python -m suite devices`: what try_gpu()/try_all_gpus() see, and the machine's inventory."""

from __future__ import annotations

import json
import re

from suite.devices.machine import inventory
from suite.devices.specs import present_devices, try_all_gpus, try_gpu

# What each name of a link (nvml.PCIE_LEVELS, NV<n>) means, printed below the pair matrix.
LINK_MEANINGS = {
    "NV#": "a bonded set of # NVLinks (direct, or through NVSwitch)",
    "NVLink": "NVLink peer-to-peer, link count not reported",
    "PIX": "at most one PCIe switch",
    "PXB": "several PCIe switches, not the host bridge",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "PCIe host bridges within one NUMA node",
    "SYS": "PCIe and the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)",
}
# Inventory keys the device line shows in its own way (or, for the pairs, in the matrix below it).
_SHOWN_APART = ("id", "kind", "name", "memory_bytes", "peer_access", "links")


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the inventory as JSON")


def run(args) -> int:
    inv = inventory()
    if args.json:
        print(json.dumps(inv.as_machine_info(), indent=2, default=str))
        return 0
    print(f"try_gpu()       -> {try_gpu()}")
    print(f"try_gpu(1)      -> {try_gpu(1)}")
    print(f"try_all_gpus()  -> {try_all_gpus()}")
    print(f"all devices     -> {present_devices()}")
    print()
    for entry in inv.devices:
        gib = entry.get("memory_bytes", 0) / 2**30
        detail = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in _SHOWN_APART and v is not None)
        print(f"{entry['id']:<8} {entry['name']}  {gib:.1f} GiB  {detail}")
    if inv.peer_access:
        print("\n" + "\n".join(pair_matrix_lines(inv.peer_access, inv.links)))
    print("\nsoftware: " + ", ".join(f"{k} {v}" for k, v in inv.software.items() if v))
    return 0


def pair_matrix_lines(peer_access: dict[str, dict[str, bool]], links: dict[str, dict[str, str]]) -> list[str]:
    """The GPU pairs as `python -m suite devices` prints them: peer access, and the link where NVML tells it
    ('yes NV18', 'no SYS'), row to column; then what each link name that appears means."""
    gpus = list(peer_access)
    cell = {(a, b): f"{'yes' if peer_access[a].get(b) else 'no'} {links.get(a, {}).get(b, '')}".rstrip()
            for a in gpus for b in gpus}
    cell |= {(a, a): "-" for a in gpus}
    width = max([7, *(len(c) for c in cell.values())])
    title = "peer access and link (row to column):" if links else "peer access (row can access column):"
    lines = [title, " " * 8 + " ".join(f"{g:>{width}}" for g in gpus)]
    lines += [f"{a:<8}" + " ".join(f"{cell[a, b]:>{width}}" for b in gpus) for a in gpus]
    names = {re.sub(r"^NV\d+$", "NV#", v) for row in links.values() for v in row.values()}
    lines += [f"  {n:<6} {meaning}" for n, meaning in LINK_MEANINGS.items() if n in names]
    return lines
