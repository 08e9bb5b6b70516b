"""How copy results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size
from suite.health.expect import Measure

RATE = "gbps"  # the rate that says how fast this family is
# Seconds a benchmark costs beyond warm-up and timed rounds (suite.plan; measured as matmul's OVERHEAD_S).
OVERHEAD_S = 0.04
# Other tools' outputs read as this family's results (suite.importers).
IMPORTERS = ("suite.cases.copy.nvbandwidth",)
TITLE = "Copies between host and devices"
NOTE = (
    "Bandwidth counts the buffer's bytes once. pinned = page-locked host memory (DMA directly); pageable "
    "copies go through a driver staging buffer and are often half as fast."
)

# Host memory a matrix cell prefers where one pair ran with several: pinned (or device) memory shows the
# link's speed; pageable goes through a staging buffer.
MEMORY_RANK = {"pinned": 0, "device": 0, "pageable": 1}


def call_bytes(params: dict) -> int:
    """Bytes one call moves (suite.plan's call time; imports the measure module): 'bi' moves the size each way,
    and a call holds copies_per_call copies a direction."""
    from suite.cases.copy.measure import copies_per_call

    return params["size"] * (2 if params["direction"] == "bi" else 1) * copies_per_call(params)


def fill_bytes(params: dict) -> int:
    """Bytes its build fills with the pattern (suite.plan): a source per direction."""
    return params["size"] * (2 if params["direction"] == "bi" else 1)


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
    columns: dict = {}  # in first-seen order
    for i in uni:
        path = i.get("path")
        ours = path == "host" if accel is None else accel in (i["src"], i["dst"])
        if path in (None, "peer", "local") or not ours:
            continue
        col = f"{path} {i.get('memory', '-')}" + (" nb" if i.get("non_blocking") else "")
        columns[col] = None
        sweep[i["size"]][col] = cell(i["gbps"])
    if not sweep:
        return []
    title = f"copy: GB/s by size, cpu<->{accel}" if accel else "copy: GB/s by size, cpu->cpu"
    return grid(title, {format_size(s): sweep[s] for s in sorted(sweep)}, list(columns), "size")


def _links(table) -> bool:
    """Whether a run's copies recorded what joins their GPU pairs (the `link` column, from NVML)."""
    return "link" in table and bool((table["link"].map(type) == str).any())


def _peer_copies(table):
    """A run's copies from one accelerator to another (the copies a link joins), of a results table."""
    if not {"case", "src", "dst"} <= set(table.columns):
        return table.iloc[0:0]
    copies = table[table["case"] == "copy"]
    peer = [isinstance(s, str) and isinstance(d, str) and s != d and not s.startswith("cpu")
            and not d.startswith("cpu") for s, d in zip(copies["src"], copies["dst"])]
    return copies.loc[peer]


def missing_hint(base, cand, rows) -> str:
    """compare's hint where the baseline's peer copies missing from the candidate point to a candidate
    without NVML, else "".

    A copy run sweeps one GPU pair per link kind, and learns the links from NVML: a baseline whose peer
    copies recorded a link and a candidate whose own peer copies recorded none swept different pairs. A
    candidate with no peer copy at all (a run killed before them, a config without them) says nothing of
    NVML, so no hint blames it.
    """
    base_peers, cand_peers = _peer_copies(base), _peer_copies(cand)
    missing = {r.benchmark for r in rows if r.status == "missing"}
    if (missing & set(base_peers["name"]) and _links(base_peers) and not cand_peers.empty
            and not _links(cand_peers)):
        return ("the baseline's copies recorded the GPU links (NVML) and the candidate's did not: its size "
                "sweep covered one peer pair per link, the candidate's one pair in all; install nvidia-ml-py "
                "where the candidate runs, or pass --allow-missing")
    return ""


def copy_engine_rows(rows):
    """`rows` keeping, of an imported route that nvbandwidth measured several ways, the way the suite copies.

    The suite's copies are cudaMemcpy (copy-engine) copies that torch issues on the source GPU's stream
    (ATen's copy_device_to_device). nvbandwidth measures a GPU pair by its `_ce` and `_sm` (an SM copy kernel)
    tests, and each of those as a write (issued from the source's context, as torch does) and a read (from the
    destination's context, PREFER_DST_CONTEXT in testcases_ce.cpp). The better of them would not be like the
    suite's figure, and could hide a slow path: copy engine wins over SM kernel, then write over read; a route
    measured one way only keeps it."""
    import pandas as pd

    if "engine" not in rows or not rows["engine"].isin(["ce", "sm"]).any():
        return rows
    keys = [k for k in ("label", "src", "dst", "direction") if k in rows]
    route = pd.Series(["\x1f".join(map(str, r)) for r in zip(*(rows[k] for k in keys))], index=rows.index)
    no_test = pd.Series("", rows.index)
    test = rows["test"].where(rows["test"].map(type) == str, "") if "test" in rows else no_test
    # 0 = copy engine, issued by the source; 1 = copy engine, by the destination; 2, 3 = the same by SM
    # kernel.
    rank = (rows["engine"] == "sm").astype(int) * 2 + test.str.contains("_read", regex=False).astype(int)
    return rows[rank == rank.groupby(route).transform("min")]


like_ours = copy_engine_rows  # the hook suite.results.like_ours calls on a table's copy rows

# Health judges copies only from 64 MiB: host links reach their plateau by 32-64 MB (bandwidthTest uses
# 32 MB, nvbandwidth 512 MiB buffers).
MIN_COPY_BYTES = 64 * 2**20
_PINNED_UNI = (("memory", "pinned"), ("direction", "uni"))
MEASURES = {
    "h2d": Measure("gbps", "GB/s", _PINNED_UNI, "h2d", min_bytes=MIN_COPY_BYTES),
    "d2h": Measure("gbps", "GB/s", _PINNED_UNI, "d2h", min_bytes=MIN_COPY_BYTES),
    "same_device": Measure("gbps", "GB/s", (("direction", "uni"),), "local", min_bytes=MIN_COPY_BYTES),
    "peer": Measure("gbps", "GB/s", (("direction", "uni"),), "peer", min_bytes=MIN_COPY_BYTES),
}
