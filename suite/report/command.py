"""`python -m suite report RESULTS... -o report.html`: one self-contained HTML page from results files."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from suite import __version__
from suite.cases import FAMILIES, family_read
from suite.errors import UserError
from suite.health.checks import DEFAULT_FAIL_ON, judge
from suite.health.command import node_lines
from suite.health.expect import load_expectations
from suite.report.charts import chart_machines, charts_for, family_charts, history_charts
from suite.report.overview import headlines
from suite.report.power import attach_per_watt
from suite.report.tables import SHARES, machine_views, result_rows, speed_table
from suite.results import (
    FOREIGN_CASE,
    OUR_TOOL,
    LoadedResults,
    Machine,
    export_table,
    load_results,
    parse_label_args,
)

TEMPLATES = Path(__file__).resolve().parent / "templates"
OPEN_ROWS = 60  # tables up to this long start unfolded; longer ones would bury the next family's charts
# Beyond this many machines one card each fills screens: a compact sortable table takes their place.
MAX_MACHINE_CARDS = 12
MAX_NAMED_LEFT_OUT = 20  # runs a family's chart note names as left out; a fleet's hundreds would be a page

FOREIGN_TITLE = "Other (not ours)"
FOREIGN_NOTE = "Results from pytest-benchmark files that are not ours: timings only."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="results files (.json, .partial.jsonl) or folders searched recursively",
    )
    parser.add_argument("-o", "--output", default="reports/report.html", help="HTML file to write")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="FILE=NAME",
        help="name a machine in the report (repeatable)",
    )
    parser.add_argument(
        "--baseline", metavar="NAME",
        help="machine label to compare against (default: the first complete single-process run of ours)",
    )
    parser.add_argument("--csv", metavar="PATH", help="also write the tidy table as CSV")
    parser.add_argument(
        "--parquet", metavar="PATH", help="also write the tidy table as Parquet (needs pyarrow)"
    )
    parser.add_argument("--title", default="GPU benchmark report", help="page title")
    parser.add_argument("--expect", action="append", default=[], metavar="FILE",
                        help="YAML of expected figures for the health verdict, added to the shipped table")


def _family_order(cases: list[str]) -> list[str]:
    """The registry's order, then families it does not know alphabetically, foreign rows last."""
    known = [c for c in FAMILIES if c in cases]
    rest = sorted(c for c in cases if c not in FAMILIES and c != FOREIGN_CASE)
    return known + rest + ([FOREIGN_CASE] if FOREIGN_CASE in cases else [])


def _section(case: str, rows, partial: set[str]) -> dict:
    """A family's section without its charts: title, note, its own tables (its `charts` module's TABLES, of
    the valid results, as its charts) and every result, invalid ones said to be."""
    if case == FOREIGN_CASE:
        title, note = FOREIGN_TITLE, FOREIGN_NOTE
    else:
        title, note = family_read(case, "TITLE", case), family_read(case, "NOTE", "")
    valid = rows[rows["invalid"] == ""]
    tables = [t for build in getattr(family_charts(case), "TABLES", []) if (t := build(valid)) is not None]
    shown = result_rows(rows, partial)
    return {"case": case, "title": title, "note": note, "tables": tables, "rows": shown,
            "metric_header": _metric_header(rows), "shares": [k for k in SHARES if any(r[k] for r in shown)]}


def _metric_header(rows) -> str:
    units = list(dict.fromkeys(rows["metric_name"].dropna()))
    names = {"tflops": "TFLOP/s", "gbps": "GB/s", "busbw": "busbw", "samples_per_s": "samples/s"}
    return " / ".join(names.get(u, u) for u in units) or "rate"


def _once(loaded: LoadedResults) -> tuple[LoadedResults, dict[str, str]]:
    """The results with a benchmark that a machine's file holds twice (same test id) kept once, the first, so
    it is not counted twice in charts and means; per family, a note naming them. An invalid copy is the one
    kept: a bad number in a file never vanishes behind a good twin."""
    table = loaded.table
    invalid_first = (table["invalid"] != "").sort_values(ascending=False, kind="stable").index
    twice = table.loc[invalid_first].duplicated(["label", "fullname", "name"]).reindex(table.index)
    if not twice.any():
        return loaded, {}
    notes = {}
    for case, dups in table[twice].groupby("case", sort=False):
        names = list(dict.fromkeys(dups["name"] + " (" + dups["label"] + ")"))
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        notes[case] = (f"{len(names)} result(s) appear twice in one machine's file, shown and counted once: "
                       f"{', '.join(names[:3])}{more}.")
    return dataclasses.replace(loaded, table=table[~twice]), notes


def default_baseline(machines: dict[str, Machine]) -> str:
    """The first run (in file order) that measured every family it set out to, on its own: ours, not partial,
    one process, with results. A killed run's missing families read "—" for every machine, a torchrun job
    measured its one family alone, another tool's results are one family. The first run where none is."""
    for label, m in machines.items():
        if m.tool == OUR_TOOL and not m.foreign and not m.partial and not m.launch and m.n_benchmarks:
            return label
    return next(iter(machines))


def _chart_note(present: list[str], shown: list[str], runs: dict[str, Machine]) -> str:
    """What a family's charts leave out, and that the table does not: one sentence and the runs by name."""
    charted = set(shown)
    left_out = [label for label in present if label not in charted]
    if not left_out:
        return ""
    models = {runs[label].gpu_model for label in present if label in runs}
    covered = {runs[label].gpu_model for label in shown if label in runs}
    cover = "every GPU model among them"
    if not covered >= models:
        cover = f"{len(covered)} of their {len(models)} GPU models"
    named = ", ".join(left_out[:MAX_NAMED_LEFT_OUT])
    more = f" and {len(left_out) - MAX_NAMED_LEFT_OUT} more" if len(left_out) > MAX_NAMED_LEFT_OUT else ""
    return (f"Charts show {len(shown)} of {len(present)} runs, {cover} (baseline first); the table lists "
            f"them all. Left out: {named}{more}.")


def _family_sections(loaded: LoadedResults, chart_order: list[str], twice: dict[str, str]) -> list[dict]:
    """Each family's section of the report: its table, the charts of the runs chosen to show (in
    `chart_order`), and a note on those left out."""
    table = loaded.table
    partial = {m.label for m in loaded.machines.values() if m.partial}
    families = []
    for case in _family_order(list(dict.fromkeys(table["case"]))):
        rows = table[table["case"] == case]
        measured = set(rows["label"].unique())
        present = [m for m in chart_order if m in measured]
        shown = chart_machines(present, loaded.machines)
        charts = charts_for(case, rows, shown)
        note = _chart_note(present, shown, loaded.machines) if charts else ""
        families.append({**_section(case, rows, partial), "charts": charts, "chart_note": note,
                         "twice": twice.get(case, "")})
    return families


def render_report(
    loaded: LoadedResults, baseline: str | None = None, title: str = "GPU benchmark report",
    expect: list[str] | None = None,
) -> str:
    """The report's HTML for already-loaded results; `baseline` is a machine label (default:
    default_baseline's)."""
    labels = list(loaded.machines)
    baseline = baseline or default_baseline(loaded.machines)
    if baseline not in loaded.machines:
        raise UserError(
            f"--baseline {baseline!r} is not a machine in these results; use one of: {', '.join(labels)}"
        )
    chart_order = [baseline] + [m for m in labels if m != baseline]
    loaded, twice = _once(loaded)
    table = loaded.table
    families = _family_sections(loaded, chart_order, twice)
    attach_per_watt(families, table, chart_order)
    speed_cases, speed_rows = speed_table(table, chart_order, baseline)
    health = judge(loaded, load_expectations(expect))
    status_of = {label: n.status(DEFAULT_FAIL_ON) for n in health.nodes for label in n.labels}
    health_rows = node_lines(health, DEFAULT_FAIL_ON)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2").render(
        title=title,
        suite_version=__version__,
        built=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machines=machine_views(loaded.machines),
        # Runs of one node (host and accelerators, as health counts nodes) are one machine measured again.
        n_machines=len({m.node for m in loaded.machines.values()}),
        machine_cards=len(loaded.machines) <= MAX_MACHINE_CARDS,
        status_of=status_of,
        headlines=headlines(table, chart_order, status_of),
        health_rows=health_rows,
        health_flagged=sum(status == "flagged" for status, _, _ in health_rows),
        history=history_charts(loaded),
        baseline=baseline,
        n_results=len(table),
        families=families,
        speed_cases=speed_cases,
        speed_rows=speed_rows,
        warnings=loaded.warnings + health.warnings + list(twice.values()),
        open_rows=OPEN_ROWS,
    )


def run(args: argparse.Namespace) -> int:
    loaded = load_results(args.results, labels=parse_label_args(args.label))
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    html = render_report(loaded, baseline=args.baseline, title=args.title, expect=args.expect)
    out = Path(args.output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out} ({exc.strerror}); pick another -o path") from None
    print(out)
    for path in export_table(loaded.table, csv=args.csv, parquet=args.parquet):
        print(path)
    return 0
