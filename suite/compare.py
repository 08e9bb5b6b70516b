"""`python -m suite compare BASELINE CANDIDATE`: per-benchmark time ratios; exit 1 on a regression."""
# BASELINE and CANDIDATE may be folders: each machine's latest run, machines paired by identity.

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.cases import FAMILIES, family_read
from suite.compare_format import emit, invalid_lines, render_all
from suite.compare_format import summary_table  # noqa: F401 -- imported from here by its tests
from suite.compare_verdict import HIGHER_IS_BETTER, HISTORY_MIN_RUNS, HISTORY_RUNS, UNRECORDED, Pair
from suite.compare_verdict import compare_tables, outcome, unfinished_runs
from suite.compare_verdict import classify  # noqa: F401 -- imported from here by its tests
from suite.errors import UserError
from suite.results import FOREIGN_CASE, NOTHING_MEASURED, PARTIAL_SUFFIX, Machine, latest_runs, load_results
from suite.results import parse_label_args

DEFAULT_THRESHOLD = "5%"
METRICS = ("median", "min", "mean", *HIGHER_IS_BETTER)
FORMATS = ("text", "markdown", "csv", "json")
_THRESHOLD_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%?\s*$")
_FAMILY_RE = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*=(.*)$")


def parse_threshold(value: str) -> float:
    """`"5%"` or `"5"` -> 0.05: the number is always a percentage; anything else is a UserError."""
    match = _THRESHOLD_RE.match(str(value))
    if not match:
        raise UserError(f"--threshold {value!r} is not a percentage; write e.g. 5% or 5 (both mean 5 percent)")
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
class Side:
    """One side's latest runs: (identity, tool, launch) -> (label, table), (node, tool, launch) of each, the
    device ids its runs have (machine_info devices and the devices its benchmarks name), its machines by label."""

    runs: dict[tuple[str, str, str], tuple[str, pd.DataFrame]]
    nodes: dict[tuple[str, str, str], tuple[str, str, str]]
    families: set[str]
    machines: dict[str, Machine]
    devices: set[str] = field(default_factory=set)
    # key -> rows of that machine's latest HISTORY_RUNS runs (its latest included), where a folder holds
    # HISTORY_MIN_RUNS or more of them
    history: dict[tuple[str, str, str], pd.DataFrame] = field(default_factory=dict)


def _partial(m: Machine) -> str:
    return m.file if m.partial else ""


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
    side = Side({}, {}, set(loaded.table["case"].unique()), {label: loaded.machines[label] for label in latest})
    for label, m in side.machines.items():
        if not m.n_benchmarks:
            raise UserError(
                f"{what} {m.file} {NOTHING_MEASURED}: nothing to compare; rerun it, or pass the run to judge"
            )
        key = (m.identity, m.tool, m.launch)
        # Of a benchmark recorded twice, an invalid result is the one kept: a gate never passes on the valid
        # twin of garbage.
        table = loaded.table[loaded.table["label"] == label]
        table = table.sort_values("invalid", ascending=False, kind="stable").drop_duplicates("match_key")
        side.runs[key] = (label, table.sort_index())
        side.nodes[key] = (m.node, m.tool, m.launch)
        side.devices |= {str(d["id"]) for d in m.devices if d.get("id")}
        side.devices |= {v for column in ("device", "src", "dst") for v in table[column] if isinstance(v, str)}
    side.history = _history(loaded, side.runs)
    return side


def _history(loaded, runs: dict) -> dict[tuple[str, str, str], pd.DataFrame]:
    """Side.history: the rows of each compared machine's latest HISTORY_RUNS runs, where it has enough."""
    by_machine: dict[tuple[str, str, str], list] = {}
    for m in loaded.machines.values():
        by_machine.setdefault((m.identity, m.tool, m.launch), []).append(m)
    history = {}
    for key, ms in by_machine.items():
        if key in runs and len(ms) >= HISTORY_MIN_RUNS:
            # Ordered as latest_runs orders them: the newest HISTORY_RUNS, the one compared among them.
            kept = [m.label for m in sorted(ms, key=lambda m: (m.datetime, Path(m.file).name, m.file))]
            history[key] = loaded.table[loaded.table["label"].isin(kept[-HISTORY_RUNS:])].drop_duplicates(
                ["label", "match_key"])
    return history


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
                raise UserError(f"--map {src}={dst}: the {what} has no device {device} (it has: "
                                f"{', '.join(sorted(side.devices)) or 'none named'}); write --map "
                                "BASELINE_DEV=CANDIDATE_DEV with devices of the two runs")


def pair_sides(base: Side, cand: Side, base_path: str, cand_path: str
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
    rest_base = sorted(base.runs.keys() - cand.runs.keys())
    rest_cand = sorted(cand.runs.keys() - base.runs.keys())
    pairs += _driver_changed(base, cand, rest_base, rest_cand)
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


def _driver_changed(base: Side, cand: Side, rest_base: list, rest_cand: list) -> list[tuple[tuple, tuple]]:
    """Unpaired machines alone on one node (host and GPUs) on each side: one machine with another driver. The
    pairs, taken out of `rest_base` and `rest_cand`."""
    pairs, by_node = [], {}
    for k in rest_cand:
        by_node.setdefault(cand.nodes[k], []).append(k)
    for k in list(rest_base):
        found = by_node.get(base.nodes[k], [])
        if len(found) == 1 and sum(base.nodes[b] == base.nodes[k] for b in rest_base) == 1:
            other = found[0]
            print(f"warning: {base.runs[k][0]} paired with {cand.runs[other][0]}: same host and GPUs, "
                  f"another driver ({k[0]} -> {other[0]})", file=sys.stderr)
            pairs.append((base.runs[k], cand.runs[other]))
            rest_base.remove(k)
            rest_cand.remove(other)
    return pairs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE",
                        help="results file of the reference run, or a folder (each machine's latest run)")
    parser.add_argument("candidate", metavar="CANDIDATE",
                        help="results file of the run to judge, or a folder (each machine's latest run)")
    parser.add_argument("--threshold", action="append", default=[], metavar="[FAMILY=]PCT",
                        help=f"slowdown that counts as a regression, in percent (5%% and 5 both mean 5 percent; "
                        f"default {DEFAULT_THRESHOLD.replace('%', '%%')}); FAMILY=PCT for one family, e.g. "
                        "--threshold copy=10%% (repeatable)")
    parser.add_argument("--metric", choices=METRICS, default="median",
                        help="which time statistic to compare, or perf_per_w: the rate per watt (higher is "
                        "better; a result without it is not judged)")
    parser.add_argument("--format", choices=FORMATS, default="text", dest="fmt")
    parser.add_argument("--map", action="append", default=[], metavar="BASE_DEV=CAND_DEV",
                        help="match a baseline device to a candidate device, e.g. cuda:0=cuda:1 (repeatable)")
    parser.add_argument("--label", action="append", default=[], metavar="FILE=NAME",
                        help="name a side in the output (repeatable)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="pass although benchmarks (or, with folders, machines) of the baseline are missing "
                        "from the candidate: for a candidate that measures a deliberate subset")
    parser.add_argument("--changed-only", action="store_true",
                        help="list every benchmark but the unchanged ones (regression, improvement, not judged, "
                        "missing, only in candidate); the counts still cover all of them")


def _warn_hardware(matched: list, base: Side, cand: Side) -> None:
    for (base_label, _), (cand_label, _) in matched:
        before, after = base.machines[base_label].gpus, cand.machines[cand_label].gpus
        if before and after and before != after:
            print(f"warning: different hardware ({before} against {after}): differences are the hardware's, "
                  "not a regression of one machine", file=sys.stderr)


def _hints(base_table: pd.DataFrame, cand_table: pd.DataFrame, rows: list) -> list[str]:
    """The families' missing_hint texts for one machine pair."""
    hints = []
    for family in FAMILIES:
        hint = family_read(family, "missing_hint")
        text = hint(base_table, cand_table, rows) if hint else ""
        if text:
            hints.append(text)
    return hints


def _compare_pairs(matched: list, base: Side, cand: Side, args: argparse.Namespace, threshold: float,
                   thresholds: dict[str, float], device_map: dict[str, str]) -> tuple[list[Pair], list[str]]:
    """Each machine pair's verdicts, and the families' missing_hint texts, each once, in order."""
    pairs, hints = [], {}
    base_keys = {label: key for key, (label, _) in base.runs.items()}
    for (base_label, base_table), (cand_label, cand_table) in matched:
        rows = compare_tables(base_table, cand_table, metric=args.metric, threshold=threshold,
                              device_map=device_map, thresholds=thresholds,
                              history=base.history.get(base_keys[base_label]))
        b, c = base.machines[base_label], cand.machines[cand_label]
        pairs.append(Pair(base_label, cand_label, rows, _partial(b), _partial(c), b.launch, c.launch))
        hints.update(dict.fromkeys(_hints(base_table, cand_table, rows)))
    return pairs, list(hints)


def _warn_partial(pairs: list[Pair], stopped: dict[str, str], allow_missing: bool) -> None:
    for p in pairs:
        if p.base_partial:
            print(f"warning: the baseline {p.base_label} is a partial run ({Path(p.base_partial).name}: it "
                  "did not finish): only what it measured is compared", file=sys.stderr)
        if p.cand_partial and p.count("missing") and allow_missing:
            at = f", stopped in {stopped[p.cand_partial]}" if stopped[p.cand_partial] else ""
            print(f"warning: the candidate {p.cand_label} is a partial run ({Path(p.cand_partial).name}: it "
                  f"did not finish{at}): its {p.count('missing')} missing benchmark(s) were not measured, "
                  "and --allow-missing passes them", file=sys.stderr)


def _nothing_compared(pairs: list[Pair], metric: str) -> None:
    # Nothing in common passes no gate, --allow-missing or not.
    if any(r.note.startswith(UNRECORDED) for p in pairs for r in p.rows):
        print(f"compare: nothing was judged: no benchmark in common has {metric} on both sides; rerun with "
              "telemetry on a machine whose GPU (NVML) or CPU (RAPL) reports power", file=sys.stderr)
    elif any(r.invalid for p in pairs for r in p.rows):
        print("compare: nothing valid was compared: every benchmark in common has an invalid result on one "
              "side (see above); rerun the run whose results are invalid", file=sys.stderr)
    else:
        print("compare: no benchmark of the baseline is in the candidate: nothing was compared; compare runs "
              "of the same config (or map devices with --map BASELINE_DEV=CANDIDATE_DEV)", file=sys.stderr)


def _unfinished_cause(pairs: list[Pair], missing: int, missing_machines: list[str],
                      stopped: dict[str, str], cause: str) -> str:
    """What of the missing came from candidate runs that did not finish, and which files."""
    unfinished, n, runs = unfinished_runs(pairs)
    files = "; ".join(Path(p.cand_partial).name + (f", stopped in {stopped[p.cand_partial]}"
                                                 if stopped[p.cand_partial] else "")
                      for p in unfinished[:3]) + ("; ..." if len(unfinished) > 3 else "")
    rest = "" if n == missing and not missing_machines else f"; the rest: {cause}"
    return f"{'all' if n == missing else n} from {runs} that did not finish: {files}{rest}"


def _resume_fix(unfinished: list[Pair], cand: Side, fix: str) -> str:
    if len(unfinished) == 1:
        only = unfinished[0]
        how = resume_command(only.cand_partial, cand.machines[only.cand_label].config_path)
        return f"resume it on its machine ({how}) to measure the rest, or {fix}"
    return ("resume each on its machine (pytest benchmarks --benchmark-json FILE.json "
            "--suite-resume with the run's --suite-config) to measure the rest, or " + fix)


def _missing_failed(pairs: list[Pair], missing_machines: list[str], cand: Side, stopped: dict[str, str],
                    hints: list[str]) -> None:
    """Why a candidate missing some of the baseline fails, and how to finish or allow it."""
    missing = sum(p.count("missing") for p in pairs)
    what = ", ".join(
        filter(None, [f"{missing} benchmark(s)" if missing else "",
                      f"{len(missing_machines)} machine(s)" if missing_machines else ""])
    )
    cause = "a crash, a skip or a narrower config"
    fix = "pass --allow-missing if the candidate measures a subset on purpose"
    unfinished = unfinished_runs(pairs)[0]
    if unfinished:
        cause = _unfinished_cause(pairs, missing, missing_machines, stopped, cause)
        fix = _resume_fix(unfinished, cand, fix)
    print(f"compare: {what} of the baseline missing from the candidate ({cause}): failing; {fix}",
          file=sys.stderr)
    for hint in hints:
        print(f"compare: {hint}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    threshold, thresholds = parse_thresholds(args.threshold)
    device_map = parse_device_map(args.map)
    labels = parse_label_args(args.label)
    base, cand = _side(args.baseline, labels, "baseline"), _side(args.candidate, labels, "candidate")
    check_families(thresholds, base.families | cand.families)
    check_device_map(device_map, base, cand)
    matched, missing_machines, extra_machines = pair_sides(base, cand, args.baseline, args.candidate)
    _warn_hardware(matched, base, cand)
    pairs, hints = _compare_pairs(matched, base, cand, args, threshold, thresholds, device_map)
    stopped = {p.cand_partial: stopped_in(p.cand_partial) for p in unfinished_runs(pairs)[0]}
    _warn_partial(pairs, stopped, args.allow_missing)
    emit(render_all(pairs, args.fmt, args.metric, threshold, thresholds, args.changed_only,
                    args.allow_missing, missing_machines, extra_machines))
    code, _ = outcome(pairs, missing_machines, args.allow_missing)
    for line in invalid_lines(pairs):
        print(line, file=sys.stderr)
    unrecorded = sum(r.note.startswith(UNRECORDED) for p in pairs for r in p.rows)
    if unrecorded and code != 2:
        print(f"warning: {unrecorded} benchmark(s) without {args.metric} on a side: not judged",
              file=sys.stderr)
    if code == 2:
        _nothing_compared(pairs, args.metric)
        return 2
    missing = sum(p.count("missing") for p in pairs)
    if (missing or missing_machines) and not args.allow_missing:
        _missing_failed(pairs, missing_machines, cand, stopped, hints)
    return code
