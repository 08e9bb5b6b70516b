"""The `cases.copy` section: device pairs, sizes, host memory, non_blocking and direction of the copies."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from suite.sections import CaseSection, Size, cpu_overrides, one_of

HOST_MEMORY = ("pinned", "pageable")
COPY_DIRECTIONS = ("uni", "bi")
_PAIR_DEVICE = r"(cpu|mps|(?:cuda|xpu)(?::\d+)?)"


def _device_pair(value: Any) -> str:
    """'cpu->cuda:1' (spaces allowed, 'cuda' means cuda:0) -> 'cpu->cuda:1'."""
    match = re.fullmatch(rf"\s*{_PAIR_DEVICE}\s*->\s*{_PAIR_DEVICE}\s*", value.lower()) if isinstance(
        value, str) else None
    if not match:
        raise ValueError(f"{value!r} is not a device pair; expected 'SRC->DST' with devices cpu, mps, cuda:N "
                         "or xpu:N (e.g. 'cpu->cuda:0', 'cuda:0->cuda:1')")
    src, dst = (d if d in ("cpu", "mps") or ":" in d else f"{d}:0" for d in match.groups())
    return f"{src}->{dst}"


HostMemory = Annotated[str, one_of("host memory kind", HOST_MEMORY)]
CopyDirection = Annotated[str, one_of("copy direction", COPY_DIRECTIONS)]
DevicePair = Annotated[str, BeforeValidator(_device_pair)]


def powers_of_4(low: int, high: int) -> list[int]:
    sizes = [low]
    while sizes[-1] * 4 <= high:
        sizes.append(sizes[-1] * 4)
    return sizes


@cpu_overrides("sizes", "matrix_sizes", description="overrides of sizes/matrix_sizes for the CPU->CPU copy")
class CopyConfig(CaseSection):
    """Every ordered (src, dst) pair of the selected devices x size; host memory and non_blocking for the
    host side of host<->device copies; 'bi' = both directions at once on separate streams. With
    `matrix_sizes`, only the pairs where size matters run every size in `sizes` (the sweep); every other pair
    runs `matrix_sizes` only (nvbandwidth's src x dst matrix)."""

    sizes: list[Size] = Field(
        default_factory=lambda: powers_of_4(4 * 2**10, 256 * 2**20), min_length=1,
        description="buffer sizes (with matrix_sizes: of the size sweep); default 4KiB-256MiB in powers of 4",
    )
    matrix_sizes: list[Size] | None = Field(
        None, min_length=1,
        description="sizes for every ordered pair; then `sizes` runs only on the sweep pairs: host<->each "
        "device, the host copy, one same-device copy and one peer pair per link kind (default: unset, every "
        "pair runs every size)",
    )
    memory: list[HostMemory] = Field(
        default_factory=lambda: list(HOST_MEMORY), min_length=1,
        description="host memory of host<->device copies: pinned, pageable",
    )
    non_blocking: list[bool] = Field(
        default_factory=lambda: [False, True], min_length=1,
        description="non_blocking values for host<->device copies (the only ones where it changes anything)",
    )
    directions: list[CopyDirection] = Field(
        default_factory=lambda: list(COPY_DIRECTIONS), min_length=1,
        description="uni, bi (both directions at once; distinct devices with an accelerator only)",
    )
    pairs: list[DevicePair] | None = Field(
        None, min_length=1,
        description="'SRC->DST' pairs to run instead of every ordered pair of the devices",
    )
