"""The GPU check (suite/tools/gpu_check.py, scripts/gpu-check.sh): its CPU dry run end to end, so a broken step
shows in CI and not in a scarce minute on a GPU; its table, budget, order, verdicts and merged results."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile

import pytest

from suite.cases.ceiling.checks import BURST_TFLOPS, burst_target
from suite.cli import main as suite_main
from suite.tools import check_files, gpu_check
from suite.tools.gpu_check import CheckContext, CheckRow, run_check
from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu-check.sh"
STEPS = ["collectives", "out of memory", "sigkill", "matmul", "copy", "habits", "ceiling", "conv", "model",
         "quick config", "gpu tests"]
# What the device tool brings back from $OUT: at most this many files (docs/gpu-check.md).
MAX_OUT_FILES = 8


def _script_env(tmp_path, **extra) -> dict:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"), **extra}
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """scripts/gpu-check.sh --dry-run OUT, once for the tests below: (process, OUT)."""
    tmp = tmp_path_factory.mktemp("gpu-check")
    out = tmp / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], env=_script_env(tmp),
                          capture_output=True, text=True, timeout=600, check=False)
    return proc, out


@pytest.mark.slow
def test_dry_run_of_the_shell_script_runs_every_step(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    files = sorted(p.name for p in out.rglob("*"))
    assert files == ["check.json", "gpu-check.log", "quick.json", gpu_check.RESULTS_NAME, "table.txt"]
    assert len(files) <= MAX_OUT_FILES and all(p.is_file() for p in out.iterdir()), "flat, few files"
    check = json.loads((out / "check.json").read_text())
    assert [s["name"] for s in check["steps"]] == STEPS and all(s["ok"] and s["ran"] for s in check["steps"])
    assert check["dry_run"] is True and check["exit_code"] == 0
    assert check["facts"]["modules"]["pydantic"], "the node facts name where each needed module comes from"
    assert check["facts"]["versions"]["pytest-benchmark"], "and the version of each that is imported"
    assert check["facts"]["machine"], "the node facts name the processor architecture"
    rows = {r["name"]: r for r in check["rows"]}
    # The steps that need no GPU are judged in the dry run too.
    for name in ("out of memory: a skip naming free memory, next case passes",
                 "SIGKILL: finished results kept in the partial file",
                 "collectives: gloo starts, all_reduce with 1 rank",
                 "collectives: gloo x2 all_reduce 1MiB busbw"):
        assert rows[name]["verdict"] == "PASS", rows[name]
    # The multi-GPU rows (planned on a fake node of two GPUs) and the host-bound verdicts appear, shown.
    for name in ("copy peer cuda:0->cuda:1 256MiB (events on both GPUs)",
                 "copy peer cuda:0<->cuda:1 256MiB (events on both GPUs)",
                 "collectives: gloo x2 all_reduce 1MiB busbw vs a plain loop", "matmul float32 128x128x128: bound",
                 "model lenet b256 (quick config): bound", "model mlp b256 (quick config): bound",
                 "matmul on all GPUs at once vs sum of per-device rates", "not checked on 2 GPUs"):
        assert rows[name]["verdict"] == "n/a", rows[name]
    # Timing-truth rows ran with paired ratios from both alternations; shown, not judged, on the CPU.
    paired = [r for r in check["rows"] if r["pairs"]]
    assert paired and all(len(r["pairs"]) == gpu_check.DRY_ROUNDS and r["verdict"] == "n/a" for r in paired)
    assert json.loads((out / "quick.json").read_text())["benchmarks"]
    # The Python output reaches the console (not only the log), and the table comes last, once.
    assert "== collectives" in proc.stdout and "+ " in proc.stdout
    table = (out / "table.txt").read_text().strip()
    assert proc.stdout.strip().endswith(table) and proc.stdout.count("steps (seconds") == 1
    assert "no carried wheels" in proc.stdout and "machine: " in proc.stdout
    log = (out / "gpu-check.log").read_text()
    killed_run = log.split("SIGKILL after its first finished case")[1].split("\n== ")[0]
    assert "collected 4 items" in killed_run, "the SIGKILLed run's own output is in the log"


@pytest.mark.slow
def test_the_merged_results_load_in_report_and_compare(dry_run, tmp_path, capsys):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:]
    results = out / gpu_check.RESULTS_NAME
    data = json.loads(results.read_text())
    names = [b["fullname"] for b in data["benchmarks"]]
    assert len(names) == len(set(names)), "one benchmark per case, however many alternations ran"
    families = {b["extra_info"]["case"] for b in data["benchmarks"]}
    assert {"matmul", "ceiling", "conv", "model", "copy", "habits", "collectives"} <= families
    runs = data["suite"]["gpu_check"]["runs"]
    assert {r["step"] for r in runs} >= {"matmul", "ceiling", "copy", "collectives"}
    # pct_of_ceiling is relative to the best matmul of all the check's runs, not of each run alone.
    best = data["suite"]["ceilings"]["cpu"]["float32"]["tflops"]
    for bench in data["benchmarks"]:
        if bench["extra_info"]["case"] == "matmul" and bench["extra_info"].get("precision") == "float32":
            assert bench["extra_info"]["ceiling_tflops"] == best
    html = tmp_path / "report.html"
    assert suite_main(["report", str(results), "-o", str(html)]) == 0
    assert "suite.gpu_check" in html.read_text(), "the report names where the results come from"
    capsys.readouterr()
    assert suite_main(["compare", str(results), str(results), "--format", "json"]) == 0
    compared = json.loads(capsys.readouterr().out)["results"]
    # Every benchmark lines up with itself (too few rounds on a shared CPU leave some not judged).
    assert len(compared) == len(names) and {r["status"] for r in compared} <= {"unchanged", "not judged"}


@pytest.mark.slow
def test_evidence_keeps_the_checks_files_as_they_came_and_writes_its_page(dry_run, tmp_path, capsys):
    from suite.tools import evidence

    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:]
    page = tmp_path / "evidence.md"
    start, end = evidence.START.format(name="h200"), evidence.END.format(name="h200")
    page.write_text(f"# x\n\n{start}\nold\n{end}\n\nrest\n")
    real = tmp_path / "real"
    with pytest.raises(evidence.UserError, match="a dry run"):
        evidence.keep(out, real=real, page=page)
    kept = evidence.keep(out, allow_dry_run=True, real=real, page=page)
    assert [p.name for p in kept] == ["h200_check.json", "h200_quick.json", "h200_gpu_check.json"]
    for source, target in zip(("results.json", "quick.json", "check.json"), kept):
        assert target.read_bytes() == (out / source).read_bytes(), "kept byte for byte, never rewritten"
    text = page.read_text()
    assert text.startswith("# x\n") and text.endswith("\n\nrest\n") and "\nold\n" not in text
    assert evidence.read_section(page) == evidence.section("h200", real)
    section = evidence.section("h200", real)
    assert "**Measured on a dry run on the CPU (no GPU)**" in section and "torch " in section
    assert "| matmul float32 " in section and "| copy host pageable " in section and "| habit " in section
    lines = section.splitlines()
    for row in json.loads((out / "check.json").read_text())["rows"]:
        assert any(line.startswith(f"| {row['name']} | ") for line in lines), row["name"]
    # The kept files load in report and compare, as the committed ones will.
    html = tmp_path / "report.html"
    assert suite_main(["report", *map(str, kept[:2]), "-o", str(html)]) == 0
    capsys.readouterr()
    assert suite_main(["compare", str(kept[0]), str(kept[0]), "--format", "json"]) == 0


def _fake_plan(steps):
    def plan(ctx, out):
        return steps

    return plan


def test_a_crashing_step_fails_its_row_and_the_others_still_run(tmp_path, monkeypatch):
    def crash(timeout):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpu_check, "plan", _fake_plan([
        ("matmul", crash),
        ("copy", lambda t: [CheckRow("copy H2D", 1.0, 1.02, "ms", True, pairs=[0.97, 0.98, 0.99])]),
    ]))
    code = run_check(CheckContext(device="cpu", dry_run=True, workdir=tmp_path), tmp_path)
    check = json.loads((tmp_path / "check.json").read_text())
    assert code == 1 and check["exit_code"] == 1
    assert [(s["name"], s["ok"]) for s in check["steps"]] == [("matmul", False), ("copy", True)]
    assert check["rows"][0]["verdict"] == "FAIL" and "illegal memory access" in check["rows"][0]["note"]
    assert check["rows"][1]["ratio"] == pytest.approx(0.98), "the ratio is the median of the paired ratios"
    assert "1 PASS, 1 FAIL" in (tmp_path / "table.txt").read_text()


def test_a_step_out_of_time_is_not_run_and_is_no_failure(tmp_path, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(gpu_check, "plan", _fake_plan([
        ("collectives", lambda t: ran.append("collectives") or [CheckRow("gloo", None, None, "", True)]),
        ("gpu tests", lambda t: ran.append("gpu tests") or []),
    ]))
    monkeypatch.setitem(gpu_check.STEP_ESTIMATES_S, "collectives", 0.0)
    monkeypatch.setitem(gpu_check.STEP_ESTIMATES_S, "gpu tests", 3600.0)
    code = run_check(CheckContext(device="cuda:0", dry_run=False, workdir=tmp_path), tmp_path, budget_s=60)
    check = json.loads((tmp_path / "check.json").read_text())
    assert ran == ["collectives"] and code == 0 and check["exit_code"] == 0
    row = check["rows"][-1] if check["rows"][-1]["name"].startswith("gpu tests") else check["rows"][-2]
    assert row["verdict"] == "NOT RUN" and "3600 s" in row["note"]
    assert [s["ran"] for s in check["steps"]] == [True, False]
    table = (tmp_path / "table.txt").read_text()
    assert "1 NOT RUN" in table and "NOT RUN (out of time, not a failure): gpu tests" in table
    assert "GPU_CHECK_BUDGET_S" in table, "the table says how to get the missing steps run"


def test_unique_checks_run_first_and_the_general_ones_last(tmp_path):
    names = [name for name, _ in gpu_check.plan(CheckContext(device="cpu", dry_run=True, workdir=tmp_path),
                                                tmp_path)]
    assert names == STEPS


def test_a_node_of_eight_gpus_is_checked_on_two_and_its_budget_still_holds():
    # The quick step ran every GPU and every ordered pair (~750 results on 8 GPUs) against an estimate for
    # one, and was killed; it now runs two GPUs, whose peer copies and all-GPUs case one GPU cannot show.
    assert gpu_check.quick_gpus(8) == gpu_check.quick_gpus(2) == ["cuda:0", "cuda:1"]
    assert gpu_check.quick_gpus(1) == ["cuda:0"]
    assert gpu_check.quick_estimate_s(8) == gpu_check.quick_estimate_s(2) > gpu_check.quick_estimate_s(1)
    assert sum(gpu_check.step_estimate(name, 8) for name in STEPS) <= gpu_check.BUDGET_S


def test_the_default_budget_holds_every_step_and_a_rerun_fits_the_lease():
    estimates = {name: gpu_check.step_estimate(name) for name in STEPS}
    assert sum(estimates.values()) <= gpu_check.BUDGET_S, estimates
    # Each estimate counts the sustained warm-up of every compute benchmark it runs (and its reference's).
    warm = gpu_check.CHECK_TIMING["compute_warmup_s"]
    assert estimates["matmul"] >= (gpu_check.ROUNDS * 2 + 2) * warm
    assert estimates["conv"] >= gpu_check.ROUNDS * 4 * warm
    # Hard stop: the budget and its margin, well under 6 minutes; the script's defaults are the module's.
    assert gpu_check.BUDGET_S + gpu_check.HARD_STOP_MARGIN_S <= 330
    script = SCRIPT.read_text()
    assert f"BUDGET_S=${{GPU_CHECK_BUDGET_S:-{gpu_check.BUDGET_S}}}" in script
    assert f"HARD_STOP_MARGIN_S={gpu_check.HARD_STOP_MARGIN_S}" in script
    doc = (ROOT / "docs" / "gpu-check.md").read_text()
    timeout = int(re.search(r"timeout_s[^0-9]*(\d+)", doc).group(1))
    hard_stop = gpu_check.BUDGET_S + gpu_check.HARD_STOP_MARGIN_S
    assert hard_stop + 30 <= timeout <= 360, "room for the node facts and the install, and for a rerun"


def test_the_check_times_its_cases_as_a_default_run_does():
    from suite.sections import TimingConfig

    defaults = TimingConfig()
    timing = gpu_check.CHECK_TIMING
    assert timing["precision"] == defaults.precision
    assert timing["compute_warmup_s"] == defaults.compute_warmup_s
    assert timing["max_time"] <= defaults.max_time
    TimingConfig(**timing)  # every key is one the config knows


def test_run_command_streams_output_and_stops_a_command_past_its_time(capsys):
    script = "import time; print('first line', flush=True); time.sleep(60)"
    started = time.monotonic()
    code, text = gpu_check.run_command([sys.executable, "-c", script], timeout=2)
    assert code is None and "first line" in text
    assert time.monotonic() - started < 30, "stopped, not waited for"
    assert "first line" in capsys.readouterr().out, "what it printed is in our output (the log)"


def test_every_subprocess_gets_the_checkout_and_the_carried_site(monkeypatch, tmp_path):
    site = tmp_path / "site"
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("RANK", "3")
    show = "import os; print(os.environ['PYTHONPATH']); print(os.environ.get('RANK'))"
    code, text = gpu_check.run_command([sys.executable, "-c", show], 60)
    paths, rank = text.strip().splitlines()[-2:]
    assert code == 0 and paths.split(os.pathsep) == [str(ROOT), str(site)] and rank == "None"


def test_without_a_gpu_the_check_says_so_and_points_to_the_dry_run(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "--dry-run" in capsys.readouterr().out


def test_the_script_refuses_a_budget_that_is_not_seconds(tmp_path):
    env = _script_env(tmp_path, GPU_CHECK_BUDGET_S="4min")
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 64 and "GPU_CHECK_BUDGET_S=4min" in proc.stderr


def test_a_node_whose_packages_cannot_run_the_suite_stops_before_any_step(tmp_path):
    # A Python that finds pytest-benchmark 5.2.3 first (its metadata in front on PYTHONPATH), as a node with an
    # older one and nothing carried would: one line naming it and the fix, exit 3, no step started.
    fake = tmp_path / "old-site"
    (fake / "pytest_benchmark-5.2.3.dist-info").mkdir(parents=True)
    (fake / "pytest_benchmark-5.2.3.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pytest-benchmark\nVersion: 5.2.3\n")
    python = tmp_path / "python-old-benchmark"
    python.write_text(f'#!/bin/bash\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{fake}" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], env=_script_env(tmp_path, PYTHON=str(python)),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert ("requirements: pytest-benchmark 5.2.3 is installed; the suite needs pytest-benchmark>=5.3.1: pip "
            "install 'pytest-benchmark>=5.3.1' (on an offline node: scripts/prepare-device.sh carries it"
            ) in proc.stdout
    assert "nothing was run" in proc.stdout and "== collectives" not in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.log"]


@pytest.mark.slow
def test_without_pip_the_wheels_are_unpacked_and_the_hard_stop_still_prints_the_table(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "carried_probe-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("carried_probe.py", "VALUE = 1\n")
    # An interpreter whose `-m pip` fails, as on a node without pip.
    python = tmp_path / "python-no-pip"
    python.write_text(f'#!/bin/bash\n[ "$1 $2" = "-m pip" ] && exit 1\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    # 10 s: past the wheels' unpacking and torch's import (~3 s alone, far more on a loaded machine), so a
    # step has begun and written its table when the stop comes; still far short of the ~50 s dry run.
    env = _script_env(tmp_path, PYTHON=str(python), GPU_CHECK_WHEELS=str(wheels), GPU_CHECK_HARD_STOP_S="10")
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert "no pip here" in proc.stdout and "carried_probe.py" in proc.stdout, proc.stdout[-2000:]
    assert proc.returncode == 124 and "HARD STOP after 10 s" in proc.stdout
    table = (out / "table.txt").read_text().strip()
    assert proc.stdout.strip().endswith(table), "the table, as far as it got"


def test_merged_results_keep_the_median_run_of_each_case(monkeypatch):
    def bench(param, case, median, tflops=None):
        info = {"case": case, "device": "cpu", "precision": "float32", "ceiling_tflops": 1.0}
        if tflops is not None:
            info["tflops"] = tflops
        name = f"test_{case}[{param}]"
        return {"name": name, "fullname": f"benchmarks/test_{case}.py::{name}", "param": param,
                "stats": {"median": median}, "extra_info": info}

    def run(*benches):
        return {"machine_info": {"node": "n"}, "commit_info": {}, "datetime": "d", "version": "5",
                "suite": {"version": "x", "schema_version": 1, "devices": ["cpu"], "config": {}},
                "benchmarks": list(benches)}

    merged = check_files.merge_results([
        ("matmul", {}, run(bench("a", "matmul", 3.0, 2.0))),
        ("matmul", {}, run(bench("a", "matmul", 1.0, 6.0))),
        ("matmul", {}, run(bench("a", "matmul", 2.0, 3.0))),
        ("ceiling", {}, run(bench("b", "ceiling", 1.0, 10.0))),
    ])
    by_case = {b["extra_info"]["case"]: b for b in merged["benchmarks"]}
    assert len(merged["benchmarks"]) == 2 and by_case["matmul"]["stats"]["median"] == 2.0
    # Annotated against the best of all the runs (the ceiling step's 10 TFLOP/s), not the stale figure.
    assert by_case["matmul"]["extra_info"]["ceiling_tflops"] == 10.0
    assert by_case["matmul"]["extra_info"]["pct_of_ceiling"] == pytest.approx(30.0)
    assert [r["step"] for r in merged["suite"]["gpu_check"]["runs"]] == ["matmul"] * 3 + ["ceiling"]
    assert "config" not in merged["suite"]


@pytest.mark.parametrize("name, power, judged, says", [
    ("NVIDIA H200", 700.0, True, "power limit 700 W"),
    ("NVIDIA H200", None, True, "power limit not read"),
    ("NVIDIA H200", 500.0, False, "power limit 500 W"),
    ("NVIDIA H200 NVL", 600.0, False, "not an H200 SXM (H200 NVL)"),
    ("NVIDIA GH200 480GB", 900.0, False, "not an H200 SXM (GH200)"),
    ("NVIDIA H100 80GB HBM3", 700.0, False, "not an H200 SXM"),
])
def test_the_ceiling_is_judged_against_the_h200_figure_on_a_full_power_sxm_only(name, power, judged, says):
    ok, note = burst_target(name, power)
    assert ok is judged and says in note
    assert BURST_TFLOPS == 790.0


def test_nvml_records_the_gpus_own_pcie_generation_beside_the_links(monkeypatch):
    from suite.devices.nvml import nvml_info
    from tests.test_devices import FakeNvml

    class GenFiveGpuInGenFourSlot(FakeNvml):
        def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
            return self._link("gen_max", h, 4)

        def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
            return self._link("gpu_gen_max", h, 5)

    monkeypatch.setitem(sys.modules, "pynvml", GenFiveGpuInGenFourSlot())
    info = nvml_info(0, "GPU-parent")
    assert info["pcie_gen_max"] == 4 and info["pcie_gen_gpu_max"] == 5
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # an older nvidia-ml-py: the link's max only
    assert "pcie_gen_gpu_max" not in nvml_info(0, "GPU-parent")


def test_gpu_tests_show_torch_warnings_instead_of_failing(pytester):
    pytester.makeconftest(
        "import tests.conftest as shared\n"
        "shared.has_accelerator = lambda: True  # as on a GPU node\n"
        "pytest_collection_modifyitems = shared.pytest_collection_modifyitems\n")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: real accelerator\nfilterwarnings =\n    error\n")
    pytester.makepyfile(
        "import warnings, pytest\n"
        "@pytest.mark.gpu\n"
        "def test_on_gpu():\n"
        "    warnings.warn('a newer torch deprecates this', FutureWarning)\n"
        "    warnings.warn('cuDNN plan fell back', UserWarning)\n"
        "def test_on_cpu():\n"
        "    warnings.warn('a newer torch deprecates this', FutureWarning)\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED*test_on_cpu*"])


def test_a_run_keeps_its_inputs_until_it_ends_and_leaves_a_callers_cache_alone():
    from types import SimpleNamespace

    from suite.cases import common
    from suite.plugin import _keep_inputs_for_run

    cleanups = []
    config = SimpleNamespace(add_cleanup=cleanups.append)
    assert not common.keeping_inputs()
    try:
        _keep_inputs_for_run(config)
        assert common.keeping_inputs() and len(cleanups) == 1
        cleanups.pop()()
        assert not common.keeping_inputs(), "dropped when the run ends"
        common.keep_inputs(True)  # the GPU check keeps them across several runs in its process
        _keep_inputs_for_run(config)
        assert cleanups == [], "not the run's to drop"
    finally:
        common.keep_inputs(False)


def test_a_run_draws_each_operand_once_for_every_precision_of_a_shape(pytester, monkeypatch, tmp_path):
    import torch
    import yaml

    from tests.conftest import ROOT

    draws = []
    real = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: draws.append(a) or real(*a, **k))
    cfg = tmp_path / "suite.yaml"
    cfg.write_text(yaml.safe_dump({"devices": ["cpu"], "timing": {"max_time": 0.01, "warmup_s": 0.0}, "cases": {
        "matmul": {"dtypes": ["float32", "bfloat16"], "shapes": ["48x40x32"]}}}))
    result = pytester.runpytest_inprocess(str(ROOT / "benchmarks" / "test_matmul.py"), f"--rootdir={ROOT}",
                                          f"--suite-config={cfg}", "-q", "-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(passed=2)
    assert sorted(d for d in draws if d in ((48, 32), (32, 40))) == [(32, 40), (48, 32)], "once each, not twice"


def test_the_input_cache_takes_at_most_an_eighth_of_the_host_memory(monkeypatch):
    import os

    from suite.cases import common

    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**20}[name])  # 4 GiB
    assert common.kept_inputs_cap() == 2**29
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**30}[name])
    assert common.kept_inputs_cap() == common.KEPT_INPUTS_MAX_BYTES

    def unknown(name):
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(os, "sysconf", unknown)  # a platform that cannot say: the fixed cap, not none
    assert common.kept_inputs_cap() == common.KEPT_INPUTS_MAX_BYTES
    # A host of 64 KiB keeps at most 8 KiB: the 64x32 float32 draw, then the oldest goes for the next.
    import torch

    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 16}[name])
    common.keep_inputs(True)
    try:
        common.randn(64, 32, dtype=torch.float32, device="cpu", seed=3)
        assert list(common._KEPT_INPUTS) == [((64, 32), 3)]
        common.randn(8, 8, dtype=torch.float32, device="cpu", seed=4)
        assert list(common._KEPT_INPUTS) == [((8, 8), 4)]
        common.randn(64, 33, dtype=torch.float32, device="cpu", seed=5)  # over the cap: not kept
        assert list(common._KEPT_INPUTS) == [((8, 8), 4)]
    finally:
        common.keep_inputs(False)


def test_kept_inputs_are_drawn_once_and_every_caller_gets_its_own_copy(monkeypatch):
    import torch

    from suite.cases import common

    draws = []
    real = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: draws.append(a) or real(*a, **k))
    fresh = common.randn(64, 32, dtype=torch.float32, device="cpu", seed=3)
    common.keep_inputs(True)
    try:
        first = common.randn(64, 32, dtype=torch.float32, device="cpu", seed=3)
        first.add_(1.0)  # a caller that writes into its operand must not change the next caller's
        second = common.randn(64, 32, dtype=torch.bfloat16, device="cpu", seed=3)
        assert len(draws) == 2, "drawn once while kept"
        assert torch.equal(second.float(), fresh.to(torch.bfloat16).float()), "the same values as a fresh draw"
        monkeypatch.setattr(common, "KEPT_INPUTS_MAX_BYTES", 64 * 32 * 4)
        common.randn(8, 8, dtype=torch.float32, device="cpu", seed=4)
        assert list(common._KEPT_INPUTS) == [((8, 8), 4)], "the oldest draw goes when the cap is reached"
    finally:
        common.keep_inputs(False)
    common.randn(64, 32, dtype=torch.float32, device="cpu", seed=3)
    assert len(draws) == 4 and common._KEPT_INPUTS is None, "off again: every build draws anew"


def test_a_step_subprocess_gets_the_steps_time_left_with_a_floor(tmp_path):
    ctx = CheckContext(device="cpu", dry_run=True, workdir=tmp_path)
    assert ctx.step_seconds(60) == 60, "no step running: the cap"
    ctx.step_deadline = time.monotonic() + 20
    assert 19 < ctx.step_seconds(60) <= 20
    ctx.step_deadline = time.monotonic() - 1
    assert ctx.step_seconds(60) == 5.0


def test_only_reruns_the_named_steps_and_a_wrong_name_is_one_line(tmp_path, capsys):
    for stale in ("quick.json", gpu_check.RESULTS_NAME):  # an earlier run's, in the same OUTDIR
        (tmp_path / stale).write_text("{}")
    code = run_check(CheckContext(device="cpu", dry_run=True, workdir=tmp_path), tmp_path, only="habits")
    check = json.loads((tmp_path / "check.json").read_text())
    assert code == 0 and [s["name"] for s in check["steps"]] == ["habits"] and check["only"] == ["habits"]
    assert not (tmp_path / "quick.json").exists(), "OUTDIR holds this run's files only"
    assert json.loads((tmp_path / gpu_check.RESULTS_NAME).read_text())["suite"]["gpu_check"]["runs"][0]["step"] \
        == "habits"
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path / "x"), "--only", "conv,nope"]) == 64
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("gpu-check:")]
    assert line.startswith("gpu-check: --only 'conv,nope': 'nope' is not a step; the steps are collectives, ")
    assert not (tmp_path / "x" / "check.json").exists(), "nothing ran"


def test_the_collectives_step_ends_its_runs_with_the_step(tmp_path, monkeypatch):
    from suite.cases.collectives import checks as collectives

    timeouts = []
    monkeypatch.setattr(collectives, "run_command", lambda cmd, timeout, env=None: timeouts.append(timeout) or (1, ""))
    ctx = CheckContext(device="cpu", dry_run=True, workdir=tmp_path)
    ctx.step_deadline = time.monotonic() + 12
    rows = collectives.gpu_checks(ctx)
    assert len(timeouts) == 2 and all(5 <= t <= 12 for t in timeouts), timeouts
    assert [r.ok for r in rows] == [False, False], "a run stopped or failed is a failed row"


def test_a_step_that_runs_long_is_stopped_before_the_hard_stop():
    """The budget's grace for a long subprocess step, the stop's terminate grace and the output reader's wait
    end before the script's hard stop, so the step's own row (not exit 124) says what ran long."""
    from suite.tools.checkrow import TERMINATE_GRACE_S

    worst = gpu_check.STEP_GRACE_S + 2 * TERMINATE_GRACE_S
    assert worst < gpu_check.HARD_STOP_MARGIN_S
    # The estimates leave room for a first run's fixed costs, so the last step is not starved.
    total = sum(gpu_check.step_estimate(name) for name in STEPS)
    assert gpu_check.BUDGET_S - total >= 20, total


def test_the_budget_counts_from_the_start_it_is_given(tmp_path, monkeypatch):
    """main() passes the process's start: time spent importing torch comes out of the budget."""
    ran = []
    monkeypatch.setattr(gpu_check, "plan", _fake_plan([("gpu tests", lambda t: ran.append(t) or [])]))
    monkeypatch.setitem(gpu_check.STEP_ESTIMATES_S, "gpu tests", 30.0)
    ctx = CheckContext(device="cuda:0", dry_run=False, workdir=tmp_path)
    import time

    assert run_check(ctx, tmp_path, budget_s=60, started=time.monotonic() - 40) == 0
    assert ran == [], "20 s left of 60 cannot hold a 30 s step"
    assert run_check(ctx, tmp_path, budget_s=60) == 0 and len(ran) == 1


@pytest.mark.parametrize("burst, mamf, sustained, verdicts", [
    (786.0, 700.0, 672.0, [True, None, True]),    # the H200 of issue 10: boosts to 790, power-capped after
    (650.0, 600.0, 590.0, [False, None, True]),   # the GPU is slow, the suite measures it right
    (786.0, 700.0, 800.0, [True, None, False]),   # sustained above the MAMF-style mean: rounds not waiting
    (786.0, 700.0, 560.0, [True, None, False]),   # sustained far below MAMF-style on the same GPU: lost time
])
def test_the_ceiling_judges_like_with_like(tmp_path, monkeypatch, burst, mamf, sustained, verdicts):
    """A burst from idle against the 790 read the same way; the MAMF-style figure beside the burst, shown and
    not judged (a 700 W H200 cannot hold its boost); the suite's sustained ceiling against the MAMF-style
    figure of the same shape, GPU and process."""
    from suite.cases.ceiling import checks as ceiling
    from suite.tools import paired

    bench = {"extra_info": {"tflops": sustained, "m": 64, "n": 64, "k": 64}}
    ctx = CheckContext(device="cpu", dry_run=False, workdir=tmp_path)
    monkeypatch.setattr(ctx, "run_suite", lambda *a, **k: [bench], raising=False)
    monkeypatch.setattr(ceiling, "burst_target", lambda name, power: (True, "target >= 90%"))
    monkeypatch.setattr(ceiling, "BURST_SHAPE", 64)
    monkeypatch.setattr(ceiling, "IDLE_BEFORE_BURST_S", 0.0)
    monkeypatch.setattr(ceiling, "MAMF_FLUSH_BYTES", 1024)
    seconds = 2 * 64**3 / 1e12

    def reference_times(op, device, calls, before=None):
        # Only mamf-finder's statistic flushes the L2 before each call.
        return [seconds / (burst if before is None else mamf)] * calls

    monkeypatch.setattr(paired, "reference_times", reference_times)
    rows = ceiling.gpu_checks(ctx)
    assert rows[0].name.endswith("64x64x64: burst from idle vs H200 figure") and rows[0].reference == 790.0
    assert rows[0].suite == pytest.approx(burst)
    assert rows[1].name.endswith("MAMF-style mean vs the burst")
    assert rows[1].suite == pytest.approx(mamf) and rows[1].reference == pytest.approx(burst)
    assert rows[2].suite == sustained and rows[2].reference == pytest.approx(mamf)
    assert [r.ok for r in rows] == verdicts


def test_the_ceiling_burst_starts_from_an_idle_gpu(tmp_path, monkeypatch):
    """The burst waits IDLE_BEFORE_BURST_S with the GPU synchronised, and runs before the suite's sweep heats
    the GPU; the dry run does not wait."""
    from suite.cases.ceiling import checks as ceiling
    from suite.tools import paired

    events = []
    monkeypatch.setattr(ceiling, "BURST_SHAPE", 64)
    monkeypatch.setattr(ceiling, "MAMF_FLUSH_BYTES", 1024)
    monkeypatch.setattr("time.sleep", lambda s: events.append(("sleep", s)))
    monkeypatch.setattr(paired, "reference_times",
                        lambda op, device, calls, before=None: events.append(("times", calls)) or [1e-3] * calls)
    for dry, pause in ((False, ceiling.IDLE_BEFORE_BURST_S), (True, 0.0)):
        events.clear()
        ctx = CheckContext(device="cpu", dry_run=dry, workdir=tmp_path)
        monkeypatch.setattr(ctx, "run_suite", lambda *a, **k: events.append(("sweep",)) or [
            {"extra_info": {"tflops": 1.0, "m": 64, "n": 64, "k": 64}}], raising=False)
        ceiling.gpu_checks(ctx)
        assert events[:4] == [("sleep", pause), ("times", ceiling.BURST_WARMUP), ("times", ceiling.BURST_CALLS),
                              ("sweep",)], events
    assert ceiling.IDLE_BEFORE_BURST_S >= 4.0


def test_the_hard_stops_sigterm_ends_the_check_at_once_not_as_a_failed_step(monkeypatch, tmp_path):
    # gpu-check.sh stops the check with SIGTERM. Landing in an in-process suite run, it became that run's
    # Ctrl-C (suite.plugin's handler): the step was a false "check crashed" FAIL row and the check went on.
    import os
    import signal
    from types import SimpleNamespace

    from suite.plugin import _stop_on_sigterm
    from suite.tools import gpu_check

    seen = {}

    def run_check(ctx, out, budget_s, only, started):
        seen["check"] = signal.getsignal(signal.SIGTERM)
        _stop_on_sigterm(SimpleNamespace(stash={}, add_cleanup=lambda f: None))  # an in-process run starts
        seen["run"] = signal.getsignal(signal.SIGTERM)
        return 0

    monkeypatch.setattr(gpu_check, "run_check", run_check)
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert gpu_check.main(["--dry-run", "--out", str(tmp_path / "out"), "--no-table"]) == 0
        assert signal.getsignal(signal.SIGTERM) is before, "main() puts the handler it found back"
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen["check"] not in (signal.SIG_DFL, None) and seen["run"] is seen["check"], "the run left it alone"
    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    seen["check"](signal.SIGTERM, None)  # the check's handler ends the process at once, as SIGTERM did
    assert exits == [128 + signal.SIGTERM]


def test_the_reference_copy_is_built_and_timed_inside_the_familys_host_side(tmp_path, monkeypatch):
    # The suite's copy runs on the GPU's NUMA node (copy's host_side): its reference must too, or a dual-socket
    # node compares a near copy with a far one.
    import contextlib

    from suite.cases.copy import measure as copy_measure
    from suite.tools import paired
    from suite.tools.paired import event_seconds

    order = []

    @contextlib.contextmanager
    def host_side(case):
        order.append("bind")
        yield
        order.append("unbind")

    build = copy_measure.build
    monkeypatch.setattr(copy_measure, "host_side", host_side)
    monkeypatch.setattr(copy_measure, "build", lambda case, config: order.append("build") or build(case, config))
    monkeypatch.setattr(paired, "reference_times", lambda fn, device, seconds: order.append("time") or [1e-3])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("devices: cpu\ntiming: {warmup_s: 0.0}\ncases:\n  copy:\n    sizes: [4KiB]\n"
                   "    memory: [pageable]\n", encoding="utf-8")
    ctx = CheckContext(device="cpu", dry_run=True, workdir=tmp_path)
    case_id = ctx.case_ids("copy", cfg)[0]
    assert event_seconds("copy", cfg, {"param": case_id, "stats": {"total": 0.01, "iterations": 1}}) == 1e-3
    assert order == ["bind", "build", "time", "unbind"]


def test_freeing_device_memory_drains_and_frees_every_gpu(monkeypatch):
    from suite.devices import use_platform
    from tests.fakes import FakePlatform

    freed = []

    class Counting(FakePlatform):
        def empty_cache(self, device):
            freed.append(str(device))

    with use_platform(Counting(gpus=3)) as platform:
        gpu_check._free_device_memory()
    assert platform.synchronized == freed == ["cuda:0", "cuda:1", "cuda:2"]
