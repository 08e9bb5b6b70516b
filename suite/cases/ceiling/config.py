"""The `cases.ceiling` section: the matmul shape sweep whose best TFLOP/s is a device's measured ceiling."""

from __future__ import annotations

from pydantic import Field

from suite.cases.matmul.config import MatmulPrecision
from suite.sections import CaseSection, Shape3, cpu_overrides


@cpu_overrides("dtypes", "shapes", description="overrides for the CPU")
class CeilingConfig(CaseSection):
    """A MAMF-style sweep of matmul shapes per precision."""

    dtypes: list[MatmulPrecision] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(n, n, n) for n in (1024, 2048, 4096)], min_length=1,
                                 description="the matmul sweep; the best TFLOP/s over it is the device's ceiling")
