"""The `cases.matmul` section: precisions, m x n x k shapes, and the all-GPUs-at-once case."""

from __future__ import annotations

from pydantic import Field

from suite.sections import CaseSection, Precision, Shape3, cpu_overrides


@cpu_overrides("dtypes", "shapes")
class MatmulConfig(CaseSection):
    """`torch.matmul(a, b, out=c)` per device, precision and shape."""

    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(1024, 1024, 1024)], min_length=1)
    concurrent: bool = Field(
        False, description="also run each GPU dtype/shape on every selected GPU at once (case 'all-gpus')"
    )
