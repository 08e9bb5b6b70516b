"""suite.importers: nccl-tests text and JSON, nvbandwidth JSON and text read as our collectives and copy results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.cli import main
from suite.errors import UserError
from suite.results import load_results

IMPORTED = Path(__file__).parent / "data" / "imported"
NCCL = IMPORTED / "nccl-tests" / "all_reduce_perf_2x8xH100.txt"
NVBW = IMPORTED / "nvbandwidth"


def test_nccl_tests_rows_have_our_keys_and_units():
    loaded = load_results([NCCL])
    assert not loaded.warnings
    (machine,) = loaded.machines.values()
    assert machine.tool == "nccl-tests" and machine.gpu_model == "NVIDIA H100 80GB HBM3"
    assert machine.host == "ztan-mig-235z,ztan-mig-gq73" and len(machine.devices) == 16
    t = loaded.table
    assert len(t) == 31 * 2 and set(t["case"]) == {"collectives"} and set(t["op"]) == {"all_reduce"}
    big = t[(t["bytes"] == 8589934592) & (t["in_place"] == False)].iloc[0]
    assert big["busbw"] == pytest.approx(338.82) and big["algbw"] == pytest.approx(180.71)
    assert big["median"] == pytest.approx(47535e-6) and big["metric_name"] == "busbw"
    assert big["world_size"] == 16 and big["nnodes"] == 2 and big["dtype"] == "float32"


def test_nvbandwidth_matrix_cells_become_copy_routes():
    loaded = load_results([NVBW / "dcgm_v0.5_one_gpu.json"])
    t = loaded.table
    routes = set(zip(t["test"], t["src"], t["dst"], t["direction"]))
    assert ("host_to_device_memcpy_ce", "cpu", "cuda:0", "uni") in routes
    assert ("device_to_host_memcpy_ce", "cuda:0", "cpu", "uni") in routes
    # One direction measured while the other runs (nvbandwidth reports the first copy only): its own key.
    assert ("host_to_device_bidirectional_memcpy_ce", "cpu", "cuda:0", "uni_loaded") in routes
    assert ("device_to_host_bidirectional_memcpy_ce", "cuda:0", "cpu", "uni_loaded") in routes
    assert not t["test"].str.contains("all|latency").any()  # contended and latency tests are not routes
    h2d = t[t["test"] == "host_to_device_memcpy_ce"].iloc[0]
    assert h2d["gbps"] == pytest.approx(12.3964) and h2d["bytes"] == 512 * 2**20
    assert h2d["median"] == pytest.approx(512 * 2**20 / 12.3964e9)
    (machine,) = loaded.machines.values()
    assert machine.devices[0]["driver_version"] == "565.02"
    assert [d["id"] for d in machine.devices] == ["cuda:0"]


@pytest.mark.parametrize(
    ("path", "warning"),
    [
        (IMPORTED / "nccl-tests" / "all_reduce_perf_cut_short.txt", "ends before its summary (cut short?)"),
        (NVBW / "truncated.json", "nvbandwidth output is not JSON (truncated?) — skipped"),
        (IMPORTED / "not_a_tool.txt", "neither pytest-benchmark JSON nor nccl-tests or nvbandwidth output"),
    ],
)
def test_cut_or_foreign_files_in_a_folder_are_one_line_warnings(path, warning, tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / path.name).write_bytes(path.read_bytes())
    # Beside a file health judges (a 2-node nccl-tests run alone would be "nothing judged", exit 2).
    judged = NVBW / "constructed_issue6_h100x4.json"
    (folder / judged.name).write_bytes(judged.read_bytes())
    assert main(["health", str(folder)]) in (0, 1)
    err = capsys.readouterr().err
    assert warning in err and "Traceback" not in err
    assert all(line.startswith("warning: ") for line in err.strip().splitlines())


def test_a_folder_picks_up_other_tools_output():
    loaded = load_results([IMPORTED])
    files = {Path(m.file).name: m for m in loaded.machines.values()}
    assert set(files) == {
        "all_reduce_perf_2x8xH100.txt",
        "all_reduce_perf_cut_short.txt",
        "constructed_issue6_h100x4.json",
        "dcgm_v0.5_one_gpu.json",
        "constructed_2x8xH100.json",
        "constructed_8xh100_vm_numa.json",
        "constructed_8xh100_vm_numa.txt",
        "issue15_v0.2_8x4090_head.txt",
        "issue42_v0.8_a100.txt",
        "issue50_v0.8_6xa6000_read.txt",
    }  # DCGM documents and the failed nvbandwidth run are one-line warnings
    assert files["constructed_issue6_h100x4.json"].n_benchmarks == 4
    assert files["all_reduce_perf_2x8xH100.txt"].n_benchmarks == 62
    assert files["all_reduce_perf_cut_short.txt"].partial
    assert files["dcgm_v0.5_one_gpu.json"].host == "dcgm_v0.5_one_gpu"  # names no host: the file does


# --- nvbandwidth: a CONSTRUCTED 2-GPU output in json_output.cpp's layout (no real one was published) ---


def nvbw(tmp_path: Path, testcases: list[dict], devices: int = 2, name: str = "nvbw.json") -> Path:
    data = {
        "nvbandwidth": {
            "Driver Version": "550.54.15",
            "GPU Device list": [
                f"{i}: NVIDIA H100 80GB HBM3 (00000000:{i:02x}:00): (box)" for i in range(devices)
            ],
            "testcases": testcases,
            "version": "v0.8",
        }
    }
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def matrix_case(name: str, rows: list[list[str]], description: str) -> dict:
    return {"name": name, "status": "Passed", "bandwidth_description": description, "bandwidth_matrix": rows}


def test_nvbandwidth_peer_direction_comes_from_the_test_name(tmp_path):
    """testcases_ce.cpp: read copies column -> row, write row -> column, whatever the description's arrow."""
    rows = [["N/A", "370"], ["360", "N/A"]]
    path = nvbw(
        tmp_path,
        [
            matrix_case(
                "device_to_device_memcpy_read_ce", rows, "memcpy CE GPU(row) -> GPU(column) bandwidth"
            ),
            matrix_case(
                "device_to_device_memcpy_write_ce", rows, "memcpy CE GPU(row) <- GPU(column) bandwidth"
            ),
        ],
    )
    t = load_results([path]).table
    got = {(r.test, r.src, r.dst): r.gbps for r in t.itertuples()}
    assert got == {
        ("device_to_device_memcpy_read_ce", "cuda:1", "cuda:0"): 370.0,  # row 0, column 1: 1 -> 0
        ("device_to_device_memcpy_read_ce", "cuda:0", "cuda:1"): 360.0,
        ("device_to_device_memcpy_write_ce", "cuda:0", "cuda:1"): 370.0,  # row 0, column 1: 0 -> 1
        ("device_to_device_memcpy_write_ce", "cuda:1", "cuda:0"): 360.0,
    }


def test_nvbandwidth_bidirectional_peer_keeps_only_the_total_block(tmp_path, capsys):
    """addTestcaseResults appends read1, read2 and total matrices to one testcase: 3N rows, N GPUs."""
    read1 = [["N/A", "300"], ["301", "N/A"]]
    read2 = [["N/A", "302"], ["303", "N/A"]]
    total = [["N/A", "602"], ["604", "N/A"]]
    path = nvbw(
        tmp_path,
        [
            matrix_case(
                "device_to_device_bidirectional_memcpy_read_ce",
                read1 + read2 + total,
                "memcpy CE CPU(row) <-> GPU(column) Total bandwidth (GB/s)",
            )
        ],
    )
    loaded = load_results([path])
    (machine,) = loaded.machines.values()
    assert [d["id"] for d in machine.devices] == ["cuda:0", "cuda:1"]  # no phantom cuda:2..5
    t = loaded.table
    assert sorted(zip(t["src"], t["dst"], t["direction"], t["gbps"])) == [
        ("cuda:0", "cuda:1", "bi", 602.0),
        ("cuda:1", "cuda:0", "bi", 604.0),
    ]
    assert set(t["bytes"]) == {2 * 512 * 2**20}  # both directions' bytes, as our own `bi` counts them


def test_nvbandwidth_cells_outside_the_listed_gpus_are_refused(tmp_path):
    path = nvbw(
        tmp_path,
        [matrix_case("device_to_device_memcpy_write_ce", [["N/A", "370"], ["360", "N/A"], ["1", "2"]], "x")],
    )
    loaded = load_results([path])
    assert len(loaded.table) == 2 and len(next(iter(loaded.machines.values())).devices) == 2
    assert any("outside the 2 GPU(s)" in w for w in loaded.warnings)


def test_nvbandwidth_local_copy(tmp_path):
    path = nvbw(
        tmp_path,
        [matrix_case("device_local_copy", [["1400", "1390"]], "memcpy local GPU(column) bandwidth (GB/s)")],
    )
    t = load_results([path]).table
    assert sorted(zip(t["src"], t["dst"], t["gbps"])) == [
        ("cuda:0", "cuda:0", 1400.0),
        ("cuda:1", "cuda:1", 1390.0),
    ]


SMALL_BUFFER = ("NOTE: You have chosen a buffer size that is smaller than the default buffer size. It is "
                "suggested to use the default buffer size (64MB) to achieve maximal peak bandwidth.")


def test_nvbandwidth_run_with_a_small_buffer_is_not_imported_as_512_mib(tmp_path, capsys):
    """nvbandwidth's JSON never records -b (json_output.cpp); its root warning says when it was below 512 MiB."""
    h2d = matrix_case("host_to_device_memcpy_ce", [["20.1", "20.3"]], "memcpy CE CPU(row) -> GPU(column)")
    d2h = matrix_case("device_to_host_memcpy_ce", [["21.1", "21.3"]], "memcpy CE CPU(row) <- GPU(column)")
    path = nvbw(tmp_path, [h2d, d2h])
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(load_results([path]).table["bytes"]) == {512 * 2**20}  # no warning: the default size
    data["nvbandwidth"]["warning"] = SMALL_BUFFER
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError) as raised:  # nothing else to read: one line, naming the file and the fix
        load_results([path])
    message = str(raised.value)
    assert "nvbw.json: nvbandwidth ran with a buffer below its default 512 MiB" in message
    assert "2 test(s) are not imported" in message and "-b 512 or more" in message and "\n" not in message
    # A size the file does record is taken as it is, warning or not.
    data["nvbandwidth"]["testcases"] = [{**h2d, "bufferSize": 2**30}, d2h]
    path.write_text(json.dumps(data), encoding="utf-8")
    loaded = load_results([path])
    assert set(loaded.table["bytes"]) == {2**30}
    assert any("1 test(s) are not imported (device_to_host_memcpy_ce)" in w for w in loaded.warnings)


# --- nccl-tests: variants of the real published log (tests/data/imported/nccl-tests) ---


def variant(tmp_path: Path, name: str, edit) -> Path:
    path = tmp_path / name
    path.write_text(edit(NCCL.read_text(encoding="utf-8")), encoding="utf-8")
    return path


def test_nccl_tests_cputime_column_is_launch_time_so_the_time_comes_from_algbw(tmp_path):
    """-C prints the loop's launch time (common.cu cputimeSec) where the time was; algbw still times completion."""
    def launch(text: str) -> str:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("#") and " time " in line and "algbw" in line:
                lines[i] = line.replace("    time", " cputime")
            elif line.strip().startswith("8589934592"):
                lines[i] = line.replace("47535", "  9.5", 1)  # the launch of the loop: far shorter
        return "\n".join(lines)

    loaded = load_results([variant(tmp_path, "all_reduce_perf_C.txt", launch)])
    t = loaded.table
    big = t[(t["bytes"] == 8589934592) & (t["in_place"] == False)].iloc[0]  # noqa: E712
    assert big["median"] == pytest.approx(8589934592 / 180.71e9) and big["algbw"] == pytest.approx(180.71)
    assert list(t["bytes"] / t["median"] / 1e9) == pytest.approx(list(t["algbw"]))
    assert (t["algbw"] >= 1.0).all()  # 0.05 printed is +-10%: no time to judge by
    assert any("-C" in w and "algbw under 1.00 GB/s" in w for w in loaded.warnings)
    assert len(load_results([NCCL]).table) == 62  # the plain time column is read as it is
    # hypercube's algbw counts (n-1)/n of the size column: under -C no time follows from it.
    cube = variant(tmp_path, "hypercube_perf_C.txt", lambda text: launch(text).replace("all_reduce_perf",
                                                                                       "hypercube_perf"))
    with pytest.raises(UserError, match="hypercube_perf run with -C: its time column is launch time"):
        load_results([cube])


def test_nccl_tests_iters_is_the_timed_count_not_the_warmup():
    t = load_results([NCCL]).table
    assert set(t["iterations"]) == {20}  # "warmup iters: 5 iters: 20 agg iters: 1"


def test_nccl_tests_wrong_results_are_dropped_and_fail_health(tmp_path, capsys):
    def wrong(text: str) -> str:
        text = text.replace("47535  180.71  338.82      0", "47535  180.71  338.82      7")
        return text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 14 FAILED")

    path = variant(tmp_path, "all_reduce_perf.txt", wrong)
    loaded = load_results([path])
    assert len(loaded.table) == 61  # the wrong out-of-place 8 GB row is not a measurement
    assert any("data check failed" in w for w in loaded.warnings)
    code = main(["health", str(path), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["counts"]["wrong"] == 1


def test_nccl_tests_out_of_bounds_alone_fails_health(tmp_path, capsys):
    path = variant(
        tmp_path,
        "all_reduce_perf.txt",
        lambda t: t.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"),
    )
    assert main(["health", str(path)]) == 1
    assert "data check failed" in capsys.readouterr().out


def test_nccl_tests_srun_prefix_and_nccl_info_lines(tmp_path):
    def srun(text: str) -> str:
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("8 "))
        lines.insert(at + 1, "box:123:456 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7")
        return "\n".join("0: " + line for line in lines)

    loaded = load_results([variant(tmp_path, "run.log", srun)])
    assert len(loaded.table) == 62 and not [w for w in loaded.warnings if "unreadable" in w]


def test_nccl_tests_per_iteration_and_timestamp_columns(tmp_path):
    """util.cu: -I adds i_min i_max i_p99 i_cv% after each group; -T a timestamp column."""
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    extra = "    i_min    i_max    i_p99    i_cv%"

    def per_iter(text: str) -> str:
        out = []
        for line in text.splitlines():
            if line.startswith(header):
                line = f"{header}{extra}     time   algbw   busbw #wrong{extra}  timestamp"
            elif line.lstrip()[:1].isdigit():
                t = line.split()
                line = "  ".join(
                    t[:9] + ["1.0", "2.0", "3.0", "4.0"] + t[9:13] + ["1.0", "2.0", "3.0", "4.0"]
                )
                line += "  2026-01-01 10:00:00"
            out.append(line)
        return "\n".join(out)

    t = load_results([variant(tmp_path, "all_reduce_perf.txt", per_iter)]).table
    big = t[(t["bytes"] == 8589934592)].set_index("in_place")
    assert big.loc[False, "busbw"] == pytest.approx(338.82) and big.loc[True, "busbw"] == pytest.approx(
        337.35
    )
    assert big.loc[True, "median"] == pytest.approx(47743e-6)


def test_nccl_tests_alltoallv_is_not_all_to_all(tmp_path, capsys):
    path = tmp_path / "alltoallv_perf.txt"
    path.write_text(
        NCCL.read_text(encoding="utf-8").replace("all_reduce_perf", "alltoallv_perf"), encoding="utf-8"
    )
    main(["health", str(path)])
    assert "alltoallv_perf has no counterpart among our collectives" in capsys.readouterr().err


def test_nccl_tests_hypercube_without_C_is_imported(tmp_path):
    # Only -C makes hypercube's time underivable: its plain time column is the completed loop's, as for any op.
    cube = variant(tmp_path, "hypercube_perf.txt", lambda text: text.replace("all_reduce_perf", "hypercube_perf"))
    t = load_results([cube]).table
    assert len(t) == 62 and set(t["name"].str.contains("hypercube")) == {True}


def test_an_imported_routes_copy_engine_figure_is_the_one_shown_and_judged(tmp_path, capsys, monkeypatch):
    """Our copies are cudaMemcpy (copy-engine) copies: set beside them, an nvbandwidth route measured by its _ce
    and _sm tests shows the _ce figure, not the better of the two (here the SM kernel's)."""
    from suite.cases.copy.charts import copy_heatmaps
    from suite.cases.copy.read import copy_engine_rows

    ce = matrix_case("host_to_device_memcpy_ce", [["20.0", "52.0"]], "memcpy CE CPU(row) -> GPU(column)")
    sm = matrix_case("host_to_device_memcpy_sm", [["30.0", "55.0"]], "memcpy SM CPU(row) -> GPU(column)")
    only_sm = matrix_case("device_to_host_memcpy_sm", [["40.0", "41.0"]], "memcpy SM CPU(row) <- GPU(column)")
    path = nvbw(tmp_path, [ce, sm, only_sm])
    loaded = load_results([path])
    kept = copy_engine_rows(loaded.table)
    assert sorted(zip(kept["test"], kept["dst"], kept["gbps"])) == [
        ("device_to_host_memcpy_sm", "cpu", 40.0), ("device_to_host_memcpy_sm", "cpu", 41.0),  # no CE test: kept
        ("host_to_device_memcpy_ce", "cuda:0", 20.0), ("host_to_device_memcpy_ce", "cuda:1", 52.0)]
    from suite.report import charts

    drawn = []
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or "")
    copy_heatmaps(loaded.table[loaded.table["case"] == "copy"], list(loaded.machines))
    cells = {t.get_text() for t in drawn[-1].axes[0].texts}
    assert {"20", "52"} <= cells and not {"30", "55"} & cells, cells
    assert main(["health", str(path), "--format", "json"]) in (0, 1)
    health = json.loads(capsys.readouterr().out)
    (entry,) = [e for n in health["nodes"] for e in n["expectations"]
                if e["measure"] == "h2d" and e["device"] == "cuda:0"]
    assert entry["measured"] == 20.0 and entry["verdict"] == "low"  # the SM kernel's 30 would blur a slow link


def test_an_imported_peer_route_shows_the_write_test_issued_by_the_source_as_torch_does(tmp_path, capsys, monkeypatch):
    """torch issues a peer copy on the source GPU's stream (ATen copy_device_to_device): like nvbandwidth's write
    tests (source context), not its read tests (PREFER_DST_CONTEXT). A pair measured both ways shows and is
    judged by the write figure even where the read is faster; a pair with a read test only keeps it."""
    from suite.cases.copy.charts import copy_heatmaps
    from suite.cases.copy.read import copy_engine_rows
    from suite.report import charts

    read = matrix_case("device_to_device_memcpy_read_ce", [["N/A", "390"], ["391", "N/A"]], "read")
    write = matrix_case("device_to_device_memcpy_write_ce", [["N/A", "300"], ["301", "N/A"]], "write")
    sm_write = matrix_case("device_to_device_memcpy_write_sm", [["N/A", "395"], ["396", "N/A"]], "sm write")
    bi_read = matrix_case("device_to_device_bidirectional_memcpy_read_ce",
                          [["N/A", "1"], ["1", "N/A"], ["N/A", "1"], ["1", "N/A"], ["N/A", "700"], ["701", "N/A"]],
                          "bi read")
    path = nvbw(tmp_path, [read, write, sm_write, bi_read], devices=2)
    loaded = load_results([path])
    kept = copy_engine_rows(loaded.table)
    assert sorted(zip(kept["test"], kept["src"], kept["dst"], kept["gbps"])) == [
        ("device_to_device_bidirectional_memcpy_read_ce", "cuda:0", "cuda:1", 700.0),  # no write test: kept
        ("device_to_device_bidirectional_memcpy_read_ce", "cuda:1", "cuda:0", 701.0),
        ("device_to_device_memcpy_write_ce", "cuda:0", "cuda:1", 300.0),
        ("device_to_device_memcpy_write_ce", "cuda:1", "cuda:0", 301.0)]
    drawn = []
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or "")
    copy_heatmaps(loaded.table[loaded.table["case"] == "copy"], list(loaded.machines))
    cells = {t.get_text().split("\n")[0] for t in drawn[-1].axes[0].texts}
    assert {"300", "301"} <= cells and not {"390", "391", "395", "396"} & cells, cells
    assert main(["health", str(path), "--format", "json"]) in (0, 1)
    health = json.loads(capsys.readouterr().out)
    measured = sorted(e["measured"] for n in health["nodes"] for e in n["expectations"] if e["measure"] == "peer")
    assert measured == [300.0, 301.0], measured  # H100 NVLink peer expects 376: the read's 390 would pass


# --- nccl-tests: JSON (-J), unnamed logs, several runs in one file, old formats ---

NCCL_JSON = IMPORTED / "nccl-tests" / "constructed_2x8xH100.json"
PAIRED = ["name", "median", "min", "max", "algbw", "busbw", "bytes", "in_place", "world_size", "nnodes", "iterations"]


def test_nccl_tests_text_and_json_of_one_run_give_the_same_results():
    text, js = load_results([NCCL]), load_results([NCCL_JSON])
    a, b = (x.table.sort_values("name").reset_index(drop=True) for x in (text, js))
    assert len(a) == 62 and a[PAIRED].equals(b[PAIRED])
    (m_text,), (m_json,) = text.machines.values(), js.machines.values()
    assert m_text.host == m_json.host and m_text.devices == m_json.devices
    assert m_json.devices[0]["pci_bus_id"] == "0000:04:00.0" and m_json.software["nccl"] == "2.21.5"


def nccl_json(tmp_path: Path, edit, name: str = "results.json") -> Path:
    data = json.loads(NCCL_JSON.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_nccl_tests_per_iteration_statistics_are_the_noise_in_both_formats(tmp_path):
    """-I: JSON keeps min/max/cv% and every iteration's time (quartiles), the text min/max/cv%: the same spread."""
    times = [47000.0 + 60 * i for i in range(20)]

    def per_iter(data):
        big = data["results"][-1]
        big["out_of_place_per_iter"] = {"skipped_iterations": 0, "min_us": 47000.0, "max_us": 48140.0,
                                        "avg_us": 47570.0, "p50_us": 47600.0, "p95_us": 48080.0, "p99_us": 48140.0,
                                        "stdev_us": 380.0, "cv_pct": 0.8, "times_us": times}

    js = load_results([nccl_json(tmp_path, per_iter)]).table
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    extra = "    i_min    i_max    i_p99    i_cv%"

    def text_per_iter(text):
        out = []
        for line in text.splitlines():
            t = line.split()
            if line.startswith(header):
                line = f"{header}{extra}     time   algbw   busbw #wrong{extra}"
            elif t and t[0] == "8589934592":
                line = "  ".join(t[:9] + ["47000", "48140", "48140", "0.80"] + t[9:13] + ["N/A"] * 4)
            elif line.lstrip()[:1].isdigit():
                line = "  ".join(t[:9] + ["N/A"] * 4 + t[9:13] + ["N/A"] * 4)
            out.append(line)
        return "\n".join(out)

    txt = load_results([variant(tmp_path, "all_reduce_perf.txt", text_per_iter)]).table
    pick = [(t[(t["bytes"] == 8589934592) & (t["in_place"] == False)].iloc[0]) for t in (js, txt)]  # noqa: E712
    for row in pick:
        assert row["median"] == pytest.approx(47535e-6) and row["min"] == pytest.approx(47000e-6)
        assert row["max"] == pytest.approx(48140e-6) and row["stddev"] == pytest.approx(0.008 * 47535e-6)
    assert pick[0]["iqr"] == pytest.approx(600e-6, rel=0.1)  # from times_us, which only the JSON lists


def unnamed(text: str) -> str:
    """The real log as a script's output names no binary: its command line and comments gone."""
    return "\n".join(line for line in text.splitlines() if "_perf" not in line and not line.startswith(">"))


def test_nccl_tests_collective_is_inferred_from_content(tmp_path):
    """redop `sum`, root -1, busbw/algbw = 2(n-1)/n over 16 ranks: all_reduce, whatever the file is called;
    in a markdown paste whose lines carry mpirun --tag-output tags, some in mid-line."""
    def paste(text):
        lines = [f"[1,{i % 3}]<stdout>:{line}" for i, line in enumerate(unnamed(text).splitlines())]
        lines = [line.replace("  float ", "  float[1,0]<stdout>: ", 1) for line in lines]
        return "```\n" + "\n".join(lines) + "\n```\n"

    loaded = load_results([variant(tmp_path, "nccl-test-output-v2.22.3-1.log", paste)])
    assert set(loaded.table["op"]) == {"all_reduce"} and len(loaded.table) == 62
    assert not [w for w in loaded.warnings if "unreadable" in w]


def gather_like(text: str) -> str:
    """The log's rows as an all_gather's or alltoall's would read: redop none, busbw = algbw (n-1)/n."""
    out = []
    for line in unnamed(text).splitlines():
        t = line.split()
        if t and t[0].isdigit() and len(t) == 13:
            t[3] = "none"
            t[7], t[11] = (f"{float(t[i]) * 15 / 16:.2f}" for i in (6, 10))
            line = "  ".join(t)
        out.append(line)
    return "\n".join(out)


def test_an_ambiguous_nccl_tests_log_names_its_candidates_and_the_flag(tmp_path, capsys):
    path = variant(tmp_path, "nccl.log", gather_like)
    with pytest.raises(UserError) as raised:
        load_results([path])
    message = str(raised.value)
    assert "all_gather or alltoall" in message and "16 ranks" in message
    assert "add --as all_gather or --as alltoall to read it" in message
    assert main(["health", str(path), "--as", "all_gather", "--format", "json"]) in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err
    assert main(["report", str(path), "--as", "alltoall", "-o", str(tmp_path / "r.html")]) == 0
    with pytest.raises(UserError):  # --as lasts one command
        load_results([path])


def test_several_collectives_in_one_nccl_tests_file(tmp_path):
    def two_runs(text):
        body = unnamed(text)
        second = gather_like(text).replace("  none  ", "  sum  ")  # reduce_scatter: a reduction, (n-1)/n
        return ("# Collective test starting: all_reduce_perf\n" + body + "\n# Collective test concluded: "
                "all_reduce_perf\n\n" + second)

    t = load_results([variant(tmp_path, "sweep.log", two_runs)]).table
    assert t.groupby("op").size().to_dict() == {"all_reduce": 62, "reduce_scatter": 62}


def test_old_nccl_tests_format(tmp_path):
    """No Group column, no root column, validation 0 (`N/A` where #wrong was), the bus as `0x04`."""
    def old(text):
        out = []
        for line in text.splitlines():
            t = line.split()
            line = line.replace(" Group  0", "").replace("[0000:04:00]", "[0x04]").replace("validation: 1",
                                                                                           "validation: 0")
            if line.startswith("#       size"):
                line = line.replace("   root", "")
            elif t and t[0].isdigit() and len(t) == 13:
                line = "  ".join(t[:4] + t[5:8] + ["N/A"] + t[9:12] + ["N/A"])
            out.append(line)
            if "Rank 15" in line:  # NCCL_DEBUG=VERSION's line, printed as the communicators start
                out.append("host:1:2 [0] NCCL INFO NCCL version 2.18.1+cuda12.1")
        return "\n".join(out)

    loaded = load_results([variant(tmp_path, "all_reduce_perf_old.txt", old)])
    assert len(loaded.table) == 62 and set(loaded.table["op"]) == {"all_reduce"}
    (machine,) = loaded.machines.values()
    assert machine.devices[0]["pci_bus_id"] == "0000:04:00.0" and machine.software["nccl"] == "2.18.1"


# --- nvbandwidth: its plain-text output ---

NUMA = NVBW / "constructed_8xh100_vm_numa"
ROUTE = ["test", "src", "dst", "direction", "bytes"]


def test_nvbandwidth_text_and_json_of_one_run_give_the_same_results():
    text, js = load_results([NUMA.with_suffix(".txt")]), load_results([NUMA.with_suffix(".json")])
    a, b = (x.table.sort_values(ROUTE).reset_index(drop=True) for x in (text, js))
    assert len(a) == 80 and a[ROUTE].equals(b[ROUTE])
    assert list(a["gbps"]) == pytest.approx(list(b["gbps"]), rel=1e-3)  # text prints 2 decimals, JSON 6 digits
    assert not a["test"].str.contains("latency").any()  # latency tests are no routes, in either format
    assert set(a[a["direction"] == "bi"]["gbps"]) == set(a[a["test"].str.contains("bidirectional")]["gbps"])
    (m_text,), (m_json,) = text.machines.values(), js.machines.values()
    assert m_text.host == m_json.host == "vm-h100x8-07" and m_text.devices == m_json.devices
    assert m_text.devices[4] == {"id": "cuda:4", "kind": "cuda", "name": "NVIDIA H100 80GB HBM3",
                                 "pci_bus_id": "0000:9a:00.0", "driver_version": "550.90.07"}


def test_health_names_the_gpus_that_read_host_memory_slower_as_stragglers(capsys):
    assert main(["health", str(NUMA.with_suffix(".txt")), "--format", "json"]) == 1
    health = json.loads(capsys.readouterr().out)
    stragglers = {f["device"] for n in health["nodes"] for f in n["findings"] if f["kind"] == "straggler"}
    assert stragglers == {"cuda:4", "cuda:5", "cuda:6", "cuda:7"}


@pytest.mark.parametrize(
    ("name", "routes", "model"),
    [
        ("issue42_v0.8_a100.txt", {("cpu", "cuda:0", 25.13)}, "NVIDIA A100-SXM4-40GB"),
        ("issue15_v0.2_8x4090_head.txt", {("cpu", "cuda:2", 23.90), ("cuda:7", "cpu", 26.83)},
         "NVIDIA GeForce RTX 4090"),
        # its `Running` line and device list left out of the paste: SUM names the test, the matrix the GPUs
        ("issue50_v0.8_6xa6000_read.txt", {("cuda:3", "cuda:0", 21.95), ("cuda:0", "cuda:5", 21.86)},
         "GPU (model not in nvbandwidth output)"),
    ],
)
def test_published_nvbandwidth_text_outputs(name, routes, model):
    loaded = load_results([NVBW / name])
    assert routes <= set(zip(loaded.table["src"], loaded.table["dst"], loaded.table["gbps"]))
    (machine,) = loaded.machines.values()
    assert machine.gpu_model == model


@pytest.mark.parametrize(
    ("content", "warning"),
    [
        ((NVBW / "issue34_v0.7_8xa100_error.txt").read_text(encoding="utf-8"),
         "device_to_device_memcpy_read_ce (Error: Invalid value when checking the pattern"),
        (json.dumps({"nvbandwidth": {"version": "v0.8", "error": "cuInit failed: no CUDA-capable device"}}),
         "nvbandwidth stopped with an error: cuInit failed: no CUDA-capable device"),
    ],
)
def test_a_failed_nvbandwidth_run_is_one_warning_line(content, warning, tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "nvbw.txt").write_text(content, encoding="utf-8")
    (folder / "numa.txt").write_bytes(NUMA.with_suffix(".txt").read_bytes())
    assert main(["health", str(folder)]) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if warning in line] and "Traceback" not in err
    assert all(line.startswith("warning: ") for line in err.strip().splitlines())
