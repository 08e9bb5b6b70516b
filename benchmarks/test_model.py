"""A model on a device: nn.Linear(3, 1) forward, and MLP / LeNet training steps in samples/s (suite/cases/model/)."""

from suite.cases.precision import mode_for


def test_model(case, measure):
    with mode_for(case):
        measure(case)
