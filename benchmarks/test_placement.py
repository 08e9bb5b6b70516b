"""`.to` against copies on each device: to the same device is free, a copy is not (suite/cases/placement/)."""


def test_placement(case, measure):
    measure(case)
