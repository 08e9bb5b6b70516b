"""Helpers the case families share: dtypes, seeded random inputs, result checks, unsupported-op and host-memory
skips."""

from __future__ import annotations

import math
import os
import re
from typing import NoReturn

import torch

from suite.cases import SkipCase
from suite.devices.memory import host_shortfall

TORCH_DTYPES = {name: getattr(torch, name) for name in ("float32", "float16", "bfloat16", "float64")}

# Seed for every input tensor: results are reproducible and never all-zero.
SEED = 1234
# Host memory of a computation on the CPU per byte of its operands and results: the float32 draws the inputs
# are cast from, layout copies, the library's packed panels and workspaces, and the check's float64 copies.
HOST_WORKSPACE_FACTOR = 3

# Messages torch uses when an op or dtype is not implemented on a backend, MPS's and XPU's included: "Cannot
# convert a MPS Tensor to float64 dtype" (MPS has no float64), "MPS BFloat16 is only supported on MacOS 14 or
# newer", "Required aspect fp64 is not supported on the device" (an Intel GPU without float64).
_UNSUPPORTED = re.compile(r"not implemented for|not supported|doesn't support|does not support|unsupported|no kernel"
                          r"|only supported on|cannot convert a \w+ tensor to \w+ dtype", re.IGNORECASE)


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]


# Inputs kept by (shape, seed) while `keep_inputs` is on. A run draws the same operands for every device and
# precision of a shape (a matmul shape on 8 GPUs in 4 precisions: 32 draws of each operand), and the CPU
# generator is serial: about a second per 16384x16384 operand, minutes per full run on an 8-GPU node. The
# plugin keeps them for the run; the GPU check (each case built six times) too.
_KEPT_INPUTS: dict[tuple, torch.Tensor] | None = None
KEPT_INPUTS_MAX_BYTES = 8 * 2**30
# At most this share of the host's memory: a laptop's run must not hold 8 GiB of operands it will not reuse.
KEPT_INPUTS_MEMORY_SHARE = 1 / 8


def kept_inputs_cap() -> int:
    """How many bytes of drawn inputs to keep: KEPT_INPUTS_MAX_BYTES, or less on a host with little memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX: the fixed cap
        return KEPT_INPUTS_MAX_BYTES
    return int(min(KEPT_INPUTS_MAX_BYTES, memory * KEPT_INPUTS_MEMORY_SHARE))


def keep_inputs(on: bool = True) -> None:
    """Keep randn's draws for reuse (on) or drop them (off)."""
    global _KEPT_INPUTS
    _KEPT_INPUTS = {} if on else None


def keeping_inputs() -> bool:
    return _KEPT_INPUTS is not None


def require_host_bytes(nbytes: int, what: str) -> None:
    """SkipCase, naming the size and what is free, unless the host can give `nbytes` more now (with a margin,
    suite.devices.memory); nothing where the host does not tell (not Linux). Call it before allocating."""
    if reason := host_shortfall(nbytes, what):
        raise SkipCase(reason)


def randn(*shape: int, dtype: torch.dtype, device: str, seed: int = SEED) -> torch.Tensor:
    """Standard normal data made on the CPU with a fixed seed, then moved: identical on every device. Always a
    tensor of the caller's own (a kept draw is copied, never handed out). A skip where the host cannot hold
    the float32 draw (and, for the CPU, its copy)."""
    key = (shape, seed)
    base = _KEPT_INPUTS.get(key) if _KEPT_INPUTS is not None else None
    if base is None:
        numel = math.prod(shape)
        copy = numel * dtype.itemsize if device == "cpu" else 0
        require_host_bytes(numel * 4 + copy, f"a {'x'.join(map(str, shape))} float32 input drawn on the host")
        gen = torch.Generator().manual_seed(seed)
        base = torch.randn(*shape, generator=gen, dtype=torch.float32)
        cap = kept_inputs_cap() if _KEPT_INPUTS is not None else 0
        if _KEPT_INPUTS is None or base.numel() * 4 > cap:
            return base.to(dtype=dtype).to(device)
        held = sum(t.numel() * t.element_size() for t in _KEPT_INPUTS.values())
        while _KEPT_INPUTS and held + base.numel() * 4 > cap:
            dropped = _KEPT_INPUTS.pop(next(iter(_KEPT_INPUTS)))  # the oldest first
            held -= dropped.numel() * dropped.element_size()
        _KEPT_INPUTS[key] = base
    return base.to(dtype=dtype, device=device, copy=True)


def skip_if_unsupported(exc: BaseException, what: str, device: str) -> NoReturn:
    """Turn torch's 'not implemented for this dtype/backend' into a SkipCase; re-raise anything else."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, (RuntimeError, TypeError, NotImplementedError)) and _UNSUPPORTED.search(first):
        raise SkipCase(f"{what} is not supported on {device}: {first}") from None
    raise exc


def to_host64(t: torch.Tensor) -> torch.Tensor:
    """`t` as a float64 tensor on the CPU: moved first, then cast there. A single `.to("cpu", torch.float64)`
    may cast on the device side, which MPS refuses ("Cannot convert a MPS Tensor to float64 dtype") or, on
    some versions, answers with zeros."""
    return t.detach().to("cpu").to(torch.float64)


def float64_reference(t: torch.Tensor) -> torch.Tensor:
    """`t` in float64 where float64 runs: on its own device for CUDA (ROCm's device type is "cuda" too), on
    the CPU for every other kind. MPS has no float64, and Intel's consumer and integrated GPUs lack it."""
    if t.device.type == "cuda":
        return t.detach().to(torch.float64)
    return to_host64(t)


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """||result - reference|| / ||reference|| in float64 (Frobenius norm); `reference` is on the CPU."""
    diff = (to_host64(result) - reference).norm()
    return float(diff / reference.norm().clamp_min(1e-300))
