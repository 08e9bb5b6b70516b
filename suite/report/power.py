"""Performance per watt in the report: in each family's section, one benchmark's rate on each machine beside
its rate per watt and power, and a chart of both across machines, where telemetry recorded perf_per_w."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from suite.report.charts import MAX_BAR_CATEGORIES, WIDTH_IN, Chart, figure_chart, palette, safe_text
from suite.report.tables import Table, format_rate

EXPLAIN = ("One benchmark on each machine (the one most machines ran, of those the fastest): its rate beside "
           "its rate per watt, the rate over the mean power its devices drew during the timed rounds "
           "(perf_per_w, from NVML or RAPL where the platform reports power; never estimated), and that "
           "power.")


def best_per_watt(rows: pd.DataFrame, machines: list[str]) -> pd.DataFrame:
    """Per machine (in `machines` order), its valid result of one benchmark that recorded perf_per_w."""
    per_watt = pd.to_numeric(rows.get("perf_per_w"), errors="coerce") if "perf_per_w" in rows else None
    if per_watt is None:
        return rows.iloc[:0]
    watts = pd.to_numeric(rows["power_w"], errors="coerce") if "power_w" in rows else np.nan
    rows = rows.assign(per_watt_=per_watt, watts_=watts)
    rows = rows[(rows["per_watt_"] > 0) & (rows["metric"] > 0) & (rows["invalid"] == "")]
    if rows.empty:
        return rows
    # One benchmark for every machine, so the bars compare like with like: the one most machines ran, of
    # those the fastest.
    ran = rows.groupby("match_key").agg(machines=("label", "nunique"), rate=("metric", "median"))
    key = ran.sort_values(["machines", "rate"], ascending=False).index[0]
    best = rows[rows["match_key"] == key].drop_duplicates("label")
    order = {label: i for i, label in enumerate(machines)}
    best = best.assign(order_=best["label"].map(order).fillna(len(order)))
    return best.sort_values("order_", kind="stable")


def per_watt_table(best: pd.DataFrame) -> Table:
    lines = [[r.label, r.name, format_rate(r.metric, r.metric_unit),
              format_rate(r.per_watt_, f"{r.metric_unit}/W"), f"{r.watts_:.0f} W" if r.watts_ > 0 else ""]
             for r in best.itertuples(index=False)]
    return Table("per-watt", ["machine", "benchmark", "rate", "rate per watt", "power"], lines, words=2,
                 strong=3, explain=EXPLAIN)


def per_watt_chart(best: pd.DataFrame, title: str) -> Chart:
    """Two panels side by side: the rate and the rate per watt of each machine's best result."""
    shown = best.iloc[:MAX_BAR_CATEGORIES]
    unit = str(shown["metric_unit"].iloc[0])
    fig = Figure(figsize=(WIDTH_IN, max(2.0, 0.8 + 0.3 * len(shown))))
    y = np.arange(len(shown))
    colors = palette(len(shown))
    for i, (column, label) in enumerate((("metric", unit), ("per_watt_", f"{unit}/W"))):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.barh(y, shown[column].to_numpy(dtype=float), color=colors)
        ax.set_yticks(y, [safe_text(m) for m in shown["label"]] if i == 0 else [], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{label} (higher is better)")
        ax.grid(axis="x", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    cut = len(best) > len(shown)
    caption = f"First {len(shown)} of {len(best)} machines shown; the table lists all." if cut else ""
    return figure_chart(f"{title}: rate and rate per watt", fig, caption)


def attach_per_watt(families: list[dict], table: pd.DataFrame, machines: list[str]) -> None:
    """Each family section (`case`, `title`, `charts`, `tables`) whose results recorded perf_per_w gets its
    per-watt chart and table; the others are left as they are."""
    for section in families:
        best = best_per_watt(table[table["case"] == section["case"]], machines)
        if not best.empty:
            section["charts"] = [*section["charts"], per_watt_chart(best, section["title"])]
            section["tables"] = [*section["tables"], per_watt_table(best)]
