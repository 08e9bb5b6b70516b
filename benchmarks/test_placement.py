"""`.to` against copies on each device: to the same device is free, a copy is not (suite/cases/placement/)."""

from suite.cases.placement.measure import host_side


def test_placement(case, measure):
    # `.to` between the host and a GPU: host memory on the GPU's NUMA node, as the copy family's.
    with host_side(case):
        measure(case)
