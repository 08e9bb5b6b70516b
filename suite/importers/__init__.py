"""Other tools' results (nccl-tests text, nvbandwidth JSON) read as pytest-benchmark data of our families."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from suite import SCHEMA_VERSION


def imported(tool: str, path: Path, machine_info: dict, benchmarks: list[dict], version: str = "") -> dict:
    """A results object shaped like ours, so the loader, report, compare and health treat it alike."""
    # Neither tool records when it ran: the file's modification time stands in (the history's x axis).
    when = _dt.datetime.fromtimestamp(path.stat().st_mtime, tz=_dt.timezone.utc).isoformat()
    return {
        "machine_info": machine_info,
        "benchmarks": benchmarks,
        "datetime": when,
        "suite": {"schema_version": SCHEMA_VERSION, "tool": tool, "tool_version": version},
    }


def stats_from_time(seconds: float, rounds: int, iterations: int) -> dict:
    """pytest-benchmark stats from one reported time: no spread is known, so none is invented."""
    return {
        "median": seconds,
        "mean": seconds,
        "min": seconds,
        "max": seconds,
        "rounds": rounds,
        "iterations": iterations,
    }


# nccl-tests' first line or its column header: what no JSON file of ours contains.
_NCCL_TESTS = re.compile(r"^(?:\[\d+,\d+\]<stdout>:)?#\s*(?:nThread\s+\d+|size\s+count\s)", re.MULTILINE)


def sniff(path: Path, text: str) -> str | None:
    """Which importer reads this text: 'nvbandwidth', 'nccl-tests', or None."""
    if '"nvbandwidth"' in text[:4096]:
        return "nvbandwidth"
    if _NCCL_TESTS.search(text):
        return "nccl-tests"
    return None
