"""How collectives results are read (torch-free): headline rate, report title and note."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size

RATE = "busbw"  # the rate that says how fast this family is
TITLE = "Collectives"
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
