"""Copy bandwidth for every ordered device pair and size: host<->device, peer, within a device (suite/cases/copy/)."""

from suite.cases.copy.measure import host_side


def test_copy(case, measure):
    # A host<->GPU copy's host buffers and thread on the GPU's NUMA node, as nvbandwidth measures it.
    with host_side(case):
        measure(case)
