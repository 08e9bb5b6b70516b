"""Matmul TFLOP/s per device, precision and shape (cases in suite/cases/matmul/)."""

from suite.cases.precision import mode_for


def test_matmul(case, measure):
    # TF32 on or off as the case asks, for its check, warm-up and timing; restored even if it fails or skips.
    with mode_for(case):
        measure(case)
