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


SMALL = {
    "devices": ["cpu"],
    "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 3},
    "cases": {"matmul": {"dtypes": ["float32"], "shapes": ["64x32x16"]},
              "placement": {"sizes": ["4KiB"], "ops": ["clone", "to_same"]}},
}


def test_every_result_says_how_it_stopped(run_benchmarks):
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement")
    result.assert_outcomes(passed=3, skipped=0)
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        assert info["stopped_on"] in ("precision", "time")
        assert info["rounds"] == bench["stats"]["rounds"] and info["precision_target"] == 0.01
        assert bench["options"]["precision"] == 0.01 and bench["options"]["confidence"] == 0.99
        assert info["stopped_on"] == "time" or info["margin"] <= 0.01


def test_summary_in_rates_replaces_pytest_benchmarks_table(run_benchmarks):
    result, _ = run_benchmarks(SMALL, "-k", "matmul or placement")
    out = result.stdout.str()
    assert "suite summary" in out and "matmul: TFLOP/s" in out and "placement: median time per call" in out
    assert "Name (time in" not in out
    result, _ = run_benchmarks(SMALL, "-k", "matmul", "--suite-summary=both")
    assert "Name (time in" in result.stdout.str() and "matmul: TFLOP/s" in result.stdout.str()
    result, _ = run_benchmarks(SMALL, "-k", "matmul", "--suite-summary=off")
    assert "Name (time in" in result.stdout.str() and "suite summary" not in result.stdout.str()


def test_a_budget_too_small_is_refused_before_anything_runs(run_benchmarks):
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "--suite-budget", "1s")
    assert result.ret != 0 and data is None
    err = result.stderr.str()
    assert "--suite-budget 1.0s is too small for the 3 selected benchmarks: they need at least" in err
    assert "Traceback" not in err + result.stdout.str()


def test_a_budget_sets_each_benchmarks_share(run_benchmarks):
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "--suite-budget", "30s")
    result.assert_outcomes(passed=3)
    shares = [b["options"]["max_time"] for b in data["benchmarks"]]
    # The shares come from the budget (seconds each), not from the config's 0.05 s.
    assert all(share > 1.0 for share in shares)


def test_family_timing_reaches_the_benchmark(run_benchmarks):
    config = dict(SMALL, cases={"matmul": {"dtypes": ["float32"], "shapes": ["64x32x16"],
                                           "timing": {"precision": "off", "min_rounds": 4}}})
    result, data = run_benchmarks(config, "-k", "matmul")
    (bench,) = data["benchmarks"]
    assert bench["options"]["precision"] is None and bench["options"]["min_rounds"] == 4
    assert bench["extra_info"]["stopped_on"] == "time"
