"""Helpers the case families share: dtypes, seeded random inputs, result checks, unsupported-op skips."""

from __future__ import annotations

import re

import torch

from suite.cases import SkipCase

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

# Seed for every input tensor: results are reproducible and never all-zero.
SEED = 1234

# Messages torch uses when an op or dtype is not implemented on a backend.
_UNSUPPORTED = re.compile(
    r"not implemented for|not supported|doesn't support|does not support|unsupported|no kernel", re.IGNORECASE
)


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


def randn(*shape: int, dtype: torch.dtype, device: str, seed: int = SEED) -> torch.Tensor:
    """Standard normal data made on the CPU with a fixed seed, then moved: identical on every device."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype=dtype).to(device)


def skip_if_unsupported(exc: BaseException, what: str, device: str) -> None:
    """Turn torch's 'not implemented for this dtype/backend' into a SkipCase; re-raise anything else."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, (RuntimeError, TypeError, NotImplementedError)) and _UNSUPPORTED.search(first):
        raise SkipCase(f"{what} is not supported on {device}: {first}") from None
    raise exc


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """||result - reference|| / ||reference|| in float64 (Frobenius norm)."""
    diff = (result.detach().to("cpu", torch.float64) - reference).norm()
    return float(diff / reference.norm().clamp_min(1e-300))
