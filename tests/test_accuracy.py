"""`python -m suite accuracy`: one table of paired ratios for every family it covers, verdicts from them."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from suite.tools.accuracy import HEADER, QUICK_ROUNDS, table
from suite.tools.accuracy import families as accuracy_families
from suite.tools.paired import MIN_PAIRS_FOR_RATIO, Pair, Target, summarise

ROOT = Path(__file__).resolve().parent.parent


def table_rows(stdout: str) -> list[dict[str, str]]:
    """The accuracy table's rows as {column: cell}, cut at the header's column offsets (cells are padded)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == list(HEADER[:2]))
    header = lines[start]
    offsets = [header.index(name) for name in HEADER] + [None]
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append({name: line[a:b].strip() for name, a, b in zip(HEADER, offsets, offsets[1:])})
    return rows


@pytest.mark.slow
def test_quick_run_prints_one_row_per_target_with_finite_positive_ratios():
    proc = subprocess.run([sys.executable, "-m", "suite", "accuracy", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table_rows(proc.stdout)
    families = [row["family"] for row in rows]
    # Every target of the four scripts this command replaced, in family order.
    assert families == ["matmul", "ceiling", "conv", "copy"] + ["placement"] * 4 + ["collectives"]
    assert set(families) == set(accuracy_families())
    assert QUICK_ROUNDS < MIN_PAIRS_FOR_RATIO
    for row in rows:
        low, high = (float(x) for x in row["pair ratios"].split("-"))
        assert all(math.isfinite(x) and x > 0 for x in (low, high)) and low <= high, row
        # Two pairs: no median ratio to show (it would be their mean), and no verdict.
        assert row["ratio"] == "-" and row["verdict"] == "-", row
        assert row["target"].startswith(("within ", ">= ", "< ")), row
    assert "nothing judged" in proc.stdout
    assert f"ratio '-': fewer than {MIN_PAIRS_FOR_RATIO} paired rounds" in proc.stdout


def test_unknown_family_is_one_line_naming_the_families():
    proc = subprocess.run([sys.executable, "-m", "suite", "accuracy", "habits"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: no accuracy check for 'habits'; families with one: {', '.join(accuracy_families())}"]


def pairs(title: str, target: Target, values: list[tuple[float, float]]) -> list[Pair]:
    return [Pair("f", title, "s", "Timer", target, suite, ref) for suite, ref in values]


def test_verdict_is_the_median_of_paired_ratios_not_the_ratio_of_medians():
    # Both sides drift together (a slow phase, then a fast one): paired ratios are all 1.0, while the medians
    # of each side taken apart would be 2.0 / 1.05 off.
    values = [(1.0, 1.0), (2.0, 2.0), (2.0, 2.0), (1.05, 1.05), (4.0, 4.0)]
    shuffled = [(1.0, 2.0), (2.0, 1.05), (2.0, 4.0), (1.05, 1.0), (4.0, 2.0)]  # same medians, unpaired
    (row,) = summarise(pairs("x", Target("within", 0.10), values))
    assert row.ratio == 1.0 and row.passed
    (unpaired,) = summarise(pairs("x", Target("within", 0.10), shuffled))
    assert unpaired.suite == row.suite and unpaired.ref == row.ref
    assert unpaired.low < 0.9 and unpaired.high > 1.1  # the spread shows the disagreement


@pytest.mark.parametrize(("target", "values", "passed"), [
    (Target("within", 0.10), [(1.09, 1.0), (1.05, 1.0), (0.95, 1.0)], True),  # median 1.05, every pair within
    # Median 1.09 within, but with 3 pairs the interval of the median is their range (0.5-1.11): not judged.
    (Target("within", 0.10), [(1.09, 1.0), (1.11, 1.0), (0.5, 1.0)], None),
    (Target("within", 0.10), [(1.2, 1.0), (1.11, 1.0), (0.5, 1.0)], False),  # median ratio 1.11
    (Target("at_least", 50), [(60e-6, 1e-6), (40e-6, 1e-6), (70e-6, 1e-6)], True),
    (Target("at_least", 50), [(60e-6, 1e-6), (40e-6, 1e-6), (30e-6, 1e-6)], False),
    (Target("below", 2e-6), [(1e-6, 9.0), (3e-6, 9.0), (1.5e-6, 9.0)], True),  # the suite's median, not ratio
    (Target("below", 2e-6), [(2.5e-6, 1e-9), (3e-6, 1e-9), (1.5e-6, 1e-9)], False),
])
def test_each_kind_of_target_judges_the_right_figure(target, values, passed):
    (row,) = summarise(pairs("x", target, values))
    assert row.passed is passed


def test_quick_judges_nothing():
    (row,) = summarise(pairs("x", Target("within", 0.10), [(5.0, 1.0)]), judge=False)
    assert row.passed is None


def test_two_pairs_show_no_ratio_and_no_verdict():
    # One disturbed pair of two: their "median" (the mean) would read 43 for two nearly equal medians.
    two = pairs("x", Target("within", 0.10), [(0.110, 0.109), (85.0, 1.0)])
    (row,) = summarise(two)
    assert row.ratio is None and row.passed is None
    assert row.low == pytest.approx(0.110 / 0.109) and row.high == 85.0
    (shown,) = table_rows(table([row]))
    assert shown["ratio"] == "-" and shown["pair ratios"] == "1.009-85.000" and shown["verdict"] == "-"
    (three,) = summarise(two + pairs("x", Target("within", 0.10), [(1.0, 1.0)]))
    # A median now, but 3 pairs bound it only by their range, which the disturbed pair stretches to 85:
    # shown, not passed. Seven pairs with that one disturbed pair among them pass.
    assert three.ratio == pytest.approx(0.110 / 0.109) and three.passed is None
    assert table_rows(table([three]))[0]["verdict"] == "noise"
    (seven,) = summarise(two + pairs("x", Target("within", 0.10), [(1.0, 1.0), (1.02, 1.0), (0.99, 1.0),
                                                                     (1.01, 1.0), (1.0, 1.0)]))
    assert seven.passed is True
    assert summarise(two + pairs("x", Target("within", 0.10), [(1.5, 1.0)]))[0].passed is False  # median 1.5


def test_a_judged_run_needs_enough_rounds_for_a_median(capsys):
    from suite.cli import main

    assert main(["accuracy", "--rounds", str(MIN_PAIRS_FOR_RATIO - 1)]) == 2
    expected = (f"error: --rounds {MIN_PAIRS_FOR_RATIO - 1}: give at least {MIN_PAIRS_FOR_RATIO} (a verdict is on "
                "the median of the paired ratios; default 7), or add --quick to check only that it runs")
    assert capsys.readouterr().err.splitlines() == [expected]
