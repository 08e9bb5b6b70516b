"""Case families and their registry: one package per family, one line each in FAMILIES.

A family is a package `suite/cases/<name>/` (or any importable package registered with `register_family`):
    __init__.py   torch-free: `Config`, its YAML section (a `suite.sections.CaseSection`), from its config.py
    measure.py    NAME, enumerate_cases(config, devices) -> list[Case], build(case, config) -> Work
    checks.py     optionally, its part of the tooling (suite/tools): gpu_checks(ctx), accuracy_round(...),
                  headline(results) (the evidence page's figures)
`benchmarks/test_<name>.py` holds `def test_<name>(case, measure): measure(case)`; the plugin parametrises
`case` from the family's enumerate_cases and `measure` does the rest (skips, check, warm-up, timing, extra_info).
The config (`suite.config`) gets a `cases.<name>` key for every registered family that has a `Config`.
"""

from __future__ import annotations

import importlib
import importlib.util
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

# family name -> its package. A new family adds one line here, its package and one thin test file.
FAMILIES: dict[str, str] = {
    "matmul": "suite.cases.matmul",
    "ceiling": "suite.cases.ceiling",
    "conv": "suite.cases.conv",
    "model": "suite.cases.model",
    "copy": "suite.cases.copy",
    "placement": "suite.cases.placement",
    "habits": "suite.cases.habits",
    "collectives": "suite.cases.collectives",
}


def register_family(name: str, package: str) -> None:
    """Add a family from outside this package (a plugin, a test): before the config is loaded, so that its
    `cases.<name>` section is known."""
    if FAMILIES.get(name, package) != package:
        raise ValueError(f"case family {name!r} is already registered as {FAMILIES[name]}")
    FAMILIES[name] = package


class SkipCase(Exception):
    """This case cannot run here (dtype unsupported, pinned memory without an accelerator, ...)."""


@dataclass(frozen=True)
class Case:
    """One parametrisation: what is measured, on which devices, with which parameters."""

    family: str
    id: str
    devices: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]

    @property
    def info(self) -> dict[str, Any]:
        return dict(self.params)

    def __str__(self) -> str:
        return self.id


@dataclass
class Work:
    """A case built on its devices: the timed call and what one call does.

    `fn` is the only thing inside the timed region. `check` runs once, outside it, and raises
    AssertionError on a wrong result. Per-call counts (`flops`, `bytes`, `traffic_bytes`, `samples`) turn the
    median into rates; `extra` goes into extra_info as is.
    """

    fn: Callable[[], object]
    check: Callable[[], None]
    flops: float | None = None
    bytes: float | None = None
    traffic_bytes: float | None = None
    samples: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Fixed `benchmark.pedantic` arguments (rounds, iterations, warmup_rounds) instead of calibration and the
    # time-based warm-up: for cases whose calls must happen the same number of times everywhere (collectives).
    pedantic: dict[str, Any] | None = None
    # More extra_info from the median seconds per call (collectives: algbw, busbw).
    derive: Callable[[float], dict[str, Any]] | None = None


class OwnFn:
    """Calls the current `fn` of the Work a check belongs to, holding that Work weakly.

    A check calls the timed function through its Work (so a test can put a broken `fn` in its place and see
    the check fail). Through a closure over `work` that was a reference cycle: each case's buffers then lived
    until Python's cycle collector ran, often inside a later case, whose pinned blocks could be another GPU's
    NUMA node's memory and whose device memory looked used up. `work = own.bind(Work(...))`; the check calls
    `own()`."""

    def __init__(self) -> None:
        self._ref: Callable[[], Work | None] = lambda: None

    def bind(self, work: Work) -> Work:
        self._ref = weakref.ref(work)
        return work

    def __call__(self) -> object:
        work = self._ref()
        assert work is not None, "the check outlived its Work"
        return work.fn()


def _package(name: str) -> ModuleType:
    try:
        return importlib.import_module(FAMILIES[name])
    except KeyError:
        raise KeyError(f"unknown case family {name!r}; known: {', '.join(FAMILIES)}") from None


def family_module(name: str) -> ModuleType:
    """The family's measuring module (imports torch): enumerate_cases, build."""
    package = _package(name)
    if hasattr(package, "__path__"):
        return importlib.import_module(f"{package.__name__}.measure")
    return package  # a single-module family (test fakes): config-less, measuring names at its top level


def family_part(name: str, part: str) -> ModuleType | None:
    """One optional module of a family's package (`read`: torch-free reading of its results; `charts`: its
    report charts, matplotlib), or None where the family has none. Shared modules reach a family only
    through this, so they never name one."""
    package = _package(name)
    if not hasattr(package, "__path__"):
        return None
    target = f"{package.__name__}.{part}"
    if importlib.util.find_spec(target) is None:
        return None
    return importlib.import_module(target)


def family_read(name: str, attr: str, default: Any = None) -> Any:
    """One attribute of the family's `read` module, or `default` where the family is not registered (a
    foreign row, an old family's name in a results file) or has no read module or no such attribute.

    The attributes a family's read.py may define, each optional (absent: the generic behaviour). Torch-free
    to import; docs/adding-a-family.md shows them on the toy family.
      RATE          the extra_info rate that says how fast it is, a key of suite.results.RATE_UNITS (all
                    higher-is-better; the unit is from there); absent: the first rate a result has
      TITLE, NOTE   its report section's title and the note under it
      summary(benchmarks) -> list[str]   its end-of-run summary lines from pytest-benchmark JSON entries
                    (helpers in suite.summary); absent or []: the generic rate-per-benchmark section
      OVERHEAD_S    seconds a benchmark costs beyond warm-up and timed rounds (suite.plan; default 0.06)
      TORCHRUN      the command that runs the family under torchrun, apart from `pytest benchmarks`: its cases
                    run only there, the plan counts a torchrun launch, health expects its results only from a
                    torchrun job
      fixed_seconds(case, config) -> float   the seconds of a case that runs fixed rounds (no max_time share)
      plan_config(config, devices) -> config  the config the plan enumerates its cases with
      PLAN_ASSUMPTIONS  {key: value} added to `suite plan --json`'s assumptions
      call_flops(params) -> int | None       FLOP of one call from a case's parameters (the plan's long calls;
                    called where torch is loaded, so it may import the family's measure module)
      call_bytes(params) -> int | None       bytes one call copies, likewise (the plan prices them per path);
                    fill_bytes(params): bytes its build fills with the pattern, where not call_bytes
      MEASURES      {name: suite.health.expect.Measure} health judges against expected figures; a measure
                    several families declare takes the results of each
      like_ours(rows) -> rows   of its rows of a results table, those measured the suite's way (an imported
                    tool's other variants of a figure left out), for health and charts
      missing_hint(base, cand, rows) -> str  a hint compare prints when candidate benchmarks are missing
      IMPORTERS     modules that read another tool's output as this family's results (suite.importers), each
                    with recognises(text) -> bool and parse(path, text, warnings) -> (data, problem)
    """
    if name not in FAMILIES:
        return default
    return getattr(family_part(name, "read"), attr, default)


def family_config(name: str) -> type | None:
    """The family's config section class (torch-free), or None for a family without YAML keys."""
    return getattr(_package(name), "Config", None)


def measuring_names(package: str) -> Callable[[str], Any]:
    """A module `__getattr__` for a family package: `suite.cases.copy.build` reaches `suite.cases.copy.measure`
    on first use, so the package itself stays torch-free for the config."""

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(importlib.import_module(f"{package}.measure"), attr)

    return __getattr__


def make_case(family: str, devices: tuple[str, ...], id_parts: list[str], **params: Any) -> Case:
    return Case(family=family, id="-".join(id_parts), devices=devices, params=tuple(params.items()))
