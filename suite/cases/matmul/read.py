"""How matmul results are read (torch-free): headline rate, report title and note."""

from __future__ import annotations

from suite.summary import compute_grid, precision
from suite.health.expect import Measure

RATE = "tflops"  # the rate that says how fast this family is
TITLE = "Matmul"
NOTE = ""


def shape(info: dict) -> str:
    return f"{info.get('m')}x{info.get('n')}x{info.get('k')}"


def summary(benches: list[dict]) -> list[str]:
    return compute_grid("matmul", benches, lambda i: f"{i.get('device')} {precision(i)}", shape)

# Health judges matmul only at 2*4096^3 FLOP or more: MAMF's best shapes are large; smaller ones do not fill
# the GPU.
MIN_MATMUL_FLOPS = 2 * 4096**3
MEASURES = {
    f"matmul_{short}": Measure("tflops", "TFLOP/s", (("precision", precision),), min_flops=MIN_MATMUL_FLOPS)
    for short, precision in (("bf16", "bfloat16"), ("fp16", "float16"), ("tf32", "tf32"))
}
