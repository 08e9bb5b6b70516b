"""How conv results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from suite.summary import compute_grid, precision

RATE = "tflops"  # the rate that says how fast this family is
OVERHEAD_S = 0.45  # measured as matmul's (suite.plan)
TITLE = "Convolutions"
NOTE = ("TFLOP/s counts the direct convolution's multiply-adds (fwd+bwd: 3 × the forward). A faster algorithm "
        "(cuDNN Winograd or FFT; oneDNN on the CPU against a small matmul sweep) can exceed 100% of the "
        "ceiling.")


def summary(benches: list[dict]) -> list[str]:
    return compute_grid("conv", benches, lambda i: f"{i.get('device')} {precision(i)} {i.get('layout')} {i.get('step')}",
                        lambda i: f"{i.get('layer')}")


def call_flops(params: dict) -> int | None:
    """FLOP of one call, from the case's parameters alone (the plan's long-call estimate; imports torch)."""
    from suite.cases.conv.measure import flops

    try:
        return flops(params)
    except (KeyError, TypeError):
        return None
