"""Transfer habits as slow/fast pairs of equal work (suite/cases/habits/)."""

from suite.cases.habits.measure import host_side
from suite.cases.precision import mode_for


def test_habits(case, measure):
    # The habits' matmuls are IEEE float32 whatever the process had set (TF32 on, or torch's
    # TORCH_ALLOW_TF32_CUBLAS_OVERRIDE): a TF32 matmul beside the copy would change the overlap ratio.
    # Host transfers: host memory on the GPU's NUMA node, as the copy family's.
    with mode_for(case), host_side(case):
        measure(case)
