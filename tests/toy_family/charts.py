"""The toy family's report chart: fill bandwidth per device and size (what a family's charts.py holds)."""

from __future__ import annotations

import pandas as pd

from suite.report.charts import Chart, bars_by, grouped_barh
from suite.units import format_size


def fill_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """GB/s of `fill_` per device and size, a bar per machine."""
    rows = rows[rows["gbps"].notna()]
    if rows.empty:
        return []
    size = rows["size"].map(lambda b: format_size(int(b)))
    category = rows["device"].fillna("?").astype(str) + " · " + size
    cats, series = bars_by(rows, machines, category, "gbps")
    return [grouped_barh(cats, series, "GB/s", "Toy: fill bandwidth (higher is better)")]


CHARTS = [fill_bars]
