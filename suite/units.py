"""Sizes and rates in the units the suite reports: bytes with binary/decimal suffixes, GB/s, TFLOP/s.

No torch here: both the measurement and the analysis side use it.
"""

from __future__ import annotations

import re

# Decimal units for rates (GB/s = 1e9 B/s, TFLOP/s = 1e12 FLOP/s), as bandwidthTest, nvbandwidth and
# nccl-tests report them.
GB = 1e9
TFLOP = 1e12

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
SIZE_HELP = "an integer byte count or a number with a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB (e.g. 64MiB)"


def parse_size(value: object) -> int:
    """Return a byte count from `4096`, `"4KiB"`, `"64MiB"`, `"1GB"`; raise ValueError naming the value."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; expected {SIZE_HELP}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{value!r} is not a size; sizes must be positive")
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match:
            number, unit = match.groups()
            factor = _SIZE_UNITS.get(unit.upper())
            if factor is not None:
                size = float(number) * factor
                if size >= 1 and size == int(size):
                    return int(size)
                raise ValueError(f"{value!r} is not a whole, positive number of bytes")
    raise ValueError(f"{value!r} is not a size; expected {SIZE_HELP}")


def format_size(nbytes: int) -> str:
    """Shortest exact binary-unit spelling: 4096 -> '4KiB', 67108864 -> '64MiB', 1000 -> '1000B'."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def gbps(nbytes: float, seconds: float) -> float:
    """Decimal GB/s for `nbytes` moved in `seconds`."""
    return nbytes / seconds / GB


def tflops(flops: float, seconds: float) -> float:
    """Decimal TFLOP/s for `flops` done in `seconds`."""
    return flops / seconds / TFLOP
