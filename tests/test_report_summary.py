"""The report's first screen: each machine's headline figures and health, numbers for people, rows once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from suite.cli import main
from suite.report.tables import format_rate, stop_text

DATA = Path(__file__).parent / "data"
REAL = DATA / "real"


def _report(tmp_path: Path, *inputs: Path) -> str:
    out = tmp_path / "r.html"
    assert main(["report", *map(str, inputs), "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def _section(html: str, anchor: str) -> str:
    part = html[html.index(f'id="{anchor}"'):]
    return part[:part.index("</section>")]


def test_each_machine_has_its_headline_figures_and_health_on_top(tmp_path):
    html = _report(tmp_path, REAL / "h200_quick.json", REAL / "cpu_quick_run.json")
    summary = _section(html, "summary")
    # On top, in the health section (the verdict's first section), above each node's findings.
    assert html.index('id="health"') < html.index('id="summary"') < html.index('id="verdicts"') < html.index(
        'id="machines"')
    h200 = next(row for row in summary.split("<tr>") if row.startswith("<td>NVIDIA H200"))
    # Every family in its own unit, % of the measured ceiling and the datasheet where the run recorded them.
    assert re.search(r"matmul bf16 <b>6\d\d TFLOP/s</b><small>\d+% of ceiling · \d+% of datasheet</small>",
                     h200)
    assert re.search(r"h2d <b>5\d\.\d GB/s</b>", h200) and re.search(r"same device <b>1,\d{3} GB/s</b>", h200)
    assert re.search(r"model best <b>\d+\.?\d* M samples/s</b>", h200)
    assert ">healthy</b>" in h200
    cpu = next(row for row in summary.split("<tr>") if row.startswith("<td>CPU"))
    assert "copy best <b>" in cpu and "GB/s</b>" in cpu  # no measure of a GPU's: its best rate per family


def test_rates_and_margins_are_written_for_people():
    assert format_rate(1.081e7, "samples/s") == "10.8 M samples/s"
    assert format_rate(136.27, "GB/s") == "136 GB/s"
    assert format_rate(2086.4, "GB/s") == "2,086 GB/s"
    assert format_rate(0.12134, "TFLOP/s") == "0.121 TFLOP/s"
    assert stop_text(40, "time", 4.7, 0.009) == "40 · time ±470% (target ±0.9%)"


def test_result_tables_show_shares_of_ceiling_and_datasheet_and_only_parameters_the_id_does_not_say(tmp_path):
    matmul = _section(_report(tmp_path, REAL / "h200_quick.json"), "family-matmul")
    assert "<th>% ceiling</th><th>% datasheet</th>" in matmul
    row = next(r for r in matmul.split("<tr>") if "test_matmul[cuda:0-float32-" in r)
    assert re.search(r"<small>allow_tf32=False</small>", row) and "m=" not in row and "dtype=" not in row
    share = r'<td class="num" data-v="\d+">\d+%</td>'
    assert re.search(share + share + "</tr>", row)


def test_a_test_id_twice_in_one_file_is_shown_and_counted_once_with_a_note(tmp_path):
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    once = _report(tmp_path, DATA / "h200x2.json")
    data["benchmarks"] += data["benchmarks"][:3]
    (tmp_path / "twice.json").write_text(json.dumps(data), encoding="utf-8")
    html = _report(tmp_path, tmp_path / "twice.json")
    assert re.findall(r'<span class="count">\d+ results</span>', html) == re.findall(
        r'<span class="count">\d+ results</span>', once)
    assert "3 result(s) appear twice in one machine&#39;s file, shown and counted once" in html


def test_a_habit_whose_slow_way_came_out_faster_says_so_as_the_terminal_does(tmp_path):
    data = json.loads((REAL / "h200_quick.json").read_text(encoding="utf-8"))
    slow = next(b for b in data["benchmarks"] if b["extra_info"].get("role") == "slow")
    slow["stats"]["median"] /= 100  # the habit to avoid, 100x faster than its fix: noise, or a broken case
    (tmp_path / "run.json").write_text(json.dumps(data), encoding="utf-8")
    habits = _section(_report(tmp_path, tmp_path / "run.json"), "family-habits")
    row = next(r for r in habits.split("<tr>") if f"<td>{slow['extra_info']['variant']}</td>" in r)
    assert re.search(r"<b>\d+(\.\d+)?× faster \(unexpected: noise\?\)</b>", row), row
