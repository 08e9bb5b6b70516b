"""Ceilings: each device's measured matmul ceiling per precision, and % of ceiling / datasheet on every result.

The ceiling is MAMF-style: the best TFLOP/s over a sweep of shapes. When the JSON is written, `annotate` adds
`pct_of_ceiling` and `pct_of_datasheet` to every compute result.
The ceiling of (device, precision) is the best `tflops` of the run's single-device matmul results, the sweep of
this family and the matmul family alike. It is a realistic ceiling (below the datasheet peak: REFERENCE.md);
conv results may exceed it where cuDNN uses Winograd/FFT (fewer multiplies than the FLOP the suite counts).
"""

from __future__ import annotations

import math
import time

from suite.cases import Case, Work
from suite.cases.datasheet import find_gpu, lookup
from suite.cases.matmul.measure import ALL_GPUS, build_matmul, matmul_case

NAME = "ceiling"

# Families whose single-device matmul results define a device's ceiling.
CEILING_FAMILIES = ("ceiling", "matmul")
# MAMF-finder warms up for a long while because a cold GPU runs above its sustained clock; before timing a
# sweep shape on an accelerator, run its matmul this long (the CPU does not boost like that; it is skipped there).
SUSTAINED_WARMUP_S = 0.5


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.ceiling
    if not section.enabled:
        return []
    return [
        matmul_case(NAME, dev, precision, m, n, k)
        for dev in devices
        for precision in section.for_device(dev).dtypes
        for (m, n, k) in section.for_device(dev).shapes
    ]


def build(case: Case, config) -> Work:
    p = case.info
    work = build_matmul(case.id, p["device"], p["precision"], p["m"], p["n"], p["k"])
    verify = work.check

    def check() -> None:
        verify()
        if p["device"] != "cpu":
            from suite.devices import synchronize

            deadline = time.perf_counter() + SUSTAINED_WARMUP_S
            while time.perf_counter() < deadline:
                work.fn()
                synchronize(p["device"])

    work.check = check
    return work


# --- annotation of the results file --------------------------------------------------------------------


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def precision_of(info: dict) -> str | None:
    return info.get("precision") or info.get("dtype")


def ceilings(benchmarks: list) -> dict[str, dict[str, dict]]:
    """{device: {precision: {"tflops": best, "benchmark": its name}}} over the run's single-device matmuls."""
    table: dict[str, dict[str, dict]] = {}
    for bench in benchmarks:
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if not isinstance(info, dict) or info.get("case") not in CEILING_FAMILIES:
            continue
        device, precision, rate = info.get("device"), precision_of(info), _number(info.get("tflops"))
        if not isinstance(device, str) or device == ALL_GPUS or not isinstance(precision, str) or rate is None:
            continue
        best = table.setdefault(device, {}).get(precision)
        if best is None or rate > best["tflops"]:
            table[device][precision] = {"tflops": rate, "benchmark": bench.get("name")}
    return table


def _device_names(output_json: dict) -> dict[str, str]:
    machine = output_json.get("machine_info")
    entries = machine.get("devices") if isinstance(machine, dict) else None
    if not isinstance(entries, list):
        return {}
    return {e["id"]: e.get("name") for e in entries
            if isinstance(e, dict) and isinstance(e.get("id"), str) and e.get("kind") != "cpu"}


def annotate(output_json: dict) -> None:
    """Add pct_of_ceiling / ceiling_tflops and, on GPUs the datasheet table knows, pct_of_datasheet /
    datasheet_tflops / datasheet_gpu to every benchmark that has `tflops`; the tables go into `suite`."""
    benchmarks = output_json.get("benchmarks")
    if not isinstance(benchmarks, list):
        return
    table = ceilings(benchmarks)
    names = _device_names(output_json)
    for bench in benchmarks:
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        rate = _number(info.get("tflops")) if isinstance(info, dict) else None
        precision = precision_of(info) if rate is not None else None
        if not isinstance(precision, str):
            continue
        devices = info.get("gpus") if info.get("device") == ALL_GPUS else [info.get("device")]
        if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
            continue
        # The all-GPUs case is judged against the sum of its devices' ceilings (and peaks).
        measured = [table.get(d, {}).get(precision) for d in devices]
        if all(measured):
            total = sum(m["tflops"] for m in measured)
            info["ceiling_tflops"] = total
            info["pct_of_ceiling"] = 100.0 * rate / total
        matches = [lookup(names.get(d), precision) for d in devices]
        if all(matches):
            total = sum(m.tflops for m in matches)
            info["datasheet_tflops"] = total
            info["pct_of_datasheet"] = 100.0 * rate / total
            info["datasheet_gpu"] = matches[0].gpu
    suite = output_json.setdefault("suite", {})
    if isinstance(suite, dict):
        suite["ceilings"] = table
        suite["datasheet"] = {
            dev: {"gpu": peak.gpu, "dense_tflops": peak.tflops, "source": peak.source, "note": peak.note}
            for dev, name in names.items()
            if (peak := find_gpu(name)) is not None
        }


# --- GPU check --------------------------------------------------------------------------------------------

# REFERENCE.md: one H200 reaches ~790 TFLOP/s bf16 dense through PyTorch (MAMF, 8192^3, random data); the suite's
# own ceiling should come within 10% of it.
H200_BF16_MAMF = 790.0
CEILING_TARGET = 0.90
CHECK_SWEEP = ("4096x4096x4096", "8192x8192x8192", "8192x8192x16384", "12288x12288x12288")


def gpu_checks(ctx) -> list:
    """The bf16 ceiling the suite measures (best of a sweep) against REFERENCE.md's MAMF figure and CUDA events."""
    import torch

    from suite.cases.common import randn
    from suite.cases.matmul.measure import flops
    from suite.gpu_check import RATIO_TOLERANCE, CheckRow, median
    from suite.timing import cuda_event_times

    config = {"devices": [ctx.device], "cases": {"ceiling": {"dtypes": ["bfloat16"], "shapes": list(CHECK_SWEEP)}}}
    benches = ctx.run_suite(config, tests="benchmarks/test_ceiling.py")
    best = max(benches, key=lambda b: b["extra_info"]["tflops"])
    info = best["extra_info"]
    name = torch.cuda.get_device_name(ctx.device)
    is_h200 = "h200" in name.lower()
    ceiling = info["tflops"]
    print(f"bf16 matmul ceiling on {ctx.device} ({name}): {ceiling:.1f} TFLOP/s at {info['m']}x{info['n']}x{info['k']}"
          f" = {100 * ceiling / H200_BF16_MAMF:.1f}% of {H200_BF16_MAMF:g} (target >= {100 * CEILING_TARGET:.0f}% on H200)"
          f"; {info.get('pct_of_datasheet', float('nan')):.1f}% of the datasheet", flush=True)
    a = randn(info["m"], info["k"], dtype=torch.bfloat16, device=ctx.device, seed=1)
    b = randn(info["k"], info["n"], dtype=torch.bfloat16, device=ctx.device, seed=2)
    out = torch.empty(info["m"], info["n"], dtype=torch.bfloat16, device=ctx.device)
    events = median(cuda_event_times(lambda: torch.matmul(a, b, out=out), ctx.device, iterations=50, warmup=50))
    event_rate = flops(info["m"], info["n"], info["k"]) / events / 1e12
    return [
        CheckRow("ceiling bf16 vs REFERENCE MAMF (H200)", ceiling, H200_BF16_MAMF, "TFLOP/s",
                 ceiling >= CEILING_TARGET * H200_BF16_MAMF if is_h200 else None,
                 f"target >= {CEILING_TARGET:.0%}" if is_h200 else f"not judged: {name} is not an H200"),
        CheckRow("ceiling bf16 best shape vs CUDA events", ceiling, event_rate, "TFLOP/s",
                 abs(ceiling / event_rate - 1) <= RATIO_TOLERANCE, "same shape, events per call"),
    ]


__all__ = ["CEILING_FAMILIES", "NAME", "annotate", "build", "ceilings", "enumerate_cases", "gpu_checks"]
