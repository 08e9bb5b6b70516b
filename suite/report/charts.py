"""Report charts: the building blocks a family's `charts` module draws with, the generic charts of a family
without one, and the history; each chart a PNG figure for the HTML page."""

from __future__ import annotations

import base64
import io
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType

import matplotlib

matplotlib.use("Agg")  # no display, no GUI toolkit: reports are built on headless boxes
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from suite.cases import FAMILIES, family_part
from suite.results import Machine
from suite.units import format_size

# Limits that keep a report of hundreds of machines readable and fast; the tables always list everything.
MAX_CHART_MACHINES = 8  # more bars/lines per group than this cannot be told apart by colour
MAX_BAR_CATEGORIES = 40  # a horizontal bar chart taller than about a screen stops being read
MAX_LINES_PER_AXES = 12  # beyond this, curves of one machine are summarised by their median
LOG_SCALE_SPAN = 30  # bars spanning more than this factor (CPU next to GPU) vanish on a linear axis
DPI = 100  # 1100 px wide figures: sharp on a laptop screen, ~50-150 KB each as PNG
WIDTH_IN = 11.0


@dataclass
class Chart:
    """One embedded figure: a title, the PNG as base64, and a caption saying what was left out."""

    title: str
    png_base64: str
    caption: str = ""


def safe_text(value: object) -> str:
    """A label safe for matplotlib: `$` would start mathtext, a leading `_` hides a legend entry."""
    text = str(value).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def figure_chart(title: str, fig: Figure, caption: str = "") -> Chart:
    """A drawn figure as a Chart; every chart goes through here and _png, which tests swap to read figures."""
    return Chart(title, _png(fig), caption)


def palette(n: int) -> list:
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def grouped_barh(
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
        categories, series, spread = _first_categories(categories, series, spread)
    n_series = max(1, len(series))
    bar_h = 0.8 / n_series
    height = max(2.2, 0.8 + len(categories) * max(0.3, 0.12 * n_series))
    fig = Figure(figsize=(WIDTH_IN, height))
    ax = fig.add_subplot()
    y = np.arange(len(categories))
    labelled = annotate if annotate and n_series * len(categories) <= 60 else None
    for i, ((name, values), color) in enumerate(zip(series.items(), palette(n_series))):
        vals = _zeroed(values)
        pos = y - 0.4 + bar_h * (i + 0.5)
        ax.barh(pos, vals, height=bar_h * 0.92, color=color, label=safe_text(name))
        ends = _whiskers(ax, pos, vals, spread[name]) if spread and name in spread else vals
        if labelled:
            _label_bars(ax, pos, vals, ends, labelled)
    ax.set_yticks(y, [safe_text(c) for c in categories], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(_log_x(ax, xlabel) if _wants_log(series, log) else xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    if len(series) > 1:  # above the bars, so it never hides one
        ax.legend(
            fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=min(3, n_series), frameon=False
        )
    return figure_chart(title, fig, caption)


def _first_categories(categories: list[str], series: dict[str, list[float]],
                      spread: dict[str, tuple[list[float], list[float]]] | None) -> tuple[list, dict, dict]:
    """The first MAX_BAR_CATEGORIES groups of every series and spread."""
    return (categories[:MAX_BAR_CATEGORIES], {k: v[:MAX_BAR_CATEGORIES] for k, v in series.items()},
            {k: (lo[:MAX_BAR_CATEGORIES], hi[:MAX_BAR_CATEGORIES]) for k, (lo, hi) in (spread or {}).items()})


def _label_bars(ax, pos: np.ndarray, vals: np.ndarray, ends: np.ndarray,
                annotate: Callable[[float], str]) -> None:
    for p, v, end in zip(pos, vals, ends):
        if v > 0:
            ax.text(end, p, " " + annotate(v), va="center", fontsize=7)


def _zeroed(values: list[float]) -> np.ndarray:
    """Bar lengths: a missing value (None, NaN) draws no bar."""
    return np.array([v if v is not None and not math.isnan(v) else 0.0 for v in values])


def _whiskers(ax, pos: np.ndarray, vals: np.ndarray, spread: tuple[list[float], list[float]]) -> np.ndarray:
    """Draw a series' (low, high) whiskers where they differ; each bar's label goes at its whisker's end."""
    lo, hi = (_zeroed(side) for side in spread)
    whisker = (hi > lo) & (vals > 0)
    if not whisker.any():
        return vals
    below, above = vals[whisker] - lo[whisker], hi[whisker] - vals[whisker]
    ax.errorbar(vals[whisker], pos[whisker], xerr=[below, above], fmt="none", ecolor="#333",
                elinewidth=0.8, capsize=2)
    return np.where(whisker, hi, vals)


def _wants_log(series: dict[str, list[float]], log: bool) -> bool:
    """Asked for, or values spanning more than LOG_SCALE_SPAN; never a log axis of nothing."""
    positive = [v for vals in series.values() for v in vals if v is not None and v > 0]
    return bool(positive) and (log or max(positive) / min(positive) > LOG_SCALE_SPAN)


def _log_x(ax, xlabel: str) -> str:
    """A log x axis with plain numbers (0.5, 2, 40 read faster than 5×10⁻¹); minor ticks stay unlabelled."""
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    return xlabel + ("" if "log" in xlabel else " (log scale)")


def bars_by(
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


def count_text(value: object) -> str:
    """A whole-number parameter (an int, or a float in a column with gaps) as text; `?` where absent."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return "?" if math.isnan(value) else f"{int(value)}"
    return "?"


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
    cats, series = bars_by(rows, machines, category, "tflops")
    chart = grouped_barh(cats, series, "TFLOP/s", title, annotate=lambda v: f"{v:.3g}")
    chart.caption = " ".join(filter(None, [caption, chart.caption]))
    return [chart]


def curve_panel(
    ax,
    rows: pd.DataFrame,
    color_key: str,
    style_key: str | None,
    x: str,
    y: str,
    colors: dict[str, object],
    styles: dict[str, str],
    marker_key: str | None = None,
    markers: dict[str, str] | None = None,
) -> None:
    """One line per (colour, style, marker) group, against a log2 size axis; `styles` maps a style_key value
    to its dash pattern (dotted where it has none)."""
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


def figure_legend(fig: Figure, colors: dict[str, object], extra: list | None = None) -> None:
    """One legend above all panels: a colour per line name, then `extra` handles (a chart's own styles and
    markers)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, linewidth=2, label=safe_text(name)) for name, c in colors.items()]
    handles += extra or []
    fig.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.01, 1.0),
        ncol=min(3, len(handles)),
        fontsize=8,
        frameon=False,
    )


def panels(n: int, row_height: float) -> tuple[Figure, int, int]:
    ncols = min(2, n)
    nrows = math.ceil(n / ncols)
    return Figure(figsize=(WIDTH_IN, row_height * nrows)), nrows, ncols


def generic_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """Fallback: the derived rate if the family has one, else the median time."""
    if rows["tflops"].notna().any():
        return tflops_bars(rows, machines)
    label = rows["device"].fillna("").astype(str)
    category = (label + " " + rows["name"]).str.strip() if rows["device"].notna().any() else rows["name"]
    if rows["metric"].notna().any():
        unit = rows["metric_unit"].dropna().iloc[0]
        cats, series = bars_by(rows, machines, category, "metric")
        return [grouped_barh(cats, series, unit, f"Throughput, {unit} (higher is better)")]
    cats, series = bars_by(rows.assign(us=rows["median"] * 1e6), machines, category, "us")
    return [
        grouped_barh(cats, series, "median time, µs (log scale; lower is better)", "Median time", log=True)
    ]


def family_charts(case: str) -> ModuleType | None:
    """A family's `charts` module, or None (another tool's results, a family without one). It holds CHARTS,
    functions (rows, machines to chart) -> list[Chart], and where the family has tables of its own, TABLES,
    functions (rows) -> Table or None."""
    return family_part(case, "charts") if case in FAMILIES else None


def chart_machines(
    labels: list[str], runs: Mapping[str, Machine], limit: int = MAX_CHART_MACHINES
) -> list[str]:
    """At most `limit` of `labels` (baseline first) to chart, every GPU model first: one run of each model in
    the order they come, then a second of each, and so on; within a model, one run of each launch (one
    process, torchrun N ranks) before a second of any. In that order, so a chart that keeps fewer (a matrix
    per machine) still shows different GPUs. The first `limit` in file order were identical 8-GPU nodes that
    crowded every other kind out."""
    if len(labels) <= limit:
        return list(labels)
    by_gpu: dict[str, list[tuple[int, str]]] = {}
    launches: Counter = Counter()
    for label in labels:
        run = runs.get(label)
        gpu, launch = (run.gpu_model, run.launch) if run is not None else (label, "")
        by_gpu.setdefault(gpu, []).append((launches[gpu, launch], label))
        launches[gpu, launch] += 1
    queues = [[label for _, label in sorted(members, key=lambda m: m[0])] for members in by_gpu.values()]
    picked: list[str] = []
    for depth in range(max(map(len, queues))):
        picked += [queue[depth] for queue in queues if depth < len(queue)]
    return picked[:limit]


def charts_for(case: str, rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """The charts of one family, drawn for at most MAX_CHART_MACHINES machines (baseline first); pick them
    with chart_machines to cover every GPU model. Invalid results are left out (the table shows them)."""
    rows = rows[rows["invalid"] == ""]
    shown = [m for m in machines if (rows["label"] == m).any()][:MAX_CHART_MACHINES]
    rows = rows[rows["label"].isin(shown)]
    if rows.empty:
        return []
    charts = []
    for draw in getattr(family_charts(case), "CHARTS", [generic_bars]):
        charts.extend(draw(rows, shown))
    return charts


MAX_HISTORY_MACHINES = 8  # lines per family panel, as for the other charts


def _history_series(loaded) -> list[tuple[str, list, pd.DataFrame]]:
    """(legend name, runs oldest first, speeds relative to the first run) of each machine with two or more
    runs of one tool and launch."""
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
    return series


def history_charts(loaded) -> list[Chart]:
    """Per family, each machine's geometric-mean speed over its runs, relative to its first run.

    Only machines (same identity: host, GPUs, driver) with two or more runs of one tool and launch are drawn,
    as results.latest_runs groups them: a node's torchrun job shares no benchmark with its
    single-process runs, so among them it was a run with no point, and alone a legend entry with no line.
    """
    series = _history_series(loaded)
    if not series:
        return []
    # The machines whose latest run moved furthest from their first (in any family) first: a fleet's
    # history is about the ones that changed, not the first eight by name.
    def moved(entry) -> float:
        _, ms, speed = entry
        latest = speed[speed["label"] == ms[-1].label]["speed"]
        logs = [abs(math.log(v)) for v in latest if isinstance(v, float) and v > 0]
        return max(logs, default=0.0)

    shown = sorted(sorted(series, key=moved, reverse=True)[:MAX_HISTORY_MACHINES], key=series.index)
    families = sorted({c for _, _, speed in shown for c in speed["case"]})
    if not families:
        return []
    fig, nrows, ncols = panels(len(families), 3.0)
    colors = dict(zip([s[0] for s in shown], palette(len(shown))))
    for i, case in enumerate(families):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for identity, ms, speed in shown:
            mine = speed[speed["case"] == case]
            if mine.empty:  # none of its runs measured this family again: a lone 1.0 at run 1 says nothing
                continue
            by_label = dict(zip(mine["label"], mine["speed"]))
            speeds = [1.0] + [by_label.get(m.label, math.nan) for m in ms[1:]]
            ax.plot(range(1, len(ms) + 1), speeds, marker="o", markersize=3, color=colors[identity])
        ax.axhline(1.0, color="#999", linewidth=0.8)
        ax.set_title(safe_text(case), fontsize=10, loc="left")
        ax.set_xlabel("run (1 = oldest)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # runs are counted
        ax.set_ylabel("× first run")
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    figure_legend(fig, colors)
    caption = "Geometric mean over the benchmarks each run shares with the machine's first run; above 1: faster."
    if len(series) > len(shown):
        caption += (f" The {len(shown)} of {len(series)} machines with history whose latest run moved furthest "
                    "from their first.")
    return [figure_chart("History: speed per family against each machine's first run", fig, caption)]
