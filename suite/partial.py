"""Crash-safe results: every finished benchmark is appended and flushed to `<json>.partial.jsonl` at once.

pytest-benchmark writes `--benchmark-json` only when the session ends, so a run killed halfway (SIGKILL, a
driver hang, the job's time limit) would lose everything. The partial file holds, line by line:

    {"partial": true, "machine_info": ..., "commit_info": ..., "suite": ..., "datetime": ..., "version": ...}
    {"started": "<nodeid>"}                      before each test runs
    {<benchmark>}                                 a finished benchmark, exactly as in the final JSON
    {"finished": "<nodeid>", "outcome": "..."}   after each test (passed, failed, skipped)

A completed run replaces it with the normal JSON. `python -m suite report`/`compare` read it (marked partial),
and `pytest benchmarks --suite-resume` re-runs only what it lacks. Readers skip lines that are not benchmarks
(they have no "stats") and an unparsable last line (the write the kill interrupted).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from suite.errors import UserError

SUFFIX = ".partial.jsonl"
# A test that was running when this many runs died is skipped by --suite-resume: once may be the job's time
# limit or a stray kill (so it is retried; a hang is caught by the per-case time limit), twice is the test
# crashing the process, which would stop every resumed run at the same place.
MAX_DEATHS = 2


def partial_path(json_path: str | Path) -> Path:
    """results/x.json -> results/x.partial.jsonl"""
    path = Path(json_path)
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(stem + SUFFIX)


def _dumps(obj: dict) -> str:
    from pytest_benchmark.utils import safe_dumps

    return safe_dumps(obj, ensure_ascii=True)


class PartialWriter:
    """Appends one JSON object per line, flushed and fsynced, so a kill loses at most the line being written."""

    def __init__(self, path: Path, append: bool = False) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self.has_header = append and path.stat().st_size > 0

    def write(self, obj: dict) -> None:
        self._fh.write(_dumps(obj) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


@dataclass
class PartialRun:
    """What an earlier, interrupted run left: its header, finished benchmarks, and the test it died in."""

    header: dict | None = None
    benchmarks: dict[str, dict] = field(default_factory=dict)  # fullname -> benchmark
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/skipped
    started: Counter = field(default_factory=Counter)
    finished: Counter = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)  # the valid lines, to rewrite without a torn last one

    def deaths(self, nodeid: str) -> int:
        """How many runs died while this test was running (started, never finished)."""
        return self.started[nodeid] - self.finished[nodeid]


def read_partial(path: Path) -> PartialRun:
    """Parse a partial file; a torn last line is dropped, a corrupt one elsewhere is a UserError."""
    run = PartialRun()
    try:
        raw = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the partial results ({exc}); delete it to start afresh") from None
    for number, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if number == len(raw):
                break  # the write a kill interrupted
            raise UserError(f"{path}: line {number} is not JSON; delete the file to start afresh") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}: line {number} is not a JSON object; delete the file to start afresh")
        run.lines.append(line)
        if obj.get("partial"):
            run.header = obj
        elif "started" in obj:
            run.started[obj["started"]] += 1
        elif "finished" in obj:
            run.finished[obj["finished"]] += 1
            run.outcomes[obj["finished"]] = obj.get("outcome", "")
        elif "stats" in obj and "fullname" in obj:
            run.benchmarks[obj["fullname"]] = obj
    return run


def rewrite_clean(path: Path, run: PartialRun) -> None:
    """Drop a torn last line before appending to the file again."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in run.lines), encoding="utf-8")
    os.replace(tmp, path)


def check_writable(json_path: Path) -> None:
    """Create the output folder and prove the JSON can be written, before anything is measured."""
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"--benchmark-json {json_path}: cannot create the folder {json_path.parent} ({exc.strerror}); "
            "choose a writable path"
        ) from None
    if json_path.is_dir():
        raise UserError(f"--benchmark-json {json_path}: is a directory; give a file path such as {json_path}/results.json")
    existed = json_path.exists()
    try:
        with open(json_path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UserError(f"--benchmark-json {json_path}: cannot be written ({exc.strerror}); choose a writable path") from None
    if not existed:
        json_path.unlink()
