"""The report's first screen: per machine, each family's headline figure, its share of ceiling and datasheet."""

from __future__ import annotations

import pandas as pd

from suite.cases import FAMILIES
from suite.health.expect import measures
from suite.report.tables import against_text, format_rate
from suite.results import FOREIGN_CASE, like_ours, route_kinds


def _best(rows: pd.DataFrame, rate: str, what: str, unit: str | None = None) -> dict | None:
    """The row of `rows` with the highest `rate`, as a figure: what, value, against, benchmark."""
    rows = rows[rows[rate] > 0] if rate in rows else rows.iloc[:0]
    if rows.empty:
        return None
    row = rows.loc[rows[rate].idxmax()]
    return {"what": what, "value": format_rate(row[rate], unit or row["metric_unit"]), "benchmark": row["name"],
            "against": against_text(row.get("pct_of_ceiling"), row.get("pct_of_datasheet")), "family": row["case"]}


def _measured(rows: pd.DataFrame) -> tuple[list[dict], set[str]]:
    """The best result of each measure the families declare (health's: bf16 matmul, h2d, all-reduce busbw),
    at any size (health judges only large ones; a summary shows what ran); the families they cover."""
    figures, covered = [], set()
    for name, measure in measures().items():
        mask = rows["case"].isin(measure.families)
        if measure.route:
            mask &= rows["route_"] == measure.route
        for key, wanted in measure.where:
            column = "precision_" if key == "precision" else key
            mask &= rows[column] == wanted if column in rows else False
        figure = _best(rows[mask], measure.rate, name.replace("_", " "), measure.unit)
        if figure:
            figures.append(figure | {"family": measure.families[0]})
            covered |= set(measure.families)
    return figures, covered


def headlines(table: pd.DataFrame, labels: list[str], status_of: dict[str, str]) -> list[dict]:
    """Per machine (in `labels` order): its health and headline figures, families in registry order; a
    family none of whose measures it ran shows its best rate (a CPU's float32 matmul)."""
    rows = like_ours(table[(table["invalid"] == "") & (table["case"] != FOREIGN_CASE)])
    none = pd.Series(None, index=rows.index, dtype=object)
    precision = rows["precision"].fillna(rows.get("dtype", none)) if "precision" in rows else rows.get("dtype", none)
    rows = rows.assign(route_=route_kinds(rows["src"], rows["dst"]), precision_=precision)
    order = {family: i for i, family in enumerate(FAMILIES)}
    out = []
    for label in labels:
        mine = rows[rows["label"] == label]
        figures, covered = _measured(mine)
        for family in [f for f in FAMILIES if f not in covered]:
            figure = _best(mine[mine["case"] == family], "metric", f"{family} best")
            figures += [figure] if figure else []
        out.append({"label": label, "health": status_of.get(label, "not judged (older run)"),
                    "figures": sorted(figures, key=lambda f: order.get(f["family"], len(order)))})
    return out
