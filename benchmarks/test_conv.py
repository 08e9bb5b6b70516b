"""conv2d TFLOP/s per device, precision, memory layout, step and layer shape (suite/cases/conv/)."""

from suite.cases.precision import mode_for


def test_conv(case, measure):
    # TF32 and cudnn.benchmark as the case asks, for its check, warm-up and timing; restored afterwards.
    with mode_for(case):
        measure(case)
