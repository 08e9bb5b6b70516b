"""Matmul: C = A @ B for (m, n, k) shapes x dtypes x devices; 2*m*n*k FLOP per call."""

from __future__ import annotations

import torch

from suite.cases import Case, SkipCase, Work, make_case
from suite.cases.common import randn, relative_error, skip_if_unsupported, torch_dtype

NAME = "matmul"

# Relative Frobenius error allowed against a float64 reference. Rounding error of a dot product grows about
# like sqrt(k) * unit roundoff; these bounds hold to k = 65536 with margin and still catch a wrong kernel
# (a wrong result has relative error ~1).
TOLERANCE = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 5e-2,
}
# TF32 keeps 10 mantissa bits (unit roundoff ~5e-4): float32 matmuls on CUDA with TF32 allowed get this bound.
TF32_TOLERANCE = 5e-3
# The check recomputes this many rows of C in float64 on the CPU: rows are independent, so a slice checks the
# kernel at a small fraction of the cost of a full float64 matmul.
CHECK_ROWS = 256


def flops(m: int, n: int, k: int) -> int:
    """FLOP of one m x k by k x n matmul: a multiply and an add per (i, j, p)."""
    return 2 * m * n * k


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.matmul
    if not section.enabled:
        return []
    return [
        make_case(NAME, (dev,), [dev, dtype, f"{m}x{n}x{k}"], device=dev, dtype=dtype, m=m, n=n, k=k)
        for dev in devices
        for dtype in section.for_device(dev).dtypes
        for (m, n, k) in section.for_device(dev).shapes
    ]


def _tolerance(dtype: str, device: str) -> float:
    if dtype == "float32" and device.startswith("cuda") and torch.backends.cuda.matmul.allow_tf32:
        return TF32_TOLERANCE
    return TOLERANCE[dtype]


def build(case: Case, config) -> Work:
    p = case.info
    device, dtype_name, m, n, k = p["device"], p["dtype"], p["m"], p["n"], p["k"]
    dtype = torch_dtype(dtype_name)
    a = randn(m, k, dtype=dtype, device=device, seed=1)
    b = randn(k, n, dtype=dtype, device=device, seed=2)
    out = torch.empty(m, n, dtype=dtype, device=device)
    try:
        torch.matmul(a, b, out=out)
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, f"{dtype_name} matmul", device)

    def run() -> None:
        torch.matmul(a, b, out=out)

    def check() -> None:
        rows = min(m, CHECK_ROWS)
        torch.matmul(a, b, out=out)
        reference = a[:rows].to("cpu", torch.float64) @ b.to("cpu", torch.float64)
        err = relative_error(out[:rows], reference)
        tol = _tolerance(dtype_name, device)
        assert err <= tol, f"matmul {case.id}: relative error {err:.3g} > {tol:g} against a float64 reference"

    return Work(fn=run, check=check, flops=flops(m, n, k))


# The GPU check's large matmul: big enough that launch and synchronisation costs vanish (REFERENCE.md's MAMF
# figure for one H200 is quoted at 8192^3 bf16).
CHECK_SHAPE = 8192


def gpu_checks(ctx) -> list:
    """The suite's median for a large bf16 matmul against CUDA events around the same op, in one run."""
    from suite.gpu_check import RATIO_TOLERANCE, CheckRow, median
    from suite.timing import cuda_event_times

    n = CHECK_SHAPE
    config = {
        "devices": [ctx.device],
        "cases": {"matmul": {"dtypes": ["bfloat16"], "shapes": [f"{n}x{n}x{n}"]}},
    }
    bench = ctx.run_suite(config, tests="benchmarks/test_matmul.py")
    suite_median = bench[0]["stats"]["median"]
    a = randn(n, n, dtype=torch.bfloat16, device=ctx.device, seed=1)
    b = randn(n, n, dtype=torch.bfloat16, device=ctx.device, seed=2)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=ctx.device)
    events = median(cuda_event_times(lambda: torch.matmul(a, b, out=out), ctx.device, iterations=50, warmup=20))
    ratio_ok = abs(suite_median / events - 1) <= RATIO_TOLERANCE
    tf = flops(n, n, n) / 1e12
    return [
        CheckRow(f"matmul bf16 {n}^3 median", suite_median * 1e3, events * 1e3, "ms", ratio_ok, "vs CUDA events"),
        CheckRow(f"matmul bf16 {n}^3 TFLOP/s", tf / suite_median, tf / events, "TFLOP/s", ratio_ok),
    ]


__all__ = ["NAME", "SkipCase", "build", "enumerate_cases", "flops", "gpu_checks"]
