"""Report charts: one entry per case family in CHARTS, each drawing a few PNG figures for the HTML page."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports are built on headless boxes
from matplotlib.figure import Figure  # noqa: E402  (after the backend is chosen)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from suite.units import format_size  # noqa: E402

# Limits that keep a report of hundreds of machines readable and fast; the tables always list everything.
MAX_CHART_MACHINES = 8  # more bars/lines per group than this cannot be told apart by colour
MAX_BAR_CATEGORIES = 40  # a horizontal bar chart taller than about a screen stops being read
MAX_LINES_PER_AXES = 12  # beyond this, curves of one machine are summarised by their median
MAX_HEATMAPS = 4  # src x dst matrices are large; the table has the rest
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


def _grouped_barh(categories: list[str], series: dict[str, list[float]], xlabel: str, title: str,
                  log: bool = False, annotate: Callable[[float], str] | None = None) -> Chart:
    """Horizontal bars: one group per category, one bar per series (machine)."""
    caption = ""
    if len(categories) > MAX_BAR_CATEGORIES:
        caption = f"First {MAX_BAR_CATEGORIES} of {len(categories)} groups shown; the table lists all."
        categories = categories[:MAX_BAR_CATEGORIES]
        series = {k: v[:MAX_BAR_CATEGORIES] for k, v in series.items()}
    n_series = max(1, len(series))
    bar_h = 0.8 / n_series
    height = max(2.2, 0.6 + len(categories) * (0.22 + 0.14 * n_series))
    fig = Figure(figsize=(WIDTH_IN, height))
    ax = fig.add_subplot()
    y = np.arange(len(categories))
    for i, ((name, values), color) in enumerate(zip(series.items(), _colors(n_series))):
        vals = np.array([v if v is not None and not math.isnan(v) else 0.0 for v in values])
        pos = y - 0.4 + bar_h * (i + 0.5)
        ax.barh(pos, vals, height=bar_h * 0.92, color=color, label=_text(name))
        if annotate and n_series * len(categories) <= 60:
            for p, v in zip(pos, vals):
                if v > 0:
                    ax.text(v, p, " " + annotate(v), va="center", fontsize=7)
    ax.set_yticks(y, [_text(c) for c in categories], fontsize=8)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    if len(series) > 1:
        ax.legend(fontsize=8, loc="lower right" if not log else "best", framealpha=0.9)
    ax.set_title(_text(title), fontsize=11, loc="left")
    return Chart(title, _png(fig), caption)


def _bars_by(rows: pd.DataFrame, machines: list[str], category: pd.Series, value: str) -> tuple[list, dict]:
    """Categories in first-seen order and, per machine, its value in each (NaN where it has none)."""
    frame = rows.assign(_cat=category.values)
    pivot = frame.pivot_table(index="_cat", columns="label", values=value, aggfunc="max", sort=False)
    cats = list(pivot.index)
    series = {m: [float(v) for v in pivot[m]] if m in pivot else [math.nan] * len(cats) for m in machines}
    return cats, series


def _shape(rows: pd.DataFrame) -> pd.Series:
    if {"m", "n", "k"} <= set(rows.columns):
        dims = rows[["m", "n", "k"]]
        shape = dims.apply(lambda r: "×".join(f"{int(v)}" for v in r) if r.notna().all() else "", axis=1)
        return shape.where(shape != "", rows["params"])
    return rows["params"]


def tflops_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """TFLOP/s per device, dtype and shape; if that is too many bars, the best shape per device and dtype."""
    rows = rows[rows["tflops"].notna()]
    if rows.empty:
        return []
    dtype = rows["dtype"].fillna("") if "dtype" in rows else pd.Series("", index=rows.index)
    device = rows["device"].fillna("")
    category = device + " · " + dtype + " · " + _shape(rows)
    title = "Compute throughput (higher is better)"
    if category.nunique() > MAX_BAR_CATEGORIES:
        category = device + " · " + dtype + " · best shape"
        title = "Best compute throughput over shapes, per device and dtype (higher is better)"
    cats, series = _bars_by(rows, machines, category, "tflops")
    return [_grouped_barh(cats, series, "TFLOP/s", title, annotate=lambda v: f"{v:.3g}")]


def _route_kind(src: str, dst: str) -> str:
    if src == dst:
        return "same device"
    if src == "cpu":
        return "host → device"
    if dst == "cpu":
        return "device → host"
    return "device → device"


def _curves(ax, rows: pd.DataFrame, keys: list[str], x: str, y: str, describe: Callable) -> str:
    """One line per group of `keys`; too many lines collapse to the median per (label, last key)."""
    groups = list(rows.groupby(keys, sort=False, dropna=False))
    caption = ""
    if len(groups) > MAX_LINES_PER_AXES:
        summary = rows.groupby(["label", keys[-1], x], sort=False, dropna=False)[y].median().reset_index()
        groups = [((label, "median", last), g) for (label, last), g
                  in summary.groupby(["label", keys[-1]], sort=False, dropna=False)]
        caption = "Too many routes to draw one by one: each line is the median over a machine's routes."
        groups = groups[:MAX_LINES_PER_AXES]
    for (key, g), color in zip(groups, _colors(len(groups))):
        g = g.sort_values(x)
        ax.plot(g[x], g[y], marker="o", markersize=3, linewidth=1.4, color=color, label=_text(describe(key)))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: format_size(int(v)) if v >= 1 else ""))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    return caption


def copy_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Copy bandwidth against size, one panel per route kind, one line per machine, route and memory."""
    rows = rows[rows["gbps"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return []
    rows["route"] = rows["src"].fillna("?") + "→" + rows["dst"].fillna("?")
    rows["kind"] = [_route_kind(s, d) for s, d in zip(rows["src"], rows["dst"])]
    rows["mem"] = rows["memory"].fillna("") if "memory" in rows else ""
    if "direction" in rows and rows["direction"].nunique() > 1:
        rows["mem"] = rows["mem"] + " " + rows["direction"].fillna("")
    kinds = [k for k in ("host → device", "device → host", "device → device", "same device") if k in set(rows["kind"])]
    ncols = min(2, len(kinds))
    nrows = math.ceil(len(kinds) / ncols)
    fig = Figure(figsize=(WIDTH_IN, 4.0 * nrows))
    captions = []
    multi = len(machines) > 1
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        sub = rows[rows["kind"] == kind]
        cap = _curves(ax, sub, ["label", "route", "mem"], "bytes", "gbps",
                      lambda k: (f"{k[0]}: " if multi else "") + f"{k[1]} {k[2]}".strip())
        if cap and cap not in captions:
            captions.append(cap)
        ax.set_title(kind, fontsize=10, loc="left")
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s (1e9 B/s)")
    fig.tight_layout()
    return [Chart("Copy bandwidth against size (higher is better)", _png(fig), " ".join(captions))]


def copy_heatmaps(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """src × dst matrix of GB/s at each machine's largest copy size (pinned host memory where measured)."""
    rows = rows[rows["gbps"].notna() & rows["src"].notna() & rows["dst"].notna()]
    shown = [m for m in machines if (rows["label"] == m).any()][:MAX_HEATMAPS]
    if not shown:
        return []
    ncols = min(2, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = Figure(figsize=(WIDTH_IN, 4.6 * nrows))
    for i, label in enumerate(shown):
        sub = rows[rows["label"] == label]
        sub = sub[sub["bytes"] == sub["bytes"].max()]
        if "memory" in sub and (sub["memory"] == "pageable").any():
            sub = sub[sub["memory"] != "pageable"]
        grid = sub.pivot_table(index="src", columns="dst", values="gbps", aggfunc="max")
        names = sorted(set(grid.index) | set(grid.columns), key=lambda d: (d != "cpu", len(d), d))
        grid = grid.reindex(index=names, columns=names)
        ax = fig.add_subplot(nrows, ncols, i + 1)
        im = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(names)), [_text(n) for n in names], fontsize=8, rotation=45, ha="right")
        ax.set_yticks(range(len(names)), [_text(n) for n in names], fontsize=8)
        ax.set_xlabel("dst")
        ax.set_ylabel("src")
        if len(names) <= 9:
            for (r, c), v in np.ndenumerate(grid.to_numpy(dtype=float)):
                if not math.isnan(v):
                    ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize=7, color="white")
        size = format_size(int(sub["bytes"].max())) if len(sub) else ""
        ax.set_title(_text(f"{label} — {size}"), fontsize=9, loc="left")
        fig.colorbar(im, ax=ax, label="GB/s")
    fig.tight_layout()
    extra = len([m for m in machines if (rows["label"] == m).any()]) - len(shown)
    caption = "Largest size per machine, pinned host memory where both were measured."
    if extra > 0:
        caption += f" {extra} more machine(s) in the table."
    return [Chart("Copy bandwidth matrix, src × dst (GB/s)", _png(fig), caption)]


def placement_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Time per placement op and size: what `.to`, `clone`, `copy_` cost."""
    rows = rows.copy()
    size = rows["bytes"].map(lambda b: format_size(int(b)) if not math.isnan(b) else "")
    multi = len(machines) > 1
    category = rows["op"].fillna("?") + " · " + size + ((" · " + rows["device"].fillna("")) if not multi else "")
    rows["us"] = rows["median"] * 1e6
    cats, series = _bars_by(rows, machines, category, "us")
    chart = _grouped_barh(cats, series, "median time per call, µs (log scale; lower is better)",
                          "Placement: time per op and size", log=True, annotate=lambda v: f"{v:.3g} µs")
    return [chart]


def habit_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Pair each habit's slow and fast variants: columns label, habit, pair, slow, fast, ratio (slow/fast time)."""
    if rows.empty or "variant" not in rows:
        return pd.DataFrame(columns=["label", "habit", "pair", "slow", "fast", "slow_median", "fast_median", "ratio"])
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
        out.append({"label": label, "habit": habit, "pair": pair, "slow": slow, "fast": fast,
                    "slow_median": by_variant[slow], "fast_median": by_variant[fast], "ratio": ratio})
    return pd.DataFrame(out)


def habit_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """How many times slower the habit to avoid is than its fix, per habit and machine."""
    pairs = habit_pairs(rows)
    if pairs.empty:
        return []
    category = pairs["habit"].astype(str) + " · " + pairs["slow"] + " vs " + pairs["fast"]
    cats, series = _bars_by(pairs, machines, category, "ratio")
    return [_grouped_barh(cats, series, "× slower (slow variant time / fast variant time, log scale)",
                          "Habits: the cost of the slow way", log=True, annotate=lambda v: f"{v:.2g}× slower")]


def busbw_curves(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Collective bus bandwidth against message size, one panel per op."""
    rows = rows[rows["busbw"].notna() & rows["bytes"].notna()].copy()
    if rows.empty:
        return []
    ops = list(dict.fromkeys(rows["op"].fillna("?")))[:4]
    rows["setup"] = (rows["world_size"].map(lambda w: f"n={int(w)}" if not math.isnan(w) else "")
                     if "world_size" in rows else "")
    if "backend" in rows:
        rows["setup"] = rows["setup"] + " " + rows["backend"].fillna("")
    ncols = min(2, len(ops))
    nrows = math.ceil(len(ops) / ncols)
    fig = Figure(figsize=(WIDTH_IN, 4.0 * nrows))
    captions = []
    for i, op in enumerate(ops):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        cap = _curves(ax, rows[rows["op"].fillna("?") == op], ["label", "setup"], "bytes", "busbw",
                      lambda k: f"{k[0]} {k[1]}".strip())
        if cap and cap not in captions:
            captions.append(cap)
        ax.set_title(_text(op), fontsize=10, loc="left")
        ax.set_xlabel("message bytes")
        ax.set_ylabel("busbw GB/s")
    fig.tight_layout()
    return [Chart("Collectives: bus bandwidth against size (higher is better)", _png(fig), " ".join(captions))]


def model_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Training or inference throughput per model, device and batch size."""
    rows = rows[rows["samples_per_s"].notna()]
    if rows.empty:
        return []
    parts = [rows[c].astype(str) for c in ("model", "device") if c in rows]
    if "batch_size" in rows:
        parts.append("bs " + rows["batch_size"].map(lambda b: "" if math.isnan(b) else f"{int(b)}"))
    category = parts[0]
    for p in parts[1:]:
        category = category + " · " + p
    cats, series = _bars_by(rows, machines, category, "samples_per_s")
    return [_grouped_barh(cats, series, "samples/s", "Model throughput (higher is better)",
                          annotate=lambda v: f"{v:.4g}")]


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
    return [_grouped_barh(cats, series, "median time, µs (log scale; lower is better)", "Median time", log=True)]


# family -> chart functions; a new family adds one line here (and a function above if it needs its own chart).
CHARTS: dict[str, list[Callable[[pd.DataFrame, list[str]], list[Chart]]]] = {
    "matmul": [tflops_bars],
    "copy": [copy_curves, copy_heatmaps],
    "placement": [placement_bars],
    "habits": [habit_bars],
    "collectives": [busbw_curves],
    "model": [model_bars],
}


def charts_for(case: str, rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """The charts of one family, drawn for at most MAX_CHART_MACHINES machines (baseline first)."""
    shown = [m for m in machines if (rows["label"] == m).any()][:MAX_CHART_MACHINES]
    rows = rows[rows["label"].isin(shown)]
    charts = []
    for draw in CHARTS.get(case, [generic_bars]):
        charts.extend(draw(rows, shown))
    return charts
