"""The YAML config: loaded with the safe loader, validated into typed objects, errors as one line.

What is shared lives here (devices, timing, loading, error messages, the JSON Schema); each case family's
section lives in its package (`suite/cases/<family>/config.py`) and is assembled into `cases:` from the registry.
No torch here: a config can be checked (and its JSON Schema exported) on any machine.
"""

from __future__ import annotations

import functools
import json
import re
import typing
import warnings
from pathlib import Path
from typing import Any, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model, field_validator

from suite import cases as registry
from suite.errors import UserError
from suite.sections import DTYPES, CaseSection, Section, TimingConfig
from suite.units import SIZE_HELP

DEFAULT_CONFIG = Path("configs/default.yaml")


DeviceSpec = Union[str, list[str]]


class SuiteConfig(Section):
    """The whole config. `cases:` holds one section per registered family; the class `parse_config` returns is
    this one with that field added (`suite_model()`)."""

    devices: DeviceSpec = Field("all", description="'all', 'cpu', 'gpus', 'cuda:1', or a list of these")
    timing: TimingConfig = Field(default_factory=TimingConfig)

    def timing_for(self, family: str) -> TimingConfig:
        """The top-level timing with the family's own `timing:` keys over it."""
        section = getattr(self.cases, family, None)
        override = getattr(section, "timing", None)
        if override is None:
            return self.timing
        return self.timing.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    @field_validator("devices", mode="before")
    @classmethod
    def _device_numbers(cls, value: Any) -> Any:
        # A bare number is GPU N to a torch user (`try_gpu(5)`); `devices:` takes torch's device names.
        items = value if isinstance(value, list) else [value]
        number = next((v for v in items if isinstance(v, int) and not isinstance(v, bool)), None)
        if number is not None:
            raise ValueError(f"{number!r} is not a device; write [cuda:{number}] for GPU {number}, or gpus for every GPU")
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: DeviceSpec) -> DeviceSpec:
        items = value.split(",") if isinstance(value, str) else value
        if not items or not any(str(i).strip() for i in items):
            raise ValueError("empty device list; expected 'all', 'cpu', 'gpus', 'cuda:1', or a list of these")
        for item in items:
            _check_device_word(str(item))
        return value


def suite_model() -> type[SuiteConfig]:
    """SuiteConfig with a `cases:` section per registered family that has a Config, in registry order."""
    return _assemble(tuple(registry.FAMILIES.items()))


@functools.cache
def _assemble(families: tuple[tuple[str, str], ...]) -> type[SuiteConfig]:
    sections: dict[str, Any] = {}
    for name, _ in families:
        section = registry.family_config(name)
        if section is None:
            continue
        if not (isinstance(section, type) and issubclass(section, CaseSection)):
            raise TypeError(f"case family {name!r}: Config must be a suite.sections.CaseSection subclass")
        sections[name] = (section, Field(default_factory=section))
    with warnings.catch_warnings():
        # A family named like a BaseModel method (the deprecated BaseModel.copy()) becomes a field that
        # shadows it; nothing here calls those methods, so pydantic's warning says nothing useful.
        shadows = r'Field name "\w+" in "CasesConfig" shadows'
        warnings.filterwarnings("ignore", message=shadows, category=UserWarning)
        cases = create_model("CasesConfig", __base__=Section, __module__=__name__, **sections)
    cases.__doc__ = "One section per case family: " + ", ".join(sections)
    return create_model("SuiteConfig", __base__=SuiteConfig, __module__=__name__,
                        cases=(cases, Field(default_factory=cases)))


_DEVICE_WORDS = ("all", "cpu", "gpus", "gpu", "accelerators", "mps")


def _check_device_word(item: str) -> None:
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
        try:
            first = seen.get(key)
        except TypeError:  # a mapping or a list written as a key (`{a: 1}: 2`, a stray `}:`); its contents
            # are not built yet here (the loader fills them later), so the line and column name it
            kind = {dict: "mapping", list: "list"}.get(type(key), type(key).__name__)
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a name or a number, not a {kind}", key_node.start_mark
            ) from None
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {first + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
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
    model: type[BaseModel] | None = suite_model()
    for part in (p for p in loc if not isinstance(p, int)):  # a list index stays in the list's model
        field = model.model_fields.get(part)
        if field is None:
            return model
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:  # a key below a value that is not a section
            return None
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
    if kind == "list_type" and isinstance(value, (str, int, float)):
        return f"{_loc_path(loc)}: {value!r} is invalid: a list is expected; write [{value}]"
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


# How many validation problems one error line names.
MAX_PROBLEMS = 4


def parse_config(data: Any, source: str = "<config>") -> SuiteConfig:
    """Validate an already-parsed YAML document; UserError naming `source`, the key path and the value."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{source}: the config must be a mapping of keys (devices, timing, cases), got {type(data).__name__}")
    try:
        return suite_model().model_validate(data)
    except ValidationError as exc:
        errors = [_clean_loc(e) for e in exc.errors()]
        # Every problem on the one line (up to MAX_PROBLEMS), so a config is fixed in one pass, not one
        # error per run.
        shown = "; ".join(dict.fromkeys(_format_error(e) for e in errors[:MAX_PROBLEMS]))
        more = f" (and {len(errors) - MAX_PROBLEMS} more problem(s))" if len(errors) > MAX_PROBLEMS else ""
        raise UserError(f"{source}: {shown}{more}") from None


def load_config(path: str | Path) -> SuiteConfig:
    """Read and validate a YAML config file; every problem is one UserError line."""
    path = Path(path)
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to the current folder, {Path.cwd()})"
        raise UserError(f"{path}: config file not found{where}; pass --suite-config PATH to an existing YAML file")
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


def selects_nothing(config: SuiteConfig) -> bool:
    """Every case family's section is disabled: pytest would refuse the config (nothing_selected), torch-free."""
    return not any(getattr(config.cases, name).enabled for name in type(config.cases).model_fields)


def nothing_selected(source: object) -> str:
    """The one line pytest and `schema --check` give for a config that selects no benchmarks."""
    return (f"{source} selects no benchmarks (every case family is disabled or empty); enable a family under "
            "`cases:` or pick another --suite-config")


def json_schema() -> dict:
    schema = suite_model().model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpubench-suite config"
    return schema


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", help="write the schema to this file instead of stdout")
    parser.add_argument("--check", metavar="CONFIG", nargs="*",
                        help="validate these config files (and that each selects some benchmarks) and exit")


def run(args) -> int:
    if args.check is not None and not args.check:
        # `schema --check $CFG` with an empty variable must not print the schema and pass.
        raise UserError("--check needs at least one config file: python -m suite schema --check CONFIG...")
    if args.check:
        for name in args.check:
            if selects_nothing(load_config(name)):
                raise UserError(nothing_selected(name))
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
    "DEFAULT_CONFIG", "DTYPES", "SIZE_HELP", "Section", "SuiteConfig", "TimingConfig", "json_schema",
    "load_config", "nothing_selected", "parse_config", "resolved", "selects_nothing", "suite_model",
]
