"""How collectives results are read (torch-free): headline rate, report title and note."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size
from suite.health.expect import Measure

RATE = "busbw"  # the rate that says how fast this family is
TITLE = "Collectives"
# Its cases run in their own torchrun launch (every rank a process), apart from `pytest benchmarks`.
TORCHRUN = "python -m suite collectives"
NOTE = (
    "busbw follows nccl-tests: comparable to the link's hardware bandwidth whatever the world size."
)


def summary(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = extra_info(b)
        bw = num(i.get("busbw"))
        if bw is None or size_of(i) is None:
            continue
        col = f"{i.get('op')}" + (
            "" if i.get("in_place") is None else (" ip" if i.get("in_place") else " oop")
        )
        columns += [col] if col not in columns else []
        rows[(i.get("size"), i.get("dtype"))][col] = cell(bw)
    order = sorted(rows, key=lambda sd: (sd[0], str(sd[1])))
    labelled = {f"{format_size(s)} {d}": rows[(s, d)] for s, d in order}
    return grid("collectives: busbw GB/s (nccl-tests' definition)", labelled, columns, "size dtype")

# Health judges all-reduce only from 256 MiB, the largest size of the default config. NCCL's busbw climbs to
# 1-8 GB and 256 MB is below its peak (nccl-tests maintainers, issue 212): the best judged size is compared,
# and the tolerance (suite.health.expect.OK_AT_PCT) absorbs the shortfall of a run that stops at 256 MiB.
MIN_COLLECTIVE_BYTES = 256 * 2**20
MEASURES = {
    # One node only: the figures are NVLink within a node; across nodes the network decides.
    "all_reduce_busbw": Measure(
        "busbw", "GB/s", (("op", "all_reduce"), ("nnodes", 1)), min_bytes=MIN_COLLECTIVE_BYTES, per_machine=True
    ),
}
