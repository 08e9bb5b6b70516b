"""Matmul TFLOP/s per device, dtype and shape (cases in suite/cases/matmul.py)."""


def test_matmul(case, measure):
    measure(case)
