"""Collectives: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv over torch.distributed.

Run under torchrun (see suite/distributed.py). Sizes follow nccl-tests: S is the whole buffer (all_gather: the
output, reduce_scatter: the input); algbw = S / t and busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import torch

from suite import distributed
from suite.distributed.launch import nccl_tuning_log
from suite.cases import Case, SkipCase, Work, make_case
from suite.cases.common import torch_dtype
from suite.units import GB, format_size

NAME = "collectives"


@dataclass(frozen=True)
class Op:
    modes: tuple[str, ...]  # the modes torch offers for it: "inplace", "outofplace"
    factor: Callable[[int], float]  # busbw = algbw x factor(world size)
    chunked: bool  # the buffer splits into one chunk per rank: its element count rounds down to n x k


# nccl-tests' bus bandwidth factors: what each rank's link carries relative to S.
OPS: dict[str, Op] = {
    "all_reduce": Op(("inplace",), lambda n: 2 * (n - 1) / n, False),
    "all_gather": (ag := Op(("outofplace", "inplace"), lambda n: (n - 1) / n, True)),
    "reduce_scatter": ag,
    "broadcast": Op(("inplace",), lambda n: 1.0, False),
    "reduce": Op(("inplace",), lambda n: 1.0, False),
    "all_to_all": Op(("outofplace",), lambda n: (n - 1) / n, True),
    # Each rank sends S to rank+1 and receives S from rank-1 (nccl-tests' sendrecv; pairs when n = 2).
    "send_recv": Op(("outofplace",), lambda n: 1.0, False),
}
# broadcast and reduce use this root, as nccl-tests do by default.
ROOT = 0
# Input values are (rank + 1) + (i mod PATTERN) / PATTERN: never zero, different per rank and per position (a
# misplaced chunk fails the check), exact in bf16/fp16 for small ranks. All positive: repeated in-place SUMs
# (all_reduce, reduce_scatter, reduce grow n-fold per call) head to +inf, never NaN; inf costs the same as
# finite values on GPUs and x86 CPUs, and the check runs on fresh buffers before timing.
PATTERN = 8


def bus_factor(op: str, world_size: int) -> float:
    return OPS[op].factor(world_size)


def algbw(nbytes: float, seconds: float) -> float:
    """GB/s (decimal) of S bytes in `seconds`, as nccl-tests' algbw."""
    return nbytes / seconds / GB


def busbw(op: str, nbytes: float, seconds: float, world_size: int) -> float:
    return algbw(nbytes, seconds) * bus_factor(op, world_size)


def element_count(op: str, nbytes: int, element_size: int, world_size: int) -> int:
    """Elements of the S buffer; chunked ops round down to a multiple of the world size (0: too small)."""
    count = nbytes // element_size
    if OPS[op].chunked:
        count -= count % world_size
    return count


def modes(op: str, in_place: bool | str) -> list[str]:
    """The modes to run: both where torch has both and the config says both; otherwise the op's own."""
    available = OPS[op].modes
    if len(available) == 1 or in_place == "both":
        return list(available)
    return ["inplace" if in_place else "outofplace"]


def _backend_and_device(config, devices: list[str]) -> tuple[str, str]:
    state = distributed.current()
    if state is not None:
        return state.backend, state.device
    backend = distributed.resolve_backend(config.cases.collectives.backend, devices)
    kind = distributed.BACKEND_DEVICE_KIND.get(backend)
    return backend, f"{kind}:0" if kind else "cpu"


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.collectives
    if not section.enabled:
        return []
    backend, device = _backend_and_device(config, devices)
    sec = section.for_device(device)
    return [
        make_case(NAME, (device,), [backend, op, dtype, format_size(size), mode],
                  op=op, dtype=dtype, size=size, in_place=mode == "inplace", backend=backend, device=device)
        for op in sec.ops
        for dtype in sec.dtypes
        for size in sec.sizes
        for mode in modes(op, sec.in_place)
    ]


def rank_values(rank: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Rank `rank`'s input of `count` elements (see PATTERN)."""
    base = torch.arange(count, device=device, dtype=torch.float32).remainder_(PATTERN).div_(PATTERN)
    return base.add_(rank + 1).to(dtype)


# Inputs of the reducing ops (all_reduce, reduce, reduce_scatter): small whole numbers, 1 + (i mod p) +
# (rank mod 2), so every partial sum is an integer <= (p + 1) n, exact in the dtype (integers up to 2 / eps:
# 256 in bf16, 2048 in fp16, 2**24 in fp32), and so is the sum with one rank too many: the check compares
# exactly, and a missing or doubled rank (off by >= 1) always shows. The period p is the largest of 11, 7, 5,
# 3, 2 that keeps the sums exact (primes, above or beside any chunk count of a node: chunks of power-of-two
# size stay distinct, so a reduce_scatter chunk delivered to the wrong rank shows too): in bf16 11 up to 20
# ranks, 7 up to 31, 5 up to 41, 3 up to 63, 2 up to 84, then values 1 or 2 (no position term: a misplaced
# chunk no longer shows) up to 127 ranks and all ones up to 255; in fp16 11 up to 169 ... all ones up to 2047.
# Beyond that no whole numbers sum exactly, and a rounding tolerance of n - 1 unit roundoffs is wider than
# one rank's share (1/n of the sum): the check then proves the result is near the sum, not that every rank
# is in it (the case's extra_info says so: check "approximate").
REDUCE_PERIODS = (11, 7, 5, 3, 2)


def reduce_pattern(dtype: torch.dtype, world_size: int) -> tuple[int, int]:
    """(period, parity): inputs 1 + (i mod period) + parity * (rank mod 2), whose sums of world_size ranks
    stay exact in `dtype` where any can; (1, 1) beyond that (exactness lost, see sums_are_exact)."""
    limit = 2 / torch.finfo(dtype).eps if dtype.is_floating_point else float("inf")
    for period in REDUCE_PERIODS:
        if (period + 1) * (world_size + 1) <= limit:  # + 1: a doubled rank's sum must be exact too
            return period, 1
    return (1, 1) if 2 * (world_size + 1) <= limit else (1, 0)


def reduce_values(rank: int, count: int, dtype: torch.dtype, device: str, world_size: int) -> torch.Tensor:
    period, parity = reduce_pattern(dtype, world_size)
    base = torch.arange(count, device=device, dtype=torch.float32).remainder_(period)
    return base.add_(1 + parity * (rank % 2)).to(dtype)


# Where a check's float64 reference may be computed: on the rank's device for these, on the CPU for the
# rest (Intel's consumer and integrated GPUs, under XCCL, have no float64).
FLOAT64_DEVICE_TYPES = ("cuda", "cpu")


def _reference_device(device: str) -> str:
    return device if torch.device(device).type in FLOAT64_DEVICE_TYPES else "cpu"


def _sum_of_ranks(n: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Every rank's reduce_values summed in float64 (on the CPU where the device may lack float64)."""
    at = _reference_device(device)
    total = torch.zeros(count, dtype=torch.float64, device=at)
    for r in range(n):
        total += reduce_values(r, count, dtype, at, n).to(torch.float64)
    return total


def sums_are_exact(dtype: torch.dtype, world_size: int) -> bool:
    """Whether every partial sum of reduce_values is an integer the dtype holds exactly."""
    if not dtype.is_floating_point:
        return True
    period, parity = reduce_pattern(dtype, world_size)
    return (period + parity) * (world_size + 1) <= 2 / torch.finfo(dtype).eps


def reduce_tolerance(dtype: torch.dtype, world_size: int) -> float:
    """Relative error allowed for a SUM of n positive values in `dtype`, added in any order, where the sums
    cannot be exact: the bound is n-1 unit roundoffs (eps/2 each); twice that for margin. Wider than one
    rank's share of the sum once n > 11 in bf16 (n^2 eps > 1): only sums_are_exact makes the check strict."""
    return (world_size - 1) * torch.finfo(dtype).eps + 1e-12


def _api(new: str, old: str):
    import torch.distributed as dist

    return getattr(dist, new, None) or getattr(dist, old)


@dataclass
class _Buffers:
    fn: Callable[[], object]
    reset: Callable[[], None]
    result: Callable[[], torch.Tensor]  # what to compare after one call
    expected: Callable[[], torch.Tensor]
    exact: bool
    only_root: bool = False


def _buffers(op: str, inplace: bool, count: int, dtype: torch.dtype, device: str, rank: int, n: int) -> _Buffers:
    import torch.distributed as dist

    mine = rank_values(rank, count, dtype, device)
    chunk = count // n if OPS[op].chunked else count
    exact_sum = sums_are_exact(dtype, n)
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        mine = reduce_values(rank, count, dtype, device, n)
    if op == "all_reduce":
        buf = mine.clone()
        return _Buffers(lambda: dist.all_reduce(buf), lambda: buf.copy_(mine), lambda: buf,
                        lambda: _sum_of_ranks(n, count, dtype, device), exact=exact_sum)
    if op == "broadcast":
        buf = mine.clone()
        return _Buffers(lambda: dist.broadcast(buf, ROOT), lambda: buf.copy_(mine), lambda: buf,
                        lambda: rank_values(ROOT, count, dtype, device), exact=True)
    if op == "reduce":
        buf = mine.clone()
        return _Buffers(lambda: dist.reduce(buf, ROOT), lambda: buf.copy_(mine), lambda: buf,
                        lambda: _sum_of_ranks(n, count, dtype, device), exact=exact_sum, only_root=True)
    if op == "all_gather":
        gather = _api("all_gather_single", "all_gather_into_tensor")
        out = torch.empty(count, dtype=dtype, device=device)
        piece = rank_values(rank, chunk, dtype, device)
        src = out.narrow(0, rank * chunk, chunk) if inplace else piece.clone()
        return _Buffers(lambda: gather(out, src), lambda: src.copy_(piece), lambda: out,
                        lambda: torch.cat([rank_values(r, chunk, dtype, device) for r in range(n)]), exact=True)
    if op == "reduce_scatter":
        scatter = _api("reduce_scatter_single", "reduce_scatter_tensor")
        src = mine.clone()
        dst = src.narrow(0, rank * chunk, chunk) if inplace else torch.empty(chunk, dtype=dtype, device=device)
        return _Buffers(lambda: scatter(dst, src), lambda: src.copy_(mine), lambda: dst,
                        lambda: _sum_of_ranks(n, count, dtype, device).narrow(0, rank * chunk, chunk),
                        exact=exact_sum)
    if op == "all_to_all":
        out = torch.empty(count, dtype=dtype, device=device)
        return _Buffers(lambda: dist.all_to_all_single(out, mine), lambda: out.fill_(-1), lambda: out,
                        lambda: _all_to_all_expected(rank, n, count, dtype, device), exact=True)
    if op == "send_recv":
        out = torch.empty(count, dtype=dtype, device=device)
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n

        def send_recv() -> None:
            ops = [dist.P2POp(dist.isend, mine, peer_to), dist.P2POp(dist.irecv, out, peer_from)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

        return _Buffers(send_recv, lambda: out.fill_(-1), lambda: out,
                        lambda: rank_values(peer_from, count, dtype, device), exact=True)
    raise ValueError(f"unknown collective {op!r}")


def _all_to_all_expected(rank: int, n: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """What `rank` receives from all_to_all: its chunk of every rank's input, in rank order. One rank's input
    is alive at a time (not n full-size inputs at once, as their chunks' views would keep them)."""
    chunk = count // n
    expected = torch.empty(n * chunk, dtype=dtype, device=device)
    for r in range(n):
        expected.narrow(0, r * chunk, chunk).copy_(
            rank_values(r, count, dtype, device).narrow(0, rank * chunk, chunk))
    return expected


def _mismatch(result: torch.Tensor, expected: torch.Tensor, exact: bool, tolerance: float) -> str | None:
    if result.device.type not in FLOAT64_DEVICE_TYPES:  # compared on the CPU, beside its reference
        result, expected = result.detach().cpu(), expected.detach().cpu()
    if exact:
        bad = (result != expected.to(result.dtype)).nonzero()
        if bad.numel() == 0:
            return None
        i = int(bad[0])
        return f"{bad.numel()} of {result.numel()} elements differ (first at {i}: {result[i].item()} != " \
               f"{expected[i].item()})"
    got = result.to(torch.float64)
    err = ((got - expected).abs() / expected.abs()).nan_to_num(float("inf"))
    worst = float(err.max()) if err.numel() else 0.0
    if worst <= tolerance:
        return None
    i = int(err.argmax())
    return f"relative error {worst:.3g} > {tolerance:.3g} (at {i}: {got[i].item()} vs {expected[i].item()})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# Calibrated counts stop here: a 4 KiB all_reduce of ~5 us on NVLink would otherwise take 200 calls a
# millisecond, and a round must still end in reasonable time on a slow fabric.
MAX_ITERATIONS = 1000


def calibrated_iterations(fn: Callable[[], object], sec) -> int:
    """Collectives per timed round: `iterations`, or more where they take less than `min_round_s`. Each round
    also holds a fixed cost (the first launch, the final synchronisation, ranks leaving the barrier apart),
    tens of microseconds that 5 calls of a 10 us collective would count as a third of its time. Measured once,
    after the check, as a round is (SlowestRankTimer): the slowest rank's time, the same number on every rank."""
    from suite.distributed import SlowestRankTimer

    timer = SlowestRankTimer()
    timer()
    for _ in range(sec.iterations):
        fn()
    timer()
    # From the reduced time itself, the same bits on every rank: `end - start` would be rounded on each
    # node's own clock, and a count near a whole number could then differ between nodes (NCCL would pair
    # one rank's extra collective with another's timer reduction, and hang).
    per_call = timer.last_elapsed / sec.iterations
    if per_call <= 0:
        return sec.iterations
    return max(sec.iterations, min(MAX_ITERATIONS, math.ceil(sec.min_round_s / per_call)))


def build(case: Case, config) -> Work:
    p = case.info
    state = distributed.current()
    if state is None:
        launched = distributed.LaunchEnv.from_environ()
        if launched is not None and launched.world_size < 2:
            raise SkipCase(
                "world size 1: a collective needs 2 or more ranks (NCCL needs a GPU per rank; on a one-GPU "
                "machine run 2 Gloo ranks on the CPU: torchrun --nproc-per-node=2 with "
                "cases.collectives.backend: gloo)"
            )
        raise SkipCase(distributed.not_launched_reason())
    n, rank = state.env.world_size, state.env.rank
    if n < 2:
        raise SkipCase(f"world size 1: a collective needs 2 or more ranks; {distributed.TORCHRUN_HINT}")
    op, dtype_name, inplace = p["op"], p["dtype"], p["in_place"]
    sec = config.cases.collectives.for_device(state.device)
    dtype = torch_dtype(dtype_name)
    count = element_count(op, p["size"], dtype.itemsize, n)
    problem = None
    bufs = None
    if count == 0:
        problem = f"{format_size(p['size'])} holds fewer than {n} {dtype_name} elements (one per rank)"
    else:
        try:
            bufs = _buffers(op, inplace, count, dtype, state.device, rank, n)
        except Exception as exc:  # noqa: BLE001 - any failure here must reach the agreement below
            problem = f"could not allocate on {state.device}: {_first_line(exc)}"
    # Every rank skips together (a rank that skipped alone would leave the others waiting in the collective,
    # and its count of agreements would fall behind theirs, so every later agreement would wait in vain).
    skipped = state.agree(f"{case.id} build", problem)
    if skipped:
        raise SkipCase("; ".join(f"rank {r}: {text}" for r, text in sorted(skipped.items())))
    nbytes = count * dtype.itemsize
    tolerance = reduce_tolerance(dtype, n)

    def logged():
        """Which algorithm and protocol NCCL took for this case, from the check's call (rank 0 logs it)."""
        return nccl_tuning_log() if p["backend"] == "nccl" and rank == 0 else contextlib.nullcontext({})

    def check() -> None:
        from suite.devices import synchronize

        problem = None
        try:
            bufs.reset()
            with logged() as choice:
                bufs.fn()
            synchronize(state.device)
            extra.update(choice)
            if not (bufs.only_root and rank != ROOT):
                found = _mismatch(bufs.result(), bufs.expected(), bufs.exact, tolerance)
                problem = found and f"{op} {case.id}: {found}"
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory for the float64 reference on this rank only
            problem = f"{op} {case.id}: the check raised {type(exc).__name__}: {_first_line(exc)}"
        # Every rank reaches this agreement, whatever failed above, and fails the case with the same message.
        wrong = state.agree(f"{case.id} check", problem)
        bufs.reset()
        assert not wrong, "wrong result on " + "; ".join(f"rank {r}: {text}" for r, text in sorted(wrong.items()))
        if sec.min_round_s:
            # Every rank reaches this (the agreement passed) and times the same calls: the slowest rank's time
            # is the same number on each, so every rank picks the same count and stays in lockstep.
            pedantic["iterations"] = extra["iterations"] = calibrated_iterations(bufs.fn, sec)
            bufs.reset()

    def derive(median: float) -> dict:
        return {"algbw": algbw(nbytes, median), "busbw": busbw(op, nbytes, median, n)}

    pedantic = {"rounds": sec.rounds, "iterations": sec.iterations, "warmup_rounds": sec.warmup_rounds}
    extra = {
        "world_size": n,
        "ranks_per_node": state.env.local_world_size, "nnodes": state.env.nnodes,
        "busbw_factor": bus_factor(op, n), "iterations": sec.iterations, "timeout_s": state.timeout_s,
        "check": "exact" if bufs.exact else "approximate",  # approximate: bf16 sums of 256+ ranks
    }
    return Work(fn=bufs.fn, check=check, bytes=nbytes, extra=extra, derive=derive,
                pedantic=pedantic)


__all__ = ["NAME", "OPS", "algbw", "build", "bus_factor", "busbw", "element_count", "enumerate_cases"]
