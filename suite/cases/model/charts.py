"""The model family's report chart: training or inference samples/s per model, device and batch size."""

from __future__ import annotations

import math

import pandas as pd

from suite.report.charts import MAX_BAR_CATEGORIES, Chart, bars_by, count_text, grouped_barh


def model_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Training or inference throughput per model, device and batch size; across machines, or past
    MAX_BAR_CATEGORIES groups, the median over a machine's devices of each kind, whiskers at the slowest and
    fastest."""
    rows = rows[rows["samples_per_s"].notna()]
    if rows.empty:
        return []
    precision = rows["precision"] if "precision" in rows else rows.get("dtype", pd.Series("", rows.index))
    batch = rows["batch_size"] if "batch_size" in rows else pd.Series(math.nan, index=rows.index)
    device = rows["device"].fillna("?").astype(str)

    def categories(where: pd.Series) -> pd.Series:
        # `cpu · float32 · lenet-b64`: the test id's words (model-b{batch}) after the device and precision.
        return pd.Series([f"{d} · {p} · {m}-b{count_text(b)}" for d, p, m, b in
                          zip(where, precision.fillna("?"), rows["model"].fillna("?"), batch)],
                         index=rows.index, dtype=object)

    category = categories(device)
    kind = device.str.split(":").str[0]
    # cuda:0 of one box and cuda:0 of another are different GPUs, and 8 GPUs of a dozen machines are more bars
    # than a chart holds (the last GPUs were cut off): one bar per machine and kind of device, as tflops_bars.
    if (kind != device).any() and (len(machines) > 1 or category.nunique() > MAX_BAR_CATEGORIES):
        category = categories(kind)
        cats, series = bars_by(rows, machines, category, "samples_per_s", "median")
        _, low = bars_by(rows, machines, category, "samples_per_s", "min")
        _, high = bars_by(rows, machines, category, "samples_per_s", "max")
        chart = grouped_barh(cats, series, "samples/s", "Model throughput (higher is better)",
                              annotate=lambda v: f"{v:.4g}", spread={m: (low[m], high[m]) for m in series})
        caption = "Each bar is the median over a machine's devices of that kind"
        if widest := _widest_spread(cats, series, low, high):
            caption += f"; whiskers span its slowest to fastest device ({widest})"
        chart.caption = " ".join(filter(None, [caption + "; the table lists every device.", chart.caption]))
        return [chart]
    cats, series = bars_by(rows, machines, category, "samples_per_s")
    return [grouped_barh(cats, series, "samples/s", "Model throughput (higher is better)", annotate=lambda v: f"{v:.4g}")]


def _widest_spread(cats: list[str], series: dict, low: dict, high: dict) -> str:
    """`widest: 12% on box · cuda · mlp-b64`, the largest (fastest − slowest) / median among the bars; "" if
    every bar's devices agree."""
    spreads = [((hi - lo) / mid, f"{machine} · {cat}")
               for machine, values in series.items()
               for cat, mid, lo, hi in zip(cats, values, low[machine], high[machine])
               if mid > 0 and hi > lo]  # NaN compares False: a machine without the category is skipped
    if not spreads:
        return ""
    spread, where = max(spreads)
    return f"widest: {100 * spread:.2g}% on {where}"


CHARTS = [model_bars]
