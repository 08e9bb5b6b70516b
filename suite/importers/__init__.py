"""Other tools' results (nccl-tests text, nvbandwidth JSON) read as pytest-benchmark data of our families."""

from __future__ import annotations

import re
from pathlib import Path

from suite import SCHEMA_VERSION


def imported(tool: str, machine_info: dict, benchmarks: list[dict], version: str = "") -> dict:
    """A results object shaped like ours, so the loader, report, compare and health treat it alike."""
    # Neither tool's text or JSON output records when it ran, and a file's modification time changes with
    # every copy: no time is invented. Untimed runs of one machine are ordered by file name, with a warning.
    return {
        "machine_info": machine_info,
        "benchmarks": benchmarks,
        "datetime": "",
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
# Lines may carry Open MPI's --tag-output prefix or srun -l's `0: `.
_NCCL_TESTS = re.compile(
    r"^(?:\[\d+,\d+\]<stdout>:|\s*\d+: )?#\s*(?:nThread\s+\d+|size\s+count\s)", re.MULTILINE
)


def sniff(path: Path, text: str) -> str | None:
    """Which importer reads this text: 'nvbandwidth', 'nccl-tests', or None."""
    if '"nvbandwidth"' in text[:4096]:
        return "nvbandwidth"
    if _NCCL_TESTS.search(text):
        return "nccl-tests"
    return None
