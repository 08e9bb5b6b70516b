"""Collective algbw/busbw per op, dtype, size and mode (cases in suite/cases/collectives/); run under torchrun:

    torchrun --nproc-per-node=N -m pytest benchmarks/test_collectives.py --benchmark-json out.json
"""


def test_collectives(case, measure):
    measure(case)
