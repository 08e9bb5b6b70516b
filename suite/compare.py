"""`python -m suite compare BASELINE CANDIDATE`: per-benchmark time ratios; exit 1 on a regression."""
# BASELINE and CANDIDATE may be folders: each machine's latest run, machines paired by identity.

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from suite.cases import FAMILIES, family_read
from suite.errors import UserError
from suite.report.tables import format_time
from suite.results import (
    FOREIGN_CASE,
    NOTHING_MEASURED,
    PARTIAL_SUFFIX,
    benchmark_keys,
    latest_runs,
    load_results,
    parse_label_args,
)

DEFAULT_THRESHOLD = "5%"
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
METRICS = ("median", "min", "mean")
FORMATS = ("text", "markdown", "csv", "json")
# "missing": measured by the baseline, absent from the candidate (a crash, a skip, a narrower config). It
# fails the gate like a regression unless --allow-missing says the subset is deliberate: a run that measured
# less must never pass for one that measured the same and was as fast.
STATUS_ORDER = ("regression", "improvement", "unchanged", "not judged", "missing", "only in candidate")
# --changed-only lists every row but these (the counts stay whole), so a comparison fits a PR comment.
QUIET_STATUSES = ("unchanged",)
MAX_INVALID_NAMED = 10  # invalid results named one per line on stderr; the rest counted
# A results file read from `<json>.partial.jsonl`: its run stopped (killed, crashed, Ctrl-C) or still runs.
PARTIAL_NOTE = "partial: the run did not finish"
_THRESHOLD_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%?\s*$")
_FAMILY_RE = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*=(.*)$")


def parse_threshold(value: str) -> float:
    """`"5%"` or `"5"` -> 0.05: the number is always a percentage; anything else is a UserError."""
    match = _THRESHOLD_RE.match(str(value))
    if not match:
        raise UserError(
            f"--threshold {value!r} is not a percentage; write e.g. 5% or 5 (both mean 5 percent)"
        )
    return float(match.group(1)) / 100.0


def parse_thresholds(values: list[str] | str | None) -> tuple[float, dict[str, float]]:
    """`["copy=10%", "5%"]` -> (0.05, {"copy": 0.10}): a default and per-family thresholds."""
    values = [values] if isinstance(values, str) else list(values or [])
    default, per_family = None, {}
    for value in values:
        family = _FAMILY_RE.match(str(value))
        if family:
            try:
                per_family[family.group(1)] = parse_threshold(family.group(2))
            except UserError:
                raise UserError(
                    f"--threshold {value!r}: {family.group(2).strip()!r} is not a percentage for family "
                    f"{family.group(1)!r}; write e.g. {family.group(1)}=10%"
                ) from None
        elif default is None:
            default = parse_threshold(value)
        else:
            raise UserError(
                f"--threshold {value!r}: a second default; write FAMILY=PCT for one family, e.g. copy=10%"
            )
    return (parse_threshold(DEFAULT_THRESHOLD) if default is None else default), per_family


def check_families(thresholds: dict[str, float], present: set[str]) -> None:
    """A per-family threshold names a family of the suite or of the results compared: a typo is an error."""
    known = set(FAMILIES) | {FOREIGN_CASE} | present
    for family in thresholds:
        if family not in known:
            raise UserError(
                f"--threshold {family}=...: no family {family!r}; use one of {', '.join(sorted(known))}"
            )


def emit(text: str) -> None:
    """Print to stdout; a reader that stops early (`| head`) ends the output quietly, not with a traceback."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the broken pipe again when it flushes stdout at exit: point stdout at devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def parse_device_map(values: list[str] | None) -> dict[str, str]:
    """`["cuda:0=cuda:1"]` -> `{"cuda:0": "cuda:1"}`: baseline device id = candidate device id."""
    mapping = {}
    for value in values or []:
        src, sep, dst = value.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise UserError(
                f"--map {value!r} is not BASELINE_DEVICE=CANDIDATE_DEVICE; write e.g. --map cuda:0=cuda:1"
            )
        mapping[src.strip()] = dst.strip()
    return mapping


@dataclass
class Row:
    """One benchmark's verdict."""

    status: str
    case: str
    benchmark: str
    baseline: float
    candidate: float
    ratio: float  # candidate time / baseline time: above 1 is slower
    change_pct: float
    noise: float  # half the summed IQRs, in seconds: the smallest difference taken as real
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


@dataclass
class Side:
    """One side's latest runs: (identity, tool, launch) -> (label, table), (node, tool, launch) of each, and
    the device ids its runs have (machine_info devices and the devices its benchmarks name)."""

    runs: dict[tuple[str, str, str], tuple[str, pd.DataFrame]]
    nodes: dict[tuple[str, str, str], tuple[str, str, str]]
    families: set[str]
    devices: set[str] = field(default_factory=set)
    hardware: dict[str, str] = field(default_factory=dict)  # label -> its accelerators ("2×NVIDIA H200")
    partial: dict[str, str] = field(default_factory=dict)  # label -> its partial file, for a run that stopped
    launches: dict[str, str] = field(default_factory=dict)  # label -> "torchrun 16 ranks on 2 nodes", or ""
    configs: dict[str, str] = field(default_factory=dict)  # label -> the config file its run recorded
    # key -> rows of that machine's latest HISTORY_RUNS runs (its latest included), where a folder holds
    # HISTORY_MIN_RUNS or more of them
    history: dict[tuple[str, str, str], pd.DataFrame] = field(default_factory=dict)


def _side(path: str, labels: dict[str, str], what: str) -> Side:
    """identity -> (label, table) of each machine's latest run; a file is its one machine.

    A latest run that measured nothing is a UserError: comparing it would pass a crashed run, and comparing
    the run before it would judge the wrong run.
    """
    loaded = load_results([path], labels=labels)
    warnings = list(loaded.warnings)
    latest = latest_runs(loaded.machines, warnings=warnings)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    runs, nodes, devices, hardware, partial, launches, configs = {}, {}, set(), {}, {}, {}, {}
    for label in latest:
        m = loaded.machines[label]
        hardware[label] = m.gpus
        launches[label] = m.launch
        configs[label] = m.config_path
        if m.partial:
            partial[label] = m.file
        if not m.n_benchmarks:
            raise UserError(
                f"{what} {m.file} {NOTHING_MEASURED}: nothing to compare; rerun it, or pass the run to judge"
            )
        key = (m.identity, m.tool, m.launch)
        # Of a benchmark recorded twice, an invalid result is the one kept: a gate never passes on the valid
        # twin of garbage.
        table = loaded.table[loaded.table["label"] == label]
        table = table.sort_values("invalid", ascending=False, kind="stable").drop_duplicates("match_key")
        table = table.sort_index()
        runs[key] = (label, table)
        nodes[key] = (m.node, m.tool, m.launch)
        devices |= {str(d["id"]) for d in m.devices if d.get("id")}
        for column in ("device", "src", "dst"):
            devices |= {v for v in table[column] if isinstance(v, str)}
    families = set(loaded.table["case"].unique())
    history = {}
    by_machine: dict[tuple[str, str, str], list] = {}
    for m in loaded.machines.values():
        by_machine.setdefault((m.identity, m.tool, m.launch), []).append(m)
    for key, ms in by_machine.items():
        if key in runs and len(ms) >= HISTORY_MIN_RUNS:
            # Ordered as latest_runs orders them: the newest HISTORY_RUNS, the one compared among them.
            labels = [m.label for m in sorted(ms, key=lambda m: (m.datetime, Path(m.file).name, m.file))]
            kept = labels[-HISTORY_RUNS:]
            history[key] = loaded.table[loaded.table["label"].isin(kept)].drop_duplicates(["label", "match_key"])
    return Side(runs, nodes, families, devices, hardware, partial, launches, configs, history)


def resume_command(partial_file: str, config_path: str) -> str:
    """How to finish a partial run: the same results file and config, with --suite-resume."""
    stem = partial_file[: -len(PARTIAL_SUFFIX)] if partial_file.endswith(PARTIAL_SUFFIX) else ""
    done = f"{stem}.json" if stem else "FILE.json"
    config = f" --suite-config {config_path}" if config_path else ""
    return f"pytest benchmarks{config} --benchmark-json {done} --suite-resume"


def stopped_in(partial_file: str) -> str:
    """The benchmark a partial run was measuring when it stopped: the last test it started and did not finish
    (suite.partial's `started`/`finished` lines), "" if it stopped between tests or the file is unreadable."""
    last = ""
    try:
        with open(partial_file, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                head = line[:16]
                if '"started"' not in head and '"finished"' not in head:
                    continue  # a benchmark line (or the header): large, and not about progress
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and "started" in entry:
                    last = str(entry["started"])
                elif isinstance(entry, dict) and entry.get("finished") == last:
                    last = ""
    except OSError:
        return ""
    return last.rpartition("::")[2]


def check_device_map(device_map: dict[str, str], base: Side, cand: Side) -> None:
    """Each --map names a baseline device the baseline has and a candidate device the candidate has."""
    for src, dst in device_map.items():
        for what, device, side in (("baseline", src, base), ("candidate", dst, cand)):
            if device not in side.devices:
                raise UserError(
                    f"--map {src}={dst}: the {what} has no device {device} (it has: "
                    f"{', '.join(sorted(side.devices)) or 'none named'}); write --map "
                    "BASELINE_DEV=CANDIDATE_DEV with devices of the two runs"
                )


def pair_sides(
    base: Side, cand: Side, base_path: str, cand_path: str
) -> tuple[list[tuple[tuple, tuple]], list[str], list[str]]:
    """Pairs of (label, table), the labels of baseline machines the candidate lacks and those of candidate
    machines the baseline lacks: one file against one file as given; folders by machine identity.

    A machine whose driver changed keeps its host and GPUs: it is paired by those, with a warning. Machines
    on one side only are listed in a warning, never dropped silently.
    """
    if len(base.runs) == 1 and len(cand.runs) == 1:
        return [(next(iter(base.runs.values())), next(iter(cand.runs.values())))], [], []
    common = sorted(base.runs.keys() & cand.runs.keys())
    pairs = [(base.runs[k], cand.runs[k]) for k in common]
    rest_base = [k for k in sorted(base.runs) if k not in cand.runs]
    rest_cand = [k for k in sorted(cand.runs) if k not in base.runs]
    by_node = {}
    for k in rest_cand:
        by_node.setdefault(cand.nodes[k], []).append(k)
    for k in list(rest_base):
        found = by_node.get(base.nodes[k], [])
        if len(found) == 1 and sum(base.nodes[b] == base.nodes[k] for b in rest_base) == 1:
            other = found[0]
            print(
                f"warning: {base.runs[k][0]} paired with {cand.runs[other][0]}: same host and GPUs, "
                f"another driver ({k[0]} -> {other[0]})",
                file=sys.stderr,
            )
            pairs.append((base.runs[k], cand.runs[other]))
            rest_base.remove(k)
            rest_cand.remove(other)
    for what, rest, side in (("baseline", rest_base, base), ("candidate", rest_cand, cand)):
        if rest:
            names = ", ".join(side.runs[k][0] for k in rest)
            print(f"warning: machine(s) only in the {what}, not compared: {names}", file=sys.stderr)
    if not pairs:
        raise UserError(
            f"no machine of {base_path} ({len(base.runs)} machine(s)) is in {cand_path} ({len(cand.runs)}): "
            "machines are paired by host and GPUs; pass two files to compare different machines"
        )
    return (sorted(pairs, key=lambda p: p[0][0]), [base.runs[k][0] for k in rest_base],
            [cand.runs[k][0] for k in rest_cand])


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


def compare_tables(
    base: pd.DataFrame,
    cand: pd.DataFrame,
    metric: str = "median",
    threshold: float = 0.05,
    device_map: dict[str, str] | None = None,
    thresholds: dict[str, float] | None = None,
    history: pd.DataFrame | None = None,
) -> list[Row]:
    """Match benchmarks by (case, parameters with devices mapped), or fullname for foreign files, and judge.

    `thresholds` overrides `threshold` per family; a benchmark with fewer than MIN_ROUNDS_TO_JUDGE rounds on
    either side is "not judged". `history`: rows of the baseline machine's latest runs (Side.history), whose
    range bounds what counts as a change.
    """
    thresholds = thresholds or {}
    ranges = history_ranges(history, metric, device_map) if history is not None else {}
    # Plain dicts of the five columns read: iterrows over the whole table (dozens of columns) and a .loc per
    # row took most of a folder compare's time (about 0.5-1 s per machine pair at a full run's size).
    columns = list(dict.fromkeys(["case", "name", metric, "iqr", "rounds", "invalid"]))
    base_rows = (base.assign(_key=benchmark_keys(base, device_map)).drop_duplicates("_key")
                 .set_index("_key")[columns].to_dict("index"))
    cand_rows = (cand.assign(_key=benchmark_keys(cand)).drop_duplicates("_key")
                 .set_index("_key")[columns].to_dict("index"))
    rows = []
    for key, b in base_rows.items():
        c = cand_rows.get(key)
        if c is None:
            rows.append(Row("missing", b["case"], b["name"], b[metric], math.nan, math.nan, math.nan, math.nan))
            continue
        if b["invalid"] or c["invalid"]:
            why = "; ".join(f"{side}: {r['invalid']}" for side, r in (("baseline", b), ("candidate", c))
                            if r["invalid"])
            rows.append(Row("not judged", b["case"], c["name"], b[metric], c[metric], math.nan, math.nan, math.nan,
                            invalid=why))
            continue
        noise = NOISE_IQR_SHARE * (_zero(b["iqr"]) + _zero(c["iqr"]))
        few = min(_zero(b["rounds"]), _zero(c["rounds"])) < MIN_ROUNDS_TO_JUDGE
        ratio = c[metric] / b[metric] if b[metric] > 0 and c[metric] > 0 else math.nan
        if math.isnan(ratio):
            status = "not judged"  # no positive time on one side: nothing to compare
        elif few:
            status = "not judged"
        else:
            status = classify(b[metric], c[metric], b["iqr"], c["iqr"], thresholds.get(b["case"], threshold))
        note = ""
        low, high, runs = ranges.get(key, (math.nan, math.nan, 0))
        if status in ("regression", "improvement") and runs >= HISTORY_MIN_RUNS and low <= c[metric] <= high:
            status, note = "unchanged", f"within {runs} baseline runs' range"
        rows.append(Row(status, b["case"], c["name"], b[metric], c[metric], ratio, (ratio - 1) * 100, noise,
                        note))
    for key, c in cand_rows.items():
        if key not in base_rows:
            rows.append(Row("only in candidate", c["case"], c["name"], math.nan, c[metric], math.nan, math.nan,
                            math.nan, invalid=f"candidate: {c['invalid']}" if c["invalid"] else ""))
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    # Worst regressions and best improvements first within their section.
    rows.sort(key=lambda r: (order[r.status], -abs(r.change_pct) if not math.isnan(r.change_pct) else 0))
    return rows


def _cells(r: Row) -> list[str]:
    ratio = "—" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
    change = "—" if math.isnan(r.change_pct) else f"{r.change_pct:+.1f}%"
    return [
        f"{r.status} ({r.invalid})" if r.invalid else f"{r.status} (in range)" if r.note else r.status,
        r.case,
        r.benchmark,
        format_time(r.baseline),
        format_time(r.candidate),
        ratio,
        change,
        format_time(r.noise),
    ]


HEADERS = ["status", "case", "benchmark", "baseline", "candidate", "ratio", "change", "noise"]
SUMMARY_HEADERS = ["baseline", "candidate", "regressions", "improvements", "missing", "verdict"]


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
        return sum(r.status not in ("missing", "only in candidate") and not r.invalid for r in self.rows)

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


def _named(label: str, partial: str) -> str:
    return f"{label} ({PARTIAL_NOTE})" if partial else label


def _as_json(pair: Pair, metric: str, threshold: float, thresholds: dict[str, float],
             changed_only: bool = False) -> dict:
    return {
        "baseline": pair.base_label,
        "candidate": pair.cand_label,
        "baseline_partial": bool(pair.base_partial),
        "candidate_partial": bool(pair.cand_partial),
        "metric": metric,
        "threshold": threshold,
        "thresholds": dict(sorted(thresholds.items())),
        "min_rounds": MIN_ROUNDS_TO_JUDGE,
        "counts": pair.counts,
        "changed_only": changed_only,
        "results": [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(r).items()}
            for r in pair.shown(changed_only)
        ],
    }


def _csv(pairs: list[Pair], metric: str, changed_only: bool) -> str:
    """One tidy table for every pair: one header, the machines of each row in columns of their own."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["baseline_machine", "candidate_machine", "status", "case", "benchmark",
                     f"baseline_{metric}_s", f"candidate_{metric}_s", "ratio", "change_pct", "noise_s",
                     "baseline_partial", "candidate_partial", "note"])
    for pair in pairs:
        flags = [str(bool(pair.base_partial)).lower(), str(bool(pair.cand_partial)).lower()]
        for r in pair.shown(changed_only):
            values = (r.baseline, r.candidate, r.ratio, r.change_pct, r.noise)
            writer.writerow([pair.base_label, pair.cand_label, r.status, r.case, r.benchmark,
                             *("" if math.isnan(v) else f"{v:.6g}" for v in values), *flags, r.note])
    return buf.getvalue().rstrip("\n")


def _table(headers: list[str], cells: list[list[str]], fmt: str) -> list[str]:
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    return lines + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def render(pair: Pair, fmt: str, metric: str, threshold: float, thresholds: dict[str, float] | None = None,
           changed_only: bool = False) -> str:
    """One pair's comparison: a headline with every count, then its rows (--changed-only: not unchanged)."""
    thresholds = thresholds or {}
    if fmt == "json":
        return json.dumps(_as_json(pair, metric, threshold, thresholds, changed_only), indent=1)
    if fmt == "csv":
        return _csv([pair], metric, changed_only)
    rows = pair.shown(changed_only)
    per_family = "".join(f", {k} {v * 100:g}%" for k, v in sorted(thresholds.items()))
    summary = (
        f"{_named(pair.base_label, pair.base_partial)} -> {_named(pair.cand_label, pair.cand_partial)}: "
        f"{metric} time, threshold {threshold * 100:g}%{per_family}, noise "
        f"{NOISE_IQR_SHARE:g} x (IQR baseline + IQR candidate): "
        + ", ".join(f"{n} {s}" for s, n in pair.counts.items())
    )
    steady = sum(bool(r.note) for r in pair.rows)
    if steady:
        summary += (f" ({steady} beyond threshold and noise but within the range of the baseline machine's "
                    f"latest runs: unchanged)")
    hidden = len(pair.rows) - len(rows)
    if hidden:
        summary += f" ({hidden} unchanged not listed: --changed-only)"
    if fmt == "markdown":
        summary = f"**{summary}**"
    if changed_only and not rows:
        return f"{summary}\n\nno benchmark other than unchanged ones"
    return "\n".join([summary, "", *_table(HEADERS, [_cells(r) for r in rows], fmt)])


def outcome(pairs: list[Pair], missing_machines: list[str], allow_missing: bool) -> tuple[int, str]:
    """The exit code and why: 2 nothing compared, 1 a regression or (without --allow-missing) something of
    the baseline missing, else 0."""
    if not sum(p.compared for p in pairs):
        invalid = sum(bool(r.invalid) for p in pairs for r in p.rows)
        if invalid:
            return 2, f"nothing valid was compared: {invalid} benchmark(s) with an invalid result on a side"
        return 2, "no benchmark of the baseline is in the candidate: nothing was compared"
    many = len(pairs) > 1

    def on(status: str) -> str:
        hit = sum(1 for p in pairs if p.counts[status])
        return f" on {hit} of {len(pairs)} machine pairs" if many else ""

    regressions = sum(p.count("regression") for p in pairs)
    invalid = sum(len(p.invalid) for p in pairs)
    missing = sum(p.count("missing") for p in pairs)
    absent = []  # what of the baseline the candidate lacks: fails, unless --allow-missing
    if missing:
        unfinished = [p for p in pairs if p.cand_partial and p.count("missing")]
        n = sum(p.count("missing") for p in unfinished)
        runs = "a candidate run" if len(unfinished) == 1 else f"{len(unfinished)} candidate runs"
        why = f", {'' if n == missing else f'{n} of them '}from {runs} that did not finish" if n else ""
        absent.append(f"{missing} benchmark(s) of the baseline missing{on('missing')}{why}")
    if missing_machines:
        absent.append(f"{len(missing_machines)} machine(s) of the baseline missing")
    allowed = "; ".join(absent) + ", allowed by --allow-missing" if absent and allow_missing else ""
    failed = [f"{regressions} regression(s){on('regression')}"] if regressions else []
    failed += [f"{invalid} invalid result(s) in the candidate{on('invalid')}"] if invalid else []
    failed += [] if allow_missing else absent
    if failed:
        return 1, "; ".join(failed + ([allowed] if allowed else []))
    compared = sum(p.compared for p in pairs)
    reason = f"no regression in {compared} benchmark(s) compared"
    reason += f" on {len(pairs)} machine pairs" if many else ""
    return 0, "; ".join([reason] + ([allowed] if allowed else []))


def invalid_lines(pairs: list[Pair]) -> list[str]:
    """One line per invalid candidate result (MAX_INVALID_NAMED of them, then a count), and a count of the
    baseline's invalid results, which are not judged."""
    rows = [(p, r) for p in pairs for r in p.invalid]
    where = "compare: invalid in the candidate"
    lines = [f"{where}{f' {p.cand_label}' if len(pairs) > 1 else ''}: {r.benchmark} "
             f"({r.invalid.partition('candidate: ')[2]})" for p, r in rows[:MAX_INVALID_NAMED]]
    if len(rows) > MAX_INVALID_NAMED:
        lines.append(f"{where}: ... and {len(rows) - MAX_INVALID_NAMED} more")
    if rows:
        lines.append("compare: a result whose numbers are missing, not finite, zero or negative fails the "
                     "gate; rerun the candidate")
    base = sum(r.invalid.startswith("baseline") for p in pairs for r in p.rows)
    if base:
        lines.append(f"warning: {base} benchmark(s) invalid in the baseline: not judged")
    return lines


def summary_table(pairs: list[Pair], fmt: str, allow_missing: bool, only_base: list[str] = (),
                  only_cand: list[str] = ()) -> str:
    """One line per machine pair (and per machine of one side only): its counts and verdict, so the end of
    a long output says what each block's headline said. A candidate named like its baseline reads `same`."""
    def name(label: str, launch: str) -> str:  # a torchrun job's label names its launch already
        return label + (f" ({launch})" if launch and f"({launch})" not in label else "")

    cells = []
    for p in pairs:
        before, after = name(p.base_label, p.base_launch), name(p.cand_label, p.cand_launch)
        after = ("same" if after == before else after) + (" (partial)" if p.cand_partial else "")
        cells.append([before + (" (partial)" if p.base_partial else ""), after,
                      *(str(p.count(s)) for s in ("regression", "improvement", "missing")),
                      p.verdict(allow_missing)])
    gone = "machine missing" + (" (allowed)" if allow_missing else "")
    cells += [[label, "—", "—", "—", "—", gone] for label in only_base]
    extra = "not compared (only in the candidate)"
    cells += [["—", label, "—", "—", "—", extra] for label in only_cand]
    title = f"summary: {len(pairs)} machine pair{'s' if len(pairs) != 1 else ''}" + "".join(
        f", {len(labels)} machine(s) only in the {what}"
        for what, labels in (("baseline", only_base), ("candidate", only_cand)) if labels)
    title = f"**{title}**" if fmt == "markdown" else title
    return "\n".join([title, "", *_table(SUMMARY_HEADERS, cells, fmt)])


def render_all(pairs: list[Pair], fmt: str, metric: str, threshold: float, thresholds: dict[str, float],
               changed_only: bool, allow_missing: bool, only_base: list[str] = (), only_cand: list[str] = (),
               ) -> str:
    """Every pair's comparison. Text and markdown end with the summary table (with folders: several pairs,
    or machines of one side only) and the exit code with its reason; CSV is one table; JSON one object per
    pair (`{"comparisons": [...]}` for several)."""
    if fmt == "json":
        objects = [_as_json(p, metric, threshold, thresholds, changed_only) for p in pairs]
        return json.dumps(objects[0] if len(objects) == 1 else {"comparisons": objects}, indent=1)
    if fmt == "csv":
        return _csv(pairs, metric, changed_only)
    blocks = [render(p, fmt, metric, threshold, thresholds, changed_only) for p in pairs]
    if len(pairs) > 1 or only_base or only_cand:
        blocks.append(summary_table(pairs, fmt, allow_missing, only_base, only_cand))
    code, reason = outcome(pairs, list(only_base), allow_missing)
    blocks.append(f"**exit {code}**: {reason}" if fmt == "markdown" else f"exit {code}: {reason}")
    return "\n\n".join(blocks)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE",
                        help="results file of the reference run, or a folder (each machine's latest run)")
    parser.add_argument("candidate", metavar="CANDIDATE",
                        help="results file of the run to judge, or a folder (each machine's latest run)")
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="[FAMILY=]PCT",
        help=f"slowdown that counts as a regression, in percent (5%% and 5 both mean 5 percent; default "
        f"{DEFAULT_THRESHOLD.replace('%', '%%')}); FAMILY=PCT for one family, e.g. --threshold copy=10%% "
        "(repeatable)",
    )
    parser.add_argument("--metric", choices=METRICS, default="median", help="which time statistic to compare")
    parser.add_argument("--format", choices=FORMATS, default="text", dest="fmt")
    parser.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="BASE_DEV=CAND_DEV",
        help="match a baseline device to a candidate device, e.g. cuda:0=cuda:1 (repeatable)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="FILE=NAME",
        help="name a side in the output (repeatable)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="pass although benchmarks (or, with folders, machines) of the baseline are missing from the "
        "candidate: for a candidate that measures a deliberate subset",
    )
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="list every benchmark but the unchanged ones (regression, improvement, not judged, missing, "
        "only in candidate); the counts still cover all of them",
    )


def run(args: argparse.Namespace) -> int:
    threshold, thresholds = parse_thresholds(args.threshold)
    device_map = parse_device_map(args.map)
    labels = parse_label_args(args.label)
    base, cand = _side(args.baseline, labels, "baseline"), _side(args.candidate, labels, "candidate")
    check_families(thresholds, base.families | cand.families)
    check_device_map(device_map, base, cand)
    matched, missing_machines, extra_machines = pair_sides(base, cand, args.baseline, args.candidate)
    for (base_label, _), (cand_label, _) in matched:
        before, after = base.hardware.get(base_label, ""), cand.hardware.get(cand_label, "")
        if before and after and before != after:
            print(f"warning: different hardware ({before} against {after}): differences are the hardware's, "
                  "not a regression of one machine", file=sys.stderr)
    pairs, hints = [], {}  # hints: the families' missing_hint texts, each once, in order
    base_keys = {label: key for key, (label, _) in base.runs.items()}
    for (base_label, base_table), (cand_label, cand_table) in matched:
        rows = compare_tables(base_table, cand_table, metric=args.metric, threshold=threshold,
                              device_map=device_map, thresholds=thresholds,
                              history=base.history.get(base_keys[base_label]))
        pairs.append(Pair(base_label, cand_label, rows, base.partial.get(base_label, ""),
                          cand.partial.get(cand_label, ""), base.launches.get(base_label, ""),
                          cand.launches.get(cand_label, "")))
        for family in FAMILIES:
            hint = family_read(family, "missing_hint")
            text = hint(base_table, cand_table, rows) if hint else ""
            if text:
                hints[text] = None
    stopped = {p.cand_partial: stopped_in(p.cand_partial)
               for p in pairs if p.cand_partial and p.count("missing")}
    for p in pairs:
        if p.base_partial:
            print(f"warning: the baseline {p.base_label} is a partial run ({Path(p.base_partial).name}: it "
                  "did not finish): only what it measured is compared", file=sys.stderr)
        if p.cand_partial and p.count("missing") and args.allow_missing:
            at = f", stopped in {stopped[p.cand_partial]}" if stopped[p.cand_partial] else ""
            print(f"warning: the candidate {p.cand_label} is a partial run ({Path(p.cand_partial).name}: it "
                  f"did not finish{at}): its {p.count('missing')} missing benchmark(s) were not measured, "
                  "and --allow-missing passes them", file=sys.stderr)
    emit(render_all(pairs, args.fmt, args.metric, threshold, thresholds, args.changed_only,
                    args.allow_missing, missing_machines, extra_machines))
    code, _ = outcome(pairs, missing_machines, args.allow_missing)
    for line in invalid_lines(pairs):
        print(line, file=sys.stderr)
    if code == 2 and any(r.invalid for p in pairs for r in p.rows):
        print("compare: nothing valid was compared: every benchmark in common has an invalid result on one "
              "side (see above); rerun the run whose results are invalid", file=sys.stderr)
        return 2
    if code == 2:
        # Nothing in common passes no gate, --allow-missing or not.
        print("compare: no benchmark of the baseline is in the candidate: nothing was compared; compare runs "
              "of the same config (or map devices with --map BASELINE_DEV=CANDIDATE_DEV)", file=sys.stderr)
        return 2
    missing = sum(p.count("missing") for p in pairs)
    if (missing or missing_machines) and not args.allow_missing:
        what = ", ".join(
            filter(None, [f"{missing} benchmark(s)" if missing else "",
                          f"{len(missing_machines)} machine(s)" if missing_machines else ""])
        )
        cause = "a crash, a skip or a narrower config"
        fix = "pass --allow-missing if the candidate measures a subset on purpose"
        unfinished = [p for p in pairs if p.cand_partial and p.count("missing")]
        if unfinished:
            n = sum(p.count("missing") for p in unfinished)
            files = "; ".join(Path(p.cand_partial).name + (f", stopped in {stopped[p.cand_partial]}"
                                                         if stopped[p.cand_partial] else "")
                              for p in unfinished[:3]) + ("; ..." if len(unfinished) > 3 else "")
            rest = "" if n == missing and not missing_machines else f"; the rest: {cause}"
            runs = "a candidate run" if len(unfinished) == 1 else f"{len(unfinished)} candidate runs"
            cause = f"{'all' if n == missing else n} from {runs} that did not finish: {files}{rest}"
            if len(unfinished) == 1:
                only = unfinished[0]
                how = resume_command(only.cand_partial, cand.configs.get(only.cand_label, ""))
                fix = f"resume it on its machine ({how}) to measure the rest, or {fix}"
            else:
                fix = ("resume each on its machine (pytest benchmarks --benchmark-json FILE.json "
                       "--suite-resume with the run's --suite-config) to measure the rest, or " + fix)
        print(f"compare: {what} of the baseline missing from the candidate ({cause}): failing; {fix}",
              file=sys.stderr)
        for hint in hints:
            print(f"compare: {hint}", file=sys.stderr)
    return code
