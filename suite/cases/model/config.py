"""The `cases.model` section: which small networks run, in which precisions and batch sizes."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from suite.sections import MAX_SIZE_BYTES, CaseSection, Precision, choice, cpu_overrides

ModelName = Annotated[str, choice("model", {"linear": "linear", "mlp": "mlp", "lenet": "lenet"})]
# The largest batch: LeNet's input alone (1x28x28 float32, 3 KiB a sample) would pass what any device holds.
BatchSize = Annotated[int, Field(ge=1, le=MAX_SIZE_BYTES // (28 * 28 * 4))]


@cpu_overrides("models", "dtypes", "batch_sizes", description="overrides for the CPU")
class ModelConfig(CaseSection):
    """A model on a device: nn.Linear(3, 1) forward, MLP and LeNet training steps."""

    models: list[ModelName] = Field(default_factory=lambda: ["linear", "mlp", "lenet"], min_length=1,
                                    description="linear: nn.Sequential(nn.Linear(3, 1)) forward; mlp, lenet: a "
                                    "training step")
    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    batch_sizes: list[BatchSize] = Field(default_factory=lambda: [256], min_length=1)
