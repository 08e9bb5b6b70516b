"""compare's judging: a verdict per benchmark from two runs' times and noise, per machine pair, exit code."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from suite.results import benchmark_keys

# A change counts only if the medians differ by more than this share of the two IQRs added together:
# with 0.5, the middle halves (q1..q3) of the two runs' rounds must not overlap (for symmetric spreads),
# so run-to-run noise of a busy machine is not reported as a regression.
NOISE_IQR_SHARE = 0.5
# Fewer rounds than this on either side and the quartiles are no estimate of the noise (pytest-benchmark's own
# default min_rounds is 5): such a benchmark is "not judged" rather than called a regression.
MIN_ROUNDS_TO_JUDGE = 5
# The IQR sees the spread within one run, not between runs (clocks, placement in memory, a neighbour's load in
# phases): where the baseline folder holds HISTORY_MIN_RUNS or more runs of a machine, a change that stays
# inside the range its latest HISTORY_RUNS runs showed for that benchmark is no regression (or improvement).
# Five runs: enough to see a machine's usual spread, few enough that one odd run long ago does not hide a
# real slowdown for ever.
HISTORY_RUNS = 5
HISTORY_MIN_RUNS = 3
# "missing": measured by the baseline, absent from the candidate (a crash, a skip, a narrower config). It
# fails the gate like a regression unless --allow-missing says the subset is deliberate: a run that measured
# less must never pass for one that measured the same and was as fast.
STATUS_ORDER = ("regression", "improvement", "unchanged", "not judged", "missing", "only in candidate")
# Rates per watt (suite.telemetry's perf_per_w): higher is better, unlike the time statistics. Judged as their
# inverse, the energy one unit of work took, so one rule serves both; their noise is the time's IQR share.
HIGHER_IS_BETTER = ("perf_per_w",)
# The note of a row whose metric one side did not record (a run without telemetry): "not judged", and not
# counted as compared, so a gate on a figure nobody recorded passes nothing.
UNRECORDED = "not recorded: "
# --changed-only lists every row but these (the counts stay whole), so a comparison fits a PR comment.
QUIET_STATUSES = ("unchanged",)


@dataclass
class Row:
    """One benchmark's verdict."""

    status: str
    case: str
    benchmark: str
    baseline: float = math.nan
    candidate: float = math.nan
    ratio: float = math.nan  # candidate time / baseline time: above 1 is slower
    change_pct: float = math.nan
    noise: float = math.nan  # half the summed IQRs, in seconds: the smallest difference taken as real
    # Beyond threshold and noise, but inside the range of the baseline machine's own latest runs: "unchanged",
    # and this says so ("within 5 baseline runs' range").
    note: str = ""
    # Why either side's result is invalid ("candidate: NaN median"): a number missing, not finite, zero or
    # negative (the table's `invalid`). Such a row is "not judged"; an invalid candidate result where the
    # baseline's was valid, or that only the candidate has, fails the gate like a regression.
    invalid: str = ""


def classify(base_time: float, cand_time: float, base_iqr: float, cand_iqr: float, threshold: float) -> str:
    """regression / improvement / unchanged: beyond the threshold AND beyond the combined noise."""
    ratio = cand_time / base_time
    noise = NOISE_IQR_SHARE * (_zero(base_iqr) + _zero(cand_iqr))
    beyond_noise = abs(cand_time - base_time) > noise
    if ratio > 1 + threshold and beyond_noise:
        return "regression"
    if ratio < 1 - threshold and beyond_noise:
        return "improvement"
    return "unchanged"


def _zero(value: float) -> float:
    return 0.0 if value is None or math.isnan(value) else value


def history_ranges(history: pd.DataFrame, metric: str, device_map: dict[str, str] | None = None
                   ) -> dict[str, tuple[float, float, int]]:
    """benchmark key -> (lowest, highest `metric`, how many runs measured it) over the baseline's runs."""
    if history.empty:
        return {}
    keyed = history.assign(_key=benchmark_keys(history, device_map))
    keyed = keyed[(keyed[metric] > 0) & (keyed["invalid"] == "")]
    grouped = keyed.groupby("_key").agg(low=(metric, "min"), high=(metric, "max"), runs=("label", "nunique"))
    return {key: (float(r.low), float(r.high), int(r.runs)) for key, r in zip(grouped.index,
                                                                               grouped.itertuples())}


def _by_key(table: pd.DataFrame, keys: pd.Series, columns: list[str]) -> dict[str, dict]:
    return table.assign(_key=keys).drop_duplicates("_key").set_index("_key")[columns].to_dict("index")


def _row(b: dict, c: dict, metric: str, threshold: float, span: tuple[float, float, int]) -> Row:
    """One benchmark both sides ran: its verdict, "unchanged" inside `span`, the (lowest, highest, runs) of
    the baseline machine's latest runs."""
    if b["invalid"] or c["invalid"]:
        why = "; ".join(f"{side}: {r['invalid']}" for side, r in (("baseline", b), ("candidate", c))
                        if r["invalid"])
        return Row("not judged", b["case"], c["name"], b[metric], c[metric], invalid=why)
    if metric in HIGHER_IS_BETTER:
        return _per_watt_row(b, c, metric, threshold, span)
    noise = NOISE_IQR_SHARE * (_zero(b["iqr"]) + _zero(c["iqr"]))
    ratio = c[metric] / b[metric] if b[metric] > 0 and c[metric] > 0 else math.nan
    # No positive time on one side, or too few rounds: nothing to judge.
    judged = not math.isnan(ratio) and not _few(b, c)
    status = classify(b[metric], c[metric], b["iqr"], c["iqr"], threshold) if judged else "not judged"
    status, note = _steady(status, c[metric], span)
    return Row(status, b["case"], c["name"], b[metric], c[metric], ratio, (ratio - 1) * 100, noise, note)


def _few(b: dict, c: dict) -> bool:
    return min(_zero(b["rounds"]), _zero(c["rounds"])) < MIN_ROUNDS_TO_JUDGE


def _steady(status: str, value: float, span: tuple[float, float, int]) -> tuple[str, str]:
    """A change inside the (lowest, highest, runs) of the baseline machine's latest runs is "unchanged"."""
    low, high, runs = span
    if status in ("regression", "improvement") and runs >= HISTORY_MIN_RUNS and low <= value <= high:
        return "unchanged", f"within {runs} baseline runs' range"
    return status, ""


def _numeric(table: pd.DataFrame | None, column: str) -> pd.DataFrame | None:
    return table if table is None else table.assign(**{column: pd.to_numeric(table[column], errors="coerce")})


def _per_watt_row(b: dict, c: dict, metric: str, threshold: float, span: tuple[float, float, int]) -> Row:
    """A rate per watt: `ratio` is baseline / candidate (above 1 is worse, as for times); a side without it
    is not judged."""
    absent = [side for side, r in (("baseline", b), ("candidate", c)) if not _zero(r[metric]) > 0]
    if absent:
        return Row("not judged", b["case"], c["name"], b[metric], c[metric],
                   note=f"{UNRECORDED}{metric} ({' and '.join(absent)})")

    def energy(r: dict) -> tuple[float, float]:  # per unit of work, its noise the time's IQR share
        return 1 / r[metric], (_zero(r["iqr"]) / r["median"] / r[metric] if r["median"] > 0 else 0.0)

    (b_cost, b_noise), (c_cost, c_noise) = energy(b), energy(c)
    status = "not judged" if _few(b, c) else classify(b_cost, c_cost, b_noise, c_noise, threshold)
    status, note = _steady(status, c[metric], span)
    ratio = b[metric] / c[metric]
    return Row(status, b["case"], c["name"], b[metric], c[metric], ratio, (ratio - 1) * 100, note=note)


def compare_tables(base: pd.DataFrame, cand: pd.DataFrame, metric: str, threshold: float,
                   device_map: dict[str, str], thresholds: dict[str, float], history: pd.DataFrame | None
                   ) -> list[Row]:
    """Match benchmarks by (case, parameters with devices mapped), or fullname for foreign files, and judge.

    `thresholds` overrides `threshold` per family; a benchmark with fewer than MIN_ROUNDS_TO_JUDGE rounds on
    either side is "not judged". `history`: rows of the baseline machine's latest runs (Side.history), whose
    range bounds what counts as a change.
    """
    if metric in HIGHER_IS_BETTER:  # a telemetry column none of a run's results recorded holds None
        base, cand, history = (_numeric(t, metric) for t in (base, cand, history))
    ranges = history_ranges(history, metric, device_map) if history is not None else {}
    # Plain dicts of the five columns read: iterrows over the whole table (dozens of columns) and a .loc per
    # row took most of a folder compare's time (about 0.5-1 s per machine pair at a full run's size).
    columns = list(dict.fromkeys(["case", "name", metric, "median", "iqr", "rounds", "invalid"]))

    base_rows = _by_key(base, benchmark_keys(base, device_map), columns)
    cand_rows = _by_key(cand, benchmark_keys(cand), columns)
    rows = []
    for key, b in base_rows.items():
        c = cand_rows.get(key)
        if c is None:
            rows.append(Row("missing", b["case"], b["name"], b[metric]))
            continue
        rows.append(_row(b, c, metric, thresholds.get(b["case"], threshold),
                         ranges.get(key, (math.nan, math.nan, 0))))
    for key, c in cand_rows.items():
        if key not in base_rows:
            rows.append(Row("only in candidate", c["case"], c["name"], candidate=c[metric],
                            invalid=f"candidate: {c['invalid']}" if c["invalid"] else ""))
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    # Worst regressions and best improvements first within their section.
    rows.sort(key=lambda r: (order[r.status], -abs(r.change_pct) if not math.isnan(r.change_pct) else 0))
    return rows


@dataclass
class Pair:
    """One machine pair's verdicts, and whether either side is a partial run (its partial file, else "")."""

    base_label: str
    cand_label: str
    rows: list[Row]
    base_partial: str = ""
    cand_partial: str = ""
    base_launch: str = ""
    cand_launch: str = ""

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    @property
    def invalid(self) -> list[Row]:
        """Rows whose candidate result is invalid where the baseline's was valid or absent: they fail the
        gate."""
        return [r for r in self.rows if r.invalid.startswith("candidate")]

    @property
    def counts(self) -> dict[str, int]:
        return {**{s: self.count(s) for s in STATUS_ORDER}, "invalid": len(self.invalid)}

    @property
    def compared(self) -> int:
        """Benchmarks of both sides whose results were both valid."""
        return sum(r.status not in ("missing", "only in candidate") and not r.invalid
                   and not r.note.startswith(UNRECORDED) for r in self.rows)

    def shown(self, changed_only: bool) -> list[Row]:
        return [r for r in self.rows if r.status not in QUIET_STATUSES] if changed_only else self.rows

    def verdict(self, allow_missing: bool) -> str:
        if not self.compared:
            return "nothing compared"
        failed = [s for s in ("regression", "invalid", "missing")
                  if self.counts[s] and not (s == "missing" and allow_missing)]
        if failed:
            return " + ".join(failed)
        return "pass (missing allowed)" if self.count("missing") else "pass"


def outcome(pairs: list[Pair], missing_machines: list[str], allow_missing: bool) -> tuple[int, str]:
    """The exit code and why: 2 nothing compared, 1 a regression or (without --allow-missing) something of
    the baseline missing, else 0."""
    if not sum(p.compared for p in pairs):
        return 2, _nothing_compared(pairs)
    absent = _absent(pairs, missing_machines)  # what of the baseline the candidate lacks
    allowed = ["; ".join(absent) + ", allowed by --allow-missing"] if absent and allow_missing else []
    failed = _failed(pairs) + ([] if allow_missing else absent)
    if failed:
        return 1, "; ".join(failed + allowed)
    compared = sum(p.compared for p in pairs)
    reason = f"no regression in {compared} benchmark(s) compared"
    reason += f" on {len(pairs)} machine pairs" if len(pairs) > 1 else ""
    return 0, "; ".join([reason] + allowed)


def _nothing_compared(pairs: list[Pair]) -> str:
    invalid = sum(bool(r.invalid) for p in pairs for r in p.rows)
    if invalid:
        return f"nothing valid was compared: {invalid} benchmark(s) with an invalid result on a side"
    unrecorded = sum(r.note.startswith(UNRECORDED) for p in pairs for r in p.rows)
    if unrecorded:
        return (f"nothing was judged: {unrecorded} benchmark(s) in common lack the metric on a side "
                "(recorded only where the platform gives power: see docs/reports.md)")
    return "no benchmark of the baseline is in the candidate: nothing was compared"


def _on(pairs: list[Pair], status: str) -> str:
    """' on 2 of 3 machine pairs': how many pairs had `status`, where there are several."""
    hit = sum(1 for p in pairs if p.counts[status])
    return f" on {hit} of {len(pairs)} machine pairs" if len(pairs) > 1 else ""


def _failed(pairs: list[Pair]) -> list[str]:
    regressions = sum(p.count("regression") for p in pairs)
    invalid = sum(len(p.invalid) for p in pairs)
    failed = [f"{regressions} regression(s){_on(pairs, 'regression')}"] if regressions else []
    failed += [f"{invalid} invalid result(s) in the candidate{_on(pairs, 'invalid')}"] if invalid else []
    return failed


def unfinished_runs(pairs: list[Pair]) -> tuple[list[Pair], int, str]:
    """The candidate runs that stopped before measuring all of the baseline, what they miss, and in words."""
    found = [p for p in pairs if p.cand_partial and p.count("missing")]
    runs = "a candidate run" if len(found) == 1 else f"{len(found)} candidate runs"
    return found, sum(p.count("missing") for p in found), runs


def _absent(pairs: list[Pair], missing_machines: list[str]) -> list[str]:
    """What of the baseline the candidate lacks: it fails, unless --allow-missing."""
    missing = sum(p.count("missing") for p in pairs)
    absent = []
    if missing:
        _, n, runs = unfinished_runs(pairs)
        why = f", {'' if n == missing else f'{n} of them '}from {runs} that did not finish" if n else ""
        absent.append(f"{missing} benchmark(s) of the baseline missing{_on(pairs, 'missing')}{why}")
    if missing_machines:
        absent.append(f"{len(missing_machines)} machine(s) of the baseline missing")
    return absent
