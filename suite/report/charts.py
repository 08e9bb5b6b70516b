"""Report charts: one entry per case family in CHARTS, each drawing a few PNG figures for the HTML page."""

from __future__ import annotations

import base64
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports are built on headless boxes
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from suite.report.tables import format_time, ranks_and_nodes
from suite.results import Machine, copy_engine_rows, route_kinds
from suite.units import format_size

# Limits that keep a report of hundreds of machines readable and fast; the tables always list everything.
MAX_CHART_MACHINES = 8  # more bars/lines per group than this cannot be told apart by colour
MAX_BAR_CATEGORIES = 40  # a horizontal bar chart taller than about a screen stops being read
MAX_LINES_PER_AXES = 12  # beyond this, curves of one machine are summarised by their median
MAX_HEATMAPS = 4  # src x dst matrices are large; the table has the rest
LOG_SCALE_SPAN = 30  # bars spanning more than this factor (CPU next to GPU) vanish on a linear axis
DPI = 100  # 1100 px wide figures: sharp on a laptop screen, ~50-150 KB each as PNG
WIDTH_IN = 11.0


@dataclass
class Chart:
    """One embedded figure: a title, the PNG as base64, and a caption saying what was left out."""

    title: str
    png_base64: str
    caption: str = ""


def _text(value: object) -> str:
    """A label safe for matplotlib: `$` would start mathtext, a leading `_` hides a legend entry."""
    text = str(value).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _colors(n: int) -> list:
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _grouped_barh(
    categories: list[str],
    series: dict[str, list[float]],
    xlabel: str,
    title: str,
    log: bool = False,
    annotate: Callable[[float], str] | None = None,
    spread: dict[str, tuple[list[float], list[float]]] | None = None,
) -> Chart:
    """Horizontal bars: one group per category, one bar per series (machine); `spread` gives each series'
    (low, high) per category, drawn as a whisker where they differ."""
    caption = ""
    if len(categories) > MAX_BAR_CATEGORIES:
        caption = f"First {MAX_BAR_CATEGORIES} of {len(categories)} groups shown; the table lists all."
        categories = categories[:MAX_BAR_CATEGORIES]
        series = {k: v[:MAX_BAR_CATEGORIES] for k, v in series.items()}
        spread = {k: (lo[:MAX_BAR_CATEGORIES], hi[:MAX_BAR_CATEGORIES])
                  for k, (lo, hi) in (spread or {}).items()}
    n_series = max(1, len(series))
    bar_h = 0.8 / n_series
    height = max(2.2, 0.8 + len(categories) * max(0.3, 0.12 * n_series))
    fig = Figure(figsize=(WIDTH_IN, height))
    ax = fig.add_subplot()
    y = np.arange(len(categories))
    for i, ((name, values), color) in enumerate(zip(series.items(), _colors(n_series))):
        vals = np.array([v if v is not None and not math.isnan(v) else 0.0 for v in values])
        pos = y - 0.4 + bar_h * (i + 0.5)
        ax.barh(pos, vals, height=bar_h * 0.92, color=color, label=_text(name))
        ends = vals
        if spread and name in spread:
            lo, hi = (np.array([v if v is not None and not math.isnan(v) else 0.0 for v in side])
                      for side in spread[name])
            whisker = (hi > lo) & (vals > 0)
            if whisker.any():
                below, above = vals[whisker] - lo[whisker], hi[whisker] - vals[whisker]
                ax.errorbar(vals[whisker], pos[whisker], xerr=[below, above], fmt="none", ecolor="#333",
                            elinewidth=0.8, capsize=2)
                ends = np.where(whisker, hi, vals)
        if annotate and n_series * len(categories) <= 60:
            for p, v, end in zip(pos, vals, ends):
                if v > 0:
                    ax.text(end, p, " " + annotate(v), va="center", fontsize=7)
    ax.set_yticks(y, [_text(c) for c in categories], fontsize=8)
    ax.invert_yaxis()
    positive = [v for vals in series.values() for v in vals if v is not None and v > 0]
    if log or (positive and max(positive) / min(positive) > LOG_SCALE_SPAN):
        ax.set_xscale("log")
        # Plain numbers (0.5, 2, 40) read faster than 5×10⁻¹; minor ticks stay unlabelled.
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        xlabel += "" if "log" in xlabel else " (log scale)"
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    if len(series) > 1:  # above the bars, so it never hides one
        ax.legend(
            fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=min(3, n_series), frameon=False
        )
    return Chart(title, _png(fig), caption)


def _bars_by(
    rows: pd.DataFrame, machines: list[str], category: pd.Series, value: str, aggfunc: str = "max"
) -> tuple[list, dict]:
    """Categories in first-seen order and, per machine, its value in each (NaN where it has none): the
    `aggfunc` of its rows there (the best, by default)."""
    frame = rows.assign(_cat=category.values)
    pivot = frame.pivot_table(index="_cat", columns="label", values=value, aggfunc=aggfunc, sort=False)
    cats = list(pivot.index)
    series = {m: [float(v) for v in pivot[m]] if m in pivot else [math.nan] * len(cats) for m in machines}
    return cats, series


def _shape(rows: pd.DataFrame) -> pd.Series:
    if {"m", "n", "k"} <= set(rows.columns):
        dims = rows[["m", "n", "k"]]
        shape = dims.apply(lambda r: "×".join(f"{int(v)}" for v in r) if r.notna().all() else "", axis=1)
        return shape.where(shape != "", rows["params"])
    return rows["params"]


def _pair(value: object) -> str:
    """A [h, w] parameter (stored as JSON text) as `h×w`; anything else as it is."""
    try:
        dims = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    return "×".join(str(d) for d in dims) if isinstance(dims, list) else str(value)


def _count(value: object) -> str:
    """A whole-number parameter (an int, or a float in a column with gaps) as text; `?` where absent."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return "?" if math.isnan(value) else f"{int(value)}"
    return "?"


def _conv_layer(rows: pd.DataFrame) -> pd.Series:
    """`resnet50-conv2-3x3 · nchw · fwd · b32`: the layer's name (or its dimensions), layout, step, batch.

    Never the whole parameter dump, which made each bar label wider than the chart.
    """
    def one(r: dict) -> str:
        layer = r.get("layer")
        if not isinstance(layer, str) or not layer:  # a shape without a name: 56×56 64→64 k3×3
            layer = (f"{_pair(r.get('size'))} {_count(r.get('in_channels'))}→{_count(r.get('out_channels'))}"
                     f" k{_pair(r.get('kernel'))}")
        return f"{layer} · {r.get('layout')} · {r.get('step')} · b{_count(r.get('batch'))}"

    return pd.Series([one(r) for r in rows.to_dict("records")], index=rows.index, dtype=object)


def conv_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """TFLOP/s per device, precision and layer (layout, step, batch)."""
    return tflops_bars(rows, machines, _conv_layer)


def tflops_bars(
    rows: pd.DataFrame, machines: list[str], shape: Callable[[pd.DataFrame], pd.Series] = _shape
) -> list[Chart]:
    """TFLOP/s per device, dtype and shape; across machines, the best device of each kind (cpu, cuda, ...)."""
    rows = rows[rows["tflops"].notna()]
    if rows.empty:
        return []
    # The precision (tf32, bf16 autocast) where recorded: two precisions of one dtype are different bars.
    dtype = rows["dtype"].fillna("") if "dtype" in rows else pd.Series("", index=rows.index)
    dtype = rows["precision"].fillna(dtype) if "precision" in rows else dtype
    device = rows["device"].fillna("").astype(str)
    caption = ""
    if len(machines) > 1:  # cuda:0 of one box and cuda:0 of another are different GPUs: compare kinds
        kind = device.str.split(":").str[0]
        if (kind != device).any():
            caption = "Best device of each kind per machine; the table lists every device."
        device = kind
    category = device + " · " + dtype + " · " + shape(rows)
    title = "Compute throughput (higher is better)"
    if category.nunique() > MAX_BAR_CATEGORIES:
        category = device + " · " + dtype + " · best shape"
        title = "Best compute throughput over shapes, per device and dtype (higher is better)"
    cats, series = _bars_by(rows, machines, category, "tflops")
    chart = _grouped_barh(cats, series, "TFLOP/s", title, annotate=lambda v: f"{v:.3g}")
    chart.caption = " ".join(filter(None, [caption, chart.caption]))
    return [chart]


# results.route_kind's codes in the words of a panel title; a CPU -> CPU copy is host memory, not a device's.
ROUTE_TITLES = {
    "h2d": "host → device",
    "d2h": "device → host",
    "peer": "device → device",
    "local": "same device",
    "host": "host (CPU → CPU)",
}


MEMORY_STYLES = {"pinned": "-", "pageable": "--", "device": "-"}  # one line style per kind of host memory


def _curve_panel(
    ax,
    rows: pd.DataFrame,
    color_key: str,
    style_key: str | None,
    x: str,
    y: str,
    colors: dict[str, object],
    styles: dict[str, str] = MEMORY_STYLES,
    marker_key: str | None = None,
    markers: dict[str, str] | None = None,
) -> None:
    """One line per (colour, style, marker) group, against a log2 size axis."""
    keys = [color_key] + ([style_key] if style_key else []) + ([marker_key] if marker_key else [])
    for key, g in rows.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        style = styles.get(str(key[1]), ":") if style_key else "-"
        marker = (markers or {}).get(str(key[-1]), "o") if marker_key else "o"
        g = g.sort_values(x)
        # a square and a triangle are told apart only a little above a dot's size
        size = 4.5 if marker_key else 3
        ax.plot(
            g[x], g[y], linestyle=style, marker=marker, markersize=size, linewidth=1.5, color=colors[key[0]]
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: format_size(int(v)) if v >= 1 else "")
    )
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def _figure_legend(
    fig: Figure, colors: dict[str, object], styles: list[str], extra: list | None = None
) -> None:
    """One legend above all panels: a colour per line name, a dash pattern per memory kind, then `extra`
    handles (a chart's own styles and markers)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, linewidth=2, label=_text(name)) for name, c in colors.items()]
    handles += [
        Line2D([], [], color="#555", linestyle=MEMORY_STYLES.get(s, ":"), label=_text(s)) for s in styles
    ]
    handles += extra or []
    fig.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.01, 1.0),
        ncol=min(3, len(handles)),
        fontsize=8,
        frameon=False,
    )


def _panels(n: int, row_height: float) -> tuple[Figure, int, int]:
    ncols = min(2, n)
    nrows = math.ceil(n / ncols)
    return Figure(figsize=(WIDTH_IN, row_height * nrows)), nrows, ncols


DIRECTION_MARKERS = {"uni": "o", "bi": "s"}
DIRECTION_LABELS = {"uni": "one way", "bi": "both ways at once (GB/s of both)"}


def per_copy_bytes(rows: pd.DataFrame) -> pd.Series:
    """Bytes of one copy's buffer: a bidirectional copy's `bytes` counts both directions (suite.cases.copy)."""
    if "direction" not in rows:
        return rows["bytes"]
    return rows["bytes"].where(rows["direction"].ne("bi"), rows["bytes"] / 2)


def copy_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Copy bandwidth against size, a panel per route kind; lines per route (one machine) or per machine."""
    from matplotlib.lines import Line2D

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
    colors = dict(zip(names, _colors(len(names))))
    fig, nrows, ncols = _panels(len(kinds), 3.6)
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        _curve_panel(ax, rows[rows["kind"] == kind], "route", "mem", "bytes", "gbps", colors,
                     marker_key="dir" if both else None, markers=DIRECTION_MARKERS)
        ax.set_title(kind, fontsize=10, loc="left")
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s")
    fig.tight_layout()
    extra = [Line2D([], [], color="#555", linestyle="", marker=DIRECTION_MARKERS[d], label=DIRECTION_LABELS[d])
             for d in DIRECTION_MARKERS if both and d in set(rows["dir"])]
    _figure_legend(fig, colors, sorted(m for m in set(rows["mem"]) if m), extra)
    return [Chart("Copy bandwidth against size (higher is better)", _png(fig), caption)]


# Up to this many devices (the CPU and eight GPUs) a copy matrix writes each cell's figure (and link) in it.
MAX_LABELLED_DEVICES = 9


def copy_heatmaps(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """src × dst matrix of GB/s at each machine's largest copy size (pinned host memory where measured)."""
    rows = copy_engine_rows(rows[rows["gbps"].notna() & rows["src"].notna() & rows["dst"].notna()])
    shown = [m for m in machines if (rows["label"] == m).any()][:MAX_HEATMAPS]
    if not shown:
        return []
    ncols = min(2, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(WIDTH_IN * 0.8, 3.4 * nrows))
    host_memory: set[str] = set()  # the kinds of host memory the matrices show, for a caption true to them
    for i, label in enumerate(shown):
        sub = rows[rows["label"] == label]
        if "direction" in sub and (sub["direction"] != "uni").any():
            # The classic matrix is one direction at a time, alone: not `bi`, nor nvbandwidth's one direction
            # measured under load from the other (uni_loaded).
            sub = sub[sub["direction"] == "uni"]
        sub = sub[sub["bytes"] == sub["bytes"].max()]
        # Pinned where both kinds were measured; a CPU-only machine has pageable (host) memory alone.
        if "memory" in sub and (sub["memory"] == "pageable").any() and (sub["memory"] != "pageable").any():
            sub = sub[sub["memory"] != "pageable"]
        if "memory" in sub:
            host = (sub["src"] == "cpu") | (sub["dst"] == "cpu")
            host_memory |= {m for m in sub.loc[host, "memory"] if isinstance(m, str)}
        grid = sub.pivot_table(index="src", columns="dst", values="gbps", aggfunc="max")
        names = sorted(set(grid.index) | set(grid.columns), key=lambda d: (d != "cpu", len(d), d))
        grid = grid.reindex(index=names, columns=names)
        ax = fig.add_subplot(nrows, ncols, i + 1)
        im = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(names)), [_text(n) for n in names], fontsize=8, rotation=45, ha="right")
        ax.set_yticks(range(len(names)), [_text(n) for n in names], fontsize=8)
        ax.set_xlabel("dst")
        ax.set_ylabel("src")
        values = grid.to_numpy(dtype=float)
        # What joins each GPU pair (NV18, PIX, SYS), where the run recorded it, under the pair's figure.
        linked = sub[sub["link"].map(type) == str] if "link" in sub else sub.iloc[:0]
        links = linked.groupby(["src", "dst"])["link"].first().to_dict()
        if len(names) <= MAX_LABELLED_DEVICES and np.isfinite(values).any():
            top = np.nanmax(values)
            for (r, c), v in np.ndenumerate(values):
                if not math.isnan(v):  # dark text on the bright end of viridis, light on the dark end
                    link = links.get((names[r], names[c]))
                    ax.text(
                        c,
                        r,
                        (f"{v:.0f}" if v >= 100 else f"{v:.3g}") + (f"\n{_text(link)}" if link else ""),
                        ha="center",
                        va="center",
                        fontsize=8 if not link else 7,
                        color="black" if v > 0.6 * top else "white",
                    )
        size = format_size(int(sub["bytes"].max())) if len(sub) else ""
        ax.set_title(_text(f"{label} — {size}"), fontsize=9, loc="left")
        fig.colorbar(im, ax=ax, label="GB/s")
    fig.tight_layout()
    extra = len([m for m in machines if (rows["label"] == m).any()]) - len(shown)
    caption = "Largest size per machine" + {
        frozenset({"pinned"}): "; host copies from pinned memory.",
        frozenset({"pageable"}): "; host copies from pageable memory (no pinned copies measured).",
        frozenset({"pinned", "pageable"}): "; host copies from pinned memory where measured, else pageable.",
    }.get(frozenset(host_memory), ".")
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
    return [Chart("Copy bandwidth matrix, src × dst (GB/s)", _png(fig), caption)]


def placement_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Time per placement op and size: what `.to`, `clone`, `copy_` cost."""
    rows = rows.copy()
    size = rows["bytes"].map(lambda b: format_size(int(b)) if not math.isnan(b) else "")
    multi = len(machines) > 1
    category = (
        rows["op"].fillna("?") + " · " + size + ((" · " + rows["device"].fillna("")) if not multi else "")
    )
    rows["us"] = rows["median"] * 1e6
    cats, series = _bars_by(rows, machines, category, "us")
    chart = _grouped_barh(
        cats,
        series,
        "median time per call, µs (log scale; lower is better)",
        "Placement: time per op and size",
        log=True,
        annotate=lambda v: format_time(v * 1e-6),
    )
    return [chart]


def habit_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Pair each habit's slow and fast variants: columns label, habit, pair, slow, fast, ratio (slow/fast time)."""
    if rows.empty or "variant" not in rows:
        return pd.DataFrame(
            columns=["label", "habit", "pair", "slow", "fast", "slow_median", "fast_median", "ratio"]
        )
    out = []
    pair_col = rows["pair"] if "pair" in rows else rows["habit"]
    keyed = rows.assign(_pair=pair_col.fillna(rows["habit"]).astype(str))
    for (label, habit, pair), g in keyed.groupby(["label", "habit", "_pair"], sort=False, dropna=False):
        if len(g) < 2:
            continue
        by_variant = {str(v): m for v, m in zip(g["variant"], g["median"])}
        if "slow" in by_variant and "fast" in by_variant:
            slow, fast = "slow", "fast"
        else:  # named variants: the slower of the pair is the habit to avoid
            order = sorted(by_variant, key=by_variant.get)
            slow, fast = order[-1], order[0]
        ratio = by_variant[slow] / by_variant[fast] if by_variant[fast] > 0 else math.nan
        out.append(
            {
                "label": label,
                "habit": habit,
                "pair": pair,
                "slow": slow,
                "fast": fast,
                "slow_median": by_variant[slow],
                "fast_median": by_variant[fast],
                "ratio": ratio,
            }
        )
    return pd.DataFrame(out)


def habit_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """How many times slower the habit to avoid is than its fix, per habit and machine."""
    pairs = habit_pairs(rows)
    if pairs.empty:
        return []
    category = pairs["habit"].astype(str) + " · " + pairs["slow"] + " vs " + pairs["fast"]
    cats, series = _bars_by(pairs, machines, category, "ratio")
    return [
        _grouped_barh(
            cats,
            series,
            "× slower (slow variant time / fast variant time, log scale)",
            "Habits: the cost of the slow way",
            log=True,
            annotate=lambda v: f"{v:.2g}× slower",
        )
    ]


# In-place and out-of-place runs of one op are different curves (in-place all_gather skips a copy): a dash
# pattern tells them apart; a result that does not say (older files) is drawn solid.
MODE_STYLES = {"out-of-place": "-", "in-place": "--", "": "-"}
DTYPE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one per dtype, in sorted order of the dtypes


def _mode(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return "in-place" if bool(value) else "out-of-place"


def busbw_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Collective bus bandwidth against message size, a panel per op; a colour per machine and setup (world
    size, nodes, backend), a dash pattern per in-place/out-of-place and a marker per dtype."""
    from matplotlib.lines import Line2D

    # The family's own order (all_reduce first), imported here: a report without collectives needs no
    # pydantic.
    from suite.cases.collectives.config import COLLECTIVE_OPS

    rows = rows[rows["busbw"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return []
    rows["op"] = rows["op"].fillna("?").astype(str)
    seen = list(dict.fromkeys(rows["op"]))
    ops = [op for op in COLLECTIVE_OPS if op in seen] + [op for op in seen if op not in COLLECTIVE_OPS]
    # A line is a machine and its setup: ranks and nodes always (a 16-rank 2-node job named by its first node
    # alone reads as that node's busbw), the backend where it varies or names the one machine's lines.
    # One text per distinct setup (NaN as -1: NaN is never equal to itself as a key), not one per row.
    counts = [rows[c].fillna(-1) if c in rows else pd.Series(-1, index=rows.index)
              for c in ("world_size", "nnodes", "ranks_per_node")]
    setups = {key: ranks_and_nodes(*(None if v == -1 else v for v in key)) for key in set(zip(*counts))}
    # A torchrun job's label names its launch (`(torchrun 16 ranks on 2 nodes)`): the setup text says it.
    named = rows["label"].astype(str).str.replace(r" \(torchrun[^)]*\)", "", regex=True)
    parts = [named if len(machines) > 1 else pd.Series("", index=rows.index),
             pd.Series([setups[key] for key in zip(*counts)], index=rows.index, dtype=object)]
    if "backend" in rows and (rows["backend"].nunique() > 1 or len(machines) == 1):
        parts.append(rows["backend"].map(lambda v: v if isinstance(v, str) else ""))
    rows["line"] = [" · ".join(p for p in line if p) for line in zip(*parts)]
    rows["mode"] = rows["in_place"].map(_mode) if "in_place" in rows else ""
    rows["dtype_"] = rows["dtype"].fillna("").astype(str) if "dtype" in rows else ""
    names = list(dict.fromkeys(rows["line"]))
    colors = dict(zip(names, _colors(len(names))))
    dtypes = sorted(set(rows["dtype_"]))
    markers = {d: DTYPE_MARKERS[i % len(DTYPE_MARKERS)] for i, d in enumerate(dtypes)}
    fig, nrows, ncols = _panels(len(ops), 3.6)  # two columns: seven ops are four rows of readable panels
    for i, op in enumerate(ops):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        _curve_panel(
            ax, rows[rows["op"] == op], "line", "mode", "bytes", "busbw", colors, MODE_STYLES, "dtype_",
            markers
        )
        ax.set_title(_text(op), fontsize=10, loc="left")
        ax.set_xlabel("message bytes")
        ax.set_ylabel("busbw GB/s")
    fig.tight_layout()
    # Modes and dtypes are named only where they vary; a lone one would be a legend entry that tells nothing.
    extra = []
    modes = [m for m in MODE_STYLES if m and m in set(rows["mode"])]
    if len(modes) > 1:
        extra += [Line2D([], [], color="#555", linestyle=MODE_STYLES[m], label=m) for m in modes]
    if len(dtypes) > 1:
        extra += [
            Line2D([], [], color="#555", linestyle="", marker=markers[d], label=_text(d or "?"))
            for d in dtypes
        ]
    _figure_legend(fig, colors, [], extra)
    return [Chart("Collectives: bus bandwidth against size (higher is better)", _png(fig))]


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
        return pd.Series(
            [f"{d} · {p} · {m}-b{_count(b)}" for d, p, m, b in
             zip(where, precision.fillna("?"), rows["model"].fillna("?"), batch)],
            index=rows.index, dtype=object,
        )

    category = categories(device)
    kind = device.str.split(":").str[0]
    # cuda:0 of one box and cuda:0 of another are different GPUs, and 8 GPUs of a dozen machines are more bars
    # than a chart holds (the last GPUs were cut off): one bar per machine and kind of device, as tflops_bars.
    if (kind != device).any() and (len(machines) > 1 or category.nunique() > MAX_BAR_CATEGORIES):
        category = categories(kind)
        cats, series = _bars_by(rows, machines, category, "samples_per_s", "median")
        _, low = _bars_by(rows, machines, category, "samples_per_s", "min")
        _, high = _bars_by(rows, machines, category, "samples_per_s", "max")
        chart = _grouped_barh(cats, series, "samples/s", "Model throughput (higher is better)",
                              annotate=lambda v: f"{v:.4g}", spread={m: (low[m], high[m]) for m in series})
        caption = "Each bar is the median over a machine's devices of that kind"
        widest = _widest_spread(cats, series, low, high)
        if widest:
            caption += f"; whiskers span its slowest to fastest device ({widest})"
        chart.caption = " ".join(filter(None, [caption + "; the table lists every device.", chart.caption]))
        return [chart]
    cats, series = _bars_by(rows, machines, category, "samples_per_s")
    return [
        _grouped_barh(
            cats, series, "samples/s", "Model throughput (higher is better)", annotate=lambda v: f"{v:.4g}"
        )
    ]


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


def generic_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Fallback: the derived rate if the family has one, else the median time."""
    if rows["tflops"].notna().any():
        return tflops_bars(rows, machines)
    label = rows["device"].fillna("").astype(str)
    category = (label + " " + rows["name"]).str.strip() if rows["device"].notna().any() else rows["name"]
    if rows["metric"].notna().any():
        unit = rows["metric_unit"].dropna().iloc[0]
        cats, series = _bars_by(rows, machines, category, "metric")
        return [_grouped_barh(cats, series, unit, f"Throughput, {unit} (higher is better)")]
    cats, series = _bars_by(rows.assign(us=rows["median"] * 1e6), machines, category, "us")
    return [
        _grouped_barh(cats, series, "median time, µs (log scale; lower is better)", "Median time", log=True)
    ]


# family -> chart functions; a new family adds one line here (and a function above if it needs its own chart).
CHARTS: dict[str, list[Callable[[pd.DataFrame, list[str]], list[Chart]]]] = {
    "matmul": [tflops_bars],
    "copy": [copy_curves, copy_heatmaps],
    "placement": [placement_bars],
    "habits": [habit_bars],
    "collectives": [busbw_curves],
    "model": [model_bars],
    "conv": [conv_bars],
}


def chart_machines(
    labels: list[str], runs: Mapping[str, Machine], limit: int = MAX_CHART_MACHINES
) -> list[str]:
    """At most `limit` of `labels` (baseline first) to chart, every GPU model first: one run of each model in
    the order they come, then a second of each, and so on; within a model, one run of each launch (one
    process, torchrun N ranks) before a second of any. In that order, so a chart that keeps fewer (the copy
    matrices) still shows different models. The first `limit` in file order were identical 8-GPU nodes that
    crowded every other kind out."""
    if len(labels) <= limit:
        return list(labels)
    by_model: dict[str, list[tuple[int, str]]] = {}
    launches: Counter = Counter()
    for label in labels:
        run = runs.get(label)
        model, launch = (run.gpu_model, run.launch) if run is not None else (label, "")
        by_model.setdefault(model, []).append((launches[model, launch], label))
        launches[model, launch] += 1
    queues = [[label for _, label in sorted(members, key=lambda m: m[0])] for members in by_model.values()]
    picked: list[str] = []
    for depth in range(max(map(len, queues))):
        picked += [queue[depth] for queue in queues if depth < len(queue)]
    return picked[:limit]


def charts_for(case: str, rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """The charts of one family, drawn for at most MAX_CHART_MACHINES machines (baseline first); pick them
    with chart_machines to cover every GPU model."""
    shown = [m for m in machines if (rows["label"] == m).any()][:MAX_CHART_MACHINES]
    rows = rows[rows["label"].isin(shown)]
    charts = []
    for draw in CHARTS.get(case, [generic_bars]):
        charts.extend(draw(rows, shown))
    return charts


MAX_HISTORY_MACHINES = 8  # lines per family panel, as for the other charts


def history_charts(loaded) -> list[Chart]:
    """Per family, each machine's geometric-mean speed over its runs, relative to its first run.

    Only machines (same identity: host, GPUs, driver) with two or more runs of one tool and launch are drawn,
    as results.latest_runs groups them: a node's torchrun job (the collectives) shares no benchmark with its
    single-process runs, so among them it was a run with no point, and alone a legend entry with no line.
    """
    from suite.results import OUR_TOOL, relative_speed

    runs: dict[tuple[str, str, str], list] = {}
    for m in loaded.machines.values():
        runs.setdefault((m.identity, m.tool, m.launch), []).append(m)
    series = []
    for (identity, tool, launch), ms in sorted(runs.items()):
        if len(ms) < 2:
            continue
        ms = sorted(ms, key=lambda m: (m.datetime, m.file))
        sub = loaded.table[loaded.table["label"].isin([m.label for m in ms])]
        speed = relative_speed(sub, ms[0].label)
        name = " · ".join(filter(None, [identity, launch])) + (f" ({tool})" if tool != OUR_TOOL else "")
        series.append((name, ms, speed))
    if not series:
        return []
    # The machines whose latest run moved furthest from their first (in any family) first: a fleet's
    # history is about the ones that changed, not the first eight by name.
    def moved(entry) -> float:
        _, ms, speed = entry
        latest = speed[speed["label"] == ms[-1].label]["speed"]
        logs = [abs(math.log(v)) for v in latest if isinstance(v, float) and v > 0]
        return max(logs, default=0.0)

    ranked = sorted(series, key=moved, reverse=True) if len(series) > MAX_HISTORY_MACHINES else series
    shown = sorted(ranked[:MAX_HISTORY_MACHINES], key=series.index)
    families = sorted({c for _, _, speed in shown for c in speed["case"]})
    if not families:
        return []
    fig, nrows, ncols = _panels(len(families), 3.0)
    colors = dict(zip([s[0] for s in shown], _colors(len(shown))))
    for i, case in enumerate(families):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for identity, ms, speed in shown:
            mine = speed[speed["case"] == case]
            if mine.empty:  # none of its runs measured this family again: a lone 1.0 at run 1 says nothing
                continue
            by_label = dict(zip(mine["label"], mine["speed"]))
            points = [(j, 1.0 if j == 1 else by_label.get(m.label, math.nan)) for j, m in enumerate(ms, 1)]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    color=colors[identity])
        ax.axhline(1.0, color="#999", linewidth=0.8)
        ax.set_title(_text(case), fontsize=10, loc="left")
        ax.set_xlabel("run (1 = oldest)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # runs are counted
        ax.set_ylabel("× first run")
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    _figure_legend(fig, colors, [])
    caption = "Geometric mean over the benchmarks each run shares with the machine's first run; above 1: faster."
    if len(series) > len(shown):
        caption += (f" The {len(shown)} of {len(series)} machines with history whose latest run moved furthest "
                    "from their first.")
    return [Chart("History: speed per family against each machine's first run", _png(fig), caption)]
