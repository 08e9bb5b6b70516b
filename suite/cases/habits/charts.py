"""The habits family's report: each habit's slow way against its fix, as bars and as a table."""

from __future__ import annotations

import math

import pandas as pd

from suite.cases.habits.read import verdict
from suite.report.charts import Chart, bars_by, grouped_barh
from suite.report.tables import Table, format_time


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
        roles = dict(zip(g["role"], g["variant"].astype(str))) if "role" in g else {}
        if {"slow", "fast"} <= set(roles):  # the habit and its fix as measured: the slow way may come out ahead
            slow, fast = roles["slow"], roles["fast"]
        elif "slow" in by_variant and "fast" in by_variant:
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
    cats, series = bars_by(pairs, machines, category, "ratio")
    return [
        grouped_barh(
            cats,
            series,
            "× slower (slow variant time / fast variant time, log scale)",
            "Habits: the cost of the slow way",
            log=True,
            annotate=lambda v: verdict(v, lambda r: f"{r:.2g}×"),
        )
    ]


def habit_table(rows: pd.DataFrame) -> Table | None:
    """Habit pairs as text: machine, habit, slow variant, fast variant, times, `N× slower` (or faster, said to
    be unexpected)."""
    pairs = habit_pairs(rows)
    if pairs.empty:
        return None
    lines = [
        [p.label, str(p.habit), str(p.slow), str(p.fast),
         f"{format_time(p.slow_median)} vs {format_time(p.fast_median)}",
         verdict(p.ratio, lambda r: f"{r:.3g}×")]
        for p in pairs.itertuples(index=False)
    ]
    columns = ["machine", "habit", "slow way", "fast way", "median times", "cost"]
    return Table("habits", columns, lines, words=4, strong=5)


CHARTS = [habit_bars]
TABLES = [habit_table]
