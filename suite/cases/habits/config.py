"""The `cases.habits` section: which transfer habits run, and the sizes of their slow/fast pairs."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from suite.cases.copy.config import HostMemory
from suite.sections import MAX_ROUNDS, MAX_SIZE_BYTES, CaseSection, Size, cpu_overrides, one_of

HABITS = ("small_vs_batched", "sync_per_step", "overlap")
SCALAR_READERS = ("item", "float", "print", "numpy")
# The largest n of an n x n float32 matmul: its matrix would hold MAX_SIZE_BYTES, more than any device holds.
MAX_MATMUL_N = int((MAX_SIZE_BYTES // 4) ** 0.5)
Habit = Annotated[str, one_of("habit", HABITS)]
ScalarReader = Annotated[str, one_of("scalar reader", SCALAR_READERS)]


@cpu_overrides("habits", "chunk", "chunks", description="overrides of habits/chunk/chunks for the CPU")
class HabitsConfig(CaseSection):
    """Transfer habits, each a slow/fast pair doing equal work: many small vs one batched transfer, a scalar
    read every step vs once, a copy overlapped with compute vs serialised."""

    habits: list[Habit] = Field(default_factory=lambda: list(HABITS), min_length=1)
    chunk: Size = Field(64 * 2**10, description="small_vs_batched: bytes of one small transfer")
    chunks: int = Field(1024, ge=1, le=MAX_ROUNDS,
                        description="small_vs_batched: small transfers per call (= one batched)")
    memory: HostMemory = Field("pinned", description="small_vs_batched: host memory of host->device transfers")
    steps: int = Field(100, ge=1, le=MAX_ROUNDS, description="sync_per_step: steps per call")
    readers: list[ScalarReader] = Field(
        default_factory=lambda: list(SCALAR_READERS), min_length=1,
        description="sync_per_step: how the loop reads its scalar: item, float, print, numpy",
    )
    step_matmul: int = Field(512, ge=1, le=MAX_MATMUL_N,
                             description="sync_per_step: n of the n x n float32 matmul of one step")
    overlap_bytes: Size = Field(256 * 2**20, description="overlap: bytes of the pinned host->device copy")
    overlap_matmul: int = Field(4096, ge=1, le=MAX_MATMUL_N,
                                description="overlap: n of the n x n float32 matmul beside the copy")
