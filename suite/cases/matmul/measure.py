"""Matmul: C = A @ B for (m, n, k) shapes x precisions x devices, and on every GPU at once; 2*m*n*k FLOP per call
(operations for INT8). FP8 and INT8 run through torch's scaled and integer matmuls (suite.cases.matmul.formats)."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

from suite.cases import Case, SkipCase, Work, make_case
from suite.cases.common import randn, relative_error, skip_if_unsupported, to_host64, torch_dtype
from suite.cases.matmul import formats
from suite.cases.precision import INT8, mode_record, require_tf32_math, storage_dtype, unsupported_reason

NAME = "matmul"
COMPUTE = True  # keeps compute units busy: a sustained warm-up on accelerators (timing.warmup_seconds)

# Relative Frobenius error allowed against a float64 reference. Rounding error of a dot product grows about
# like sqrt(k) * unit roundoff; these bounds hold to k = 65536 with margin and still catch a wrong kernel
# (a wrong result has relative error ~1).
TOLERANCE = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 5e-2,
}
# TF32 keeps 10 mantissa bits (unit roundoff ~5e-4): float32 matmuls with TF32 allowed get this bound.
TF32_TOLERANCE = 5e-3
# The check recomputes this many rows of C in float64 on the CPU: rows are independent, so a slice checks the
# kernel at a small fraction of the cost of a full float64 matmul.
CHECK_ROWS = 256
# ... and at most this many float64 FLOP (~1 s on a server CPU), so the ceiling sweep's 16384^3 shapes check
# 32 rows instead of 256; a wrong kernel still shows a relative error ~1 in any row.
CHECK_FLOP_BUDGET = 2**34
# Fewest rows checked, whatever the budget.
MIN_CHECK_ROWS = 16
# The id of the case that runs on every selected GPU at once.
ALL_GPUS = "all-gpus"
# Device kinds that count as GPUs for the all-at-once case (MPS is one device at most).
GPU_KINDS = ("cuda", "xpu")
# Per-device rates in the all-at-once case: CUDA events around this many concurrent rounds (after as many
# warm-up rounds), median per device, taken right after the timed rounds, while every GPU still runs at the
# clock the sustained load left it at (idle GPUs boost higher: a burst before timing overstates them).
PER_DEVICE_ROUNDS = 10


def flops(m: int, n: int, k: int) -> int:
    """FLOP of one m x k by k x n matmul: a multiply and an add per (i, j, p)."""
    return 2 * m * n * k


def shape_id(m: int, n: int, k: int) -> str:
    return f"{m}x{n}x{k}"


def matmul_case(family: str, device: str, precision: str, m: int, n: int, k: int) -> Case:
    return make_case(family, (device,), [device, precision, shape_id(m, n, k)], device=device,
                     dtype=storage_dtype(precision), precision=precision, m=m, n=n, k=k)


def selected_gpus(devices: list[str]) -> list[str]:
    return [d for d in devices if d.split(":")[0] in GPU_KINDS]


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.matmul
    if not section.enabled:
        return []
    cases = [
        matmul_case(NAME, dev, precision, m, n, k)
        for dev in devices
        for precision in section.for_device(dev).dtypes
        for (m, n, k) in section.for_device(dev).shapes
    ]
    if section.concurrent:
        gpus = selected_gpus(devices)
        if len(gpus) < 2:
            # One skipped case says why; with two or more GPUs there is one case per precision and shape.
            cases.append(make_case(NAME, tuple(gpus), [ALL_GPUS], device=ALL_GPUS, gpus=tuple(gpus)))
        else:
            cases += [
                make_case(NAME, tuple(gpus), [ALL_GPUS, precision, shape_id(m, n, k)], device=ALL_GPUS,
                          gpus=tuple(gpus), dtype=storage_dtype(precision), precision=precision, m=m, n=n, k=k)
                for precision in section.dtypes
                for (m, n, k) in section.shapes
            ]
    return cases


def tolerance(precision: str) -> float:
    return TF32_TOLERANCE if precision == "tf32" else TOLERANCE[storage_dtype(precision)]


def check_rows(m: int, n: int, k: int) -> int:
    return min(m, max(MIN_CHECK_ROWS, min(CHECK_ROWS, CHECK_FLOP_BUDGET // (2 * n * k))))


def product(device: str, precision: str, m: int, n: int, k: int, what: str = "matmul"
            ) -> tuple[Callable[[], object], Callable[[str], None]]:
    """One matmul's operands on `device`: the call to time and its check (given a label); SkipCase where the
    precision, the installed torch or the device cannot run it."""
    low = precision in formats.ROUNDOFF
    reason = unsupported_reason(precision, device) or (low and formats.shape_reason(precision, device, m, n, k))
    if reason:
        raise SkipCase(reason)
    try:
        if low:
            return formats.product(precision, device, m, n, k, check_rows(m, n, k))
        # Making the operands is inside too: on MPS moving a float64 tensor to the device is what fails.
        dtype = torch_dtype(storage_dtype(precision))
        a = randn(m, k, dtype=dtype, device=device, seed=1)
        b = randn(k, n, dtype=dtype, device=device, seed=2)
        out = torch.empty(m, n, dtype=dtype, device=device)
        torch.matmul(a, b, out=out)
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, f"{precision} {what}", device)
    return (lambda: torch.matmul(a, b, out=out)), (lambda label: _check(a, b, out, precision, label))


def _check(a, b, out, precision: str, label: str) -> None:
    rows = check_rows(a.shape[0], *reversed(b.shape))
    torch.matmul(a, b, out=out)
    reference = to_host64(a[:rows]) @ to_host64(b)
    err = relative_error(out[:rows], reference)
    tol = tolerance(precision)
    assert err <= tol, f"matmul {label}: relative error {err:.3g} > {tol:g} against a float64 reference"
    require_tf32_math(precision, err, f"matmul {label}")


def build_matmul(label: str, device: str, precision: str, m: int, n: int, k: int) -> Work:
    """One matmul on one device; run inside `precision.mode_for(case)` so TF32 is on or off as asked."""
    run, check = product(device, precision, m, n, k)
    return Work(fn=run, check=lambda: check(label), flops=flops(m, n, k),
                extra=_record(precision, device))


def _record(precision: str, device: str) -> dict:
    # INT8 counts integer operations: `tflops` keeps its name (one rate key for every precision), `unit` says
    # they are tera-operations.
    return {**mode_record(precision, device, ("matmul",)), **({"unit": "TOPS"} if precision == INT8 else {})}


def skip_reason(case: Case) -> str | None:
    """Why this case cannot run with the selected devices (asks no device; the plan uses it too), or None."""
    p = case.info
    if p["device"] == ALL_GPUS and len(p["gpus"]) < 2:
        have = ", ".join(p["gpus"]) if p["gpus"] else "none"
        return f"{ALL_GPUS} needs two or more GPUs among the selected devices (GPUs selected: {have})"
    return None


def build(case: Case, config) -> Work:
    p = case.info
    reason = skip_reason(case)
    if reason:
        raise SkipCase(reason)
    if p["device"] == ALL_GPUS:
        return build_all_gpus(case)
    return build_matmul(case.id, p["device"], p["precision"], p["m"], p["n"], p["k"])


def build_all_gpus(case: Case) -> Work:
    """The same matmul launched on every GPU, then all synchronised (Case.devices): the node's aggregate."""
    p = case.info
    gpus = list(p["gpus"])
    precision, m, n, k = p["precision"], p["m"], p["n"], p["k"]
    operands = [product(dev, precision, m, n, k) for dev in gpus]
    extra: dict = {**_record(precision, gpus[0]), "gpu_count": len(gpus)}

    def run() -> None:
        # Launches are asynchronous: each device starts as soon as its launch is queued, so the devices run
        # at the same time; the timer then synchronises all of them.
        for call, _ in operands:
            call()

    def check() -> None:
        for dev, (_, check_one) in zip(gpus, operands):
            check_one(f"{case.id} on {dev}")

    # `derive` runs right after the timed rounds (suite.plugin.run_case): the per-device rates come from GPUs
    # at their sustained clocks, comparable with the aggregate the timed rounds measured.
    return Work(fn=run, check=check, flops=len(gpus) * flops(m, n, k), extra=extra,
                derive=lambda median: per_device_rates(gpus, operands, flops(m, n, k)))


def per_device_rates(gpus: list[str], operands: list, flop: int) -> dict:
    """Each GPU's TFLOP/s while all run at once (CUDA events per device), and the slowest of them."""
    if not all(d.startswith("cuda") for d in gpus):
        return {}
    times: dict[str, list[float]] = {d: [] for d in gpus}
    for i in range(2 * PER_DEVICE_ROUNDS):
        events = []
        for dev, (call, _) in zip(gpus, operands):
            with torch.cuda.device(dev):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
            events.append((dev, start, end))
        for dev in gpus:
            torch.cuda.synchronize(dev)
        if i >= PER_DEVICE_ROUNDS:
            for dev, start, end in events:
                times[dev].append(start.elapsed_time(end) / 1e3)
    rates = {dev: flop / statistics.median(t) / 1e12 for dev, t in times.items()}
    slowest = min(rates, key=rates.get)
    return {"per_device_tflops": rates, "slowest_device": slowest, "slowest_tflops": rates[slowest]}


__all__ = ["ALL_GPUS", "NAME", "SkipCase", "build", "build_matmul", "enumerate_cases", "flops", "skip_reason",
           "matmul_case", "tolerance"]
