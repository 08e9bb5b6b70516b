"""End to end: `pytest benchmarks` on a tiny config writes pytest-benchmark JSON with our additions."""

from __future__ import annotations

from suite import SCHEMA_VERSION

TINY = {
    "devices": ["cpu", "cuda:3"],
    "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 2},
    "cases": {"matmul": {"dtypes": ["float32"], "shapes": ["64x32x16"]}},
}


def test_matmul_end_to_end(run_benchmarks):
    result, data = run_benchmarks(TINY, "-k", "matmul")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*cuda:3 is not available on this machine*"])
    (bench,) = data["benchmarks"]
    assert bench["name"] == "test_matmul[cpu-float32-64x32x16]"
    info = bench["extra_info"]
    assert info["case"] == "matmul" and info["device"] == "cpu" and info["dtype"] == "float32"
    assert (info["m"], info["n"], info["k"]) == (64, 32, 16)
    assert info["flops"] == 2 * 64 * 32 * 16
    assert info["tflops"] == info["flops"] / bench["stats"]["median"] / 1e12
    assert bench["options"]["timer"] == "SyncTimer(cpu)"
    assert "data" not in bench["stats"], "raw samples are only saved with --benchmark-save-data"
    devices = data["machine_info"]["devices"]
    assert devices[0]["id"] == "cpu" and devices[0]["memory_bytes"] > 0
    suite = data["suite"]
    assert suite["schema_version"] == SCHEMA_VERSION
    assert suite["config"]["cases"]["matmul"]["shapes"] == [[64, 32, 16]]


def test_suite_devices_overrides_config(run_benchmarks):
    result, data = run_benchmarks(TINY, "-k", "matmul", "--suite-devices", "cpu")
    result.assert_outcomes(passed=1)
    assert data["suite"]["devices"] == ["cpu"]


def test_user_benchmark_options_win(run_benchmarks):
    result, data = run_benchmarks(TINY, "-k", "matmul", "--suite-devices=cpu", "--benchmark-min-rounds=7")
    result.assert_outcomes(passed=1)
    assert data["benchmarks"][0]["stats"]["rounds"] >= 7
    assert data["benchmarks"][0]["options"]["min_rounds"] == 7


def test_bad_config_is_one_line_without_traceback(run_benchmarks):
    result, data = run_benchmarks({"cases": {"matmul": {"dtypes": ["float32", "float33"]}}})
    assert result.ret != 0 and data is None
    err = result.stderr.str()
    assert "cases.matmul.dtypes[1]: 'float33' is not a dtype; allowed:" in err
    assert "Traceback" not in err + result.stdout.str()


def test_bad_device_option(run_benchmarks):
    result, _ = run_benchmarks(TINY, "--suite-devices", "tpu:0")
    assert result.ret != 0
    assert "'tpu:0' is not a device" in result.stderr.str()
