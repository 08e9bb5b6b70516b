"""FP8 and INT8 matmuls: torch._scaled_mm (bf16 output; one scale per tensor, or per row of a and column of b)
and torch._int_mm (int32 output), inputs drawn to use each format's range, checked against float64 of the
dequantized inputs."""

from __future__ import annotations

import math
from typing import Callable

import torch

from suite import devices as dev
from suite.cases.common import randn, relative_error, to_host64
from suite.cases.precision import FP8, INT8, below, low_precision_dtype

# The relative error (Frobenius, against float64 of the dequantized inputs, which are exact) a format may
# show: MARGIN x (the output's rounding + the accumulator's roundoff x sqrt(k), how a sum's rounding error
# grows). FP8: the bf16 output rounds each element by up to 2^-8; cuBLAS accumulates in fp32, but Hopper's FP8
# tensor cores keep ~14 bits between its promotions to fp32 (DeepSeek-V3 technical report, 3.3.2): 2^-14 per
# add. INT8: int32 accumulation of int8 products is exact while |sum| < 2^31 (any k below 133,000): 0.
ROUNDOFF = {**{name: (2.0**-8, 2.0**-14) for name in FP8}, INT8: (0.0, 0.0)}
MARGIN = 2.0
# INT8 inputs are normal data scaled so the largest magnitude is this (the format's range, symmetric).
INT8_MAX = 127
# cuBLASLt's FP8 matmuls need k and n in multiples of 16; torch._int_mm on CUDA needs m > 16 and k and n in
# multiples of 8. The CPU takes any shape.
CUDA_MULTIPLE = {**{name: 16 for name in FP8}, INT8: 8}
INT8_MIN_M = 17
# Scales per row of a and per column of b (scale_a m x 1, scale_b 1 x n): cuBLASLt has them from Hopper on.
SCALINGS = ("tensor", "row")
ROW_MIN_CAPABILITY = (9, 0)


def tolerance(precision: str, k: int) -> float:
    output, accumulator = ROUNDOFF[precision]
    return MARGIN * (output + math.sqrt(k) * accumulator)


def shape_reason(precision: str, device: str, m: int, n: int, k: int) -> str | None:
    """Why this shape cannot run in `precision` on `device`'s library, or None."""
    if not device.startswith("cuda"):
        return None
    step = CUDA_MULTIPLE[precision]
    if k % step or n % step or (precision == INT8 and m < INT8_MIN_M):
        low = f" and m > {INT8_MIN_M - 1}" if precision == INT8 else ""
        return f"{precision} matmuls on {device} need k and n in multiples of {step}{low}; got {m}x{n}x{k}"
    return None


def scaling_reason(scaling: str, device: str) -> str | None:
    """Why `device` cannot run FP8 with row-wise scales, or None."""
    if scaling != "row" or not device.startswith("cuda") or dev.missing_reason(device) is not None:
        return None
    props = dev.current_platform().properties(torch.device(device))
    if capability := below(props, ROW_MIN_CAPABILITY):
        return (f"row-wise FP8 scales need compute capability >= 9.0 (Hopper or newer); {device} "
                f"({props.get('name', '?')}) is {capability}")
    return None


def product(precision: str, device: str, m: int, n: int, k: int, rows: int, scaling: str = "tensor"
            ) -> tuple[Callable[[], object], Callable[[str], None]]:
    """The call to time (run once here, so an unsupported one raises now) and its check, given a label, of the
    first `rows` rows."""
    a = randn(m, k, dtype=torch.float32, device=device, seed=1)
    b = randn(k, n, dtype=torch.float32, device=device, seed=2)
    if precision == INT8:
        aq, bq = (_to_int8(x) for x in (a, b))
        scales = (1.0, 1.0)

        def run() -> torch.Tensor:
            return torch._int_mm(aq, bq)
    else:
        fmt = low_precision_dtype(precision, device)
        # fp32 scales chosen so the largest input lands on the format's largest value: the whole range is used,
        # as a training recipe's amax scaling does. One per operand (mamf-finder's recipe), or one per row of a
        # and column of b (what the operand's reduction dimension k shares).
        row = scaling == "row"
        sa = (a.abs().amax(dim=1, keepdim=True) if row else a.abs().amax()) / torch.finfo(fmt).max
        sb = (b.abs().amax(dim=0, keepdim=True) if row else b.abs().amax()) / torch.finfo(fmt).max
        aq = (a / sa).to(fmt)
        bq = (b / sb).to(fmt).t().contiguous().t()  # column-major, as cuBLASLt wants its second operand
        scales = (to_host64(sa[:rows] if row else sa), to_host64(sb))

        def run() -> torch.Tensor:
            return torch._scaled_mm(aq, bq, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    del a, b
    run()

    def check(label: str) -> None:
        result = run()
        result = result[0] if isinstance(result, tuple) else result  # torch < 2.5 also returned the amax
        reference = (to_host64(aq[:rows]) * scales[0]) @ (to_host64(bq) * scales[1])
        err, tol = relative_error(result[:rows], reference), tolerance(precision, k)
        assert err <= tol, (f"matmul {label}: relative error {err:.3g} > {tol:g} against float64 of the "
                            "dequantized inputs")

    return run, check


def _to_int8(x: torch.Tensor) -> torch.Tensor:
    return (x * (INT8_MAX / x.abs().amax())).round().to(torch.int8)
