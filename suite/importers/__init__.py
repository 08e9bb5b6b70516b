"""Other tools' results read as pytest-benchmark data of our families: each family's read module names the
importers of its tools (IMPORTERS: modules with `recognises(text)` and `parse(path, text, warnings)`)."""

from __future__ import annotations

import contextvars
import importlib
from pathlib import Path

from suite import SCHEMA_VERSION
from suite.cases import FAMILIES, family_read

# `--as NAME` of report, health and compare: what another tool's output measured where the output itself does not
# say (an nccl-tests log that names no collective). Set for one command by suite.cli; importers read it.
READ_AS: contextvars.ContextVar[str | None] = contextvars.ContextVar("read_as", default=None)


def _importers():
    return [importlib.import_module(m) for name in FAMILIES for m in family_read(name, "IMPORTERS", ())]


def read_as_choices() -> list[str]:
    """Every name `--as` accepts: the union of the importers' READ_AS_CHOICES."""
    return sorted({c for importer in _importers() for c in getattr(importer, "READ_AS_CHOICES", ())})


def imported(tool: str, machine_info: dict, benchmarks: list[dict], version: str = "") -> dict:
    """A results object shaped like ours, so the loader, report, compare and health treat it alike."""
    # Neither tool's text or JSON output records when it ran, and a file's modification time changes with
    # every copy: no time is invented. Untimed runs of one machine are ordered by file name, with a warning.
    return {"machine_info": machine_info, "benchmarks": benchmarks, "datetime": "",
            "suite": {"schema_version": SCHEMA_VERSION, "tool": tool, "tool_version": version}}


def stats_from_time(seconds: float, rounds: int, iterations: int) -> dict:
    """pytest-benchmark stats from one reported time: no spread is known, so none is invented."""
    return {"median": seconds, "mean": seconds, "min": seconds, "max": seconds, "rounds": rounds,
            "iterations": iterations}


def read_other_tool(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None] | None:
    """The first registered importer that recognises `text`, parsing it; None when none does."""
    for importer in _importers():
        if importer.recognises(text):
            return importer.parse(path, text, warnings)
    return None
