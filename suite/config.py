"""The YAML config: loaded with the safe loader, validated into typed objects, errors as one line.

No torch here: a config can be checked (and its JSON Schema exported) on any machine.
"""

from __future__ import annotations

import json
import re
import typing
import warnings
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from suite.errors import UserError
from suite.timing import (
    DEFAULT_CONFIDENCE,
    DEFAULT_PRECISION,
    SUSTAINED_WARMUP_S,
    parse_duration,
)
from suite.units import SIZE_HELP, parse_size

DEFAULT_CONFIG = Path("configs/default.yaml")

# Torch dtype names (and their aliases) a case may ask for; the case maps them to torch dtypes and skips
# the ones a device cannot run.
DTYPE_ALIASES = {
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "fp64": "float64",
}
DTYPES = sorted(set(DTYPE_ALIASES.values()))


def _dtype(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower().removeprefix("torch.") in DTYPE_ALIASES:
        return DTYPE_ALIASES[value.strip().lower().removeprefix("torch.")]
    raise ValueError(f"{value!r} is not a dtype; allowed: {', '.join(DTYPES)}")


def _size(value: Any) -> int:
    return parse_size(value)


def _shape3(value: Any) -> tuple[int, int, int]:
    """'4096x4096x4096' or [m, n, k] -> (m, n, k)."""
    parts: list[Any]
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").split("x")
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = []
    try:
        dims = tuple(int(p) for p in parts if not isinstance(p, bool))
    except (TypeError, ValueError):
        dims = ()
    if len(dims) != 3 or len(parts) != 3 or min(dims) <= 0:
        raise ValueError(f"{value!r} is not a matmul shape; expected 'MxNxK' (e.g. 4096x4096x4096) or [m, n, k]")
    return dims  # type: ignore[return-value]


# json_schema_input_type: what a user may write (the exported JSON Schema shows it), not the parsed type.
Dtype = Annotated[str, BeforeValidator(_dtype, json_schema_input_type=str)]
Size = Annotated[int, BeforeValidator(_size, json_schema_input_type=Union[int, str])]
Shape3 = Annotated[tuple[int, int, int], BeforeValidator(_shape3, json_schema_input_type=Union[str, list[int]])]


# Compute cases take a precision: a dtype, or `tf32` (float32 data, TensorFloat-32 math on CUDA tensor cores).
PRECISION_ALIASES = {**DTYPE_ALIASES, "tf32": "tf32", "tensorfloat32": "tf32"}
PRECISIONS = sorted(set(PRECISION_ALIASES.values()))


def _precision(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower().removeprefix("torch.") in PRECISION_ALIASES:
        return PRECISION_ALIASES[value.strip().lower().removeprefix("torch.")]
    raise ValueError(f"{value!r} is not a dtype; allowed: {', '.join(PRECISIONS)} (tf32: float32 data, TF32 math)")


Precision = Annotated[str, BeforeValidator(_precision, json_schema_input_type=str)]


class Section(BaseModel):
    """Base for every config object: unknown keys are errors, values are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


def _duration(value: Any) -> float:
    return parse_duration(value)


def _precision_target(value: Any) -> float | None:
    """A fraction strictly between 0 and 1 (0.01 = +-1%), or off: null, false, 0, 'off'."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("off", "none")):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == 0:
            return None
        if 0 < value < 1:
            return float(value)
    raise ValueError(f"{value!r} is not a precision; expected a fraction such as 0.01 (+-1%), or off")


Duration = Annotated[float, BeforeValidator(_duration, json_schema_input_type=Union[float, str])]
PrecisionTarget = Annotated[Union[float, None], BeforeValidator(
    _precision_target, json_schema_input_type=Union[float, str, bool, None])]


class TimingConfig(Section):
    """How rounds are timed; pytest-benchmark's own command-line options override these."""

    warmup_s: float = Field(0.05, ge=0, description="seconds of calls before timing (autotuning, handles)")
    compute_warmup_s: float = Field(
        SUSTAINED_WARMUP_S, ge=0,
        description="warm-up of compute cases (matmul, ceiling, conv, model) on an accelerator: a cold GPU boosts "
        "above the clock it can sustain, so these run this long before timing (docs/timing.md)",
    )
    min_time: float = Field(
        0.0001, gt=0, description="shortest round in seconds (pytest-benchmark --benchmark-min-time)"
    )
    max_time: float = Field(1.0, gt=0, description="most seconds of timed rounds per benchmark "
                            "(--benchmark-max-time); precision stopping usually ends sooner")
    min_rounds: int = Field(5, ge=1, description="fewest rounds per benchmark (--benchmark-min-rounds)")
    precision: PrecisionTarget = Field(
        DEFAULT_PRECISION,
        description="stop once the mean's relative margin of error is within this fraction (0.01 = +-1%) at "
        "`confidence` (--benchmark-precision); off: always run max_time",
    )
    confidence: float = Field(DEFAULT_CONFIDENCE, gt=0, lt=1,
                              description="confidence level of `precision` (--benchmark-confidence)")
    calibration_precision: int = Field(
        100,
        ge=1,
        description="a round lasts at least this many times the timer's own cost (which includes the device "
        "synchronisation), so one synchronisation is at most 1/N of a round",
    )
    time_limit_s: float = Field(
        900,
        ge=0,
        description="a case running longer fails with this limit in the message and the run goes on "
        "(pytest-timeout; 0 = no limit; --timeout on the command line wins)",
    )
    budget: Duration | None = Field(
        None,
        description="the whole run, overhead included, in this time (600, 90s, 10m, 1h); time is shared out over "
        "the selected benchmarks, and a budget too small is refused before anything runs (--suite-budget)",
    )


# Keys a case family may override under its own `timing:` (the run's budget and time limit stay global).
_RUN_WIDE_TIMING = ("budget", "time_limit_s")


def _optional_fields(model: type[BaseModel], skip: tuple[str, ...]) -> dict:
    """Every field of `model` but `skip`, optional (None = not set here), with its constraints kept."""
    fields: dict = {}
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (Union[annotation, None], Field(None, description=info.description))
    return fields


TimingOverride = create_model(
    "TimingOverride",
    __base__=Section,
    __doc__="A case family's own timing: any key of the top-level `timing` but budget and time_limit_s.",
    **_optional_fields(TimingConfig, _RUN_WIDE_TIMING),
)


class CaseSection(Section):
    """A case family's section. Its optional `cpu:` sub-section overrides keys for the CPU, which is often
    100-1000x slower than an accelerator and needs smaller sizes (or fewer dtypes) to finish in time."""

    enabled: bool = True
    timing: TimingOverride | None = Field(
        None, description="this family's own timing keys (precision, max_time, warmup_s, ...), over `timing`")

    def for_device(self, device: str):
        override = getattr(self, "cpu", None)
        if device != "cpu" or override is None:
            return self
        # The override's own values (not model_dump's dicts): nested sections such as conv shapes stay objects.
        return self.model_copy(update={key: getattr(override, key) for key in override.model_fields_set})


class MatmulCpu(Section):
    dtypes: list[Precision] = Field(None, min_length=1)
    shapes: list[Shape3] = Field(None, min_length=1)


class MatmulConfig(CaseSection):
    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(1024, 1024, 1024)], min_length=1)
    concurrent: bool = Field(
        False, description="also run each GPU dtype/shape on every selected GPU at once (case 'all-gpus')"
    )
    cpu: MatmulCpu | None = Field(None, description="overrides of dtypes/shapes for the CPU")


# --- data movement sections (copy, placement, habits) ---

HOST_MEMORY = ("pinned", "pageable")
COPY_DIRECTIONS = ("uni", "bi")
PLACEMENT_OPS = ("to_same", "to_other", "clone", "copy_", "empty_like_copy", "to_copy")
HABITS = ("small_vs_batched", "sync_per_step", "overlap")
SCALAR_READERS = ("item", "float", "print", "numpy")
_PAIR_DEVICE = r"(cpu|mps|(?:cuda|xpu)(?::\d+)?)"
# The YAML key `cases.copy` becomes a field named `copy`, which shadows pydantic's deprecated BaseModel.copy();
# nothing here calls that method, so the warning pydantic gives when CasesConfig is built says nothing useful.
warnings.filterwarnings("ignore", message=r'Field name "copy" in "CasesConfig" shadows', category=UserWarning)


def _one_of(what: str, allowed: tuple[str, ...]) -> BeforeValidator:
    """A validator accepting one of `allowed` (any case), with a one-line error listing them."""

    def check(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in allowed:
            return value.strip().lower()
        raise ValueError(f"{value!r} is not a {what}; allowed: {', '.join(allowed)}")

    return BeforeValidator(check)


def _device_pair(value: Any) -> str:
    """'cpu->cuda:1' (spaces allowed, 'cuda' means cuda:0) -> 'cpu->cuda:1'."""
    import re

    match = re.fullmatch(rf"\s*{_PAIR_DEVICE}\s*->\s*{_PAIR_DEVICE}\s*", str(value).lower()) if isinstance(
        value, str) else None
    if not match:
        raise ValueError(f"{value!r} is not a device pair; expected 'SRC->DST' with devices cpu, mps, cuda:N or "
                         "xpu:N (e.g. 'cpu->cuda:0', 'cuda:0->cuda:1')")
    src, dst = (d if d in ("cpu", "mps") or ":" in d else f"{d}:0" for d in match.groups())
    return f"{src}->{dst}"


HostMemory = Annotated[str, _one_of("host memory kind", HOST_MEMORY)]
CopyDirection = Annotated[str, _one_of("copy direction", COPY_DIRECTIONS)]
PlacementOp = Annotated[str, _one_of("placement op", PLACEMENT_OPS)]
Habit = Annotated[str, _one_of("habit", HABITS)]
ScalarReader = Annotated[str, _one_of("scalar reader", SCALAR_READERS)]
DevicePair = Annotated[str, BeforeValidator(_device_pair)]


def _powers_of_4(low: int, high: int) -> list[int]:
    sizes = [low]
    while sizes[-1] * 4 <= high:
        sizes.append(sizes[-1] * 4)
    return sizes


class CopyCpu(Section):
    sizes: list[Size] = Field(None, min_length=1)


class CopyConfig(CaseSection):
    """Every ordered (src, dst) pair of the selected devices x size; host memory and non_blocking for the
    host side of host<->device copies; 'bi' = both directions at once on separate streams."""

    sizes: list[Size] = Field(
        default_factory=lambda: _powers_of_4(4 * 2**10, 256 * 2**20), min_length=1,
        description="buffer sizes; default 4KiB to 256MiB in powers of 4",
    )
    memory: list[HostMemory] = Field(
        default_factory=lambda: list(HOST_MEMORY), min_length=1,
        description="host memory of host<->device copies: pinned, pageable",
    )
    non_blocking: list[bool] = Field(
        default_factory=lambda: [False, True], min_length=1,
        description="non_blocking values for host<->device copies (the only ones where it changes anything)",
    )
    directions: list[CopyDirection] = Field(
        default_factory=lambda: list(COPY_DIRECTIONS), min_length=1,
        description="uni, bi (both directions at once; distinct devices with an accelerator only)",
    )
    pairs: list[DevicePair] | None = Field(
        None, min_length=1, description="'SRC->DST' pairs to run instead of every ordered pair of the devices",
    )
    cpu: CopyCpu | None = Field(None, description="overrides of sizes for the CPU->CPU copy")


class PlacementCpu(Section):
    sizes: list[Size] = Field(None, min_length=1)
    ops: list[PlacementOp] = Field(None, min_length=1)


class PlacementConfig(CaseSection):
    """`.to` against copies on each device: to_same (no copy), to_other, clone, copy_, empty_like_copy, to_copy."""

    sizes: list[Size] = Field(default_factory=lambda: [4 * 2**10, 2**20, 64 * 2**20], min_length=1)
    ops: list[PlacementOp] = Field(default_factory=lambda: list(PLACEMENT_OPS), min_length=1)
    cpu: PlacementCpu | None = Field(None, description="overrides of sizes/ops for the CPU")


class HabitsCpu(Section):
    habits: list[Habit] = Field(None, min_length=1)
    chunk: Size = None
    chunks: int = Field(None, ge=1)


class HabitsConfig(CaseSection):
    """Transfer habits, each a slow/fast pair doing equal work: many small vs one batched transfer, a scalar
    read every step vs once, a copy overlapped with compute vs serialised."""

    habits: list[Habit] = Field(default_factory=lambda: list(HABITS), min_length=1)
    chunk: Size = Field(64 * 2**10, description="small_vs_batched: bytes of one small transfer")
    chunks: int = Field(1024, ge=1, description="small_vs_batched: small transfers per call (= one batched)")
    memory: HostMemory = Field("pinned", description="small_vs_batched: host memory of host->device transfers")
    steps: int = Field(100, ge=1, description="sync_per_step: steps per call")
    readers: list[ScalarReader] = Field(
        default_factory=lambda: list(SCALAR_READERS), min_length=1,
        description="sync_per_step: how the loop reads its scalar: item, float, print, numpy",
    )
    step_matmul: int = Field(512, ge=1, description="sync_per_step: n of the n x n float32 matmul of one step")
    overlap_bytes: Size = Field(256 * 2**20, description="overlap: bytes of the pinned host->device copy")
    overlap_matmul: int = Field(4096, ge=1, description="overlap: n of the n x n float32 matmul beside the copy")
    cpu: HabitsCpu | None = Field(None, description="overrides of habits/chunk/chunks for the CPU")


# --- compute sections (conv, model, ceiling) ---


def _pair(value: Any) -> tuple[int, int]:
    """3 or [3, 3] -> (3, 3): a kernel, stride, padding or spatial size as (height, width)."""
    items = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(items) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise ValueError(f"{value!r} is not a size; expected an integer or [height, width]")
    return int(items[0]), int(items[1])


def _choice(what: str, allowed: dict[str, str]):
    def check(value: Any) -> str:
        key = str(value).strip().lower() if isinstance(value, str) else None
        if key in allowed:
            return allowed[key]
        choices = ", ".join(sorted(set(allowed.values())))
        raise ValueError(f"{value!r} is not a {what}; allowed: {choices}")

    return check


Pair = Annotated[tuple[int, int], BeforeValidator(_pair, json_schema_input_type=Union[int, list[int]])]
ConvLayout = Annotated[str, BeforeValidator(_choice("memory layout", {
    "nchw": "nchw", "contiguous": "nchw", "channels_last": "channels_last", "nhwc": "channels_last"}),
    json_schema_input_type=str)]
ConvStep = Annotated[str, BeforeValidator(_choice("conv step", {
    "fwd": "fwd", "forward": "fwd", "fwd+bwd": "fwd+bwd", "forward+backward": "fwd+bwd", "backward": "fwd+bwd"}),
    json_schema_input_type=str)]
ModelName = Annotated[str, BeforeValidator(_choice("model", {"linear": "linear", "mlp": "mlp", "lenet": "lenet"}),
                                            json_schema_input_type=str)]
BatchSize = Annotated[int, Field(ge=1)]


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


class ConvCpu(Section):
    dtypes: list[Precision] = Field(None, min_length=1)
    layouts: list[ConvLayout] = Field(None, min_length=1)
    steps: list[ConvStep] = Field(None, min_length=1)
    batch: int = Field(None, ge=1)
    shapes: list[ConvShape] = Field(None, min_length=1)


class ConvConfig(CaseSection):
    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    layouts: list[ConvLayout] = Field(default_factory=lambda: ["nchw", "channels_last"], min_length=1)
    steps: list[ConvStep] = Field(default_factory=lambda: ["fwd", "fwd+bwd"], min_length=1,
                                  description="fwd: the convolution; fwd+bwd: it and both gradients")
    batch: int = Field(32, ge=1, description="batch of every shape that does not set its own")
    shapes: list[ConvShape] = Field(default_factory=lambda: list(RESNET50_LAYERS), min_length=1)
    cudnn_benchmark: bool = Field(True, description="torch.backends.cudnn.benchmark during the case (CUDA only)")
    cpu: ConvCpu | None = Field(None, description="overrides for the CPU")


class ModelCpu(Section):
    models: list[ModelName] = Field(None, min_length=1)
    dtypes: list[Precision] = Field(None, min_length=1)
    batch_sizes: list[BatchSize] = Field(None, min_length=1)


class ModelConfig(CaseSection):
    models: list[ModelName] = Field(default_factory=lambda: ["linear", "mlp", "lenet"], min_length=1,
                                    description="linear: nn.Sequential(nn.Linear(3, 1)) forward; mlp, lenet: a "
                                    "training step")
    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    batch_sizes: list[BatchSize] = Field(default_factory=lambda: [256], min_length=1)
    cpu: ModelCpu | None = Field(None, description="overrides for the CPU")


class CeilingCpu(Section):
    dtypes: list[Precision] = Field(None, min_length=1)
    shapes: list[Shape3] = Field(None, min_length=1)


class CeilingConfig(CaseSection):
    dtypes: list[Precision] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(n, n, n) for n in (1024, 2048, 4096)], min_length=1,
                                 description="the matmul sweep; the best TFLOP/s over it is the device's ceiling")
    cpu: CeilingCpu | None = Field(None, description="overrides for the CPU")


# --- collectives section ---

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv")
COLLECTIVE_BACKENDS = ("auto", "nccl", "gloo")


def _collective_op(value: Any) -> str:
    key = value.strip().lower().replace("-", "_") if isinstance(value, str) else None
    aliases = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
               "alltoall": "all_to_all", "sendrecv": "send_recv"}
    key = aliases.get(key, key)
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


def _backend(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in COLLECTIVE_BACKENDS:
        return value.strip().lower()
    raise ValueError(f"{value!r} is not a backend; allowed: {', '.join(COLLECTIVE_BACKENDS)}")


CollectiveOp = Annotated[str, BeforeValidator(_collective_op)]
InPlace = Annotated[Union[bool, str], BeforeValidator(_in_place)]
Backend = Annotated[str, BeforeValidator(_backend)]
# nccl-tests' default sweep doubles the size: 4 KiB, 8 KiB, ... 256 MiB (17 sizes).
COLLECTIVE_SIZES = [4096 * 2**i for i in range(17)]


class CollectivesCpu(Section):
    sizes: list[Size] = Field(None, min_length=1)
    dtypes: list[Dtype] = Field(None, min_length=1)
    rounds: int = Field(None, ge=1)
    iterations: int = Field(None, ge=1)
    warmup_rounds: int = Field(None, ge=0)


class CollectivesConfig(CaseSection):
    """Collectives over torch.distributed; only run under torchrun (every rank runs the same rounds)."""

    ops: list[CollectiveOp] = Field(default_factory=lambda: list(COLLECTIVE_OPS), min_length=1)
    sizes: list[Size] = Field(default_factory=lambda: list(COLLECTIVE_SIZES), min_length=1,
                              description="nccl-tests' size S: the whole buffer (all_gather: the output, "
                              "reduce_scatter: the input)")
    dtypes: list[Dtype] = Field(default_factory=lambda: ["float32"], min_length=1)
    in_place: InPlace = Field("both", description="both, true or false: which mode to run for the ops that "
                              "have both (all_gather, reduce_scatter); the others run their only mode")
    backend: Backend = Field("auto", description="auto (NCCL for CUDA, Gloo for the CPU), nccl or gloo")
    rounds: int = Field(20, ge=1, description="timed rounds, identical on every rank (no calibration)")
    iterations: int = Field(5, ge=1, description="collectives per timed round")
    warmup_rounds: int = Field(2, ge=0, description="untimed rounds before timing")
    timeout_s: float = Field(300, gt=0, description="seconds to wait for every rank at start-up and in "
                             "each collective before failing with the missing ranks named")
    cpu: CollectivesCpu | None = Field(None, description="overrides for Gloo ranks on the CPU")



class CasesConfig(Section):
    matmul: MatmulConfig = Field(default_factory=MatmulConfig)
    collectives: CollectivesConfig = Field(default_factory=CollectivesConfig)
    copy: CopyConfig = Field(default_factory=CopyConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    habits: HabitsConfig = Field(default_factory=HabitsConfig)
    conv: ConvConfig = Field(default_factory=ConvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    ceiling: CeilingConfig = Field(default_factory=CeilingConfig)


DeviceSpec = Union[str, list[str]]


class SuiteConfig(Section):
    devices: DeviceSpec = Field("all", description="'all', 'cpu', 'gpus', 'cuda:1', or a list of these")
    timing: TimingConfig = Field(default_factory=TimingConfig)
    cases: CasesConfig = Field(default_factory=CasesConfig)

    def timing_for(self, family: str) -> TimingConfig:
        """The top-level timing with the family's own `timing:` keys over it."""
        section = getattr(self.cases, family, None)
        override = getattr(section, "timing", None)
        if override is None:
            return self.timing
        return self.timing.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: DeviceSpec) -> DeviceSpec:
        items = value.split(",") if isinstance(value, str) else value
        if not items or not any(str(i).strip() for i in items):
            raise ValueError("empty device list; expected 'all', 'cpu', 'gpus', 'cuda:1', or a list of these")
        for item in items:
            _check_device_word(str(item))
        return value


_DEVICE_WORDS = ("all", "cpu", "gpus", "gpu", "accelerators", "mps")


def _check_device_word(item: str) -> None:
    import re

    word = item.strip().lower()
    if word in _DEVICE_WORDS or re.fullmatch(r"(cuda|xpu)(:\d+)?", word):
        return
    raise ValueError(f"{item!r} is not a device; expected 'all', 'cpu', 'gpus', 'cuda:N', 'xpu:N' or 'mps'")


# --- loading -------------------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys (YAML silently keeps the last one otherwise)."""


def _mapping_no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark
            )
        try:
            seen[key] = key_node.start_mark.line
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"unhashable key {key!r}", key_node.start_mark
            ) from None
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_duplicates)


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z0-9_:-]+", part):
            out += ("." if out else "") + part
        else:
            out += f"[{part!r}]"  # a key as odd as '\n' or 'a.b' is shown quoted, on the same line
    return out or "(top level)"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The config class that owns the key at `loc` (for listing allowed keys)."""
    model: Any = SuiteConfig
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return model if isinstance(model, type) and issubclass(model, BaseModel) else None
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return model


def _format_error(err: dict) -> str:
    loc = tuple(err.get("loc", ()))
    value = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = ", ".join(owner.model_fields) if owner else ""
        return f"{_loc_path(loc)}: unknown key {loc[-1]!r}; allowed keys here: {allowed}"
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind.startswith("value_error") or "is not" in msg:
        return f"{_loc_path(loc)}: {msg}"
    return f"{_loc_path(loc)}: {value!r} is invalid: {msg}"


_BRANCH_TAG = re.compile(r"^(str|int|float|bool|none|[a-z_-]+\[.*\])$")


def _clean_loc(err: dict) -> dict:
    """Drop the union/validator branch tags pydantic adds to a path ('str', 'list[str]', 'function-before[..]').

    User-written strings appear in a path only as the unknown key of an extra_forbidden error (our sections
    have no free-form mappings), and that is always the last element, which is kept as written.
    """
    loc = list(err.get("loc", ()))
    last = [loc.pop()] if loc and err.get("type") == "extra_forbidden" else []
    loc = [p for p in loc if not (isinstance(p, str) and _BRANCH_TAG.match(p))]
    return dict(err, loc=tuple(loc + last))


def parse_config(data: Any, source: str = "<config>") -> SuiteConfig:
    """Validate an already-parsed YAML document; UserError naming `source`, the key path and the value."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{source}: the config must be a mapping of keys (devices, timing, cases), got {type(data).__name__}")
    try:
        return SuiteConfig.model_validate(data)
    except ValidationError as exc:
        errors = [_clean_loc(e) for e in exc.errors()]
        first = _format_error(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise UserError(f"{source}: {first}{more}") from None


def load_config(path: str | Path) -> SuiteConfig:
    """Read and validate a YAML config file; every problem is one UserError line."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: config file not found; pass --suite-config PATH to an existing YAML file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory; pass --suite-config PATH to a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UserError(f"{path}: cannot read the config ({reason}); check the path and permissions") from None
    return parse_config_text(text, str(path))


def parse_config_text(text: str, source: str = "<config>") -> SuiteConfig:
    """Parse YAML text with the safe loader (duplicate keys refused) and validate it."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        hint = " (YAML forbids tabs for indentation: use spaces)" if "'\\t'" in str(exc) or "tab" in str(exc) else ""
        raise UserError(f"{source}: not valid YAML: {where}{problem}{hint}") from None
    except RecursionError:
        raise UserError(f"{source}: not valid YAML: nested too deeply") from None
    return parse_config(data, source)


def resolved(config: SuiteConfig) -> dict:
    """The config as plain JSON-able data, stored in every results file."""
    return config.model_dump(mode="json")


# --- `python -m suite schema` ---------------------------------------------------------------------------


def json_schema() -> dict:
    schema = SuiteConfig.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpubench-suite config"
    return schema


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", help="write the schema to this file instead of stdout")
    parser.add_argument("--check", metavar="CONFIG", nargs="*", help="validate these config files and exit")


def run(args) -> int:
    if args.check:
        for name in args.check:
            load_config(name)
            print(f"{name}: ok")
        return 0
    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


__all__ = [
    "DEFAULT_CONFIG",
    "DTYPES",
    "SIZE_HELP",
    "CasesConfig",
    "MatmulConfig",
    "Section",
    "SuiteConfig",
    "TimingConfig",
    "load_config",
    "parse_config",
    "resolved",
]
