"""The GPU check (suite/gpu_check.py, scripts/gpu-check.sh): its CPU dry run end to end, so a broken step
shows in CI and not in a scarce minute on a GPU; its table, budget and verdicts with fake steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from suite import gpu_check
from suite.gpu_check import CheckContext, CheckRow, run_check
from tests.conftest import ROOT

STEPS = ["gpu tests", "quick config", "matmul", "ceiling", "conv", "model", "copy", "habits", "collectives",
         "out of memory", "sigkill"]


@pytest.mark.slow
def test_dry_run_of_the_shell_script_runs_every_step(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", str(out)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {p.name for p in out.iterdir()} >= {"table.txt", "check.json", "quick.json", "gpu-check.log"}
    check = json.loads((out / "check.json").read_text())
    assert [s["name"] for s in check["steps"]] == STEPS and all(s["ok"] for s in check["steps"])
    assert check["dry_run"] is True and check["exit_code"] == 0
    assert check["facts"]["modules"]["pydantic"], "the node facts name where each needed module comes from"
    rows = {r["name"]: r for r in check["rows"]}
    # The steps that need no GPU are judged in the dry run too.
    for name in ("out of memory: a skip naming free memory, next case passes",
                 "SIGKILL: finished results kept in the partial file",
                 "collectives: gloo starts, all_reduce with 1 rank",
                 "collectives: gloo x2 all_reduce 1MiB busbw"):
        assert rows[name]["verdict"] == "PASS", rows[name]
    # Timing-truth rows ran with paired ratios from both alternations; shown, not judged, on the CPU.
    paired = [r for r in check["rows"] if r["pairs"]]
    assert paired and all(len(r["pairs"]) == gpu_check.DRY_ROUNDS and r["verdict"] == "n/a" for r in paired)
    assert json.loads((out / "quick.json").read_text())["benchmarks"]
    # The table comes last, with each step's duration.
    table = (out / "table.txt").read_text().strip()
    assert proc.stdout.strip().endswith(table.splitlines()[-1])
    assert "no carried wheels" in proc.stdout and "steps (seconds):" in proc.stdout


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


def test_a_step_that_no_longer_fits_the_budget_is_not_run_and_fails(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(gpu_check, "plan", _fake_plan([("matmul", lambda t: ran.append(t) or [])]))
    code = run_check(CheckContext(device="cuda:0", dry_run=False, workdir=tmp_path), tmp_path, budget_s=1)
    rows = json.loads((tmp_path / "check.json").read_text())["rows"]
    assert code == 1 and not ran
    assert rows[0]["verdict"] == "FAIL" and "not run" in rows[0]["note"]


def test_without_a_gpu_the_check_says_so_and_points_to_the_dry_run(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "--dry-run" in capsys.readouterr().out
