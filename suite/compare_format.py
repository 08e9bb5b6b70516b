"""compare's output: a machine pair's table in text, markdown, CSV or JSON, the summary, the exit line."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
from dataclasses import asdict

from suite.compare_verdict import HIGHER_IS_BETTER, MIN_ROUNDS_TO_JUDGE, NOISE_IQR_SHARE, UNRECORDED, Pair
from suite.compare_verdict import Row, outcome
from suite.report.tables import format_time

MAX_INVALID_NAMED = 10  # invalid results named one per line on stderr; the rest counted
# A results file read from `<json>.partial.jsonl`: its run stopped (killed, crashed, Ctrl-C) or still runs.
PARTIAL_NOTE = "partial: the run did not finish"


def emit(text: str) -> None:
    """Print to stdout; a reader that stops early (`| head`) ends the output quietly, not with a traceback."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the broken pipe again when it flushes stdout at exit: point stdout at devnull.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _figure(value: float, metric: str) -> str:
    """A time, or a rate per watt (its unit is the family's: TFLOP/s/W, GB/s/W...)."""
    if metric not in HIGHER_IS_BETTER:
        return format_time(value)
    return "—" if math.isnan(value) else f"{value:.4g}/W"


def _cells(r: Row, metric: str) -> list[str]:
    ratio = "—" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
    change = "—" if math.isnan(r.change_pct) else f"{r.change_pct:+.1f}%"
    status = r.status
    if r.invalid or r.note.startswith(UNRECORDED):
        status += f" ({r.invalid or r.note})"
    elif r.note:
        status += " (in range)"
    return [status, r.case, r.benchmark, _figure(r.baseline, metric), _figure(r.candidate, metric), ratio, change,
            format_time(r.noise)]


HEADERS = ["status", "case", "benchmark", "baseline", "candidate", "ratio", "change", "noise"]
SUMMARY_HEADERS = ["baseline", "candidate", "regressions", "improvements", "missing", "verdict"]


def _named(label: str, partial: str) -> str:
    return f"{label} ({PARTIAL_NOTE})" if partial else label


def _as_json(pair: Pair, metric: str, threshold: float, thresholds: dict[str, float], changed_only: bool) -> dict:
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
                     *(f"{side}_{metric}" + ("" if metric in HIGHER_IS_BETTER else "_s")
                       for side in ("baseline", "candidate")), "ratio", "change_pct", "noise_s",
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


def render(pair: Pair, fmt: str, metric: str, threshold: float, thresholds: dict[str, float],
           changed_only: bool) -> str:
    """One pair's comparison in text or markdown: a headline with every count, then its rows (--changed-only:
    not unchanged)."""
    rows = pair.shown(changed_only)
    per_family = "".join(f", {k} {v * 100:g}%" for k, v in sorted(thresholds.items()))
    summary = (
        f"{_named(pair.base_label, pair.base_partial)} -> {_named(pair.cand_label, pair.cand_partial)}: "
        + (f"{metric} time" if metric not in HIGHER_IS_BETTER else
           f"{metric} (rate per watt, higher is better; ratio = baseline / candidate)")
        + f", threshold {threshold * 100:g}%{per_family}, noise "
        f"{NOISE_IQR_SHARE:g} x (IQR baseline + IQR candidate): "
        + ", ".join(f"{n} {s}" for s, n in pair.counts.items())
    )
    steady = sum(bool(r.note) and r.status == "unchanged" for r in pair.rows)
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
    return "\n".join([summary, "", *_table(HEADERS, [_cells(r, metric) for r in rows], fmt)])


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


