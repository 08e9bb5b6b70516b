"""Ceilings and % of peak: the datasheet table by device name, pct_of_ceiling at JSON time, every GPU at once."""

from __future__ import annotations

import pytest
import torch

from suite.cases import datasheet
from suite.cases.ceiling import measure as ceiling
from suite.cases.matmul import measure as matmul
from suite.cases.ceiling.measure import annotate
from suite.cases.precision import PRECISIONS
from suite.config import parse_config
from suite.devices import resolve_spec, use_platform
from tests.fakes import FakePlatform


@pytest.mark.parametrize("name, gpu, bf16", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5", 989.4),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5),
    ("NVIDIA H200", "H200 SXM", 989.5),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5),
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
    ("NVIDIA A100-PCIE-40GB", "A100", 312.0),
    ("NVIDIA L4", "L4", 121.0),
    ("NVIDIA L40S", "L40S", 362.05),
    ("NVIDIA L40", "L40", 181.05),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 165.2),
    ("AMD Instinct MI300X", "MI300X", 1307.4),
])
def test_datasheet_lookup_by_device_name(name, gpu, bf16):
    match = datasheet.lookup(name, "bfloat16")
    assert (match.gpu, match.tflops) == (gpu, bf16)
    assert match.source


def test_ambiguous_form_factor_takes_the_lowest_peak_and_says_so():
    match = datasheet.lookup("NVIDIA H100", "bfloat16")
    assert match.tflops == datasheet.lookup("NVIDIA H100 PCIe", "bfloat16").tflops
    assert "lowest" in match.note


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090 D", "NVIDIA A10G", "NVIDIA L4000", "AMD EPYC 7763",
                                  "Some New Accelerator", "", None])
def test_unknown_devices_have_no_peak(name):
    assert datasheet.lookup(name, "bfloat16") is None


def test_precisions_the_chip_lacks_have_no_peak():
    assert datasheet.lookup("Tesla V100-SXM2-16GB", "bfloat16") is None
    assert datasheet.lookup("Tesla V100-SXM2-16GB", "float16").tflops == 125.0
    assert datasheet.lookup("NVIDIA H100 80GB HBM3", "tf32").tflops == 494.7


def test_every_row_is_dense_and_sourced():
    for peak in datasheet.PEAKS:
        assert peak.source and peak.tflops
        assert set(peak.tflops) <= set(PRECISIONS)
        # Dense FP8 (and INT8) is twice dense bf16 on every chip listed; a sparse figure would be four times.
        for low in ("float8_e4m3fn", "float8_e5m2", "int8"):
            if low in peak.tflops and "bfloat16" in peak.tflops:
                assert peak.tflops[low] == pytest.approx(2 * peak.tflops["bfloat16"], rel=0.01), (peak.gpu, low)
        # Tensor-core bf16 is never below plain fp32 on these chips; a sparse figure slipped in would show as a
        # bf16 peak more than 16x fp32 (dense H100 SXM: 989.4 / 66.9 = 14.8).
        if "bfloat16" in peak.tflops and "float32" in peak.tflops:
            assert peak.tflops["float32"] <= peak.tflops["bfloat16"] <= 16 * peak.tflops["float32"], peak.gpu


def _bench(name, case, device, tflops, precision="bfloat16", **extra):
    return {"name": name, "extra_info": {"case": case, "device": device, "precision": precision, "tflops": tflops,
                                         **extra}}


def _results(*benchmarks):
    return {
        "machine_info": {"devices": [
            {"id": "cpu", "kind": "cpu", "name": "AMD EPYC 7763"},
            {"id": "cuda:0", "kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
            {"id": "cuda:1", "kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
            {"id": "cuda:2", "kind": "cuda", "name": "Prototype X1"},
        ]},
        "benchmarks": list(benchmarks),
        "suite": {"version": "x"},
    }


def test_annotate_adds_pct_of_ceiling_and_of_datasheet():
    data = _results(
        _bench("ceil-small", "ceiling", "cuda:0", 600.0),
        _bench("ceil-big", "ceiling", "cuda:0", 750.0),
        _bench("mm", "matmul", "cuda:0", 700.0),
        _bench("conv", "conv", "cuda:0", 375.0, step="fwd"),
        _bench("conv-fp32", "conv", "cuda:0", 30.0, precision="float32"),  # no float32 ceiling measured
        _bench("mm1", "matmul", "cuda:1", 800.0),
        _bench("all", "matmul", matmul.ALL_GPUS, 1500.0, gpus=["cuda:0", "cuda:1"]),
        _bench("proto", "matmul", "cuda:2", 100.0),
        _bench("cpu", "ceiling", "cpu", 0.1, precision="float32"),
        {"name": "copy", "extra_info": {"case": "copy", "src": "cpu", "dst": "cuda:0", "gbps": 50.0}},
        {"name": "foreign", "extra_info": {}},
        {"name": "bare"},
    )
    annotate(data)
    info = {b["name"]: b.get("extra_info", {}) for b in data["benchmarks"]}
    assert info["conv"]["ceiling_tflops"] == 750.0 and info["conv"]["pct_of_ceiling"] == pytest.approx(50.0)
    assert info["ceil-big"]["pct_of_ceiling"] == pytest.approx(100.0)
    assert info["mm"]["pct_of_datasheet"] == pytest.approx(100 * 700 / 989.4)
    assert info["mm"]["datasheet_gpu"] == "H100 SXM5" and info["mm"]["datasheet_tflops"] == 989.4
    assert "pct_of_ceiling" not in info["conv-fp32"] and info["conv-fp32"]["pct_of_datasheet"] == pytest.approx(
        100 * 30 / 66.9)
    # every GPU at once: against the sum of the two devices' ceilings (750 + 800) and peaks
    assert info["all"]["pct_of_ceiling"] == pytest.approx(100 * 1500 / 1550)
    assert info["all"]["pct_of_datasheet"] == pytest.approx(100 * 1500 / (2 * 989.4))
    # an unknown GPU: its measured ceiling only; the CPU likewise
    assert info["proto"]["pct_of_ceiling"] == pytest.approx(100.0) and "pct_of_datasheet" not in info["proto"]
    assert info["cpu"]["pct_of_ceiling"] == pytest.approx(100.0) and "pct_of_datasheet" not in info["cpu"]
    assert "pct_of_ceiling" not in info["copy"] and info["foreign"] == {}
    suite = data["suite"]
    assert suite["version"] == "x"
    assert suite["ceilings"]["cuda:0"]["bfloat16"] == {"tflops": 750.0, "benchmark": "ceil-big"}
    assert "all-gpus" not in suite["ceilings"]
    assert suite["datasheet"]["cuda:0"]["gpu"] == "H100 SXM5" and "cpu" not in suite["datasheet"]
    assert "cuda:2" not in suite["datasheet"]


def test_the_all_gpus_case_is_annotated_in_its_own_runs_json_where_gpus_is_a_tuple():
    # The plugin annotates extra_info as run_case left it: the case's `gpus` parameter is a tuple there.
    data = _results(_bench("mm0", "matmul", "cuda:0", 700.0), _bench("mm1", "matmul", "cuda:1", 800.0),
                    _bench("all", "matmul", matmul.ALL_GPUS, 1500.0, gpus=("cuda:0", "cuda:1")))
    annotate(data)
    info = data["benchmarks"][2]["extra_info"]
    assert info["pct_of_ceiling"] == pytest.approx(100 * 1500 / 1500)
    assert info["pct_of_datasheet"] == pytest.approx(100 * 1500 / (2 * 989.4))


def test_annotate_tolerates_foreign_files():
    for data in ({}, {"benchmarks": None}, {"benchmarks": [None, 3, {"extra_info": None}]},
                 _results(_bench("nan", "matmul", "cuda:0", float("nan")), _bench("neg", "matmul", "cuda:0", -1.0))):
        annotate(data)
    assert "pct_of_ceiling" not in data["benchmarks"][0]["extra_info"]


def test_all_gpus_enumerates_one_case_over_every_gpu():
    config = parse_config({"cases": {"matmul": {"dtypes": ["bfloat16", "tf32"], "shapes": ["64x64x64"],
                                                "concurrent": True, "cpu": {"dtypes": ["float32"]}}}})
    with use_platform(FakePlatform(gpus=4)):
        devices = resolve_spec("all")
        cases = matmul.enumerate_cases(config, devices)
    together = [c for c in cases if c.info["device"] == matmul.ALL_GPUS]
    assert [c.id for c in together] == ["all-gpus-bfloat16-64x64x64", "all-gpus-tf32-64x64x64"]
    gpus = ("cuda:0", "cuda:1", "cuda:2", "cuda:3")
    assert all(c.devices == gpus and c.info["gpus"] == gpus for c in together)  # the timer waits for all four
    assert len(cases) == 1 + 4 * 2 + 2


@pytest.mark.parametrize("selected, named", [(["cpu"], "none"), (["cpu", "cuda:0"], "cuda:0")])
def test_all_gpus_with_fewer_than_two_is_one_skip_with_the_reason(selected, named):
    config = parse_config({"cases": {"matmul": {"concurrent": True}}})
    (case,) = [c for c in matmul.enumerate_cases(config, selected) if c.info["device"] == matmul.ALL_GPUS]
    assert case.id == "all-gpus"
    with pytest.raises(matmul.SkipCase, match=f"needs two or more GPUs .*GPUs selected: {named}"):
        matmul.build(case, None)


def test_concurrent_is_off_by_default():
    assert not any(c.info["device"] == matmul.ALL_GPUS for c in matmul.enumerate_cases(parse_config({}), ["cpu"]))


def test_ceiling_cases_share_the_matmul_check():
    config = parse_config({"cases": {"ceiling": {"dtypes": ["float32"], "shapes": ["32x16x8", "64x64x64"]}}})
    cases = ceiling.enumerate_cases(config, ["cpu"])
    assert [c.id for c in cases] == ["cpu-float32-32x16x8", "cpu-float32-64x64x64"]
    work = ceiling.build(cases[0], config)
    work.check()
    assert work.flops == 2 * 32 * 16 * 8



def test_a_tall_matmul_is_checked_on_its_first_rows_against_the_same_rows_of_the_reference():
    # A matrix taller than the rows the check computes in float64 (found by mutation: every tested shape was
    # short enough to be checked whole, so the reference could be taken from other rows than the result).
    work = matmul.build_matmul("tall", "cpu", "float32", 1024, 16, 16)
    assert matmul.CHECK_ROWS < 1024
    work.check()


def test_a_sweep_shape_on_a_gpu_gets_only_the_general_compute_warm_up(monkeypatch):
    from suite.cases import Work
    from suite.timing import warmup_seconds

    config = parse_config({"cases": {"ceiling": {"dtypes": ["bfloat16"], "shapes": ["64x64x64"]}}})
    case = matmul.matmul_case("ceiling", "cuda:0", "bfloat16", 64, 64, 64)
    calls = []
    monkeypatch.setattr(ceiling, "build_matmul",
                        lambda *args: Work(fn=lambda: calls.append(1), check=lambda: None))
    ceiling.build(case, config).check()
    assert calls == [], "the ceiling's check must not warm up a second time"
    timing = config.timing_for("ceiling")
    assert warmup_seconds(case, timing) == timing.compute_warmup_s

def test_end_to_end_every_compute_result_carries_pct_of_ceiling(run_benchmarks):
    config = {"devices": ["cpu"], "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 2},
              "cases": {"ceiling": {"shapes": ["64x64x64", "128x128x128"]},
                        "matmul": {"shapes": ["96x96x96"], "concurrent": True},
                        "conv": {"steps": ["fwd"], "layouts": ["nchw"], "batch": 1,
                                 "shapes": [{"in_channels": 8, "out_channels": 8, "size": 8, "kernel": 3}]},
                        "model": {"models": ["mlp"], "batch_sizes": [4]}}}
    result, data = run_benchmarks(config, "-k", "ceiling or matmul or conv or model")
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["*all-gpus needs two or more GPUs*"])
    compute = [b for b in data["benchmarks"] if b["extra_info"]["case"] in ("ceiling", "matmul", "conv", "model")]
    assert len(compute) == 5
    best = max(b["extra_info"]["tflops"] for b in compute if b["extra_info"]["case"] in ("ceiling", "matmul"))
    for bench in compute:
        info = bench["extra_info"]
        assert info["ceiling_tflops"] == best
        assert info["pct_of_ceiling"] == pytest.approx(100 * info["tflops"] / best)
        assert "pct_of_datasheet" not in info  # the CPU: measured ceiling only
    assert data["suite"]["ceilings"]["cpu"]["float32"]["tflops"] == best


@pytest.mark.gpu
def test_all_gpus_on_real_gpus_reports_each_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    gpus = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    case = matmul.make_case("matmul", gpus, ["all-gpus"], device=matmul.ALL_GPUS, gpus=gpus, dtype="bfloat16",
                            precision="bfloat16", m=2048, n=2048, k=2048)
    work = matmul.build(case, None)
    work.check()
    # The per-device rates are taken after the timed rounds (Work.derive), not at build time.
    assert "per_device_tflops" not in work.extra
    info = work.derive(1.0)
    assert set(info["per_device_tflops"]) == set(gpus)
    assert info["slowest_tflops"] == min(info["per_device_tflops"].values())
    assert info["slowest_device"] in gpus


def test_the_sweep_check_fails_on_a_wrong_matmul(monkeypatch):
    config = parse_config({"cases": {"ceiling": {"dtypes": ["float32"], "shapes": ["64x32x16"]}}})
    work = ceiling.build(ceiling.enumerate_cases(config, ["cpu"])[0], config)
    real = torch.matmul

    def off_by_a_percent(a, b, out=None):
        return real(a, b, out=out).mul_(1.01)

    monkeypatch.setattr(torch, "matmul", off_by_a_percent)
    with pytest.raises(AssertionError, match=r"matmul cpu-float32-64x32x16: relative error 0.01 > 0.0001"):
        work.check()


def test_the_all_gpus_case_checks_and_counts_every_device(monkeypatch):
    # Found by mutation: a check of the first GPU only, and the FLOPs of one GPU, passed every test.
    case = matmul.make_case("matmul", ("cpu", "cpu"), ["all-gpus", "float32", "32x32x32"], device=matmul.ALL_GPUS,
                            gpus=("cpu", "cpu"), dtype="float32", precision="float32", m=32, n=32, k=32)
    work = matmul.build(case, None)
    # Each GPU's thread issues a batch of calls_per_batch matmuls per call.
    assert work.flops == 2 * matmul.calls_per_batch(matmul.flops(32, 32, 32)) * matmul.flops(32, 32, 32)
    work.check()
    real, calls = torch.matmul, []

    def second_wrong(a, b, out=None):
        calls.append(1)
        result = real(a, b, out=out)
        return result.mul_(1.01) if len(calls) == 2 else result

    monkeypatch.setattr(torch, "matmul", second_wrong)
    with pytest.raises(AssertionError, match="relative error"):
        work.check()
