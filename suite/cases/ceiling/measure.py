"""Ceilings: each device's measured matmul ceiling per precision, and % of ceiling / datasheet on every result.

The ceiling is the best sustained median TFLOP/s over a sweep of shapes (MAMF-like in taking the best shape, not
in its statistic: mamf-finder reports a mean with the L2 flushed; the GPU check shows both, docs/gpu-check.md).
When the JSON is written, `annotate` adds `pct_of_ceiling` and `pct_of_datasheet` to every compute result. The
ceiling of (device, precision) is the best `tflops` of the run's single-device matmul results, the sweep of
this family and the matmul family alike. It is a realistic ceiling (below the datasheet peak:
docs/reference.md); conv results may exceed it where cuDNN uses Winograd/FFT (fewer multiplies than the FLOP
the suite counts), and on the CPU where oneDNN's convolution outruns the small sgemm sweep (docs/families.md).
"""

from __future__ import annotations

import math

from suite.cases import Case, Work
from suite.cases.datasheet import find_gpu, lookup
from suite.cases.matmul.measure import ALL_GPUS, build_matmul, matmul_case

NAME = "ceiling"
COMPUTE = True  # keeps compute units busy: a sustained warm-up on accelerators (timing.warmup_seconds)

# Families whose single-device matmul results define a device's ceiling.
CEILING_FAMILIES = ("ceiling", "matmul")


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.ceiling
    if not section.enabled:
        return []
    return [matmul_case(NAME, dev, precision, m, n, k) for dev in devices
            for precision in section.for_device(dev).dtypes for (m, n, k) in section.for_device(dev).shapes]


def build(case: Case, config) -> Work:
    # No warm-up of its own: a sweep shape on an accelerator gets the general sustained compute warm-up
    # (suite.timing.warmup_seconds), which keeps the device busy before its first timed round.
    p = case.info
    return build_matmul(case.id, p["device"], p["precision"], p["m"], p["n"], p["k"])


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


def _judged(bench: object) -> tuple[dict, float, str, list[str]] | None:
    """(extra_info, TFLOP/s, precision, devices) of a benchmark with a rate to judge, else None."""
    info = bench.get("extra_info") if isinstance(bench, dict) else None
    rate = _number(info.get("tflops")) if isinstance(info, dict) else None
    precision = precision_of(info) if rate is not None else None
    if not isinstance(precision, str):
        return None
    # `gpus` is a tuple in a run's own extra_info (the case's parameter) and a list once read from JSON.
    devices = info.get("gpus") if info.get("device") == ALL_GPUS else [info.get("device")]
    if not isinstance(devices, (list, tuple)) or not devices or not all(isinstance(d, str) for d in devices):
        return None
    return info, rate, precision, devices


def _annotate_one(info: dict, rate: float, precision: str, devices: list[str], table: dict, names: dict) -> None:
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


def annotate(output_json: dict) -> None:
    """Add pct_of_ceiling / ceiling_tflops and, on GPUs the datasheet table knows, pct_of_datasheet /
    datasheet_tflops / datasheet_gpu to every benchmark that has `tflops`; the tables go into `suite`."""
    benchmarks = output_json.get("benchmarks")
    if not isinstance(benchmarks, list):
        return
    table = ceilings(benchmarks)
    names = _device_names(output_json)
    for judged in filter(None, map(_judged, benchmarks)):
        _annotate_one(*judged, table, names)
    suite = output_json.setdefault("suite", {})
    if isinstance(suite, dict):
        suite["ceilings"] = table
        suite["datasheet"] = {
            dev: {"gpu": peak.gpu, "dense_tflops": peak.tflops, "source": peak.source, "note": peak.note}
            for dev, name in names.items()
            if (peak := find_gpu(name)) is not None
        }


__all__ = ["CEILING_FAMILIES", "NAME", "annotate", "build", "ceilings", "enumerate_cases"]
