"""suite.health.dcgm: `dcgmi diag -j` verdicts judged beside the results, one finding or warning line each."""

from __future__ import annotations

import json
from pathlib import Path

from suite.cli import main

DATA = Path(__file__).parent / "data" / "imported"
DCGM3 = DATA / "dcgm" / "constructed_dcgm3_r3_8gpu.json"
DCGM4 = DATA / "dcgm" / "dcgm4.2.3_gb10_r1.json"
NUMA = DATA / "nvbandwidth" / "constructed_8xh100_vm_numa.txt"


def health(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(["health", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_a_failed_plugin_is_a_finding_of_the_node_judged_beside_it(tmp_path, capsys):
    folder = tmp_path / "node"
    folder.mkdir()
    for path in (DCGM3, NUMA):
        (folder / path.name).write_bytes(path.read_bytes())
    code, verdict, err = health(capsys, str(folder))
    (node,) = verdict["nodes"]
    assert code == 1 and node["node"].startswith("vm-h100x8-07") and "dcgm" in node["checks"]
    (failed,) = [f for f in node["findings"] if f["family"] == "dcgm"]
    assert failed["kind"] == "wrong" and failed["device"] == "GPU 2" and "Uncorrectable ECC" in failed["text"]
    # A warning is one line; the loader's note that the document holds no timings is not repeated.
    (warned,) = err.strip().splitlines()
    assert warned.startswith("warning: ") and "'PCIe' warned on GPU 1" in warned and "Traceback" not in err


def test_dcgm_documents_alone_are_judged_each_as_its_own_node(capsys):
    code, verdict, err = health(capsys, str(DCGM3), str(DCGM4))
    assert code == 1 and [n["node"] for n in verdict["nodes"]] == [
        "constructed_dcgm3_r3_8gpu (DCGM)", "dcgm4.2.3_gb10_r1 (DCGM)"]
    assert "DCGM 4.2.3 diag plugin 'software' failed on GPU 0: Persistence Mode" in verdict["nodes"][1][
        "findings"][0]["text"]


def test_a_passing_diagnostic_is_a_healthy_verdict(tmp_path, capsys):
    data = json.loads(DCGM3.read_text(encoding="utf-8").split("\n", 1)[1])
    for category in data["DCGM GPU Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            for result in test["results"]:
                result["status"] = "Pass"
    path = tmp_path / "diag.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, verdict, err = health(capsys, str(path))
    assert code == 0 and verdict["verdict"] == "healthy" and not err


def test_report_and_compare_say_in_one_line_that_a_dcgm_document_holds_no_timings(tmp_path, capsys):
    assert main(["report", str(DCGM4), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "DCGM diagnostics, not benchmark results" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
