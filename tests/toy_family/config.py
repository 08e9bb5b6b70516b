"""The `cases.toy` section: buffer sizes and the fill value (torch-free)."""

from __future__ import annotations

from pydantic import Field

from suite.sections import CaseSection, Size, cpu_overrides


@cpu_overrides("sizes")
class ToyConfig(CaseSection):
    """`x.fill_(value)` on each device."""

    sizes: list[Size] = Field(default_factory=lambda: [2**20], min_length=1, description="bytes of the buffer")
    value: float = Field(1.5, description="what the buffer is filled with (not 0: the check must see a change)")
