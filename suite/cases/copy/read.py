"""How copy results are read (torch-free): headline rate, report title and note."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size

RATE = "gbps"  # the rate that says how fast this family is
TITLE = "Copies between host and devices"
NOTE = (
    "Bandwidth counts the buffer's bytes once. pinned = page-locked host memory (DMA directly); pageable "
    "copies go through a driver staging buffer and are often half as fast."
)

# Host memory a matrix cell prefers where one pair ran with several: pinned (or device) memory shows the
# link's speed; pageable goes through a staging buffer.
MEMORY_RANK = {"pinned": 0, "device": 0, "pageable": 1}


def matrix_cells(infos: list[dict]) -> tuple[int | None, dict[tuple[str, str], dict]]:
    """(largest size, {(src, dst): the extra_info shown}) of a src x dst matrix: one-direction copies at the
    largest size, pinned host memory where there is a choice (the link's speed), else whatever ran;
    non_blocking copies first (no host wait in the round). Results without the keys it needs (files from
    before `size` existed) are left out."""
    uni = _one_direction(infos)
    if not uni:
        return None, {}
    largest = max(i["size"] for i in uni)
    best: dict = {}
    for i in uni:
        if i["size"] != largest:
            continue
        key = (i["src"], i["dst"])
        order = (MEMORY_RANK.get(i.get("memory"), 2), not i.get("non_blocking"))
        if key not in best or order < best[key][0]:
            best[key] = (order, i)
    return largest, {key: i for key, (_, i) in best.items()}


def _one_direction(infos: list[dict]) -> list[dict]:
    return [
        i for i in infos
        if i.get("direction") == "uni" and num(i.get("gbps")) and size_of(i) and i.get("src") and i.get("dst")
    ]


def summary(benches: list[dict]) -> list[str]:
    infos = [extra_info(b) for b in benches]
    largest, cells = matrix_cells(infos)
    if not cells:
        return []
    devices = list(dict.fromkeys([s for s, _ in cells] + [d for _, d in cells]))
    rows = {
        src: {dst: cell(cells[(src, dst)]["gbps"]) for dst in devices if (src, dst) in cells}
        for src in devices
    }
    lines = grid(
        f"copy: GB/s at {format_size(largest)} (rows: source, columns: destination; pinned host memory "
        "where it ran)",
        {s: r for s, r in rows.items() if r},
        devices,
        "src \\ dst",
    )
    lines += _sweep(_one_direction(infos), next((d for d in devices if d != "cpu"), None))
    return lines


def _sweep(uni: list[dict], accel: str | None) -> list[str]:
    """The size sweep of host<->device (or the host copy on a CPU-only machine), first accelerator."""
    sweep: dict = defaultdict(dict)
    columns: list = []
    for i in uni:
        path = i.get("path")
        if path is None or accel is None and path != "host":
            continue
        if accel is not None and accel not in (i["src"], i["dst"]) or path in ("peer", "local"):
            continue
        col = f"{path} {i.get('memory', '-')}" + (" nb" if i.get("non_blocking") else "")
        columns += [col] if col not in columns else []
        sweep[i["size"]][col] = cell(i["gbps"])
    if not sweep:
        return []
    title = f"copy: GB/s by size, cpu<->{accel}" if accel else "copy: GB/s by size, cpu->cpu"
    return grid(title, {format_size(s): sweep[s] for s in sorted(sweep)}, columns, "size")
