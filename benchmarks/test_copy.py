"""Copy bandwidth for every ordered device pair and size: host<->device, peer, within a device (suite/cases/copy/)."""


def test_copy(case, measure):
    measure(case)
