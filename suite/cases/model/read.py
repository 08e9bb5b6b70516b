"""How model results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, precision

RATE = "samples_per_s"  # the rate that says how fast this family is
OVERHEAD_S = 1.8  # measured as matmul's (suite.plan)
TITLE = "Models"
NOTE = ""


def summary(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = extra_info(b)
        rate = num(i.get("samples_per_s"))
        col = f"{i.get('model')}-b{i.get('batch_size')}"
        columns += [col] if col not in columns else []
        rows[f"{i.get('device')} {precision(i)}"][col] = cell(rate, 4)
    return grid("model: samples/s", dict(rows), columns, "device dtype")
