"""The measured matmul ceiling per device and precision: the best TFLOP/s over a sweep of shapes (MAMF-style).

Every compute result's `pct_of_ceiling` is taken against it when the JSON is written (suite/cases/ceiling/).
"""

from suite.cases.precision import mode_for


def test_ceiling(case, measure):
    with mode_for(case):
        measure(case)
