"""Matmul: C = A @ B for (m, n, k) shapes x precisions x devices, and on every GPU at once; 2*m*n*k FLOP per call
(operations for INT8). FP8 and INT8 run through torch's scaled and integer matmuls (suite.cases.matmul.formats)."""

from __future__ import annotations

import functools
import statistics
from typing import Callable

import torch

from suite.cases import Case, SkipCase, Work, issuers, make_case
from suite.cases.common import randn, relative_error, skip_if_unsupported, to_host64, torch_dtype
from suite.cases.matmul import formats
from suite.cases.precision import FP8, INT8, mode_record, require_tf32_math, storage_dtype, unsupported_reason
from suite.devices import synchronize

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
# Each GPU's thread issues matmuls of at least this many FLOP per call of the all-at-once case (0.55 ms at
# 1 PFLOP/s), so handing the batches to the threads and waiting for them is a small share of the work the GPUs
# have queued meanwhile ...
ALL_GPUS_BATCH_FLOP = 2**39
# ... and at most this many matmuls (small shapes: 256 x 11 us for bf16 1024^3 on an H200).
MAX_BATCH_CALLS = 256


def flops(m: int, n: int, k: int) -> int:
    """FLOP of one m x k by k x n matmul: a multiply and an add per (i, j, p)."""
    return 2 * m * n * k


def shape_id(m: int, n: int, k: int) -> str:
    return f"{m}x{n}x{k}"


def matmul_case(family: str, device: str, precision: str, m: int, n: int, k: int, scaling: str = "tensor") -> Case:
    # Row-wise FP8 scales are a parameter (and an id part) of their own; per-tensor ones, the default, are not,
    # so results from before `scaling` existed still line up.
    row = {"scaling": scaling} if scaling != "tensor" else {}
    return make_case(family, (device,), [device, precision, *row.values(), shape_id(m, n, k)], device=device,
                     dtype=storage_dtype(precision), precision=precision, m=m, n=n, k=k, **row)


def selected_gpus(devices: list[str]) -> list[str]:
    return [d for d in devices if d.split(":")[0] in GPU_KINDS]


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.matmul
    if not section.enabled:
        return []
    cases = [
        matmul_case(NAME, dev, precision, m, n, k, scaling)
        for dev in devices
        for precision in section.for_device(dev).dtypes
        for scaling in (section.scaling if precision in FP8 else ["tensor"])
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


def product(device: str, precision: str, m: int, n: int, k: int, what: str = "matmul", scaling: str = "tensor"
            ) -> tuple[Callable[[], object], Callable[[str], None]]:
    """One matmul's operands on `device`: the call to time and its check (given a label); SkipCase where the
    precision, the installed torch or the device cannot run it."""
    low = precision in formats.ROUNDOFF
    reason = unsupported_reason(precision, device) or (low and (formats.shape_reason(precision, device, m, n, k)
                                                                or formats.scaling_reason(scaling, device)))
    if reason:
        raise SkipCase(reason)
    try:
        if low:
            return formats.product(precision, device, m, n, k, check_rows(m, n, k), scaling)
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


def build_matmul(label: str, device: str, precision: str, m: int, n: int, k: int, scaling: str = "tensor") -> Work:
    """One matmul on one device; run inside `precision.mode_for(case)` so TF32 is on or off as asked."""
    run, check = product(device, precision, m, n, k, scaling=scaling)
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
    return build_matmul(case.id, p["device"], p["precision"], p["m"], p["n"], p["k"], p.get("scaling", "tensor"))


def calls_per_batch(flop: int) -> int:
    """Matmuls each GPU's thread issues per call of the all-GPUs case (see ALL_GPUS_BATCH_FLOP)."""
    return max(1, min(MAX_BATCH_CALLS, -(-ALL_GPUS_BATCH_FLOP // flop)))


def build_all_gpus(case: Case) -> Work:
    """The same matmuls issued on every GPU at once, a thread per GPU, then all synchronised (Case.devices):
    the node's aggregate."""
    p = case.info
    gpus = list(p["gpus"])
    precision, m, n, k = p["precision"], p["m"], p["n"], p["k"]
    operands = [product(dev, precision, m, n, k) for dev in gpus]
    calls = calls_per_batch(flops(m, n, k))
    # `calls` is a parameter: a timed call now holds `calls` matmuls per GPU, so its time never lines up in
    # compare with a run that timed one.
    extra: dict = {**_record(precision, gpus[0]), "gpu_count": len(gpus), "calls": calls}

    def batch(call) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                call()
        return run

    # One thread per GPU, its device set once: one thread issuing the GPUs' calls in turn leaves each GPU idle
    # while it launches on the others (bf16 1024^3: 11 us a call on an H200, 40-90 us for eight launches).
    issue = issuers.Issuers([batch(call) for call, _ in operands],
                            [functools.partial(issuers.use_device, dev) for dev in gpus])

    def check() -> None:
        for dev, (_, check_one) in zip(gpus, operands):
            check_one(f"{case.id} on {dev}")

    # `derive` runs right after the timed rounds (suite.plugin.run_case): the per-device rates come from GPUs
    # at their sustained clocks, comparable with the aggregate the timed rounds measured.
    return Work(fn=issue, check=check, flops=calls * len(gpus) * flops(m, n, k), extra=extra,
                derive=lambda median: per_device_rates(gpus, issue, calls * flops(m, n, k)))


def _timed_batches(run: Callable[[], None], rounds: int) -> list[tuple]:
    """CUDA events around `rounds` batches, issued back to back on the calling thread's current device."""
    pairs = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        pairs.append((start, end))
    return pairs


def per_device_rates(gpus: list[str], issue: issuers.Issuers, flop: int) -> dict:
    """Each GPU's TFLOP/s while all run at once (CUDA events around each of its thread's batches of `flop`
    FLOP) and the slowest of them: the all-at-once aggregate is checked against their sum."""
    if not all(d.startswith("cuda") for d in gpus):
        return {}
    # The batches run back to back, so each GPU's later batches start queued behind work (no launch gap inside
    # their events), with every GPU loaded; the first PER_DEVICE_ROUNDS are the warm-up.
    spans = issue([functools.partial(_timed_batches, run, 2 * PER_DEVICE_ROUNDS) for run in issue.batches])
    synchronize(*gpus)
    rates = {dev: flop / statistics.median(s.elapsed_time(e) / 1e3 for s, e in pairs[PER_DEVICE_ROUNDS:]) / 1e12
             for dev, pairs in zip(gpus, spans)}
    slowest = min(rates, key=rates.get)
    return {"per_device_tflops": rates, "slowest_device": slowest, "slowest_tflops": rates[slowest]}


__all__ = ["ALL_GPUS", "NAME", "SkipCase", "build", "build_matmul", "enumerate_cases", "flops", "skip_reason",
           "matmul_case", "tolerance"]
