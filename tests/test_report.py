"""suite.report: the HTML page is complete, self-contained, escaped; exports round-trip; no torch import."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import pandas as pd
import pytest

from suite.cli import main
from suite.cases import FAMILIES, family_part
from suite.results import load_results

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One report of every fixture in tests/data (good, bad, partial, foreign, hostile), built once."""
    out = tmp_path_factory.mktemp("report")
    html_path = out / "nested" / "report.html"
    csv_path = out / "table.csv"
    argv = ["report", str(DATA), "-o", str(html_path), "--csv", str(csv_path), "--title", "Fleet <b>x</b>"]
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return {
        "code": code,
        "html": html_path.read_text(encoding="utf-8"),
        "path": html_path,
        "csv": csv_path,
        "stdout": stdout.getvalue(),
        "stderr": stderr.getvalue(),
    }


def test_report_is_written_with_one_warning_per_unreadable_file(built):
    assert built["code"] == 0
    assert built["stdout"].splitlines()[0] == str(built["path"])
    warnings = built["stderr"].splitlines()
    assert f"warning: {DATA / 'truncated.json'}: not JSON (truncated?) — skipped" in warnings
    assert any(w.startswith(f"warning: {DATA / 'empty.json'}: empty file") for w in warnings)
    assert any("written by gpubench-suite 9.0.0 (results schema 99)" in w for w in warnings)
    assert all(w.startswith("warning: ") for w in warnings)


def test_report_has_every_section(built):
    html = built["html"]
    for family in (
        "Matmul",
        "Copies between host and devices",
        "Tensor placement",
        "Habits",
        "Collectives",
        "Models",
        "latency",
        "Other (not ours)",
    ):
        assert f'{family} <span class="count">' in html
    assert "40× slower" in html  # small_vs_batched was fabricated 40x slower
    assert "copies nothing" in html  # the .to-on-the-same-device note
    assert "(partial)" in html
    assert "Relative speed" in html and "baseline" in html
    assert "1 GB/s = 10<sup>9</sup> bytes/s" in html
    assert html.count("<img ") >= 8


def test_strings_from_results_files_are_escaped(built):
    html = built["html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "Fleet &lt;b&gt;x&lt;/b&gt;" in html


def test_report_is_self_contained(built):
    html = built["html"]
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"<(link|iframe)\b", html)
    srcs = re.findall(r'<img src="([^"]{0,30})', html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)


def test_csv_export_round_trips(built):
    table = load_results([DATA]).table
    back = pd.read_csv(built["csv"])
    assert len(back) == len(table)
    assert list(back["label"]) == list(table["label"])
    assert list(back["name"]) == list(table["name"])
    pd.testing.assert_series_equal(back["median"], table["median"], check_names=False)
    pd.testing.assert_series_equal(back["tflops"], table["tflops"], check_names=False)


def test_parquet_export_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "t.parquet"
    assert (
        main(
            [
                "report",
                str(DATA / "foreign.json"),
                str(DATA / "partial"),
                "-o",
                str(tmp_path / "r.html"),
                "--parquet",
                str(path),
            ]
        )
        == 0
    )
    table = load_results([DATA / "foreign.json", DATA / "partial"]).table
    back = pd.read_parquet(path)
    assert list(back["name"]) == list(table["name"]) and list(back["partial"]) == list(table["partial"])
    pd.testing.assert_series_equal(back["tflops"], table["tflops"], check_names=False)


def test_parquet_without_pyarrow_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("suite.results.have_pyarrow", lambda: False)
    code = main(
        [
            "report",
            str(DATA / "foreign.json"),
            "-o",
            str(tmp_path / "r.html"),
            "--parquet",
            str(tmp_path / "t.parquet"),
        ]
    )
    assert code == 2
    assert "pip install pyarrow" in capsys.readouterr().err.splitlines()[-1]


def test_nothing_readable_is_exit_2(tmp_path, capsys):
    assert main(["report", str(DATA / "empty.json"), str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: no results could be read") and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()


def test_unknown_baseline_is_exit_2(tmp_path, capsys):
    assert (
        main(["report", str(DATA / "foreign.json"), "-o", str(tmp_path / "r.html"), "--baseline", "nope"])
        == 2
    )
    assert "laptop-7" in capsys.readouterr().err


def test_labels_and_baseline_choose_the_reference(tmp_path):
    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    slow, fast = tmp_path / "slow.json", tmp_path / "fast.json"
    slow.write_text(
        json.dumps(fixtures.synthetic_results("a", n_gpus=1, speed=0.5, limit=12)), encoding="utf-8"
    )
    fast.write_text(
        json.dumps(fixtures.synthetic_results("b", n_gpus=1, speed=1.0, limit=12)), encoding="utf-8"
    )
    out = tmp_path / "r.html"
    argv = [
        "report",
        str(slow),
        str(fast),
        "-o",
        str(out),
        "--label",
        "slow.json=old $box$",
        "--label",
        f"{fast}=new_box",
        "--baseline",
        "new_box",
    ]
    assert main(argv) == 0
    html = out.read_text(encoding="utf-8")
    assert "baseline: <b>new_box</b>" in html and "old $box$" in html
    assert re.search(r'class="num slower" data-v="0\.\d+">0\.\d+×', html)  # half as fast as the baseline


def test_every_family_has_its_charts_including_the_fallback(built):
    sections = built["html"].split('<section id="family-')[1:]
    cases = [sec.split('"', 1)[0] for sec in sections]
    assert set(cases) >= {*(n for n in FAMILIES if family_part(n, "charts")), "latency", "other"}
    for case, sec in zip(cases, sections):
        n_img = sec.split("</section>", 1)[0].count("<img ")
        assert n_img >= (2 if case == "copy" else 1), case


def test_analysis_side_never_imports_torch():
    code = (
        "import sys, suite.results, suite.report.command, suite.report.charts, suite.compare, suite.cases as c; "
        "[c.family_part(n, 'charts') for n in c.FAMILIES]; "
        "sys.exit('torch' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_report_of_a_real_cpu_only_run(tmp_path):
    """A file the pipeline itself wrote on a CPU-only machine (only pageable host copies, one device)."""
    out = tmp_path / "r.html"
    assert main(["report", str(DATA / "real" / "cpu_default_run.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "Copy bandwidth matrix" in html and "Matmul" in html


# --- how each benchmark stopped (precision stopping's extra_info) -----------------------------------------


def _row_of(html: str, name: str) -> str:
    """The results-table row (<tr>...</tr>) of one benchmark."""
    match = re.search(rf"<tr><td>[^<]*</td><td><code>{re.escape(escape(name))}</code>.*?</tr>", html)
    assert match, f"no row for {name}"
    return match.group(0)


def test_results_table_shows_how_each_benchmark_stopped(tmp_path):
    data = json.loads((DATA / "cpu_only.json").read_text(encoding="utf-8"))
    stops = {  # benchmark: rounds, extra_info as suite.timing.stopping_info writes it, the cell expected
        0: (12, {"stopped_on": "precision", "margin": 0.0043, "precision_target": 0.01},
            "12 · precision ±0.43%"),
        1: (40, {"stopped_on": "time", "margin": 0.031, "precision_target": 0.01},
            "40 · time ±3.1% (target ±1%)"),  # it missed the target: the target is shown
        2: (10, {"stopped_on": "fixed", "margin": 0.02, "precision_target": None}, "10 · fixed ±2%"),
        3: (7, {"stopped_on": "time", "margin": 0.05, "precision_target": None}, "7 · time ±5%"),  # no target
    }
    for i, (rounds, info, _) in stops.items():
        bench = data["benchmarks"][i]
        bench["stats"]["rounds"] = rounds
        bench["extra_info"].update(info, rounds=rounds, confidence=0.99)
    (tmp_path / "run.json").write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "run.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    for i, (_, _, cell) in stops.items():
        row = _row_of(html, data["benchmarks"][i]["name"])
        assert f">{cell}</td>" in row
        assert "margin=" not in row and "stopped_on=" not in row and "confidence=" not in row  # not as params
    # A result that says nothing of stopping (older files, other tools) shows its rounds alone.
    plain = data["benchmarks"][len(stops)]
    assert f">{int(plain['stats']['rounds'])}</td>" in _row_of(html, plain["name"])


def test_a_host_bound_result_says_so_beside_its_rate(tmp_path):
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    host, device = data["benchmarks"][:2]
    host["extra_info"].update(bound="host", host_share=0.97)
    device["extra_info"].update(bound="device", host_share=0.04)
    (tmp_path / "run.json").write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "run.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "host-bound (97% issuing)" in _row_of(html, host["name"])
    assert "host-bound" not in _row_of(html, device["name"])
    # bound and host_share are how it ran, not what: the two results are still matched across runs by params.
    assert "bound=" not in _row_of(html, host["name"]) and "host_share=" not in _row_of(html, host["name"])


def test_a_real_run_reports_the_stopping_it_recorded(run_benchmarks, tmp_path):
    config = {
        "devices": ["cpu"],
        "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 3, "precision": 0.05},
        "cases": {"copy": {"sizes": ["4KiB", "64KiB"], "memory": ["pageable"], "directions": ["uni"]}},
    }
    result, data = run_benchmarks(config, "-k", "test_copy")
    result.assert_outcomes(passed=2)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        assert info["stopped_on"] in ("precision", "time") and info["rounds"] == bench["stats"]["rounds"]
        cell = f"{info['rounds']} · {info['stopped_on']} ±{100 * info['margin']:.2g}%"
        assert cell in _row_of(html, bench["name"])


# --- what the charts and headings say (the walkthrough of a CPU-only run) -----------------------------------

REAL = DATA / "real" / "cpu_default_run.json"


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures the charts draw, captured instead of encoded, so their text can be read."""
    from suite.report import charts

    drawn = []
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or "")
    return drawn


def _family(path: Path, case: str) -> tuple[pd.DataFrame, list[str]]:
    loaded = load_results([path])
    return loaded.table[loaded.table["case"] == case], list(loaded.machines)


def test_conv_and_model_bars_are_labelled_by_layer_and_batch_not_every_parameter(figures):
    from suite.report.charts import charts_for

    for case, expected in (
        ("conv", {"cpu · float32 · resnet50-conv2-3x3 · nchw · fwd · b2",
                  "cpu · float32 · resnet50-conv4-1x1 · channels_last · fwd+bwd · b2"}),
        ("model", {"cpu · float32 · linear-b64", "cpu · float32 · mlp-b64", "cpu · float32 · lenet-b64"}),
    ):
        rows, machines = _family(REAL, case)
        charts_for(case, rows, machines)
        labels = [t.get_text() for t in figures[-1].axes[0].get_yticklabels()]
        assert len(labels) == len(rows) and expected <= set(labels), labels
        assert all("=" not in label and len(label) < 70 for label in labels), labels


def test_conv_layer_without_a_name_is_labelled_by_its_dimensions(figures):
    from suite.report.charts import charts_for

    rows, machines = _family(REAL, "conv")
    charts_for("conv", rows.assign(layer=None), machines)
    labels = [t.get_text() for t in figures[-1].axes[0].get_yticklabels()]
    assert "cpu · float32 · 56×56 64→64 k3×3 · nchw · fwd · b2" in labels


def test_cpu_to_cpu_copies_are_titled_host_not_same_device(figures):
    from suite.cases.copy.charts import copy_curves

    rows, machines = _family(REAL, "copy")
    copy_curves(rows, machines)
    titles = [ax.get_title(loc="left") for ax in figures[-1].axes]
    assert titles == ["host (CPU → CPU)"]


def test_bidirectional_copies_are_plotted_at_their_buffer_size_not_both_directions(figures):
    from suite.cases.copy.charts import copy_curves

    rows, machines = _family(DATA / "h200x2.json", "copy")
    bi = rows[rows["src"].eq("cpu") & rows["dst"].eq("cuda:0")].copy()
    bi["direction"], bi["bytes"] = "bi", 2 * bi["bytes"]  # as copy's measure counts them: both directions
    copy_curves(pd.concat([rows, bi]), machines)
    lines = [line for ax in figures[-1].axes for line in ax.get_lines()]
    xs = {x for line in lines for x in line.get_xdata()}
    assert xs and xs <= set(rows["bytes"]), sorted(xs - set(rows["bytes"]))
    # With both directions the dash pattern still says the host memory (it fell back to dotted for every line)
    # and a marker says the direction.
    assert {line.get_linestyle() for line in lines} <= {"-", "--"}
    assert {line.get_marker() for line in lines} == {"o", "s"}
    legend = [t.get_text() for t in figures[-1].legends[0].get_texts()]
    assert "one way" in legend and any(t.startswith("both ways") for t in legend)


@pytest.mark.parametrize(
    ("path", "says", "never"),
    [(REAL, "host copies from pageable memory (no pinned copies measured)", "pinned memory."),
     (DATA / "h200x2.json", "host copies from pinned memory.", "pageable")],
)
def test_heatmap_caption_names_the_host_memory_it_shows(path, says, never):
    from suite.cases.copy.charts import copy_heatmaps

    rows, machines = _family(path, "copy")
    (chart,) = copy_heatmaps(rows, machines)
    assert says in chart.caption and never not in chart.caption


def test_heatmap_caption_says_the_diagonal_counts_bytes_once_only_when_there_is_one():
    from suite.cases.copy.charts import copy_heatmaps

    rows, machines = _family(DATA / "h200x2.json", "copy")
    assert (rows["src"] == rows["dst"]).any()
    (chart,) = copy_heatmaps(rows, machines)
    assert "diagonal (a copy within one device) counts each byte once" in chart.caption
    assert "bandwidthTest --dtod" in chart.caption
    (chart,) = copy_heatmaps(rows[rows["src"] != rows["dst"]], machines)
    assert "diagonal" not in chart.caption


def _runs_of_one_machine(tmp_path: Path, n: int) -> list[Path]:
    data = json.loads(REAL.read_text(encoding="utf-8"))
    paths = []
    for i in range(n):
        path = tmp_path / f"run{i}.json"
        when = f"2026-12-0{i + 1}T00:00:00+00:00"
        path.write_text(json.dumps({**data, "datetime": when}), encoding="utf-8")
        paths.append(path)
    return paths


def test_history_counts_runs_in_whole_numbers(tmp_path, figures):
    from suite.report.charts import history_charts

    assert history_charts(load_results(_runs_of_one_machine(tmp_path, 2)))
    for ax in figures[-1].axes:
        shown = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert shown == [1, 2], shown


def test_one_machine_measured_twice_is_one_machine_two_runs(tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", *map(str, _runs_of_one_machine(tmp_path, 2)), "-o", str(out)]) == 0
    assert '<p class="meta">1 machine (2 runs) · ' in out.read_text(encoding="utf-8")
    assert main(["report", str(REAL), str(DATA / "h200x2.json"), "-o", str(out)]) == 0
    assert '<p class="meta">2 machines · ' in out.read_text(encoding="utf-8")


def test_ceiling_and_conv_sections_have_titles_and_notes(tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", str(REAL), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert 'Compute ceiling <span class="count">' in html and 'Convolutions <span class="count">' in html
    assert "the measured ceiling that % of ceiling" in html and "can exceed 100% of the ceiling" in html
    assert "not mamf-finder" in html  # a sustained median, not the figure of the tool users know


def test_machine_card_names_the_driver_and_counts_the_gpu_links(tmp_path):
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    gpus = [d for d in data["machine_info"]["devices"] if d.get("kind") != "cpu"]
    for d in gpus:
        d["driver_version"] = "580.159.03"
        d["links"] = {e["id"]: "NV18" for e in gpus if e is not d}
    path = tmp_path / "h200x2.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<dt>driver</dt><dd>580.159.03</dd>" in html
    assert "<dt>GPU links</dt><dd>NV18 × 1 pair</dd>" in html  # two GPUs: one pair, counted once
    from suite.report.tables import links_text

    mixed = [{"id": f"cuda:{i}", "links": {f"cuda:{j}": "NV4" if {i, j} in ({0, 1}, {2, 3}) else "SYS"
                                           for j in range(4) if j != i}} for i in range(4)]
    assert links_text(mixed) == "NV4 × 2 pairs, SYS × 4 pairs" and links_text([{"id": "cpu"}]) == ""


def test_heatmap_names_each_gpu_pairs_link_under_its_figure(tmp_path, figures):
    from suite.cases.copy.charts import copy_heatmaps

    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    for bench in data["benchmarks"]:
        extra = bench["extra_info"]
        src, dst = extra.get("src", "cpu"), extra.get("dst", "cpu")
        if extra.get("case") == "copy" and "cpu" not in (src, dst) and src != dst:
            extra["link"] = "NV18"
    path = tmp_path / "h200x2.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    (chart,) = copy_heatmaps(*_family(path, "copy"))
    cells = [t.get_text() for t in figures[-1].axes[0].texts]
    linked = [c for c in cells if c.endswith("\nNV18")]
    assert len(linked) == 2 and all(float(c.split()[0]) > 100 for c in linked), cells
    assert "nvidia-smi topo -m" in chart.caption
    (chart,) = copy_heatmaps(*_family(DATA / "h200x2.json", "copy"))  # no link recorded: nothing claimed
    assert not any("\n" in t.get_text() for t in figures[-1].axes[0].texts) and "topo" not in chart.caption


# --- the collectives chart: every op, and a line per setup, dtype and mode ----------------------------------

# The family's ops, as its config lists them; the results below are written in reverse to test the order.
COLLECTIVE_OPS = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv"
)
TWO_WAY_OPS = ("all_gather", "reduce_scatter")  # torch offers only these both in place and out of place


def _collectives_run(
    tmp_path: Path, dtypes: tuple[str, ...] = ("float32",), ops: tuple[str, ...] = COLLECTIVE_OPS
) -> Path:
    """h200x2.json with its collectives replaced by a config-default sweep (`in_place: both`) of `ops`,
    in-place runs of all_gather and reduce_scatter twice as fast as out-of-place ones (a zigzag if joined)."""
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    template = next(b for b in data["benchmarks"] if b["extra_info"].get("case") == "collectives")
    data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"].get("case") != "collectives"]
    for op in reversed(ops):
        modes = (False, True) if op in TWO_WAY_OPS else (op not in ("all_to_all", "send_recv"),)
        for dtype in dtypes:
            for in_place in modes:
                for size in (64 * 1024, 1024**2, 16 * 1024**2):
                    busbw = 100.0 * (2 if in_place and op in TWO_WAY_OPS else 1)
                    mode = "inplace" if in_place else "outofplace"
                    bench = json.loads(json.dumps(template))
                    bench["name"] = f"test_collectives[nccl-{op}-{dtype}-{size}-{mode}]"
                    bench["extra_info"].update(op=op, dtype=dtype, bytes=size, size=size, in_place=in_place,
                                               algbw=busbw, busbw=busbw)
                    bench["stats"]["median"] = size / busbw / 1e9
                    data["benchmarks"].append(bench)
    path = tmp_path / "coll.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_collectives_chart_has_a_panel_for_every_op_in_the_familys_order(tmp_path, figures):
    from suite.cases.collectives.charts import busbw_curves

    assert busbw_curves(*_family(_collectives_run(tmp_path), "collectives"))
    axes = figures[-1].axes
    assert [ax.get_title(loc="left") for ax in axes] == list(COLLECTIVE_OPS)
    for ax in axes:  # each panel keeps the text every curve chart has
        assert ax.get_xlabel() == "message bytes" and ax.get_ylabel() == "busbw GB/s"
        assert ax.get_xscale() == "log" and ax.get_lines()


def test_collectives_in_place_and_out_of_place_are_separate_lines(tmp_path, figures):
    from suite.cases.collectives.charts import busbw_curves

    busbw_curves(*_family(_collectives_run(tmp_path, ops=("all_reduce", *TWO_WAY_OPS)), "collectives"))
    fig = figures[-1]
    assert {ax.get_title(loc="left") for ax in fig.axes} == {"all_reduce", *TWO_WAY_OPS}
    for ax in fig.axes:
        op = ax.get_title(loc="left")
        lines = ax.get_lines()
        assert len(lines) == (2 if op in TWO_WAY_OPS else 1), op
        for line in lines:  # one point per size and one busbw per line: no zigzag between the modes
            assert len(set(line.get_xdata())) == len(line.get_xdata()) == 3, op
            assert len(set(line.get_ydata())) == 1, op
        if op in TWO_WAY_OPS:
            assert {line.get_linestyle() for line in lines} == {"-", "--"}, op
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "in-place" in legend and "out-of-place" in legend
    assert "float32" not in legend  # one dtype: nothing to tell apart


def test_collectives_dtypes_are_separate_lines_told_apart_by_marker(tmp_path, figures):
    from suite.cases.collectives.charts import busbw_curves

    busbw_curves(*_family(_collectives_run(tmp_path, ("float32", "bfloat16")), "collectives"))
    fig = figures[-1]
    for ax in fig.axes:
        op = ax.get_title(loc="left")
        lines = ax.get_lines()
        assert len(lines) == 2 * (2 if op in TWO_WAY_OPS else 1), op
        assert len({line.get_marker() for line in lines}) == 2, op
        assert all(len(line.get_xdata()) == 3 for line in lines), op
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"bfloat16", "float32", "in-place", "out-of-place"} <= set(legend)


def test_a_torchrun_jobs_card_shows_its_hosts_and_nccl_environment(tmp_path):
    """What changes a collective's busbw (hosts, backend, NCCL version, NCCL_* variables) is on the card of
    the run that measured it, not only in the JSON."""
    path = _collectives_run(tmp_path, ops=("all_reduce",))
    data = json.loads(path.read_text(encoding="utf-8"))
    data["suite"]["distributed"] = {
        "world_size": 16, "nnodes": 2, "ranks_per_node": 8, "ranks_per_host": {"node1": 8, "node2": 8},
        "backend": "nccl", "nccl_version": "2.21.5",
        "environment": {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_0"},
        "environment_by_rank": {"8": {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5_1"}},
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert ("<dt>launch</dt><dd>torchrun 16 ranks on 2 nodes: node1 (8), node2 (8) · nccl · NCCL 2.21.5</dd>"
            in html)
    assert ("<dt>environment</dt><dd><code>NCCL_ALGO=Ring, NCCL_IB_HCA=mlx5_0; rank(s) 8 set other values "
            "(JSON)</code></dd>") in html
    # An XCCL job (Intel XPUs) names oneCCL's version and its CCL_* settings the same way.
    data["suite"]["distributed"] = {"world_size": 4, "nnodes": 1, "ranks_per_node": 4, "ranks_per_host": {"pvc": 4},
                                    "backend": "xccl", "nccl_version": None, "xccl_version": "2021.15.0",
                                    "environment": {"CCL_ALLREDUCE": "ring"}}
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<dt>launch</dt><dd>torchrun 4 ranks: pvc (4) · xccl · oneCCL 2021.15.0</dd>" in html, html
    assert "<dt>environment</dt><dd><code>CCL_ALLREDUCE=ring</code></dd>" in html


def test_collectives_of_two_setups_get_a_scaling_table(tmp_path):
    """One node against two reads across a row: each run's busbw at its largest message."""
    one = _collectives_run(tmp_path, ops=("all_reduce",))
    two_dir = tmp_path / "two"
    two_dir.mkdir()
    data = json.loads(one.read_text(encoding="utf-8"))
    data["machine_info"]["node"] = "gpu-box-4"
    data["suite"]["distributed"] = {"world_size": 4, "nnodes": 2}
    for b in data["benchmarks"]:
        if b["extra_info"].get("case") == "collectives":
            b["extra_info"].update(world_size=4, nnodes=2, busbw=b["extra_info"]["busbw"] / 2)
    (two_dir / "coll2.json").write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["report", str(one), str(two_dir / "coll2.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    table = html[html.index('<table class="results scaling">'):]
    table = table[:table.index("</table>")]
    assert "4 ranks · 2 nodes" in table
    assert re.search(r"<td>all_reduce float32 in-place</td><td class=\"num\">100 GB/s @ 16MiB</td>"
                     r"<td class=\"num\">50 GB/s @ 16MiB</td>", table), table[:1500]


def test_a_torchrun_jobs_collectives_line_always_says_its_ranks_and_nodes(tmp_path, figures):
    """Two 16-rank 2-node jobs: where the setup does not vary, the line was named `8xH100 @ h100-01`, as if
    the node's 8 GPUs alone had reached that busbw."""
    from suite.cases.collectives.charts import busbw_curves

    paths = []
    for host in ("h100-01", "h200-01"):
        data = json.loads(_collectives_run(tmp_path, ops=("all_reduce",)).read_text(encoding="utf-8"))
        data["machine_info"]["node"] = host
        data["suite"]["distributed"] = {"world_size": 16, "nnodes": 2}
        for b in data["benchmarks"]:
            if b["extra_info"].get("case") == "collectives":
                b["extra_info"].update(world_size=16, nnodes=2)
        paths.append(tmp_path / f"{host}.json")
        paths[-1].write_text(json.dumps(data), encoding="utf-8")
    loaded = load_results(paths)
    table = loaded.table
    busbw_curves(table[table["case"] == "collectives"], list(loaded.machines))
    names = [t.get_text() for t in figures[-1].legends[0].get_texts()][:2]
    expected = ["h100-01 · 16 ranks · 2 nodes", "h200-01 · 16 ranks · 2 nodes"]
    assert [n.split(" @ ")[1] for n in names] == expected


def _fleet_family(tmp_path: Path, case: str, hosts: dict[str, int]) -> tuple[pd.DataFrame, list[str]]:
    """One family's rows of SYNTHETIC machines (tests/fleet.py), host -> its number of GPUs."""
    from tests import fleet

    for i, (host, n_gpus) in enumerate(hosts.items()):
        fleet.write(tmp_path, host, fleet.machine(host, n_gpus=n_gpus, seed=i))
    return _family(tmp_path, case)


def test_model_bars_of_many_gpus_are_one_bar_per_device_kind_with_its_spread(tmp_path, figures):
    """Two 8-GPU machines drew a group per model and cuda:N (and past 40 groups cut the last GPUs off): each
    machine's bar is now the median over its GPUs, the whiskers their spread."""
    from suite.cases.model.charts import model_bars

    rows, machines = _fleet_family(tmp_path, "model", {"box-a": 8, "box-b": 8})
    (chart,) = model_bars(rows, machines)
    ax = figures[-1].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["cuda · float32 · linear-b64", "cuda · float32 · mlp-b64", "cuda · float32 · lenet-b64"]
    medians = rows.groupby(["label", "model"], sort=False)["samples_per_s"].median()
    widths = sorted(p.get_width() for p in ax.patches)
    assert widths == pytest.approx(sorted(medians))
    assert "median over a machine's" in chart.caption and "slowest to fastest" in chart.caption
    # One machine of 16 GPUs is 48 groups, past the 40 a chart keeps: collapsed too, no GPU cut off.
    (tmp_path / "one").mkdir()
    rows, machines = _fleet_family(tmp_path / "one", "model", {"big": 16})
    (chart,) = model_bars(rows, machines)
    labels = [t.get_text() for t in figures[-1].axes[0].get_yticklabels()]
    assert len(labels) == 3 and all(label.startswith("cuda · ") for label in labels)
    assert "First 40" not in chart.caption


def test_charts_cover_every_gpu_model_and_name_the_runs_left_out(tmp_path, figures):
    """Nine runs of one GPU model first in file order crowded the one run of another model out of the
    charts."""
    from suite.report.charts import MAX_CHART_MACHINES
    from suite.report.command import render_report
    from tests import fleet

    for i in range(MAX_CHART_MACHINES + 1):
        fleet.write(tmp_path, f"a{i}", fleet.machine(f"same-{i}", n_gpus=1, seed=i))
    other = fleet.machine("other", n_gpus=1)
    for d in other["machine_info"]["devices"][1:]:
        d["name"] = "Other GPU"
    fleet.write(tmp_path, "z-other", other)
    html = render_report(load_results([tmp_path]))
    legends = [t.get_text() for fig in figures
               for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)] if legend
               for t in legend.get_texts()]
    assert "Other GPU @ other" in legends
    section = html[html.index('<section id="family-matmul"'):]
    note = section[:section.index("<figure>")]
    assert f"{MAX_CHART_MACHINES} of {MAX_CHART_MACHINES + 2} runs" in note
    assert "every GPU model" in note and "Left out: Synthetic GPU (scaled CPU run) @ same-7, " in note


# --- found by mutating the report: each of these survived every test before --------------------------------


def test_the_speed_table_has_a_row_per_machine(tmp_path):
    from suite.report.tables import speed_table
    from tests.test_compare import fixtures

    for name, speed in (("a", 0.5), ("b", 1.0)):
        data = fixtures().synthetic_results(name, n_gpus=1, speed=speed, limit=12)
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    loaded = load_results([tmp_path])
    labels = list(loaded.machines)
    _, rows = speed_table(loaded.table, labels, labels[0])
    assert [r["label"] for r in rows] == labels


def test_the_charts_draw_every_machine(tmp_path, figures):
    from suite.cases.copy.charts import copy_curves
    from suite.report import charts
    from tests.test_compare import fixtures

    for name in ("a", "b", "c"):
        data = fixtures().synthetic_results(name, n_gpus=2, limit=400)
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    loaded = load_results([tmp_path])
    machines = list(loaded.machines)
    table = loaded.table
    charts.tflops_bars(table[table["case"] == "matmul"], machines)
    assert len(figures[-1].axes[0].containers) == 3
    copy_curves(table[table["case"] == "copy"], machines)
    labels = {t.get_text() for legend in figures[-1].legends for t in legend.get_texts()}
    assert set(machines) <= labels, labels


def test_the_copy_matrix_is_drawn_for_every_machine(tmp_path, figures):
    from suite.cases.copy.charts import copy_heatmaps
    from tests.test_compare import fixtures

    for name in ("a", "b", "c"):
        data = fixtures().synthetic_results(name, n_gpus=2, limit=400)
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    loaded = load_results([tmp_path])
    table = loaded.table
    copy_heatmaps(table[table["case"] == "copy"], list(loaded.machines))
    titles = " ".join(ax.get_title(loc="left") + ax.get_title() for ax in figures[-1].axes)
    assert all(f"@ {name}" in titles for name in ("a", "b", "c")), titles


def test_history_of_a_fleet_draws_the_machines_that_changed(tmp_path, figures):
    # Nine machines measured twice: only 8 lines fit, and the one that got 30% slower was the last by name.
    from suite.report.charts import history_charts
    from tests import fleet

    for i in range(9):
        host = f"node-{i}"
        fleet.write(tmp_path, f"{host}-a", fleet.machine(host, seed=i, when="2026-11-01T00:00:00+00:00"))
        later = fleet.machine(host, seed=i, slow=0.7 if i == 8 else 1.0, when="2026-11-29T00:00:00+00:00")
        fleet.write(tmp_path, f"{host}-b", later)
    (chart,) = history_charts(load_results([tmp_path]))
    legend = {t.get_text() for legend in figures[-1].legends for t in legend.get_texts()}
    assert any(name.startswith("node-8") for name in legend), legend
    assert "The 8 of 9 machines with history whose latest run moved furthest" in chart.caption


@pytest.mark.parametrize("value", [0.0, -3.0, float("nan"), float("inf")])
def test_a_report_of_only_invalid_results_builds_and_says_so(tmp_path, figures, value):
    """Every figure zero, negative, NaN or Inf: the report once died drawing a log axis of nothing."""
    data = json.loads((DATA / "cpu_only.json").read_text())
    for bench in data["benchmarks"]:
        bench["stats"].update(median=value, iqr=value)
        for key in ("tflops", "gbps", "samples_per_s", "busbw"):
            if key in bench["extra_info"]:
                bench["extra_info"][key] = value
    (tmp_path / "bad.json").write_text(json.dumps(data, allow_nan=True))
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "bad.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    word = {"0.0": "zero", "-3.0": "negative", "nan": "NaN", "inf": "infinite"}[str(value)]
    assert html.count(f"invalid: {word} median") == len(data["benchmarks"])
    assert figures == [], "no chart of invalid results"


def test_an_invalid_row_is_shown_as_such_and_left_out_of_charts_and_means(tmp_path, figures):
    data = json.loads((DATA / "h200x2.json").read_text())
    rated = [b for b in data["benchmarks"] if b["extra_info"].get("gbps")]
    rated[0]["stats"]["median"] = float("nan")
    rated[1]["stats"]["median"], rated[1]["extra_info"]["gbps"] = -1e-3, -3.0
    (tmp_path / "bad.json").write_text(json.dumps(data, allow_nan=True))
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "bad.json"), str(DATA / "h200x2.json"), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "invalid: NaN median" in html and "invalid: negative median" in html
    assert "nan%" not in html and "-3 GB/s" not in html
    assert figures, "the valid results are still drawn"
    drawn = [v for fig in figures for ax in fig.axes for line in ax.get_lines() for v in line.get_ydata()]
    assert all(v > 0 for v in drawn if isinstance(v, float) and not math.isnan(v))
    speeds = load_results([tmp_path / "bad.json", DATA / "h200x2.json"])
    from suite.results import speed_ratios

    ratios = speed_ratios(speeds.table, list(speeds.machines)[1])
    assert len(ratios) == len(data["benchmarks"]) - 2 and (ratios["ratio"] == 1).all()
