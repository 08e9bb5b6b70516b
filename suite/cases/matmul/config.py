"""The `cases.matmul` section: precisions, m x n x k shapes, and the all-GPUs-at-once case."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from suite.sections import PRECISION_ALIASES, CaseSection, Shape3, cpu_overrides

# A matmul (and the ceiling's sweep) also takes the tensor-core formats torch multiplies in its scaled and
# integer matmuls; the other compute families take suite.sections.Precision.
MATMUL_PRECISION_ALIASES = {
    **PRECISION_ALIASES,
    **{alias: "float8_e4m3fn" for alias in ("float8_e4m3fn", "fp8", "fp8_e4m3", "e4m3")},
    **{alias: "float8_e5m2" for alias in ("float8_e5m2", "fp8_e5m2", "e5m2")},
    "int8": "int8",
    **{name: name for name in ("mxfp8", "nvfp4")},
}
MATMUL_PRECISIONS = sorted(set(MATMUL_PRECISION_ALIASES.values()))


def _precision(value: Any) -> str:
    key = value.strip().lower().removeprefix("torch.") if isinstance(value, str) else None
    if key in MATMUL_PRECISION_ALIASES:
        return MATMUL_PRECISION_ALIASES[key]
    raise ValueError(f"{value!r} is not a dtype; allowed: {', '.join(MATMUL_PRECISIONS)} (tf32: float32 data, "
                     "TF32 math; float8_*: torch._scaled_mm; int8: torch._int_mm; mxfp8, nvfp4: block-scaled, "
                     "torch.nn.functional.scaled_mm)")


MatmulPrecision = Annotated[str, BeforeValidator(_precision, json_schema_input_type=str)]


@cpu_overrides("dtypes", "shapes")
class MatmulConfig(CaseSection):
    """`torch.matmul(a, b, out=c)` per device, precision and shape."""

    dtypes: list[MatmulPrecision] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(1024, 1024, 1024)], min_length=1)
    scaling: list[Literal["tensor", "row"]] = Field(
        default_factory=lambda: ["tensor"], min_length=1,
        description="FP8 scales: one per tensor, and/or one per row of a and column of b (row: Hopper or newer)",
    )
    concurrent: bool = Field(
        False, description="also run each GPU dtype/shape on every selected GPU at once (case 'all-gpus')"
    )
