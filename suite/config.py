"""The YAML config: loaded with the safe loader, validated into typed objects, errors as one line.

No torch here: a config can be checked (and its JSON Schema exported) on any machine.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from suite.errors import UserError
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


Dtype = Annotated[str, BeforeValidator(_dtype)]
Size = Annotated[int, BeforeValidator(_size)]
Shape3 = Annotated[tuple[int, int, int], BeforeValidator(_shape3)]


class Section(BaseModel):
    """Base for every config object: unknown keys are errors, values are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class TimingConfig(Section):
    """How rounds are timed; pytest-benchmark's own command-line options override these."""

    warmup_s: float = Field(0.05, ge=0, description="seconds of calls before timing (autotuning, handles)")
    min_time: float = Field(
        0.0001, gt=0, description="shortest round in seconds (pytest-benchmark --benchmark-min-time)"
    )
    max_time: float = Field(1.0, gt=0, description="seconds to spend per benchmark (--benchmark-max-time)")
    min_rounds: int = Field(5, ge=1, description="fewest rounds per benchmark (--benchmark-min-rounds)")
    calibration_precision: int = Field(
        100,
        ge=1,
        description="a round lasts at least this many times the timer's own cost (which includes the device "
        "synchronisation), so one synchronisation is at most 1/N of a round",
    )


class CaseSection(Section):
    """A case family's section. Its optional `cpu:` sub-section overrides keys for the CPU, which is often
    100-1000x slower than an accelerator and needs smaller sizes (or fewer dtypes) to finish in time."""

    enabled: bool = True

    def for_device(self, device: str):
        override = getattr(self, "cpu", None)
        if device != "cpu" or override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_unset=True))


class MatmulCpu(Section):
    dtypes: list[Dtype] = Field(None, min_length=1)
    shapes: list[Shape3] = Field(None, min_length=1)


class MatmulConfig(CaseSection):
    dtypes: list[Dtype] = Field(default_factory=lambda: ["float32"], min_length=1)
    shapes: list[Shape3] = Field(default_factory=lambda: [(1024, 1024, 1024)], min_length=1)
    cpu: MatmulCpu | None = Field(None, description="overrides of dtypes/shapes for the CPU")


# --- data movement sections (copy, placement, habits) ---


# --- compute sections (conv, model, ceiling) ---


# --- collectives section ---


class CasesConfig(Section):
    matmul: MatmulConfig = Field(default_factory=MatmulConfig)


DeviceSpec = Union[str, list[str]]


class SuiteConfig(Section):
    devices: DeviceSpec = Field("all", description="'all', 'cpu', 'gpus', 'cuda:1', or a list of these")
    timing: TimingConfig = Field(default_factory=TimingConfig)
    cases: CasesConfig = Field(default_factory=CasesConfig)

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
        else:
            out += ("." if out else "") + str(part)
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


def _clean_loc(err: dict) -> dict:
    # pydantic adds union/validator branch names ('str', 'list[str]', 'function-before[...]') to the path.
    loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and ("[" in p or p in ("str", "list")))]
    return dict(err, loc=tuple(loc))


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
        raise UserError(f"{path}: cannot read the config ({exc.__class__.__name__}: {exc}); check the path and permissions") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        hint = " (YAML forbids tabs for indentation: use spaces)" if "'\\t'" in str(exc) or "tab" in str(exc) else ""
        raise UserError(f"{path}: not valid YAML: {where}{problem}{hint}") from None
    return parse_config(data, str(path))


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
