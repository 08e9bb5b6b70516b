"""`python -m suite health RESULTS...`: healthy or what is wrong, per node and device; exit 1 when flagged."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite.compare_format import emit
from suite.errors import UserError
from suite.health.causes import offender_line
from suite.health.checks import judge
from suite.health.dcgm import Diagnostics, empty_health, join, read_diagnostics
from suite.health.findings import DEFAULT_FAIL_ON, FLEET_MIN_MACHINES, KINDS, MAX_EXAMPLES, NOT_JUDGED, Health
from suite.health.expect import OK_AT_PCT, load_expectations
from suite.loading import DIAGNOSTICS_NOTE
from suite.results import NOTHING_MEASURED, PARTIAL_SUFFIX, LoadedResults, load_results, parse_label_args

FORMATS = ("text", "markdown", "json")


def parse_fail_on(values: list[str] | None) -> tuple[str, ...]:
    """`["low,straggler"]` -> ("low", "straggler"); unknown kinds are a UserError; none given: the default."""
    kinds = [k.strip() for v in values or [] for k in v.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise UserError(
            f"--fail-on {bad[0]!r} is not one of {', '.join(KINDS)}; write e.g. --fail-on low,straggler"
        )
    return tuple(dict.fromkeys(kinds)) or DEFAULT_FAIL_ON


def unread_named_files(paths: list[str], loaded: LoadedResults) -> list[str]:
    """Files named on the command line (not found in a folder) that gave no results."""
    read = {m.file for m in loaded.machines.values()}
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() or str(path) in read:
            continue
        if path.name.endswith(PARTIAL_SUFFIX) and str(path)[: -len(PARTIAL_SUFFIX)] + ".json" in read:
            continue  # superseded by its finished run, which was read
        out.append(str(path))
    return out


def _finding_lines(findings: list) -> list[str]:
    """Per device and kind, the worst few examples and a count; the missing, one line per measure."""
    lines: list[str] = []
    groups: dict[tuple[str, str, str], list] = {}
    missing: dict[str, list[str]] = {}
    for f in findings:  # sorted by device: each group's findings are together
        if f.kind == "missing":  # one line per measure, devices listed: absence is a note, not a fault
            missing.setdefault(f.text.split(":")[0], []).append(f.device)
        else:
            groups.setdefault((f.device, f.kind, f.family), []).append(f)
    for (device, kind, family), items in groups.items():
        where = f"{device} ({items[0].identity}) " if items[0].identity else f"{device} " if device else ""
        shown = sorted(items, key=lambda f: f.pct) if kind == "straggler" else items
        lines += [f"{where}{kind}: {f.text}" for f in shown[:MAX_EXAMPLES]]
        if len(items) > MAX_EXAMPLES:
            lines.append(f"{where}{kind}: … and {len(items) - MAX_EXAMPLES} more {family} result(s)")
    return lines + [f"missing: {measure} on {', '.join(devices)} (no result at the size its expected figure "
                    "needs)" for measure, devices in missing.items()]


def node_lines(health: Health, fail_on: tuple[str, ...]) -> list[tuple[str, str, list[str]]]:
    """(status, node, problem lines) per node: per device and kind, the worst few examples and a count."""
    out = []
    for node in health.nodes:
        lines = _finding_lines(node.findings)
        lines += [offender_line(e) for e in health.repeat_offenders if e["now_on"] == node.node]
        lines += [f"no results: {path} {NOTHING_MEASURED}" for path in node.empty]
        lines += [f"partial: {path} (a killed run: judged on what it finished)" for path in node.partial]
        status = node.status(fail_on)
        if status == NOT_JUDGED:
            lines.append(f"not judged: no expected figure applies to its results, no device has a peer of "
                         f"its model, and no fleet of {FLEET_MIN_MACHINES}+ machines of its kind")
        out.append((status, node.node, lines))
    return out


def render(health: Health, fmt: str, fail_on: tuple[str, ...]) -> str:
    data = health.as_dict(fail_on)
    if fmt == "json":
        # Compact: a fleet's verdict runs to megabytes, which indenting doubles; `jq .` pretty-prints it.
        return json.dumps(data, separators=(",", ":"))
    c = data["counts"]
    summary = (
        f"health: {c['nodes']} node(s), {c['flagged']} flagged (failing on {', '.join(fail_on)}); "
        f"findings: {', '.join(f'{c[k]} {k}' for k in KINDS)}; ok at >= {OK_AT_PCT:g}% of expected"
    )
    rows = node_lines(health, fail_on)
    # GPUs no latest run has (pulled, or on a node not passed): their history is still a finding to read.
    gone = [offender_line(e) for e in health.repeat_offenders if not e["now_on"]]
    if fmt == "markdown":
        lines = [f"**{summary}**", "", "| status | node | what is wrong |", "|---|---|---|"]
        for status, node, problems in rows:
            text = "<br>".join(p.replace("|", "\\|") for p in problems) or "—"
            lines.append(f"| {status} | {node.replace('|', '/')} | {text} |")
        return "\n".join(lines + [f"\n{g}" for g in gone])
    lines = [summary, ""]
    for status, node, problems in rows:
        lines.append(f"{status.upper():8} {node}")
        lines += [f"         {p}" for p in problems]
    return "\n".join(lines + gone)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULTS", help="results files or folders: ours, "
                        "nccl-tests text or JSON, nvbandwidth text or JSON, dcgmi diag -j")
    parser.add_argument("--fail-on", action="append", default=[], metavar="KINDS",
                        help=f"which findings exit 1: any of {', '.join(KINDS)}, comma-separated or repeated "
                        f"(default: {','.join(DEFAULT_FAIL_ON)})")
    parser.add_argument("--format", choices=FORMATS, default="text", dest="fmt")
    parser.add_argument("--expect", action="append", default=[], metavar="FILE",
                        help="YAML of expected figures added to the shipped table (repeatable)")
    parser.add_argument("--label", action="append", default=[], metavar="FILE=NAME",
                        help="name a results file's machine (repeatable)")


def run(args: argparse.Namespace) -> int:
    fail_on = parse_fail_on(args.fail_on)
    expectations = load_expectations(args.expect)
    diagnostics = read_diagnostics(args.results)
    health = _judge(args, diagnostics, expectations) if diagnostics.others else empty_health()
    join(health, diagnostics)
    for warning in diagnostics.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    emit(render(health, args.fmt, fail_on))
    if health.nothing_judged(fail_on):
        # An acceptance gate that checked nothing must not pass.
        print("health: nothing was judged (see each node's reason); pass results of GPUs with expected "
              "figures (suite/expectations.yaml, or --expect FILE), or of several devices or machines of one "
              "kind", file=sys.stderr)
        return 2
    return 1 if health.flagged(fail_on) else 0


def _judge(args: argparse.Namespace, diagnostics: Diagnostics, expectations) -> Health:
    """The verdict on the results files among RESULTS (the DCGM documents are read apart)."""
    loaded = load_results(diagnostics.others, labels=parse_label_args(args.label))
    for warning in loaded.warnings:
        if DIAGNOSTICS_NOTE not in warning:  # the DCGM documents, which dcgm read
            print(f"warning: {warning}", file=sys.stderr)
    unread = unread_named_files(diagnostics.others, loaded)
    if unread:
        raise UserError(
            f"{unread[0]} could not be judged ({len(unread)} named file(s) unreadable): an acceptance gate "
            "judges every file it is named; fix or remove it (a folder may hold other files)"
        )
    health = judge(loaded, expectations)
    for warning in health.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    empty = [(n.node, path) for n in health.nodes for path in n.empty]
    if empty:  # judging nothing would call the node healthy; judging its older run would hide the failure
        raise UserError(
            f"{empty[0][1]}: the latest run of {empty[0][0]} {NOTHING_MEASURED}, so the node cannot be "
            "judged; rerun it there, or move the file away to judge the run before it"
        )
    return health
