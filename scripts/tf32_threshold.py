"""Where the tf32 check's threshold sits: IEEE float32 and simulated TF32 matmul errors against float64.

A tf32 case whose checked result is closer to float64 than suite.cases.precision.TF32_MIN_ERROR is skipped:
TF32 math did not run. This prints, for the suite's normal data and a range of shapes, the relative error
(Frobenius norm) of an IEEE float32 matmul and of one with its inputs rounded to TF32's 10 mantissa bits,
to nearest and by truncation (what tensor cores read), and how far each lies from the threshold. CPU only;
the gpu test `test_tf32_changes_a_cuda_matmul` checks the same on a real GPU.

    .venv/bin/python scripts/tf32_threshold.py
"""

from __future__ import annotations

import torch

from suite.cases.common import randn
from suite.cases.precision import TF32_MIN_ERROR

SHAPES = [(64, 128, 128), (256, 1024, 1024), (256, 4096, 4096), (256, 16384, 1024)]


def to_tf32(x: torch.Tensor, nearest: bool) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32)
    if nearest:
        bits = bits + (1 << 12)
    return (bits & ~((1 << 13) - 1)).view(torch.float32)


def main() -> None:
    print(f"threshold {TF32_MIN_ERROR:.1e}")
    print(f"{'m x k x n':>18} {'IEEE':>9} {'TF32 rn':>9} {'TF32 trunc':>10}  threshold/IEEE  TF32 rn/threshold")
    for m, k, n in SHAPES:
        a = randn(m, k, dtype=torch.float32, device="cpu", seed=1)
        b = randn(k, n, dtype=torch.float32, device="cpu", seed=2)
        ref = a.double() @ b.double()

        def err(x: torch.Tensor) -> float:
            return float((x.double() - ref).norm() / ref.norm())

        ieee = err(a @ b)
        rn = err(to_tf32(a, True) @ to_tf32(b, True))
        trunc = err(to_tf32(a, False) @ to_tf32(b, False))
        print(f"{f'{m}x{k}x{n}':>18} {ieee:9.2e} {rn:9.2e} {trunc:10.2e}  {TF32_MIN_ERROR / ieee:14.0f}  "
              f"{rn / TF32_MIN_ERROR:17.1f}")


if __name__ == "__main__":
    main()
