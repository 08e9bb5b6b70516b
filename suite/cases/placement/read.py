"""How placement results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import extra_info, format_time, grid, median_of, size_of
from suite.units import format_size

RATE = "gbps"  # the rate that says how fast this family is
OVERHEAD_S = 0.02  # measured as matmul's (suite.plan)
TITLE = "Tensor placement"
NOTE = ("`.to(device)` on a tensor already on that device returns the same tensor and copies nothing: its "
        "time is the call's overhead, and it has no bandwidth. clone, copy_ and .to(copy=True) always copy.")


def call_bytes(params: dict) -> int:
    """Bytes one call copies (suite.plan's call time): to_same copies none."""
    return 0 if params["op"] == "to_same" else params["size"]


def fill_bytes(params: dict) -> int:
    """Bytes its build fills with the pattern (suite.plan): the source, to_same's too."""
    return params["size"]


def summary(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = extra_info(b)
        op = i.get("op")
        columns += [op] if op not in columns else []
        size = size_of(i)
        row = f"{i.get('device')} {format_size(size)}" if size else i.get("device")
        rows[row][op] = format_time(median_of(b))
    return grid("placement: median time per call", dict(rows), columns, "device size")
