"""FP8 and INT8 matmuls: torch._scaled_mm (bf16 output; one scale per tensor, or per row of a and column of b),
torch._int_mm (int32 output) and the block-scaled MXFP8 and NVFP4 through torch.nn.functional.scaled_mm; inputs
drawn to use each format's range, checked against float64 of the dequantized inputs."""

from __future__ import annotations

import math
from typing import Callable

import torch

from suite import devices as dev
from suite.cases.common import randn, relative_error, to_host64
from suite.cases.precision import BLOCK_SCALED, FP8, INT8, low_precision_dtype, short_of

# The relative error (Frobenius, against float64 of the dequantized inputs, which are exact) a format may
# show: MARGIN x (the output's rounding + the accumulator's roundoff x sqrt(k), how a sum's rounding error
# grows). FP8: the bf16 output rounds each element by up to 2^-8; cuBLAS accumulates in fp32, but Hopper's FP8
# tensor cores keep ~14 bits between its promotions to fp32 (DeepSeek-V3 technical report, 3.3.2): 2^-14 per
# add. INT8: int32 accumulation of int8 products is exact while |sum| < 2^31 (any k below 133,000): 0.
# MXFP8 and NVFP4 as FP8: the inputs' own rounding (e4m3 2^-4, e2m1 2^-2 relative) is in the dequantized inputs
# the reference multiplies, so it does not count; what remains is the product's: the products of two scaled
# elements are exact (at most 12 significant bits: fp32 holds them), the accumulation and the bf16 output as FP8
# (the fp32 rounding of NVFP4's global scales, 2^-24, is negligible). Counting the inputs' rounding would let a
# misplaced scale (an error of the scales' spread, ~2x) pass as NVFP4 noise.
ROUNDOFF = {**{name: (2.0**-8, 2.0**-14) for name in (*FP8, *BLOCK_SCALED)}, INT8: (0.0, 0.0)}
MARGIN = 2.0
# INT8 inputs are normal data scaled so the largest magnitude is this (the format's range, symmetric).
INT8_MAX = 127
# cuBLASLt's FP8 matmuls need k and n in multiples of 16; torch._int_mm on CUDA needs m > 16 and k and n in
# multiples of 8; the block-scaled formats (16-byte aligned rows of packed FP4) k and n in multiples of 32. The CPU
# takes any shape.
CUDA_MULTIPLE = {**{name: 16 for name in FP8}, INT8: 8, **{name: 32 for name in BLOCK_SCALED}}
INT8_MIN_M = 17
# Scales per row of a and per column of b (scale_a m x 1, scale_b 1 x n): cuBLASLt has them from Hopper on.
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
    return short_of(device, ROW_MIN_CAPABILITY, "row-wise FP8 scales need", "Hopper")


def product(precision: str, device: str, m: int, n: int, k: int, rows: int, scaling: str = "tensor"
            ) -> tuple[Callable[[], object], Callable[[str], None]]:
    """The call to time (run once here, so an unsupported one raises now) and its check, given a label, of the
    first `rows` rows."""
    a = randn(m, k, dtype=torch.float32, device=device, seed=1)
    b = randn(k, n, dtype=torch.float32, device=device, seed=2)
    if precision in BLOCK_SCALED:
        (aq, sa, ga, ref_a), (bq, sb, gb, ref_b) = _block_quantize(a, precision), _block_quantize(b.t(), precision)
        bq, ref_a, ref_b = bq.t(), ref_a[:rows].clone(), ref_b.t()  # b column-major (k x n), as cuBLASLt wants
        scales = (to_host64(ga), to_host64(gb))
        fn, parts = torch.nn.functional, 1 + (precision == "nvfp4")  # NVFP4 also has a fp32 scale per tensor
        recipe = [getattr(fn.ScalingType, f"BlockWise1x{BLOCK_SCALED[precision][2]}"), fn.ScalingType.TensorWise]
        recipe, swizzle = recipe[:parts], [fn.SwizzleType.SWIZZLE_32_4_4, fn.SwizzleType.NO_SWIZZLE][:parts]
        sa, sb = [sa, ga][:parts], [sb, gb][:parts]

        def run() -> torch.Tensor:
            return torch.nn.functional.scaled_mm(aq, bq, sa, recipe, sb, recipe, swizzle_a=swizzle, swizzle_b=swizzle,
                                                 output_dtype=torch.bfloat16)
    elif precision == INT8:
        aq, bq = ref_a, ref_b = _to_int8(a), _to_int8(b)
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
        bq = ref_b = (b / sb).to(fmt).t().contiguous().t()  # column-major, as cuBLASLt wants its second operand
        ref_a = aq
        scales = (to_host64(sa[:rows] if row else sa), to_host64(sb))

        def run() -> torch.Tensor:
            return torch._scaled_mm(aq, bq, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    del a, b
    run()

    def check(label: str) -> None:
        result = run()
        result = result[0] if isinstance(result, tuple) else result  # torch < 2.5 also returned the amax
        reference = (to_host64(ref_a[:rows]) * scales[0]) @ (to_host64(ref_b) * scales[1])
        err, tol = relative_error(result[:rows], reference), tolerance(precision, k)
        assert err <= tol, (f"matmul {label}: relative error {err:.3g} > {tol:g} against float64 of the "
                            "dequantized inputs")

    return run, check


def _to_int8(x: torch.Tensor) -> torch.Tensor:
    return (x * (INT8_MAX / x.abs().amax())).round().to(torch.int8)


# e2m1's magnitudes by code (0-7; bit 3 is the sign), and the midpoints between them that round to nearest.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MIDPOINTS = tuple((lo + hi) / 2 for lo, hi in zip(E2M1, E2M1[1:]))
E4M3_MAX = 448.0


def _block_quantize(x: torch.Tensor, precision: str) -> tuple:
    """x (rows x k) per block of k: the data scaled_mm takes, its block scales (swizzled), its fp32 scale per
    tensor, and the dequantized data without that one (bf16: exact, at most 6 significant bits)."""
    data, scale_dtype, block = BLOCK_SCALED[precision]
    blocks = x.contiguous().view(x.shape[0], -1, block)
    amax = blocks.abs().amax(dim=2, keepdim=True)
    if precision == "mxfp8":
        # A power of two (e8m0), rounded up: the block's largest lands within 2x of e4m3's largest, never over.
        mantissa, exponent = torch.frexp(amax / E4M3_MAX)
        glob, scale = torch.ones((), device=x.device), torch.exp2((exponent - (mantissa == 0.5).int()).float())
        q = (blocks / scale).to(torch.float8_e4m3fn)
        values = q.float()
    else:
        # NVFP4's recipe: the tensor's scale puts the largest block scale on e4m3's largest, each block's e4m3
        # scale puts the block's largest on e2m1's largest (6; the e4m3 rounding of the scale may saturate it).
        glob = x.abs().amax() / (E2M1[-1] * E4M3_MAX)
        # Never 0 (e4m3's smallest is 2^-9), never over e4m3's largest.
        scale = (amax / E2M1[-1] / glob).clamp(2.0**-9, E4M3_MAX).to(torch.float8_e4m3fn).float()
        y = blocks / (scale * glob)
        code = torch.bucketize(y.abs(), torch.tensor(E2M1_MIDPOINTS, device=x.device)).to(torch.uint8)
        values = torch.tensor(E2M1, device=x.device)[code.int()] * torch.where(y < 0, -1.0, 1.0)
        code = (code | torch.where(y < 0, 8, 0).to(torch.uint8)).reshape(x.shape[0], -1)
        # Two per byte, the even element of k in the low nibble (torch's float4_e2m1fn_x2).
        q = (code[:, 0::2] | code[:, 1::2] << 4).view(getattr(torch, data))
    scales = swizzled(scale.reshape(x.shape[0], -1)).to(getattr(torch, scale_dtype))
    return q.reshape(x.shape[0], -1), scales, glob, (values * scale).reshape(x.shape).to(torch.bfloat16)


def swizzled(scales: torch.Tensor) -> torch.Tensor:
    """Block scales (rows x blocks) in cuBLAS's layout for them ("1D Block Scaling Factors Layout" in the cuBLAS
    docs), flat: tiles of 128 rows x 4 blocks, row-major, padded with ones; in a tile, row r's block c at
    (r % 32) * 16 + (r // 32) * 4 + c."""
    rows, cols = scales.shape
    padded = scales.new_ones(-(-rows // 128) * 128, -(-cols // 4) * 4)
    padded[:rows, :cols] = scales
    return padded.view(padded.shape[0] // 128, 4, 32, -1, 4).permute(0, 3, 2, 1, 4).flatten()
