"""The collectives family's report: busbw against size per op, and how each op scales across setups."""

from __future__ import annotations

import math
import numbers

import pandas as pd

from suite.cases.collectives.config import COLLECTIVE_OPS
from suite.report.charts import Chart, curve_panel, figure_chart, figure_legend, palette, panels, safe_text
from suite.report.tables import Table
from suite.units import format_size


def _whole(value: object) -> int | None:
    """A recorded count (an int, or a float in a column with gaps) as an int; None where absent."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return None
    return int(value)


def ranks_and_nodes(world_size: object, nnodes: object, ranks_per_node: object = None) -> str:
    """`16 ranks · 2 nodes`: what a torchrun job's collective ran on, nodes too where recorded (or implied by
    ranks per node); "" for a result that records no world size."""
    world = _whole(world_size)
    if world is None:
        return ""
    nodes = _whole(nnodes)
    per_node = _whole(ranks_per_node)
    if nodes is None and per_node and world % per_node == 0:
        nodes = world // per_node
    text = f"{world} rank{'s' if world != 1 else ''}"
    return text + (f" · {nodes} node{'s' if nodes != 1 else ''}" if nodes is not None else "")


# In-place and out-of-place runs of one op are different curves (in-place all_gather skips a copy): a dash
# pattern tells them apart; a result that does not say (older files) is drawn solid.
MODE_STYLES = {"out-of-place": "-", "in-place": "--", "": "-"}
DTYPE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one per dtype, in sorted order of the dtypes


def _mode(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return "in-place" if bool(value) else "out-of-place"


def _ops(rows: pd.DataFrame) -> list[str]:
    """The family's own order (all_reduce first), then any other op a results file names."""
    seen = list(dict.fromkeys(rows["op"]))
    return [op for op in COLLECTIVE_OPS if op in seen] + [op for op in seen if op not in COLLECTIVE_OPS]


def _lines(rows: pd.DataFrame, machines: list[str]) -> list[str]:
    """A line is a machine and its setup: ranks and nodes always (a 16-rank 2-node job named by its first node
    alone reads as that node's busbw), the backend where it varies or names the one machine's lines."""
    # One text per distinct setup (NaN as -1: NaN is never equal to itself as a key), not one per row.
    counts = rows.reindex(columns=["world_size", "nnodes", "ranks_per_node"]).fillna(-1)
    keys = list(counts.itertuples(index=False, name=None))
    setups = {key: ranks_and_nodes(*(None if v == -1 else v for v in key)) for key in set(keys)}
    # A torchrun job's label names its launch (`(torchrun 16 ranks on 2 nodes)`): the setup text says it.
    named = rows["label"].astype(str).str.replace(r" \(torchrun[^)]*\)", "", regex=True)
    parts = [named if len(machines) > 1 else pd.Series("", index=rows.index),
             pd.Series([setups[key] for key in keys], index=rows.index, dtype=object)]
    if "backend" in rows and (rows["backend"].nunique() > 1 or len(machines) == 1):
        parts.append(rows["backend"].map(lambda v: v if isinstance(v, str) else ""))
    return [" · ".join(p for p in line if p) for line in zip(*parts)]


def _legend_extra(rows: pd.DataFrame, dtypes: list[str], markers: dict[str, str]) -> list:
    """Modes and dtypes are named only where they vary; a lone one would be a legend entry that tells nothing."""
    from matplotlib.lines import Line2D

    extra = []
    modes = [m for m in MODE_STYLES if m and m in set(rows["mode"])]
    if len(modes) > 1:
        extra += [Line2D([], [], color="#555", linestyle=MODE_STYLES[m], label=m) for m in modes]
    if len(dtypes) > 1:
        extra += [
            Line2D([], [], color="#555", linestyle="", marker=markers[d], label=safe_text(d or "?"))
            for d in dtypes
        ]
    return extra


def busbw_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Collective bus bandwidth against message size, a panel per op; a colour per machine and setup (world
    size, nodes, backend), a dash pattern per in-place/out-of-place and a marker per dtype."""
    rows = rows[rows["busbw"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return []
    rows["op"] = rows["op"].fillna("?").astype(str)
    ops = _ops(rows)
    rows["line"] = _lines(rows, machines)
    rows["mode"] = rows["in_place"].map(_mode) if "in_place" in rows else ""
    rows["dtype_"] = rows["dtype"].fillna("").astype(str) if "dtype" in rows else ""
    names = list(dict.fromkeys(rows["line"]))
    colors = dict(zip(names, palette(len(names))))
    dtypes = sorted(set(rows["dtype_"]))
    markers = {d: DTYPE_MARKERS[i % len(DTYPE_MARKERS)] for i, d in enumerate(dtypes)}
    fig, nrows, ncols = panels(len(ops), 3.6)  # two columns: seven ops are four rows of readable panels
    for i, op in enumerate(ops):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        curve_panel(
            ax, rows[rows["op"] == op], "line", "mode", "bytes", "busbw", colors, MODE_STYLES, "dtype_",
            markers
        )
        ax.set_title(safe_text(op), fontsize=10, loc="left")
        ax.set_xlabel("message bytes")
        ax.set_ylabel("busbw GB/s")
    fig.tight_layout()
    figure_legend(fig, colors, _legend_extra(rows, dtypes, markers))
    return [figure_chart("Collectives: bus bandwidth against size (higher is better)", fig)]


def scaling_table(rows: pd.DataFrame) -> Table | None:
    """Busbw at each run's largest message, one column per run (machine, ranks, nodes, backend): how an op
    scales from one node to several, or one GPU count to another. None unless there are results of two setups
    at least (a lone run has its chart)."""
    if "busbw" not in rows or "op" not in rows:
        return None
    rows = rows[rows["busbw"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return None

    def setup(r) -> str:
        ranks = ranks_and_nodes(r.get("world_size"), r.get("nnodes"), r.get("ranks_per_node"))
        parts = [str(r["label"]), ranks]
        if isinstance(r.get("backend"), str):
            parts.append(r["backend"])
        return " · ".join(p for p in parts if p)

    rows["setup_"] = [setup(r) for r in rows.to_dict("records")]
    columns = list(dict.fromkeys(rows["setup_"]))
    if len(columns) < 2:
        return None
    mode = rows["in_place"].map(_mode) if "in_place" in rows else ""
    rows["line_"] = (rows["op"].astype(str) + " " + rows.get("dtype", pd.Series("", index=rows.index))
                     .fillna("").astype(str) + " " + mode).str.strip()
    out = []
    for line, group in rows.groupby("line_", sort=False):  # (op, dtype, mode) -> a cell per setup
        cells = [str(line)]
        for column in columns:
            mine = group[group["setup_"] == column]
            if mine.empty:
                cells.append("")
                continue
            top = mine.loc[mine["bytes"].idxmax()]
            cells.append(f"{top['busbw']:.3g} GB/s @ {format_size(int(top['bytes']))}")
        out.append(cells)
    explain = ("busbw at each run's largest message: one column per setup (machine, ranks, nodes, backend), so "
               "one node against two, or 4 GPUs against 8, reads across a row.")
    return Table("scaling", ["op", *columns], out, explain=explain, scroll=True)


CHARTS = [busbw_curves]
TABLES = [scaling_table]
