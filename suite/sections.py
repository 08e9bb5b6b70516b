"""Building blocks of every config section: strict bases, timing, the `cpu:` override, shared value types.

Torch-free, and below both `suite.config` (which assembles the whole config from the registered families) and
each family's `config.py` (which builds its section from these parts), so neither imports the other's module.
The timing section lives here because every family section may override it (`cases.<family>.timing`).
"""

from __future__ import annotations

from copy import copy
from typing import Annotated, Any, Callable, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from suite.timing import (ACCELERATOR_MIN_ROUND_S, DEFAULT_CONFIDENCE, DEFAULT_PRECISION, SUSTAINED_WARMUP_S,
                          parse_duration)
from suite.units import format_size, parse_size

# The largest size a config may name: no device of today holds more (accelerators: under 300 GB; the largest
# hosts: a few TiB), so a size above it is a typo. What the device itself can give is checked when a case runs.
MAX_SIZE_BYTES = 4 * 2**40
# The longest a timing key may be: a whole default run takes minutes, so a duration above a day is a typo.
MAX_DURATION_S = 86_400
# The most rounds (or calls in a loop) a config may ask for: more add nothing to a median, and pytest-benchmark
# keeps every round in memory (100 million rounds hung the run).
MAX_ROUNDS = 100_000

# Torch dtype names (and their aliases) a case may ask for; the case maps them to torch dtypes and skips
# the ones a device cannot run.
DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "fp32": "float32", "float16": "float16", "half": "float16",
    "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
    "fp64": "float64",
}
DTYPES = sorted(set(DTYPE_ALIASES.values()))

# Compute cases take a precision: a dtype, or `tf32` (float32 data, TensorFloat-32 math on CUDA tensor cores).
PRECISION_ALIASES = {**DTYPE_ALIASES, "tf32": "tf32", "tensorfloat32": "tf32"}
PRECISIONS = sorted(set(PRECISION_ALIASES.values()))


def _dtype(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower().removeprefix("torch.") in DTYPE_ALIASES:
        return DTYPE_ALIASES[value.strip().lower().removeprefix("torch.")]
    raise ValueError(f"{value!r} is not a dtype; allowed: {', '.join(DTYPES)}")


def _precision(value: Any) -> str:
    if isinstance(value, str) and value.strip().lower().removeprefix("torch.") in PRECISION_ALIASES:
        return PRECISION_ALIASES[value.strip().lower().removeprefix("torch.")]
    raise ValueError(f"{value!r} is not a dtype; allowed: {', '.join(PRECISIONS)} (tf32: float32 data, TF32 math)")


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
    m, n, k = dims
    if max(m * k, k * n, m * n) > MAX_SIZE_BYTES:
        raise ValueError(f"{value!r}: a matrix of more than {MAX_SIZE_BYTES:.3g} elements is larger than any device "
                         "holds; give smaller dimensions (e.g. 4096x4096x4096)")
    return dims  # type: ignore[return-value]


def _size(value: Any) -> int:
    size = parse_size(value)
    if size > MAX_SIZE_BYTES:
        raise ValueError(f"{value!r} is larger than any device holds; give at most {format_size(MAX_SIZE_BYTES)} "
                         "(e.g. 64MiB)")
    return size


# json_schema_input_type: what a user may write (the exported JSON Schema shows it), not the parsed type.
Dtype = Annotated[str, BeforeValidator(_dtype, json_schema_input_type=str)]
Precision = Annotated[str, BeforeValidator(_precision, json_schema_input_type=str)]
Size = Annotated[int, BeforeValidator(_size, json_schema_input_type=Union[int, str])]
Shape3 = Annotated[tuple[int, int, int], BeforeValidator(_shape3, json_schema_input_type=Union[str, list[int]])]


def choice(what: str, allowed: dict[str, str], listed: tuple[str, ...] | None = None) -> BeforeValidator:
    """A validator mapping a word or one of its aliases (any case) to its canonical name, with a one-line
    error listing the canonical names (`listed`, or all of them sorted)."""
    names = ", ".join(listed or sorted(set(allowed.values())))

    def check(value: Any) -> str:
        key = value.strip().lower() if isinstance(value, str) else None
        if key in allowed:
            return allowed[key]
        raise ValueError(f"{value!r} is not a {what}; allowed: {names}")

    return BeforeValidator(check, json_schema_input_type=str)


def one_of(what: str, allowed: tuple[str, ...]) -> BeforeValidator:
    """A validator accepting one of `allowed` (any case), with a one-line error listing them in order."""
    return choice(what, {word: word for word in allowed}, listed=allowed)


class Section(BaseModel):
    """Base for every config object: unknown keys are errors, values are checked strictly, numbers are finite."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True, allow_inf_nan=False)


def optional_fields(model: type[BaseModel], keys) -> dict[str, Any]:
    """`model`'s fields named in `keys` as create_model arguments, each optional (absent = not set here) with its
    type, limits and description kept: the one way a sub-section overrides some keys of another. An explicit
    null is validated like any value (and refused where the key does not take one)."""
    fields: dict[str, Any] = {}
    for key in keys:
        info = copy(model.model_fields[key])
        info.default, info.default_factory = None, None
        fields[key] = (info.annotation, info)
    return fields


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

    warmup_s: float = Field(0.05, ge=0, le=MAX_DURATION_S,
                            description="seconds of calls before timing (autotuning, handles)")
    compute_warmup_s: float = Field(
        SUSTAINED_WARMUP_S, ge=0, le=MAX_DURATION_S,
        description="warm-up of compute cases (matmul, ceiling, conv, model) on an accelerator: a cold GPU boosts "
        "above the clock it can sustain, so these run this long before timing (docs/timing.md)",
    )
    min_time: float = Field(
        0.0001, gt=0, le=MAX_DURATION_S,
        description="shortest round in seconds (pytest-benchmark --benchmark-min-time)"
    )
    accelerator_min_time: float = Field(
        ACCELERATOR_MIN_ROUND_S, gt=0, le=MAX_DURATION_S,
        description="shortest round of a case on an accelerator: a round there also pays the first call's launch "
        "before the device starts (cuDNN: tens of microseconds), which the timer's own cost does not include; "
        "5 ms keeps 50 us under 1% (docs/timing.md)",
    )
    max_time: float = Field(1.0, gt=0, le=MAX_DURATION_S, description="most seconds of timed rounds per benchmark "
                            "(--benchmark-max-time); precision stopping usually ends sooner")
    min_rounds: int = Field(5, ge=1, le=MAX_ROUNDS,
                            description="fewest rounds per benchmark (--benchmark-min-rounds)")
    precision: PrecisionTarget = Field(
        DEFAULT_PRECISION,
        description="stop once the mean's relative margin of error is within this fraction (0.01 = +-1%) at "
        "`confidence` (--benchmark-precision); off: always run max_time",
    )
    confidence: float = Field(DEFAULT_CONFIDENCE, gt=0, lt=1,
                              description="confidence level of `precision` (--benchmark-confidence)")
    calibration_precision: int = Field(
        100, ge=1, le=MAX_ROUNDS, description="a round lasts at least this many times the timer's own cost (which "
        "includes the device synchronisation), so one synchronisation is at most 1/N of a round",
    )
    time_limit_s: float = Field(
        900, ge=0, le=MAX_DURATION_S, description="a case running longer fails with this limit in the message and "
        "the run goes on (pytest-timeout; 0 = no limit; --timeout on the command line wins)",
    )
    budget: Duration | None = Field(
        None,
        description="the whole run, overhead included, in at most this time (600, 90s, 10m, 1h): each "
        "benchmark's max_time is cut where needed, never raised; a budget too small is refused before anything "
        "runs (--suite-budget)",
    )


# Keys a case family may override under its own `timing:` (the run's budget and time limit stay global).
_RUN_WIDE_TIMING = ("budget", "time_limit_s")


TimingOverride = create_model(
    "TimingOverride",
    __base__=Section,
    __doc__="A case family's own timing: any key of the top-level `timing` but budget and time_limit_s.",
    **optional_fields(TimingConfig, [k for k in TimingConfig.model_fields if k not in _RUN_WIDE_TIMING]),
)


class CaseSection(Section):
    """A case family's section. Its optional `cpu:` sub-section (added by `cpu_overrides`) replaces keys for the
    CPU, which is often 100-1000x slower than an accelerator and needs smaller sizes (or fewer dtypes)."""

    enabled: bool = True
    timing: TimingOverride | None = Field(
        None, description="this family's own timing keys (precision, max_time, warmup_s, ...), over `timing`")

    def for_device(self, device: str):
        override = getattr(self, "cpu", None)
        if device != "cpu" or override is None:
            return self
        # The override's own values (not model_dump's dicts): nested sections such as conv shapes stay objects.
        return self.model_copy(update={key: getattr(override, key) for key in override.model_fields_set})


def cpu_overrides(*keys: str, description: str | None = None) -> Callable[[type[CaseSection]], type[CaseSection]]:
    """Class decorator: give a family section a `cpu:` sub-section that may set `keys` for the CPU.

    The sub-section's fields are the section's own (same types and limits), optional: one mechanism for every
    family instead of a hand-written copy of each field.
    """

    def decorate(section: type[CaseSection]) -> type[CaseSection]:
        fields = optional_fields(section, keys)
        name = section.__name__.removesuffix("Config") + "Cpu"
        cpu = create_model(name, __base__=Section, __module__=section.__module__, **fields)
        cpu.__doc__ = f"Keys of `{section.__name__}` replaced on the CPU: {', '.join(keys)}."
        about = description or f"overrides of {'/'.join(keys)} for the CPU"
        return create_model(  # type: ignore[return-value]
            section.__name__,
            __base__=section,
            __module__=section.__module__,
            __doc__=section.__doc__,
            cpu=(Union[cpu, None], Field(None, description=about)),
        )

    return decorate


__all__ = [
    "DTYPES", "TimingConfig", "TimingOverride", "optional_fields", "DTYPE_ALIASES", "PRECISIONS",
    "CaseSection", "Dtype", "Precision", "Section", "Shape3", "Size", "choice", "cpu_overrides", "one_of",
]
