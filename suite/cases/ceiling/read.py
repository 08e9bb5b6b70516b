"""How ceiling results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from suite.cases.matmul import read as matmul
from suite.summary import compute_grid

RATE = "tflops"  # the rate that says how fast this family is
OVERHEAD_S = 1.3  # measured as matmul's (suite.plan)
TITLE = "Compute ceiling"
NOTE = ("A sweep of matmul shapes per device and precision: the best sustained rate among these and the "
        "matmul results is the measured ceiling that % of ceiling (matmul, conv, model) divides by. It is the "
        "median of rounds of back-to-back calls after a sustained warm-up, not mamf-finder's MAMF (the mean "
        "of single calls timed by events after an L2 flush, the best of a wide sweep), which reads higher: "
        "about 790 TFLOP/s on an H200 SXM whose sustained rate is 728-735 (ml-engineering).")

# A ceiling case is a matmul: the plan counts its calls, and health judges it against the matmul figures.
call_flops = matmul.call_flops
MEASURES = matmul.MEASURES


def summary(benches: list[dict]) -> list[str]:
    return compute_grid("ceiling", benches, lambda i: f"{i.get('device')}", lambda i: f"{matmul.label(i)} {matmul.shape(i)}")
