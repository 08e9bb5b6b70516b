"""Buffers the data-movement families share: patterned host and device bytes, copy verification, side streams.

Below copy, placement and habits, so none of them imports another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from suite.cases.common import require_host_bytes
from suite.devices import bound_host_node, host_near
from suite.units import format_size

# Source bytes never hold a zero and verification first zeroes the destination ("poisons" it), so every byte a
# copy failed to write differs from the source.
POISON = 0
# The pattern is generated this many 32-bit words at a time: the hash's temporaries stay small, so a 1 GiB
# source costs one pass over memory, not three, and a buffer is filled without a second one of its size.
PATTERN_CHUNK_WORDS = 1 << 20


def _pattern_words(w: torch.Tensor, start: int, seed: int) -> torch.Tensor:
    """Fill the int32 tensor `w` with the pattern's words `start`, `start` + 1, ..."""
    torch.arange(start + seed * 7919, start + seed * 7919 + w.numel(), dtype=torch.int32, out=w)
    w.mul_(-1640531535)  # 0x9E3779B1 (Knuth's golden-ratio multiplier) as a signed int32
    w.bitwise_xor_(w >> 15)
    w.mul_(0x2C1B3C6D)
    w.bitwise_xor_(w >> 12)
    w.bitwise_or_(0x01010101)
    return w


def pattern_bytes(nbytes: int, seed: int = 1) -> torch.Tensor:
    """`nbytes` of a non-repeating byte pattern on the CPU (uint8), no byte zero; the same for a given seed.

    A multiplicative hash of the word index (fast and deterministic, unlike torch.randint, which takes seconds
    for hundreds of MiB); OR-ing 0x01 into each byte keeps every byte non-zero.
    """
    return fill_pattern(torch.empty(nbytes, dtype=torch.uint8), seed)


def fill_pattern(out: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """Write pattern_bytes(out.numel(), seed) into the uint8 tensor `out` (any device), a chunk at a time."""
    chunk = torch.empty(PATTERN_CHUNK_WORDS, dtype=torch.int32)
    step = PATTERN_CHUNK_WORDS * 4
    for offset in range(0, out.numel(), step):
        part = out[offset : offset + step]
        words = _pattern_words(chunk[: (part.numel() + 3) // 4], offset // 4, seed)
        part.copy_(words.view(torch.uint8)[: part.numel()])
    return out


def buffer(device: str, nbytes: int, pinned: bool = False, data: bool = False) -> torch.Tensor:
    """A uint8 buffer on `device`: empty, or holding pattern_bytes; host buffers pinned on request. A host
    buffer the host cannot give is a skip (common.require_host_bytes), never the kernel's OOM killer."""
    if device == "cpu":
        kind = "pinned" if pinned else "pageable"
        require_host_bytes(nbytes, f"a {format_size(nbytes)} {kind} host buffer")
        out = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    else:
        out = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return fill_pattern(out) if data else out


def host_side(case) -> contextlib.AbstractContextManager:
    """Where a case that moves bytes between the host and one GPU keeps its host buffers and runs its host side:
    on the GPU's NUMA node (devices.host_near, as nvbandwidth binds by default). Nothing to bind for a case
    without the host, or without exactly one accelerator. The family's test file enters it around the case."""
    gpus = [d for d in case.devices if d != "cpu"]
    if "cpu" not in case.devices or len(gpus) != 1:
        return contextlib.nullcontext()
    return host_near(gpus[0])


def host_extra() -> dict:
    """extra_info of a case built inside host_side: the NUMA node its host side is bound to, where it is."""
    node = bound_host_node()
    return {} if node is None else {"host_numa_node": node}


def verify_copy(dst: torch.Tensor, src: torch.Tensor, what: str) -> None:
    """AssertionError unless `dst` holds exactly the bytes of `src` (compared on the accelerator side)."""
    assert dst.shape == src.shape and dst.dtype == src.dtype, (
        f"{what}: destination {tuple(dst.shape)} {dst.dtype} does not match source {tuple(src.shape)} {src.dtype}"
    )
    where = dst.device if dst.device.type != "cpu" else src.device
    a, b = dst.to(where), src.to(where)
    # Comparing 8-byte words is several times faster than bytes on the CPU; same answer.
    wide = a.numel() % 8 == 0 and a.is_contiguous() and b.is_contiguous()
    if torch.equal(a.view(torch.int64), b.view(torch.int64)) if wide else torch.equal(a, b):
        return
    wrong = (a != b).nonzero()
    raise AssertionError(
        f"{what}: {wrong.numel()} of {a.numel()} bytes differ from the source (first at byte {int(wrong[0])}); "
        "the copy is wrong"
    )


@contextlib.contextmanager
def on_streams(streams: list) -> Iterator[None]:
    """Make each stream the current one on its device for the duration."""
    with contextlib.ExitStack() as stack:
        for stream in streams:
            stack.enter_context(torch.cuda.stream(stream))
        yield


def tie_to_streams(tensors, streams: list) -> None:
    """Tell the caching allocator that each device tensor is used on its device's stream among `streams`.

    The tensors were allocated on the default stream; without record_stream the allocator could hand their
    memory to a new tensor as soon as they are freed, while a copy queued on a side stream still reads or
    writes it. Pinned host buffers need nothing: torch records an event for each asynchronous copy of them.
    """
    for tensor in tensors:
        if tensor.device.type != "cuda":
            continue
        for stream in streams:
            if stream.device == tensor.device:
                tensor.record_stream(stream)


__all__ = ["POISON", "buffer", "fill_pattern", "host_extra", "host_side", "on_streams", "pattern_bytes", "tie_to_streams",
           "verify_copy"]
