"""The placement family's report chart: the time of each op (`.to`, clone, copy_) per size."""

from __future__ import annotations

import math

import pandas as pd

from suite.report.charts import Chart, bars_by, grouped_barh
from suite.report.tables import format_time
from suite.units import format_size


def placement_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Time per placement op and size: what `.to`, `clone`, `copy_` cost."""
    rows = rows.copy()
    size = rows["bytes"].map(lambda b: format_size(int(b)) if not math.isnan(b) else "")
    multi = len(machines) > 1
    category = rows["op"].fillna("?") + " · " + size + ((" · " + rows["device"].fillna("")) if not multi else "")
    rows["us"] = rows["median"] * 1e6
    cats, series = bars_by(rows, machines, category, "us")
    return [grouped_barh(cats, series, "median time per call, µs (log scale; lower is better)",
                         "Placement: time per op and size", log=True, annotate=lambda v: format_time(v * 1e-6))]


CHARTS = [placement_bars]
