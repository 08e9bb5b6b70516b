"""The `cases.conv` section: precisions, memory layouts, steps and conv2d layer shapes (ResNet-50 by default)."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BeforeValidator, Field, field_validator, model_validator

from suite.sections import MAX_SIZE_BYTES, CaseSection, Precision, Section, choice, cpu_overrides


def _pair(value: Any) -> tuple[int, int]:
    """3 or [3, 3] -> (3, 3): a kernel, stride, padding or spatial size as (height, width)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(items) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise ValueError(f"{value!r} is not a size; expected an integer or [height, width]")
    return int(items[0]), int(items[1])


Pair = Annotated[tuple[int, int], BeforeValidator(_pair, json_schema_input_type=Union[int, list[int]])]
ConvLayout = Annotated[str, choice("memory layout", {
    "nchw": "nchw", "contiguous": "nchw", "channels_last": "channels_last", "nhwc": "channels_last"})]
ConvStep = Annotated[str, choice("conv step", {
    "fwd": "fwd", "forward": "fwd", "fwd+bwd": "fwd+bwd", "forward+backward": "fwd+bwd", "backward": "fwd+bwd"})]


class ConvShape(Section):
    """One conv2d layer: input (batch, in_channels, size) convolved with (out_channels, in_channels/groups, kernel)."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.+]+(-[A-Za-z0-9_.+]+)*$",
                             description="label used in the test id (letters, digits, _ . + -)")
    batch: int | None = Field(None, ge=1, description="overrides the section's batch for this layer")
    in_channels: int = Field(ge=1)
    out_channels: int = Field(ge=1)
    size: Pair = Field(description="input height and width: 56 or [56, 56]")
    kernel: Pair = Field(description="kernel height and width: 3 or [3, 3]")
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    groups: int = Field(1, ge=1)

    @field_validator("size", "kernel", "stride")
    @classmethod
    def _positive(cls, value: tuple[int, int]) -> tuple[int, int]:
        if min(value) < 1:
            raise ValueError(f"{list(value)!r} must be >= 1")
        return value

    @field_validator("padding")
    @classmethod
    def _non_negative(cls, value: tuple[int, int]) -> tuple[int, int]:
        if min(value) < 0:
            raise ValueError(f"{list(value)!r} must be >= 0")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "ConvShape":
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"groups={self.groups} must divide in_channels={self.in_channels} and "
                             f"out_channels={self.out_channels}")
        for axis in (0, 1):
            if self.size[axis] + 2 * self.padding[axis] < self.kernel[axis]:
                raise ValueError(f"kernel {list(self.kernel)} is larger than the padded input "
                                 f"{list(self.size)} + 2 x {list(self.padding)}")
        return self


def _resnet50(name: str, cin: int, cout: int, size: int, kernel: int, stride: int = 1, padding: int = 0) -> ConvShape:
    return ConvShape(name=name, in_channels=cin, out_channels=cout, size=size, kernel=kernel, stride=stride,
                     padding=padding)


# ResNet-50 at 224x224 (He et al. 2016, table 1): the stem, a 3x3 of stages 2 and 4, a 1x1 bottleneck reduction.
RESNET50_LAYERS = (
    _resnet50("resnet50-conv1", 3, 64, 224, 7, stride=2, padding=3),
    _resnet50("resnet50-conv2-3x3", 64, 64, 56, 3, padding=1),
    _resnet50("resnet50-conv4-3x3", 256, 256, 14, 3, padding=1),
    _resnet50("resnet50-conv4-1x1", 1024, 256, 14, 1),
)


@cpu_overrides("dtypes", "layouts", "steps", "batch", "shapes", description="overrides for the CPU")
class ConvConfig(CaseSection):
    """`F.conv2d`, or it and both gradients, per device, precision, layout, step and layer."""

    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    layouts: list[ConvLayout] = Field(default_factory=lambda: ["nchw", "channels_last"], min_length=1)
    steps: list[ConvStep] = Field(default_factory=lambda: ["fwd", "fwd+bwd"], min_length=1,
                                  description="fwd: the convolution; fwd+bwd: it and both gradients")
    batch: int = Field(32, ge=1, description="batch of every shape that does not set its own")
    shapes: list[ConvShape] = Field(default_factory=lambda: list(RESNET50_LAYERS), min_length=1)
    cudnn_benchmark: bool = Field(True, description="torch.backends.cudnn.benchmark during the case (CUDA only)")

    @model_validator(mode="after")
    def _fits(self) -> "ConvConfig":
        for shape in self.shapes:  # the input or output tensor, at one byte an element at least
            batch = shape.batch or self.batch
            if batch * max(shape.in_channels, shape.out_channels) * shape.size[0] * shape.size[1] > MAX_SIZE_BYTES:
                raise ValueError(f"layer {shape.name or list(shape.size)} at batch {batch} is larger than any "
                                 "device holds; lower batch, channels or size")
        return self
