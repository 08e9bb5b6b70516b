"""Transfer habits as slow/fast pairs of equal work (suite/cases/habits/)."""


def test_habits(case, measure):
    measure(case)
