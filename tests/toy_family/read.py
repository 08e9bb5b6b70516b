"""How toy results are read (torch-free): what a family adds to have its own rate, title and summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size

RATE = "gbps"  # bytes written per second
TITLE = "Toy fills"
NOTE = "GB/s counts the bytes fill_ writes once per call."
OVERHEAD_S = 0.01  # a fill and a one-pass check: little beyond pytest's own bookkeeping


def summary(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for i in map(extra_info, benches):
        size, rate = size_of(i), num(i.get(RATE))
        if size is None or rate is None:
            continue
        columns += [format_size(size)] if format_size(size) not in columns else []
        rows[i.get("device")][format_size(size)] = cell(rate)
    return grid(f"toy: {TITLE}, GB/s by size", dict(rows), columns, "device")
