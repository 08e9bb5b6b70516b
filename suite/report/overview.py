"""The report's first screen: per machine, each family's headline figure, its share of ceiling, datasheet."""

from __future__ import annotations

import pandas as pd

from suite.cases import FAMILIES
from suite.health.expect import measures, taken_from
from suite.report.tables import SHARES, against_text, format_rate
from suite.results import FOREIGN_CASE, RATE_UNITS, like_ours, route_kinds


_SHOWN = ("metric_unit", "name", "case", *SHARES)  # what a figure is made of


def _best(rows: pd.DataFrame, rate: str, what: str, unit: str | None = None) -> dict[str, dict]:
    """Per machine, its row of `rows` of the highest `rate`, as a figure: what, value, against, benchmark."""
    rows = rows[rows[rate] > 0] if rate in rows else rows.iloc[:0]
    best = rows.loc[rows.groupby("label", sort=False)[rate].idxmax()] if not rows.empty else rows
    return {r["label"]: {"what": what, "value": format_rate(r[rate], unit or r["metric_unit"]),
                         "benchmark": r["name"], "family": r["case"],
                         "against": against_text(r)}
            for r in best[list(dict.fromkeys(["label", rate, *_SHOWN]))].to_dict("records")}


def headlines(table: pd.DataFrame, labels: list[str], status_of: dict[str, str]) -> list[dict]:
    """Per machine (in `labels` order): its health and headline figures, families in registry order: the best
    result of each measure the families declare, and for a family none of whose measures it ran, its best
    rate (a CPU's float32 matmul)."""
    rows = like_ours(table[(table["invalid"] == "") & (table["case"] != FOREIGN_CASE)])
    dtype = rows.get("dtype", pd.Series(None, index=rows.index, dtype=object))
    precision = rows["precision"].fillna(dtype) if "precision" in rows else dtype
    rows = rows.assign(route_=route_kinds(rows["src"], rows["dst"]), precision_=precision)
    wanted = {"label", "metric", *_SHOWN, *RATE_UNITS, *(k for m in measures().values() for k, _ in m.where)}
    rows = rows[[c for c in rows.columns if c in wanted or c.endswith("_")]]  # narrow: a fleet filters fast
    figures: dict[str, list[dict]] = {label: [] for label in labels}
    covered: dict[str, set[str]] = {label: set() for label in labels}
    for name, measure in measures().items():
        for label, figure in _best(rows[taken_from(rows, measure)], measure.rate, name.replace("_", " "),
                                   measure.unit).items():
            figures[label].append(figure | {"family": measure.families[0]})
            covered[label] |= set(measure.families)
    for family in FAMILIES:
        for label, figure in _best(rows[rows["case"] == family], "metric", f"{family} best").items():
            if family not in covered[label]:
                figures[label].append(figure)
    order = {family: i for i, family in enumerate(FAMILIES)}
    return [{"label": label, "health": status_of.get(label, "not judged (older run)"),
             "figures": sorted(figures[label], key=lambda f: order.get(f["family"], len(order)))}
            for label in labels]
