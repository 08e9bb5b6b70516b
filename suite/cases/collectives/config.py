"""The `cases.collectives` section: ops, sizes, dtypes, modes and the fixed rounds every rank runs."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BeforeValidator, Field

from suite.sections import MAX_DURATION_S, MAX_ROUNDS, CaseSection, Dtype, Size, cpu_overrides, one_of

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")
COLLECTIVE_BACKENDS = ("auto", "nccl", "gloo", "xccl")
_OP_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
               "alltoall": "all_to_all", "sendrecv": "send_recv"}


def _collective_op(value: Any) -> str:
    key = value.strip().lower().replace("-", "_") if isinstance(value, str) else None
    key = _OP_ALIASES.get(key, key)
    if key in COLLECTIVE_OPS:
        return key
    raise ValueError(f"{value!r} is not a collective; allowed: {', '.join(COLLECTIVE_OPS)}")


def _in_place(value: Any) -> bool | str:
    words = {"both": "both", "true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise ValueError(f"{value!r} is not an in_place setting; allowed: both, true, false")


CollectiveOp = Annotated[str, BeforeValidator(_collective_op)]
InPlace = Annotated[Union[bool, str], BeforeValidator(_in_place)]
Backend = Annotated[str, one_of("backend", COLLECTIVE_BACKENDS)]
# nccl-tests' default sweep doubles the size: 4 KiB, 8 KiB, ... 256 MiB (17 sizes).
COLLECTIVE_SIZES = [4096 * 2**i for i in range(17)]


@cpu_overrides("sizes", "dtypes", "rounds", "iterations", "warmup_rounds",
               description="overrides for Gloo ranks on the CPU")
class CollectivesConfig(CaseSection):
    """Collectives over torch.distributed; only run under torchrun (every rank runs the same rounds)."""

    ops: list[CollectiveOp] = Field(default_factory=lambda: list(COLLECTIVE_OPS), min_length=1)
    sizes: list[Size] = Field(default_factory=lambda: list(COLLECTIVE_SIZES), min_length=1,
                              description="nccl-tests' size S: the whole buffer (all_gather: the output, "
                              "reduce_scatter: the input)")
    dtypes: list[Dtype] = Field(default_factory=lambda: ["float32"], min_length=1)
    in_place: InPlace = Field("both", description="both, true or false: which mode to run for the ops that "
                              "have both (all_gather, reduce_scatter); the others run their only mode")
    backend: Backend = Field("auto", description="auto (NCCL for CUDA, Gloo for the CPU), nccl, gloo or xccl "
                             "(Intel XPUs, torch >= 2.8; only when asked for)")
    rounds: int = Field(20, ge=1, le=MAX_ROUNDS,
                        description="timed rounds, identical on every rank (no time-based stopping)")
    iterations: int = Field(5, ge=1, le=MAX_ROUNDS,
                            description="collectives per timed round, at least (see min_round_s)")
    min_round_s: float = Field(0.001, ge=0, le=MAX_DURATION_S,
                               description="more collectives per round where `iterations` of them "
                               "take less than this (measured once, after the check, on the slowest rank), so "
                               "a round's fixed cost stays small beside them; at most 1000; 0: exactly "
                               "`iterations`")
    warmup_rounds: int = Field(2, ge=0, le=MAX_ROUNDS, description="untimed rounds before timing")
    timeout_s: float = Field(300, gt=0, le=MAX_DURATION_S,
                             description="seconds to wait for every rank at start-up and in "
                             "each collective before failing with the missing ranks named")
