"""suite/tools/evidence.py: docs/evidence.md's GPU sections are written from the kept files of a GPU check, never by
hand, and the README's headline figures are quoted from them."""

from __future__ import annotations

import json

import pytest

from suite.tools import evidence
from tests.conftest import ROOT


NAMES = evidence.section_names()


def test_the_evidence_page_has_the_h200_section():
    assert NAMES[0] == "h200", NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_evidence_section_is_what_the_kept_files_give(name):
    # Without kept files: the not-yet-run status; with them (tests/data/real/<name>_*.json): their tables.
    assert evidence.read_section(evidence.PAGE, name) == evidence.section(name), (
        f"rewrite it with `python -m suite.tools.evidence keep OUTDIR --name {name}` (or show it with "
        f"`python -m suite.tools.evidence show --name {name}`)")


def test_the_readmes_headline_figures_are_the_evidence_pages():
    # The README's short table quotes figures; each must stand in a kept section, so none is typed by hand.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| H200 (one GPU)"):].split("\n\n", 1)[0]
    quoted = [row.split("|")[2].strip() for row in table.splitlines()[2:]]
    page = evidence.PAGE.read_text(encoding="utf-8")
    assert len(quoted) >= 5 and all(f"| {figure} |" in page for figure in quoted), quoted


@pytest.mark.parametrize("name", NAMES)
def test_kept_gpu_files_load_in_report_and_compare(name, tmp_path, capsys):
    from suite.cli import main

    kept = [p for source, p in evidence.kept_paths(name).items() if p.is_file() and source != "check.json"]
    if not kept:
        pytest.skip(f"no {name} run kept yet (docs/gpu-check.md); the dry run's files are loaded in test_gpu_check")
    assert main(["report", *map(str, kept), "-o", str(tmp_path / "report.html")]) == 0
    capsys.readouterr()
    assert main(["compare", str(kept[0]), str(kept[0]), "--format", "json"]) == 0


def test_the_kept_runs_compare_with_each_other(tmp_path, capsys):
    """Two runs of the check on the H200 (the full one and the rerun of three steps) compare case by case:
    compare's gate on real GPU figures, with only the cases both ran."""
    from suite.cli import main

    runs = [evidence.kept_paths(name)["results.json"] for name in NAMES]
    runs = [p for p in runs if p.is_file()]
    if len(runs) < 2:
        pytest.skip("fewer than two GPU runs kept")
    capsys.readouterr()
    # The rerun measured a subset: without --allow-missing that fails the gate, in one line.
    assert main(["compare", str(runs[0]), str(runs[1])]) == 1
    assert "missing from the candidate" in capsys.readouterr().err
    assert main(["compare", str(runs[0]), str(runs[1]), "--allow-missing", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    common = {r["benchmark"]: r["status"] for r in out["results"] if r["status"] != "missing"}
    # The ceiling's sweep and the LeNet step ran in both, minutes apart on one GPU: within compare's 5%.
    assert common == {f"test_ceiling[cuda:0-bfloat16-{s}]": "unchanged" for s in (
        "4096x4096x4096", "8192x8192x8192", "8192x8192x16384", "12288x12288x12288")} | {
        "test_model[cuda:0-float32-lenet-b16384]": "unchanged"}


def _bench(case: str, param: str, median: float, **info) -> dict:
    return {"group": case, "param": param, "extra_info": {"case": case, **info}, "stats": {"median": median}}


def test_figures_pick_the_headline_of_each_family_on_the_gpu():
    # GPU-shaped results made up for this test (figures near one H200's; not a measurement).
    benchmarks = [
        _bench("matmul", "cuda:0-bfloat16-4096", 2e-4, device="cuda:0", precision="bfloat16", m=4096, n=4096,
               k=4096, flops=2 * 4096**3, tflops=700.0, pct_of_datasheet=70.8, datasheet_tflops=989.4,
               pct_of_ceiling=92.0),
        _bench("matmul", "cuda:0-bfloat16-8192", 1.4e-3, device="cuda:0", precision="bfloat16", m=8192, n=8192,
               k=8192, flops=2 * 8192**3, tflops=760.0, pct_of_datasheet=76.8, datasheet_tflops=989.4,
               pct_of_ceiling=99.0),
        _bench("matmul", "cpu-float32-1024", 1e-2, device="cpu", precision="float32", m=1024, n=1024, k=1024,
               flops=2 * 1024**3, tflops=0.2),
        _bench("ceiling", "cuda:0-bfloat16-a", 1e-3, device="cuda:0", precision="bfloat16", m=8192, n=8192,
               k=8192, tflops=770.0, pct_of_datasheet=77.8, datasheet_tflops=989.4),
        _bench("ceiling", "cuda:0-bfloat16-b", 1e-3, device="cuda:0", precision="bfloat16", m=4096, n=4096,
               k=4096, tflops=720.0),
        _bench("copy", "h2d-pinned-64", 1e-3, src="cpu", dst="cuda:0", path="h2d", memory="pinned", size=2**26,
               gbps=50.0),
        _bench("copy", "h2d-pinned-256", 4e-3, src="cpu", dst="cuda:0", path="h2d", memory="pinned", size=2**28,
               gbps=55.5),
        _bench("copy", "d2h-pageable-256", 2e-2, src="cuda:0", dst="cpu", path="d2h", memory="pageable",
               size=2**28, gbps=12.0),
        _bench("copy", "local-256", 1e-4, src="cuda:0", dst="cuda:0", path="local", memory="device",
               size=2**28, gbps=2000.0, traffic_gbps=4000.0),
        _bench("habits", "slow", 3e-3, device="cuda:0", habit="sync_per_step", variant="every_step",
               role="slow", pair="sync:cuda:0"),
        _bench("habits", "fast", 1e-3, device="cuda:0", habit="sync_per_step", variant="once", role="fast",
               pair="sync:cuda:0"),
    ]
    rows = evidence._figures(benchmarks)
    assert rows == [
        ("matmul bfloat16 8192×8192×8192", "760 TFLOP/s",
         "77% of the datasheet's 989.4; 99% of the measured ceiling"),
        ("ceiling (sustained median, best shape) bfloat16 8192×8192×8192", "770 TFLOP/s",
         "78% of the datasheet's 989.4"),
        ("copy device → host pageable 256MiB", "12 GB/s", ""),
        ("copy host → device pinned 256MiB", "55.5 GB/s", ""),
        ("copy same device 256MiB", "2,000 GB/s", "4,000 GB/s read + written"),
        ("habit sync_per_step: every_step / once", "3×", "3 ms against 1 ms"),
    ], "the CPU's figures are left out where a GPU was measured"


def test_keep_refuses_what_it_cannot_keep_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(evidence.UserError, match="check.json: not found; run scripts/gpu-check.sh"):
        evidence.keep(out, real=tmp_path / "real", page=None)
    (out / "check.json").write_text("{")
    with pytest.raises(evidence.UserError, match="not readable JSON"):
        evidence.keep(out, real=tmp_path / "real", page=None)
    (out / "check.json").write_text(json.dumps({"dry_run": False, "rows": []}))
    with pytest.raises(evidence.UserError, match="no results.json; the check measured nothing"):
        evidence.keep(out, real=tmp_path / "real", page=None)
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(evidence.UserError, match="no '<!-- evidence:h200 start"):
        evidence.write_section(readme, "h200", "text")
    assert not (tmp_path / "real").exists(), "nothing kept from a refused OUTDIR"


def test_the_command_line_shows_the_section_and_refuses_a_dry_run(tmp_path, capsys):
    assert evidence.main(["show"]) == 0
    assert capsys.readouterr().out.strip() == evidence.section("h200").strip()
    (tmp_path / "check.json").write_text(json.dumps({"dry_run": True}))
    assert evidence.main(["keep", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evidence: ") and "a dry run" in err and "\n" not in err


def _outdir(tmp_path, steps, runs, quick=False):
    """An OUTDIR as the check writes it: check.json with these steps run, results.json from these steps'
    runs (a real results file of this repo's, tests/data/real/cpu_quick_run.json, with its steps named)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "check.json").write_text(json.dumps({
        "dry_run": False, "started": "2026-11-30T04:00:00+0000", "exit_code": None,
        "steps": [{"name": s, "ran": True} for s in steps], "rows": []}))
    data = json.loads((ROOT / "tests" / "data" / "real" / "cpu_quick_run.json").read_text())
    data.setdefault("suite", {})["gpu_check"] = {"runs": [{"step": r} for r in runs]}
    (out / "results.json").write_text(json.dumps(data))
    if quick:
        (out / "quick.json").write_text(json.dumps(data))
    return out


def test_keep_refuses_results_an_earlier_run_left_in_outdir(tmp_path):
    out = _outdir(tmp_path, ["habits"], ["matmul", "habits"], quick=True)
    with pytest.raises(evidence.UserError, match=r"results of steps this check did not run \(matmul, quick "
                                                 r"config\) are left from an earlier run; rerun"):
        evidence.keep(out, real=tmp_path / "real", page=None)
    assert not (tmp_path / "real").exists()


def test_keep_checks_the_readme_before_keeping_anything_and_fills_an_empty_section(tmp_path):
    out = _outdir(tmp_path, ["matmul"], ["matmul"])
    readme = tmp_path / "README.md"
    readme.write_text("no markers")
    with pytest.raises(evidence.UserError, match="no '<!-- evidence:h200 start"):
        evidence.keep(out, real=tmp_path / "real", page=readme)
    assert not (tmp_path / "real").exists(), "nothing kept while the README cannot take the section"
    start, end = evidence.START.format(name="h200"), evidence.END.format(name="h200")
    readme.write_text(f"{start}\n{end}")  # empty, no trailing newline
    assert evidence.read_section(readme) == ""
    evidence.keep(out, real=tmp_path / "real", page=readme)
    section = evidence.read_section(readme)
    assert section == evidence.section("h200", tmp_path / "real")
    assert ": cut short by the hard stop." in section and " 0 s" not in section, "no seconds: none shown"


def test_the_section_names_the_gpus_nvlinks_nvml_read(tmp_path):
    paths = evidence.kept_paths("h200", tmp_path)
    gpu = {"id": "cuda:0", "kind": "cuda", "name": "NVIDIA H200", "memory_bytes": 141 * 2**30,
           "driver_version": "580.159.03", "nvlinks_active": 18, "nvlinks_to_switch": 18}
    results = {"machine_info": {"devices": [gpu], "software": {"torch": "2.11.0"}}, "benchmarks": []}
    paths["results.json"].write_text(json.dumps(results))
    paths["check.json"].write_text(json.dumps({"dry_run": False, "exit_code": 0, "steps": [], "rows": []}))
    text = evidence.section("h200", tmp_path)
    assert "driver 580.159.03, 18 NVLinks active into NVSwitches (NVML))" in text
    gpu.update(nvlinks_active=0, nvlinks_to_switch=0)  # a PCIe card: nothing claimed
    paths["results.json"].write_text(json.dumps(results))
    assert "NVLink" not in evidence.section("h200", tmp_path)


def test_health_judges_the_kept_h200_like_with_like(capsys):
    """health on the real H200 run: healthy, and its sustained bf16 ceiling judged against a sustained
    expectation (~98% of it), not against the ~790 burst that no 700 W H200 holds (it read 86% of that, six
    points above the 'low' line, where GPUs of one node differ by 5%+)."""
    from suite.cli import main

    quick = evidence.kept_paths("h200")["quick.json"]
    if not quick.is_file():
        pytest.skip("no H200 run kept yet")
    capsys.readouterr()
    assert main(["health", str(quick), "--format", "json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert node["status"] == "healthy"
    judged = {e["measure"]: e for e in node["expectations"]}
    assert judged["matmul_bf16"]["verdict"] == "ok"
    assert 90 <= judged["matmul_bf16"]["pct_of_expected"] <= 110, judged["matmul_bf16"]
    assert {"h2d", "d2h"} <= judged.keys()
