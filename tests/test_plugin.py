"""End to end: `pytest benchmarks` on a tiny config writes pytest-benchmark JSON with our additions."""

from __future__ import annotations

import importlib.util

import pytest

from suite import SCHEMA_VERSION
from suite.devices import accelerators
from tests.conftest import ROOT

TINY = {
    "devices": ["cpu", "cuda:3"],
    "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 2},
    "cases": {"matmul": {"dtypes": ["float32"], "shapes": ["64x32x16"]}},
}


def test_matmul_end_to_end(run_benchmarks):
    result, data = run_benchmarks(TINY, "-k", "matmul")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*cuda:3 is not available on this machine*"])
    assert "[suite] warning: cuda:3 is not on this machine (it has: cpu" in result.stdout.str()
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


def test_an_empty_suite_devices_is_refused_not_ignored(run_benchmarks):
    result, data = run_benchmarks(TINY, "-k", "matmul", "--suite-devices=")
    assert result.ret == 4 and data is None
    assert "--suite-devices is empty: name the devices" in result.stderr.str()


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


def test_every_result_says_how_it_stopped(shared_run):
    result, data = shared_run(SMALL, "-k", "matmul or placement")
    result.assert_outcomes(passed=3, skipped=0)
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        assert info["stopped_on"] in ("precision", "time")
        assert info["rounds"] == bench["stats"]["rounds"] and info["precision_target"] == 0.01
        assert bench["options"]["precision"] == 0.01 and bench["options"]["confidence"] == 0.99
        assert info["stopped_on"] == "time" or info["margin"] <= 0.01


def test_summary_in_rates_replaces_pytest_benchmarks_table(run_benchmarks, shared_run):
    result, _ = shared_run(SMALL, "-k", "matmul or placement")
    out = result.stdout.str()
    assert "suite summary" in out and "matmul: TFLOP/s" in out and "placement: median time per call" in out
    assert "Name (time in" not in out
    result, _ = run_benchmarks(SMALL, "-k", "matmul", "--suite-summary=both")
    assert "Name (time in" in result.stdout.str() and "matmul: TFLOP/s" in result.stdout.str()
    result, _ = run_benchmarks(SMALL, "-k", "matmul", "--suite-summary=off")
    assert "Name (time in" in result.stdout.str() and "suite summary" not in result.stdout.str()


def test_pytest_benchmarks_own_outputs_are_not_swallowed_by_the_rates_summary(run_benchmarks, shared_run):
    # The default summary quietened pytest-benchmark's table, and with it the cProfile tables, histograms and
    # comparison the user asked for.
    result, data = run_benchmarks(SMALL, "-k", "matmul", "--benchmark-cprofile=tottime")
    out = result.stdout.str()
    assert "cProfile (time in s)" in out and "Name (time in" in out and "matmul: TFLOP/s" in out
    assert data["benchmarks"][0]["cprofile"]
    result, _ = shared_run(SMALL, "-k", "matmul")
    assert "Name (time in" not in result.stdout.str()  # nothing asked: our summary alone


def test_the_header_shows_the_timing_in_effect_and_a_foreign_timer_is_ignored_aloud(run_benchmarks):
    # pytest-benchmark's header shows its own defaults (max_time=1.0, min_rounds=5), which the config replaces.
    config = dict(SMALL, timing={**SMALL["timing"], "precision": 0.05, "confidence": 0.9})
    result, data = run_benchmarks(config, "-k", "placement", "--benchmark-timer=time.process_time",
                                  "--benchmark-min-rounds=7", "--benchmark-max-time=0.02", "--suite-budget", "1h")
    out = result.stdout.str()
    assert "suite: config " in out and "devices cpu; timing max_time=0.02s min_rounds=7" in out
    assert "precision +-0.05 at 0.9 " in out and ", budget 3600s" in out
    assert "[suite] warning: --benchmark-timer is ignored: the suite's timer synchronises the devices" in out
    assert {b["options"]["timer"] for b in data["benchmarks"]} == {"SyncTimer(cpu)"}
    result, _ = run_benchmarks(dict(SMALL, timing={**SMALL["timing"], "precision": "off"}), "-k", "placement")
    assert "max_time=0.05s min_rounds=3 precision off" in result.stdout.str()
    assert ", budget" not in result.stdout.str()


def test_runs_that_time_nothing_say_what_they_did(run_benchmarks, tmp_path):
    # --co and --setup-plan list what would run: pytest's exit status, and no "every case was skipped".
    for option in ("--co", "--setup-plan", "--setup-only"):
        result, data = run_benchmarks(SMALL, "-k", "placement", option)
        assert result.ret == pytest.ExitCode.OK and data is None, option
        assert "nothing measured" not in result.stdout.str()
        assert not (tmp_path / "results.partial.jsonl").exists()
    result, data = run_benchmarks(SMALL, "-k", "placement", "--benchmark-disable")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and data is None
    assert "[suite] nothing measured: benchmarks are disabled (--benchmark-disable" in result.stdout.str()
    assert "every selected case was skipped" not in result.stdout.str()


def test_without_pytest_benchmark_the_run_is_refused_in_one_line(pytester, run_benchmarks):
    # Was an INTERNALERROR: pytest rejected the suite's pytest-benchmark hooks as unknown.
    result = pytester.runpytest_subprocess(str(ROOT / "benchmarks"), f"--rootdir={ROOT}", "-p", "no:cacheprovider",
                                           "-k", "placement", "-p", "no:benchmark", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "pytest-benchmark is not loaded (-p no:benchmark, or not installed)" in err
    assert "INTERNALERROR" not in err + result.stdout.str() and "Traceback" not in err
    result, _ = run_benchmarks(SMALL, "-k", "placement", "-p", "no:benchmark")  # pytest's own one line
    assert "unrecognized arguments: --benchmark-json" in result.stderr.str()
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()


def test_a_budget_too_small_is_refused_before_anything_runs(run_benchmarks, tmp_path):
    # Collectives outside torchrun are skipped: the refusal counts only the 3 benchmarks that run.
    config = dict(SMALL, cases={**SMALL["cases"], "collectives": {"ops": ["all_reduce"], "sizes": ["4KiB"]}})
    result, data = run_benchmarks(config, "-k", "matmul or placement or collectives", "--suite-budget", "1s")
    assert result.ret != 0 and data is None
    err = result.stderr.str()
    assert "--suite-budget 1.0s is too small for the 3 benchmarks that run here: give " in err
    assert "Traceback" not in err + result.stdout.str()
    assert not (tmp_path / "results.partial.jsonl").exists(), "a refused run leaves no partial file"


def test_a_budget_only_shortens_and_is_recorded(run_benchmarks):
    # An hour for a run of seconds: each benchmark keeps the config's max_time (a budget never lengthens).
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "--suite-budget", "1h")
    result.assert_outcomes(passed=3)
    assert data["suite"]["budget_s"] == 3600
    for bench in data["benchmarks"]:
        assert bench["options"]["max_time"] == bench["extra_info"]["max_time"] == 0.05
    # matmul's own max_time (300 s) does not fit a 25 s budget: its share is cut, placement keeps its 0.05 s.
    # (The budget counts from the process's start: on a loaded 2-core machine, 12 s left placement nothing.)
    config = dict(SMALL, cases={**SMALL["cases"], "matmul": {**SMALL["cases"]["matmul"],
                                                             "timing": {"max_time": 300}}})
    result, data = run_benchmarks(config, "-k", "matmul or placement", "--suite-budget", "25s")
    result.assert_outcomes(passed=3)
    used = {b["extra_info"]["case"]: b["extra_info"]["max_time"] for b in data["benchmarks"]}
    assert 0 < used["matmul"] < 25 and used["placement"] == 0.05
    assert data["suite"]["budget_s"] == 25


def test_a_users_max_time_is_each_shares_ceiling_and_the_budget_still_holds(run_benchmarks):
    # --benchmark-max-time used to turn the sharing off in silence: 300 s each, whatever the budget said.
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "--suite-budget", "25s",
                                  "--benchmark-max-time=300")
    result.assert_outcomes(passed=3)
    assert data["suite"]["budget_s"] == 25
    assert all(0 < b["extra_info"]["max_time"] < 25 for b in data["benchmarks"])
    # An hour for a run of seconds: the user's max_time, not the config's 0.05 s, bounds each benchmark.
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "--suite-budget", "1h",
                                  "--benchmark-max-time=0.02")
    result.assert_outcomes(passed=3)
    assert {b["extra_info"]["max_time"] for b in data["benchmarks"]} == {0.02}


@pytest.mark.parametrize(("option", "dist", "worker", "refused"), [
    (None, "no", False, False), (0, "no", False, False), ("auto", "load", False, True), (2, "load", False, True),
    (None, "load", False, True), (None, "no", True, True)])
def test_pytest_xdist_is_refused_in_one_line(option, dist, worker, refused):
    from types import SimpleNamespace

    from suite.requirements import xdist_reason

    config = SimpleNamespace(option=SimpleNamespace(numprocesses=option, dist=dist))
    if worker:
        config.workerinput = {"workerid": "gw0"}  # what xdist gives each worker's config
    reason = xdist_reason(config)
    assert (reason is not None) == refused
    assert reason is None or ("run without -n" in reason and "\n" not in reason)


def test_a_budget_plans_with_the_timing_options_the_user_passed(run_benchmarks):
    # 1,000 rounds of at least 0.1 s each cannot fit a minute: refused before anything runs, as the config's
    # own timing would be (the config's 5 rounds of a few microseconds fit).
    result, data = run_benchmarks(SMALL, "-k", "matmul", "--suite-budget", "60s",
                                  "--benchmark-min-rounds=1000", "--benchmark-min-time=0.1")
    assert result.ret != 0 and data is None
    err = result.stderr.str()
    assert "--suite-budget 1m00s is too small for the benchmark that runs here: give 1m5" in err


def test_results_record_how_long_a_limit_held_the_clocks(run_benchmarks, shared_run):
    # tests.held_clocks gives the CPU NVML-style counters: thermal slowdown holding it a quarter of the time.
    result, data = run_benchmarks(SMALL, "-k", "matmul or placement", "-p", "tests.held_clocks")
    result.assert_outcomes(passed=3)
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        assert info["clocks_held"] == info["clocks_held_thermal"] == pytest.approx(0.25, abs=0.03)
        assert "clocks_held_power" not in info and info["clocks_window_s"] > 0
    # Where NVML tells nothing (the CPU, as on any machine without it), nothing is recorded.
    result, data = shared_run(SMALL, "-k", "matmul")
    assert "clocks_held" not in data["benchmarks"][0]["extra_info"]


def test_without_a_budget_the_config_max_time_is_recorded(shared_run):
    result, data = shared_run(SMALL, "-k", "matmul")
    (bench,) = data["benchmarks"]
    assert bench["extra_info"]["max_time"] == 0.05 and data["suite"]["budget_s"] is None


def test_devices_none_of_which_exist_are_refused_naming_what_the_machine_has(run_benchmarks, tmp_path):
    result, data = run_benchmarks(TINY, "--suite-devices", "cuda:3")
    assert result.ret == 4 and data is None
    (line,) = [ln for ln in result.stderr.str().splitlines() if ln.strip()]
    assert "--suite-devices cuda:3: cuda:3 is not on this machine (it has: cpu" in line
    assert not (tmp_path / "results.partial.jsonl").exists()


def test_some_devices_missing_is_one_warning_at_the_start(run_benchmarks, tmp_path):
    result, data = run_benchmarks(TINY, "-k", "matmul and cuda")
    out = result.stdout.str()
    assert out.count("[suite] warning: cuda:3 is not on this machine") == 1
    assert out.index("[suite] warning") < out.index("SKIPPED")
    # Everything selected was skipped: nothing measured, no JSON, no partial file left behind.
    result.assert_outcomes(skipped=1)
    assert data is None and not (tmp_path / "results.partial.jsonl").exists()


@pytest.mark.skipif(bool(accelerators()), reason="needs a machine without an accelerator")
def test_gpus_without_an_accelerator_is_an_error(run_benchmarks):
    result, data = run_benchmarks(TINY, "--suite-devices", "gpus")
    assert result.ret == 4 and data is None
    assert "no GPU visible to torch; use --suite-devices cpu or all" in result.stderr.str()


def test_progress_lines_show_without_dash_s(run_benchmarks):
    sizes = [f"{n}KiB" for n in range(1, 11)]
    # Progress lines are for a family the plan gives 5 s or more: 20 benchmarks of at most 0.3 s each.
    config = dict(SMALL, timing={**SMALL["timing"], "max_time": 0.3},
                  cases={"placement": {"sizes": sizes, "ops": ["clone", "to_same"]}})
    result, _ = run_benchmarks(config, "-k", "placement")
    result.assert_outcomes(passed=20)
    result.stdout.fnmatch_lines(["[[]suite[]] placement: 20/20 done in *"])


def test_options_in_pytest_addopts_are_the_users_too(run_benchmarks, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--benchmark-min-rounds=7")
    result, data = run_benchmarks(TINY, "-k", "matmul", "--suite-devices=cpu")
    result.assert_outcomes(passed=1)
    assert data["benchmarks"][0]["options"]["min_rounds"] == 7


def test_family_timing_reaches_the_benchmark(run_benchmarks):
    config = dict(SMALL, cases={"matmul": {"dtypes": ["float32"], "shapes": ["64x32x16"],
                                           "timing": {"precision": "off", "min_rounds": 4}}})
    result, data = run_benchmarks(config, "-k", "matmul")
    (bench,) = data["benchmarks"]
    assert bench["options"]["precision"] is None and bench["options"]["min_rounds"] == 4
    assert bench["extra_info"]["stopped_on"] == "time"


def test_a_whole_run_still_stores_what_benchmark_save_asks(run_benchmarks, tmp_path):
    # Only a run cut short is kept out of pytest-benchmark's storage.
    store = tmp_path / "store"
    result, data = run_benchmarks(SMALL, "-k", "placement", "--benchmark-save=whole",
                                  f"--benchmark-storage={store}")
    assert result.ret == pytest.ExitCode.OK and data is not None
    assert [p.name.endswith("_whole.json") for p in store.rglob("*.json")] == [True]
    assert "nothing stored" not in result.stdout.str()


def test_pytest_xdist_is_refused_by_the_run_itself(pytester, run_benchmarks):
    # xdist itself where it is installed (the test extra); elsewhere a plugin that adds its --dist stands in.
    plugin = []
    if importlib.util.find_spec("xdist") is None:
        pytester.makepyfile(fake_xdist="def pytest_addoption(parser):\n"
                                       "    parser.addoption('--dist', dest='dist', default='no')\n")
        plugin = ["-p", "fake_xdist"]
    result, data = run_benchmarks(SMALL, "-k", "placement", *plugin, "--dist", "load")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and data is None
    assert "pytest-xdist (-n, --dist) runs tests in parallel processes" in result.stderr.str()


def test_the_table_options_are_pytest_benchmarks_own(pytestconfig):
    from suite.plugin import _TABLE_OPTIONS

    for name in _TABLE_OPTIONS:  # getoption raises ValueError for a name no plugin defines
        pytestconfig.getoption(name)


def test_fp8_and_int8_matmuls_run_from_the_yaml_into_json_summary_report_and_compare(run_benchmarks, tmp_path):
    import json
    import re

    from suite.cli import main

    config = {"devices": ["cpu"], "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 2},
              "cases": {"matmul": {"dtypes": ["float32", "float8_e4m3fn", "float8_e5m2", "int8"],
                                   "shapes": ["32x32x32"]}}}
    result, data = run_benchmarks(config, "-k", "matmul")
    result.assert_outcomes(passed=4)
    infos = {b["extra_info"]["precision"]: b["extra_info"] for b in data["benchmarks"]}
    assert set(infos) == {"float32", "float8_e4m3fn", "float8_e5m2", "int8"}
    for precision, info in infos.items():
        assert info["tflops"] > 0 and info["flops"] == 2 * 32**3 and info["pct_of_ceiling"] == pytest.approx(100)
        assert info.get("unit") == ("TOPS" if precision == "int8" else None)
    assert set(data["suite"]["ceilings"]["cpu"]) == set(infos)
    out = result.stdout.str()
    assert "cpu int8 (TOPS)" in out and "cpu float8_e4m3fn" in out and "cpu float8_e5m2" in out
    new = tmp_path / "new.json"
    new.write_text(json.dumps(data), encoding="utf-8")
    html = tmp_path / "r.html"
    assert main(["report", str(new), "-o", str(html)]) == 0
    text = html.read_text(encoding="utf-8")
    # The matmul family's precision table: each precision's best, int8 in TOPS, with % of ceiling and datasheet.
    assert re.search(r"<td>int8</td><td class=\"num\">[-+.e0-9]+ TOPS</td><td class=\"num\">100%</td>", text)
    assert re.search(r"<td>float8_e5m2</td><td class=\"num\">[-+.e0-9]+ TFLOP/s</td>", text)
    assert "<th>% of datasheet</th>" in text
    # A run without FP8 (the same run's float32 alone) compares with this one on float32; a real older file
    # reports beside it.
    old = tmp_path / "old.json"
    old.write_text(json.dumps(dict(data, benchmarks=[b for b in data["benchmarks"]
                                                      if b["extra_info"]["precision"] == "float32"])))
    assert main(["compare", str(old), str(new)]) in (0, 1)
    real = ROOT / "tests" / "data" / "real" / "cpu_default_run.json"
    assert main(["report", str(real), str(new), "-o", str(html)]) == 0
