"""How matmul results are read (torch-free): headline rate, report title and note."""

from __future__ import annotations

from suite.summary import compute_grid, precision

RATE = "tflops"  # the rate that says how fast this family is
TITLE = "Matmul"
NOTE = ""


def shape(info: dict) -> str:
    return f"{info.get('m')}x{info.get('n')}x{info.get('k')}"


def summary(benches: list[dict]) -> list[str]:
    return compute_grid("matmul", benches, lambda i: f"{i.get('device')} {precision(i)}", shape)
