"""The `cases.placement` section: sizes and the `.to`/copy operations compared on each device."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from suite.sections import CaseSection, Size, cpu_overrides, one_of

PLACEMENT_OPS = ("to_same", "to_other", "clone", "copy_", "empty_like_copy", "to_copy")
PlacementOp = Annotated[str, one_of("placement op", PLACEMENT_OPS)]


@cpu_overrides("sizes", "ops")
class PlacementConfig(CaseSection):
    """`.to` against copies on each device: to_same (no copy), to_other, clone, copy_, empty_like_copy, to_copy."""

    sizes: list[Size] = Field(default_factory=lambda: [4 * 2**10, 2**20, 64 * 2**20], min_length=1)
    ops: list[PlacementOp] = Field(default_factory=lambda: list(PLACEMENT_OPS), min_length=1)
