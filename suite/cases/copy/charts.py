"""The copy family's report charts: bandwidth against size per route kind, and the src × dst matrix."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from suite.cases.copy.read import copy_engine_rows
from suite.report.charts import (
    MAX_LINES_PER_AXES,
    WIDTH_IN,
    Chart,
    curve_panel,
    figure_chart,
    figure_legend,
    palette,
    panels,
    safe_text,
)
from suite.results import route_kinds
from suite.units import format_size

# results.route_kind's codes in the words of a panel title; a CPU -> CPU copy is host memory, not a device's.
ROUTE_TITLES = {
    "h2d": "host → device",
    "d2h": "device → host",
    "peer": "device → device",
    "local": "same device",
    "host": "host (CPU → CPU)",
}

MEMORY_STYLES = {"pinned": "-", "pageable": "--", "device": "-"}  # one line style per kind of host memory

DIRECTION_MARKERS = {"uni": "o", "bi": "s"}
DIRECTION_LABELS = {"uni": "one way", "bi": "both ways at once (GB/s of both)"}


def per_copy_bytes(rows: pd.DataFrame) -> pd.Series:
    """Bytes of one copy's buffer: its `size`; where a row lacks it, `bytes`, of which a bidirectional copy's
    count both directions (a call of one now counts several copies each way, as measure.py does)."""
    moved = rows["bytes"]
    if "direction" in rows:
        moved = moved.where(rows["direction"].ne("bi"), moved / 2)
    return rows["size"].fillna(moved) if "size" in rows else moved


def _style_legend(rows: pd.DataFrame, both: bool) -> list:
    """The legend's entries for line styles: a dash pattern per host memory, a marker per direction (where
    both directions ran)."""
    from matplotlib.lines import Line2D

    memories = sorted(m for m in set(rows["mem"]) if m)
    extra = [Line2D([], [], color="#555", linestyle=MEMORY_STYLES.get(m, ":"), label=safe_text(m))
             for m in memories]
    extra += [Line2D([], [], color="#555", linestyle="", marker=DIRECTION_MARKERS[d], label=DIRECTION_LABELS[d])
              for d in DIRECTION_MARKERS if both and d in set(rows["dir"])]
    return extra


def copy_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Copy bandwidth against size, a panel per route kind; lines per route (one machine) or per machine."""
    rows = rows[rows["gbps"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return []
    # The x axis is the buffer each copy moves, the size it was configured with.
    rows["bytes"] = per_copy_bytes(rows)
    rows["route"] = rows["src"].fillna("?") + "→" + rows["dst"].fillna("?")
    rows["kind"] = route_kinds(rows["src"], rows["dst"]).map(ROUTE_TITLES).fillna("").to_numpy()
    rows["mem"] = rows["memory"].fillna("") if "memory" in rows else ""
    # A dash pattern per host memory, a marker per direction (one way, or both at once) where both ran.
    rows["dir"] = rows["direction"].fillna("uni") if "direction" in rows else "uni"
    both = rows["dir"].nunique() > 1
    kinds = [k for k in ROUTE_TITLES.values() if k in set(rows["kind"])]
    caption = ""
    many_routes = rows.groupby("kind")["route"].nunique().max() > MAX_LINES_PER_AXES
    if len(machines) > 1 or many_routes:
        # Routes of one kind differ by a GPU index; across machines the kind is what compares. The heatmap
        # and the table keep every route.
        rows = rows.groupby(["label", "kind", "mem", "dir", "bytes"], sort=False)["gbps"].median().reset_index()
        rows["route"] = rows["label"]
        caption = "Each line is the median over a machine's routes of that kind; the matrix and table list every route."
    names = list(dict.fromkeys(rows["route"]))
    colors = dict(zip(names, palette(len(names))))
    fig, nrows, ncols = panels(len(kinds), 3.6)
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        curve_panel(ax, rows[rows["kind"] == kind], "route", "mem", "bytes", "gbps", colors, MEMORY_STYLES,
                    marker_key="dir" if both else None, markers=DIRECTION_MARKERS)
        ax.set_title(kind, fontsize=10, loc="left")
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s")
    fig.tight_layout()
    figure_legend(fig, colors, _style_legend(rows, both))
    return [figure_chart("Copy bandwidth against size (higher is better)", fig, caption)]


MAX_HEATMAPS = 4  # src x dst matrices are large; the table has the rest
# Up to this many devices (the CPU and eight GPUs) a copy matrix writes each cell's figure (and link) in it.
MAX_LABELLED_DEVICES = 9
# The kinds of host memory the matrices show -> the caption's words for them.
HOST_MEMORY_CAPTIONS = {
    frozenset({"pinned"}): "; host copies from pinned memory.",
    frozenset({"pageable"}): "; host copies from pageable memory (no pinned copies measured).",
    frozenset({"pinned", "pageable"}): "; host copies from pinned memory where measured, else pageable.",
}


def _matrix_rows(sub: pd.DataFrame) -> pd.DataFrame:
    """One machine's rows that its matrix shows: one way, the largest size, pinned where both were measured."""
    if "direction" in sub and (sub["direction"] != "uni").any():
        # The classic matrix is one direction at a time, alone: not `bi`, nor nvbandwidth's one direction
        # measured under load from the other (uni_loaded).
        sub = sub[sub["direction"] == "uni"]
    sub = sub[sub["bytes"] == sub["bytes"].max()]
    # Pinned where both kinds were measured; a CPU-only machine has pageable (host) memory alone.
    if "memory" in sub and (sub["memory"] == "pageable").any() and (sub["memory"] != "pageable").any():
        sub = sub[sub["memory"] != "pageable"]
    return sub


def _host_memory(sub: pd.DataFrame) -> set[str]:
    if "memory" not in sub:
        return set()
    host = (sub["src"] == "cpu") | (sub["dst"] == "cpu")
    return {m for m in sub.loc[host, "memory"] if isinstance(m, str)}


def _cell_labels(ax, sub: pd.DataFrame, names: list[str], values: np.ndarray) -> None:
    """Each cell's figure, and under it what joins the GPU pair (NV18, PIX, SYS) where the run recorded it."""
    linked = sub[sub["link"].map(type) == str] if "link" in sub else sub.iloc[:0]
    links = linked.groupby(["src", "dst"])["link"].first().to_dict()
    if len(names) > MAX_LABELLED_DEVICES or not np.isfinite(values).any():
        return
    top = np.nanmax(values)
    for (r, c), v in np.ndenumerate(values):
        if math.isnan(v):
            continue
        link = links.get((names[r], names[c]))
        ax.text(
            c,
            r,
            (f"{v:.0f}" if v >= 100 else f"{v:.3g}") + (f"\n{safe_text(link)}" if link else ""),
            ha="center",
            va="center",
            fontsize=8 if not link else 7,
            color="black" if v > 0.6 * top else "white",  # dark text on the bright end of viridis
        )


def _draw_matrix(fig: Figure, ax, sub: pd.DataFrame, label: str) -> None:
    grid = sub.pivot_table(index="src", columns="dst", values="gbps", aggfunc="max")
    names = sorted(set(grid.index) | set(grid.columns), key=lambda d: (d != "cpu", len(d), d))
    values = grid.reindex(index=names, columns=names).to_numpy(dtype=float)
    im = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(names)), [safe_text(n) for n in names], fontsize=8, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), [safe_text(n) for n in names], fontsize=8)
    ax.set_xlabel("dst")
    ax.set_ylabel("src")
    _cell_labels(ax, sub, names, values)
    size = format_size(int(sub["bytes"].max())) if len(sub) else ""
    ax.set_title(safe_text(f"{label} — {size}"), fontsize=9, loc="left")
    fig.colorbar(im, ax=ax, label="GB/s")


def _matrix_caption(rows: pd.DataFrame, shown: list[str], host_memory: set[str], extra: int) -> str:
    caption = "Largest size per machine" + HOST_MEMORY_CAPTIONS.get(frozenset(host_memory), ".")
    in_shown = rows[rows["label"].isin(shown)]
    if (in_shown["src"] == in_shown["dst"]).any():
        caption += (" The diagonal (a copy within one device) counts each byte once: bandwidthTest --dtod and"
                    " p2pBandwidthLatencyTest count it twice (the results' traffic_gbps).")
    labelled = [m for m in shown if len(set(rows.loc[rows["label"] == m, "src"])
                                         | set(rows.loc[rows["label"] == m, "dst"])) <= MAX_LABELLED_DEVICES]
    if "link" in rows and (rows["link"].map(type) == str).any() and labelled:
        caption += " Under a GPU pair's figure: its link as nvidia-smi topo -m names it (NV#: # NVLinks)."
    if extra > 0:
        caption += f" {extra} more machine(s) in the table."
    return caption


def copy_heatmaps(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """src × dst matrix of GB/s at each machine's largest copy size (pinned host memory where measured)."""
    rows = copy_engine_rows(rows[rows["gbps"].notna() & rows["src"].notna() & rows["dst"].notna()])
    measured = [m for m in machines if (rows["label"] == m).any()]
    shown = measured[:MAX_HEATMAPS]
    if not shown:
        return []
    ncols = min(2, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(WIDTH_IN * 0.8, 3.4 * nrows))
    host_memory: set[str] = set()  # the kinds of host memory the matrices show, for a caption true to them
    for i, label in enumerate(shown):
        sub = _matrix_rows(rows[rows["label"] == label])
        host_memory |= _host_memory(sub)
        _draw_matrix(fig, fig.add_subplot(nrows, ncols, i + 1), sub, label)
    fig.tight_layout()
    caption = _matrix_caption(rows, shown, host_memory, len(measured) - len(shown))
    return [figure_chart("Copy bandwidth matrix, src × dst (GB/s)", fig, caption)]


CHARTS = [copy_curves, copy_heatmaps]
