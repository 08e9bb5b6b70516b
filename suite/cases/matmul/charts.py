"""The matmul family's report chart and table: TFLOP/s (TOPS for int8) per device, precision and shape, and each
precision's best with % of ceiling and datasheet (a matmul result without a rate draws nothing rather than the
generic median times)."""

from __future__ import annotations

import pandas as pd

from suite.report.charts import tflops_bars
from suite.report.tables import Table


def _with_units(rows: pd.DataFrame) -> pd.DataFrame:
    """Precisions whose rate is not TFLOP/s named with their unit ('int8 (TOPS)'): one axis holds them all."""
    if "unit" not in rows or "precision" not in rows:
        return rows
    named = rows["precision"].astype(str) + " (" + rows["unit"].astype(str) + ")"
    return rows.assign(precision=rows["precision"].where(rows["unit"].isna(), named))


def matmul_bars(rows: pd.DataFrame, machines: list[str]) -> list:
    return tflops_bars(_with_units(rows), machines)


def precision_table(rows: pd.DataFrame) -> Table | None:
    """Per run, device and precision: the best rate and its % of ceiling and datasheet."""
    if "tflops" not in rows or "precision" not in rows:
        return None
    rows = rows[rows["tflops"].notna() & rows["precision"].notna()]
    if rows.empty:
        return None
    best = rows.loc[rows.groupby(["label", "device", "precision"], sort=False)["tflops"].idxmax()]
    unit = best["unit"] if "unit" in best else pd.Series(float("nan"), index=best.index)

    def pct(r, key: str) -> str:
        value = r.get(key)
        return f"{value:.0f}%" if isinstance(value, float) and value == value else ""

    lines = [[str(r["label"]), str(r["device"]), str(r["precision"]),
              f"{r['tflops']:.3g} {u if isinstance(u, str) else 'TFLOP/s'}",
              pct(r, "pct_of_ceiling"), pct(r, "pct_of_datasheet")]
             for (_, r), u in zip(best.iterrows(), unit)]
    return Table("precisions", ["machine", "device", "precision", "best rate", "% of ceiling", "% of datasheet"],
                 lines, words=3, explain="Each precision's best matmul (int8 in TOPS: integer operations).")


CHARTS = [matmul_bars]
TABLES = [precision_table]
