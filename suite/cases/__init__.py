"""Case families: each module owns its parameter space, inputs, operation, FLOP/byte counts and check.

A family module defines:
    NAME: str
    def enumerate_cases(config: SuiteConfig, devices: list[str]) -> list[Case]
    def build(case: Case, config: SuiteConfig) -> Work
`benchmarks/test_<name>.py` holds `def test_<name>(case, measure): measure(case)`; the plugin parametrises
`case` from the family's enumerate_cases and `measure` does the rest (skips, check, warm-up, timing, extra_info).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

# family name -> module. A new family adds one line here and one thin test file.
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


def family_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(FAMILIES[name])
    except KeyError:
        raise KeyError(f"unknown case family {name!r}; known: {', '.join(FAMILIES)}") from None


def make_case(family: str, devices: tuple[str, ...], id_parts: list[str], **params: Any) -> Case:
    return Case(family=family, id="-".join(id_parts), devices=devices, params=tuple(params.items()))
