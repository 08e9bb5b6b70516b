"""The report's health section (first), compact machines table for many machines, and history charts."""

from __future__ import annotations

import math
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


# --- a fleet's runs: torchrun jobs beside their nodes' own runs, killed runs --------------------------------


def _torchrun_job(data: dict, world: int = 16, nnodes: int = 2) -> dict:
    """`data` (a fleet.machine) as a torchrun collectives job of `world` ranks on `nnodes` nodes: all_reduce
    at three sizes, and nothing else (the node's own run measures the rest)."""
    template = data["benchmarks"][0]
    benches = []
    for size in (2**16, 2**20, 2**24):
        busbw = 100.0
        extra = {"case": "collectives", "op": "all_reduce", "dtype": "float32", "size": size, "bytes": size,
                 "in_place": False, "backend": "nccl", "device": "cuda:0", "world_size": world,
                 "nnodes": nnodes, "algbw": busbw, "busbw": busbw}
        stats = {**template["stats"], "median": size / busbw / 1e9}
        name = f"test_collectives[nccl-all_reduce-float32-{size}-outofplace]"
        benches.append({**template, "name": name, "fullname": name, "extra_info": extra, "stats": stats})
    suite = {**data["suite"], "distributed": {"world_size": world, "nnodes": nnodes, "backend": "nccl"}}
    return {**data, "suite": suite, "benchmarks": benches}


def _history_lines(tmp_path, monkeypatch) -> tuple[list, list[str]]:
    """The history chart's run lines (not its 1× rule) and its legend, drawn from the runs in tmp_path."""
    from suite.report import charts

    drawn = []
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or "")
    assert charts.history_charts(load_results([tmp_path]))
    lines = [line for ax in drawn[-1].axes for line in ax.get_lines() if line.get_marker() == "o"]
    return lines, [t.get_text() for t in drawn[-1].legends[0].get_texts()]


def test_history_keeps_a_nodes_torchrun_jobs_apart_from_its_own_runs(tmp_path, monkeypatch):
    """The collectives' torchrun job shares no benchmark with the node's own runs: in their history it was a
    run with no point (run 3) and, alone, a legend entry with no line."""
    fleet.write(tmp_path, "r1", fleet.machine("box", n_gpus=1, when="2026-01-01T00:00:00+00:00"))
    fleet.write(tmp_path, "r2", fleet.machine("box", n_gpus=1, seed=1, when="2026-02-01T00:00:00+00:00"))
    job = fleet.machine("box", n_gpus=1, when="2026-03-01T00:00:00+00:00")
    fleet.write(tmp_path, "job1", _torchrun_job(job))
    lines, legend = _history_lines(tmp_path, monkeypatch)
    assert lines and all(list(line.get_xdata()) == [1, 2] for line in lines)
    assert all(not math.isnan(y) for line in lines for y in line.get_ydata())
    assert len(legend) == 1 and "torchrun" not in legend[0]
    # A second job of the same launch is that job's history: a line of its own, named by its launch.
    job = fleet.machine("box", n_gpus=1, when="2026-04-01T00:00:00+00:00")
    fleet.write(tmp_path, "job2", _torchrun_job(job))
    lines, legend = _history_lines(tmp_path, monkeypatch)
    assert all(list(line.get_xdata()) == [1, 2] for line in lines)
    assert all(not math.isnan(y) for line in lines for y in line.get_ydata())
    assert len(legend) == 2 and legend[1].endswith("torchrun 16 ranks on 2 nodes"), legend


def test_default_baseline_is_a_complete_single_process_run(tmp_path):
    """Not the first file by name when that is a killed run (its missing families read — for every machine)
    or a torchrun job (collectives only)."""
    fleet.write(tmp_path, "a-killed", {**fleet.machine("killed", n_gpus=1), "partial": True})
    fleet.write(tmp_path, "b-job", _torchrun_job(fleet.machine("job", n_gpus=1)))
    fleet.write(tmp_path, "c-node", fleet.machine("node", n_gpus=1))
    html = render_report(load_results([tmp_path]))
    assert "baseline: <b>Synthetic GPU (scaled CPU run) @ node</b>" in html
    # With no such run, the first run is the baseline, as before.
    (tmp_path / "c-node.json").unlink()
    html = render_report(load_results([tmp_path]))
    assert "baseline: <b>Synthetic GPU (scaled CPU run) @ killed</b>" in html


def test_compact_machines_table_keeps_launch_and_driver(tmp_path):
    """Past MAX_MACHINE_CARDS runs, a node's 2-node torchrun job must not read as a duplicate of the node."""
    for i in range(MAX_MACHINE_CARDS):
        fleet.write(tmp_path, f"n{i:02d}", fleet.machine(f"node-{i:02d}", n_gpus=1, seed=i))
    fleet.write(tmp_path, "job", _torchrun_job(fleet.machine("node-00", n_gpus=1, driver="560.35.03")))
    html = render_report(load_results([tmp_path]))
    start = html.index('id="machines-table"')
    table = html[start: html.index("</table>", start)]
    assert "<th>launch</th>" in table and "<th>driver</th>" in table
    rows = [row for row in table.split("<tr>")[2:] if "@ node-00" in row]
    assert len(rows) == 2
    job = next(row for row in rows if "job.json" in row)
    own = next(row for row in rows if "n00.json" in row)
    assert "<td>torchrun 16 ranks on 2 nodes</td>" in job and "<td>560.35.03</td>" in job
    assert "<td>one process</td>" in own and "<td>550.54.15</td>" in own


def test_device_memory_is_in_gib(tmp_path):
    """As `python -m suite devices` and the evidence write it: 80e9 bytes are 74.5 GiB, not 80.0 GB."""
    fleet.write(tmp_path, "box", fleet.machine("box", n_gpus=2))
    html = render_report(load_results([tmp_path]))
    assert '<td class="num">74.5 GiB</td>' in html and " GB</td>" not in html
