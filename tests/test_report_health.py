"""The report's health section (first), compact machines table for many machines, and history charts."""

from __future__ import annotations

from pathlib import Path

from suite.report.command import MAX_MACHINE_CARDS, render_report
from suite.results import load_results
from tests import fleet

IMPORTED = Path(__file__).parent / "data" / "imported"


def test_health_verdict_is_the_first_section(tmp_path):
    fleet.write(tmp_path, "box", fleet.machine("box", n_gpus=2, slow=0.8, slow_device=1))
    html = render_report(load_results([tmp_path]))
    sections = [line.split('"')[1] for line in html.splitlines() if line.startswith("<section id=")]
    assert sections[0] == "health"
    health = html[html.index('<section id="health">') : html.index('<section id="machines">')]
    assert "flagged" in health and "cuda:1 straggler:" in health


def test_other_tools_results_join_the_same_verdict(tmp_path):
    html = render_report(
        load_results(
            [
                IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json",
                IMPORTED / "nccl-tests" / "all_reduce_perf_2x8xH100.txt",
            ]
        )
    )
    health = html[html.index('<section id="health">') : html.index('<section id="machines">')]
    assert "h2d 14.2 GB/s = 27% of the expected 52 GB/s" in health
    assert "(nvbandwidth)" in html and "(nccl-tests)" in html


def test_a_node_whose_latest_run_measured_nothing_is_not_shown_healthy(tmp_path):
    fleet.write(tmp_path, "old", fleet.machine("box", when="2026-01-01T00:00:00+00:00"))
    empty = fleet.write(tmp_path, "new", {**fleet.machine("box", when="2026-02-01T00:00:00+00:00"),
                                          "benchmarks": []})
    html = render_report(load_results([tmp_path]))
    health = html[html.index('<section id="health">') : html.index('<section id="machines">')]
    assert '<b class="slower">no results</b>' in health and ">healthy<" not in health
    assert f"no results: {empty} holds no benchmark results" in health


def test_many_machines_get_a_compact_sortable_table(tmp_path):
    for i in range(MAX_MACHINE_CARDS + 1):
        fleet.write(tmp_path, f"n{i:02d}", fleet.machine(f"node-{i:02d}", n_gpus=1, seed=i))
    html = render_report(load_results([tmp_path]))
    assert 'id="machines-table"' in html and 'class="card"' not in html
    table = html[
        html.index('id="machines-table"') : html.index("</table>", html.index('id="machines-table"'))
    ]
    assert table.count("<tr><td>Synthetic GPU (scaled CPU run) @ node-") == MAX_MACHINE_CARDS + 1


def test_a_machine_measured_twice_gets_a_history_chart(tmp_path):
    fleet.write(tmp_path, "a", fleet.machine("box", n_gpus=1, when="2026-01-01T00:00:00+00:00"))
    html = render_report(load_results([tmp_path]))
    assert 'id="history"' not in html
    fleet.write(
        tmp_path, "b", fleet.machine("box", n_gpus=1, seed=1, slow=0.9, when="2026-02-01T00:00:00+00:00")
    )
    html = render_report(load_results([tmp_path]))
    assert 'id="history"' in html and "History: speed per family" in html
