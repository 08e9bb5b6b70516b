"""suite.importers: nccl-tests text and nvbandwidth JSON read as our collectives and copy results."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.cli import main
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
    assert ("host_to_device_bidirectional_memcpy_ce", "cpu", "cuda:0", "bi") in routes
    assert not t["test"].str.contains("all|latency").any()  # contended and latency tests are not routes
    h2d = t[t["test"] == "host_to_device_memcpy_ce"].iloc[0]
    assert h2d["gbps"] == pytest.approx(12.3964) and h2d["bytes"] == 512 * 2**20
    assert h2d["median"] == pytest.approx(512 * 2**20 / 12.3964e9)
    (machine,) = loaded.machines.values()
    assert machine.devices[0]["driver_version"] == "565.02"


@pytest.mark.parametrize(
    ("path", "warning"),
    [
        (IMPORTED / "nccl-tests" / "all_reduce_perf_cut_short.txt", "ends before its summary (cut short?)"),
        (NVBW / "truncated.json", "nvbandwidth output is not JSON (truncated?) — skipped"),
        (IMPORTED / "not_a_tool.txt", "neither pytest-benchmark JSON nor nccl-tests or nvbandwidth output"),
    ],
)
def test_cut_or_foreign_files_are_one_line_warnings(path, warning, capsys):
    main(["health", str(path), str(NCCL)])
    err = capsys.readouterr().err
    assert warning in err and "Traceback" not in err
    assert all(line.startswith("warning: ") for line in err.strip().splitlines())


def test_a_folder_picks_up_other_tools_output():
    loaded = load_results([IMPORTED])
    assert {m.tool for m in loaded.machines.values()} == {"nccl-tests", "nvbandwidth"}
