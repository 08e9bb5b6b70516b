"""How matmul results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from suite.summary import compute_grid, precision
from suite.health.expect import Measure

RATE = "tflops"  # the rate that says how fast this family is
# Seconds one benchmark costs beyond its warm-up and its timed rounds (suite.plan): pytest's setup, call
# and teardown, building inputs, the correctness check (float64 references on the host), pytest-benchmark's
# calibration, the partial-results line. Measured by scripts/bench_timing.py (pytest's per-test durations
# minus the timed rounds minus the warm-up, median per family) on the project's 2-core CPU, shared and
# loaded, with the default config; the same figures are assumed for a GPU, whose checks run the same
# references on the host (the CPU's slow calls inflate ceiling and model here, so this errs long). Each
# family's OVERHEAD_S is measured so.
OVERHEAD_S = 0.11
TITLE = "Matmul"
NOTE = ""


def shape(info: dict) -> str:
    return f"{info.get('m')}x{info.get('n')}x{info.get('k')}"


def call_flops(params: dict) -> int | None:
    """FLOP of one call, from the case's parameters alone (the plan's long-call estimate; imports torch)."""
    if not all(isinstance(params.get(k), int) for k in "mnk"):
        return None
    from suite.cases.matmul.measure import ALL_GPUS, calls_per_batch, flops

    one = flops(params["m"], params["n"], params["k"])
    # All GPUs at once: each runs a batch of calls per call, side by side.
    return one * calls_per_batch(one) if params.get("device") == ALL_GPUS else one


def label(info: dict) -> str:
    """The precision with its unit where it is not TFLOP/s: 'int8 (TOPS)' (its `tflops` counts integer ops)."""
    unit = info.get("unit")
    return f"{precision(info)} ({unit})" if unit else precision(info)


def summary(benches: list[dict]) -> list[str]:
    return compute_grid("matmul", benches, lambda i: f"{i.get('device')} {label(i)}", shape)

# Health judges matmul only at 2*4096^3 FLOP or more: MAMF's best shapes are large; smaller ones do not fill
# the GPU.
MIN_MATMUL_FLOPS = 2 * 4096**3
MEASURES = {
    f"matmul_{short}": Measure("tflops", "TFLOP/s", (("precision", precision),), min_flops=MIN_MATMUL_FLOPS)
    for short, precision in (("bf16", "bfloat16"), ("fp16", "float16"), ("tf32", "tf32"), ("fp8", "float8_e4m3fn"))
}
