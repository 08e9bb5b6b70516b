"""Datasheet peaks of common accelerators: DENSE TFLOP/s per precision (no sparsity), the source beside each row.

Vendors quote tensor-core figures "with sparsity" (2:4 structured sparsity doubles them); every number here is
the dense one (the sparse figure halved where a datasheet gives only that). float32 is the plain FP32 (CUDA
core) peak, tf32 the TF32 tensor-core peak, float16 the FP16 tensor-core peak with FP32 accumulation (what
PyTorch uses), float64 the FP64 tensor-core peak where the chip has one, float8_e4m3fn and float8_e5m2 the FP8
tensor-core peak (both formats run at one rate), mxfp8 (block-scaled FP8) the same FP8 peak, nvfp4 the FP4
tensor-core peak (Blackwell), int8 the INT8 tensor-core peak in TOPS. Peaks are upper bounds at boost clock:
the best published matmul (MAMF) reaches 78-87% of them on NVIDIA GPUs, 51% on the MI300X (docs/reference.md).

Device names are matched by tokens (`NVIDIA H100 80GB HBM3` -> h100, 80gb, hbm3). Where the name does not say
the form factor (SXM, PCIe, NVL) and the peaks differ, the lowest (most conservative) row is taken and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (v1.04), table 3"
_ADA_WP = "NVIDIA Ada GPU Architecture whitepaper (v2.1), appendix A, table 2"


@dataclass(frozen=True)
class Peak:
    gpu: str
    tflops: dict[str, float]
    source: str
    # Every item must match a token of the device name; an item that is a tuple matches if any of it does.
    require: tuple = ()
    exclude: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Match:
    gpu: str
    tflops: float
    source: str
    note: str = ""


def _peaks(fp64: float | None, fp32: float, tf32: float | None, bf16: float | None, fp16: float,
           fp8: float | None = None, int8: float | None = None) -> dict:
    values = {"float64": fp64, "float32": fp32, "tf32": tf32, "bfloat16": bf16, "float16": fp16,
              "float8_e4m3fn": fp8, "float8_e5m2": fp8, "int8": int8}
    return {k: v for k, v in values.items() if v is not None}


_H100_PCIE = _peaks(51.2, 51.2, 378.0, 756.0, 756.0, fp8=1513.0, int8=1513.0)
_V100_PCIE = _peaks(7.0, 14.0, None, None, 112.0)
_AMBIGUOUS = "the name does not say SXM, PCIe or NVL: the lowest (PCIe) peaks are taken"

# Most specific rows first: the first row whose tokens all match wins.
PEAKS: tuple[Peak, ...] = (
    Peak("H100 NVL", _peaks(60.0, 60.0, 417.5, 835.5, 835.5, fp8=1670.5, int8=1670.5),
         "NVIDIA H100 NVL datasheet (sparse figures halved)",
         ("h100", "nvl")),
    Peak("H100 PCIe", _H100_PCIE, _H100_WP, ("h100", "pcie")),
    Peak("H100 SXM5", _peaks(66.9, 66.9, 494.7, 989.4, 989.4, fp8=1978.9, int8=1978.9), _H100_WP,
         ("h100", ("sxm", "hbm3"))),
    Peak("H100 (form factor unknown)", _H100_PCIE, _H100_WP, ("h100",), note=_AMBIGUOUS),
    Peak("H200 NVL", _peaks(60.0, 60.0, 417.5, 835.5, 835.5, fp8=1670.5, int8=1670.5),
         "NVIDIA H200 datasheet (sparse figures halved)",
         ("h200", "nvl")),
    Peak("H200 SXM", _peaks(67.0, 67.0, 494.5, 989.5, 989.5, fp8=1979.0, int8=1979.0),
         "NVIDIA H200 datasheet (sparse figures halved)",
         ("h200",)),
    Peak("GH200", _peaks(67.0, 67.0, 494.0, 990.0, 990.0, fp8=1979.0, int8=1979.0),
         "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse figures halved)",
         ("gh200",)),
    Peak("A100", _peaks(19.5, 19.5, 156.0, 312.0, 312.0, int8=624.0),
         "NVIDIA A100 Tensor Core GPU datasheet (same peaks for 40/80 GB, SXM and PCIe; no FP8)", ("a100",)),
    Peak("A10", _peaks(None, 31.2, 62.5, 125.0, 125.0), "NVIDIA A10 Tensor Core GPU datasheet", ("a10",)),
    Peak("L4", _peaks(None, 30.3, 60.0, 121.0, 121.0), "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)",
         ("l4",)),
    Peak("L40S", _peaks(None, 91.6, 183.0, 362.05, 362.05), "NVIDIA L40S datasheet", ("l40s",)),
    Peak("L40", _peaks(None, 90.5, 90.5, 181.05, 181.05), "NVIDIA L40 datasheet", ("l40",)),
    Peak("GeForce RTX 4090", _peaks(None, 82.6, 82.6, 165.2, 165.2), _ADA_WP, ("rtx", "4090"),
         exclude=("d", "laptop", "mobile")),
    Peak("GeForce RTX 3090", _peaks(None, 35.6, 35.6, 71.0, 71.0),
         "NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.1), table 9", ("rtx", "3090"),
         exclude=("ti", "laptop", "mobile")),
    Peak("V100 SXM2", _peaks(7.8, 15.7, None, None, 125.0), "NVIDIA V100 Tensor Core GPU datasheet",
         ("v100", "sxm")),
    Peak("V100 PCIe", _V100_PCIE, "NVIDIA V100 Tensor Core GPU datasheet", ("v100", "pcie")),
    Peak("V100 (form factor unknown)", _V100_PCIE, "NVIDIA V100 Tensor Core GPU datasheet", ("v100",),
         note=_AMBIGUOUS),
    Peak("T4", _peaks(None, 8.1, None, None, 65.0), "NVIDIA T4 Tensor Core GPU datasheet", ("t4",)),
    # No fp32 row: Blackwell's bf16 is 30x its plain fp32 (75), past the 16x that marks a sparse figure elsewhere.
    Peak("B200", {"float64": 37.0, "tf32": 1100.0, "bfloat16": 2250.0, "float16": 2250.0,
                  "float8_e4m3fn": 4500.0, "float8_e5m2": 4500.0, "mxfp8": 4500.0, "int8": 4500.0, "nvfp4": 9000.0},
         "bf16/fp16/fp8: docs/reference.md (ml-engineering compute/accelerator README); fp64, tf32, int8 and fp4 "
         "(nvfp4: 18 PFLOPS sparse): NVIDIA HGX B200 datasheet, per-GPU column (sparse halved); mxfp8 runs at the "
         "FP8 rate", ("b200",)),
    Peak("MI300X", _peaks(163.4, 163.4, 653.7, 1307.4, 1307.4, fp8=2614.9, int8=2614.9),
         "AMD Instinct MI300X data sheet (matrix cores; fp8 and int8 dense, the sparse figures halved)",
         ("mi300x",)),
)


def name_tokens(name: str) -> list[str]:
    """'NVIDIA A100-SXM4-80GB' -> ['nvidia', 'a100', 'sxm4', '80gb']."""
    return [t for t in re.split(r"[^a-z0-9]+", str(name).lower()) if t]


def _token_matches(pattern: str, token: str) -> bool:
    # 'sxm' matches 'sxm4' and 'sxm5'; a pattern ending in a digit ('l4', 'a100') must match exactly, so that
    # 'l4' never matches 'l40' nor 'a10' 'a100'.
    if token == pattern:
        return True
    return pattern[-1].isalpha() and token.startswith(pattern) and token[len(pattern):].isdigit()


def _has(tokens: list[str], item) -> bool:
    alternatives = item if isinstance(item, tuple) else (item,)
    return any(_token_matches(alt, tok) for alt in alternatives for tok in tokens)


def find_gpu(name: str | None) -> Peak | None:
    """The datasheet row for a device name, or None for a device the table does not know (or the CPU)."""
    if not name:
        return None
    tokens = name_tokens(name)
    for peak in PEAKS:
        if all(_has(tokens, item) for item in peak.require) and not any(_has(tokens, x) for x in peak.exclude):
            return peak
    return None


def lookup(name: str | None, precision: str) -> Match | None:
    """The dense peak of `precision` on the GPU called `name`; None if the GPU or that precision is unknown."""
    peak = find_gpu(name)
    if peak is None or precision not in peak.tflops:
        return None
    return Match(peak.gpu, peak.tflops[precision], peak.source, peak.note)


__all__ = ["PEAKS", "Match", "Peak", "find_gpu", "lookup", "name_tokens"]
