"""Read results files (pytest-benchmark JSON, partial journals, other tools' output) into checked, migrated dicts."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterable
from pathlib import Path

from suite import SCHEMA_VERSION, __version__
from suite.units import GB, TFLOP

PARTIAL_SUFFIX = ".partial.jsonl"
# Other tools' text output (nccl-tests) found in a folder; a file of another kind is a one-line warning.
TEXT_SUFFIXES = (".txt", ".log", ".out")
# `dcgmi diag -j` documents (DCGM 3: "DCGM GPU Diagnostic", DCGM 4: "DCGM Diagnostic"): verdicts, not timings;
# `health` reads them beside the results (suite.health.dcgm), the loader leaves them out with this note.
DIAGNOSTICS = frozenset({"DCGM GPU Diagnostic", "DCGM Diagnostic"})
# A file recognised as none of the formats read (another tool's JSON may be one of them, cut short).
NOT_RESULTS = "neither pytest-benchmark JSON nor nccl-tests or nvbandwidth output"
DIAGNOSTICS_NOTE = "DCGM diagnostics, not benchmark results (`health` judges them beside the results)"


def _migrate_0_to_1(data: dict) -> dict:
    """Schema 0 stored only `flops`/`bytes` per call; schema 1 adds the derived `tflops`/`gbps` (from the median)."""
    for bench in data["benchmarks"]:  # a list: read_results_file migrates only what _check accepted
        if not isinstance(bench, dict):
            continue
        extra = bench.get("extra_info")
        stats = bench.get("stats")
        median = stats.get("median") if isinstance(stats, dict) else None
        if not isinstance(extra, dict) or not isinstance(median, (int, float)) or median <= 0:
            continue
        if isinstance(extra.get("flops"), (int, float)) and "tflops" not in extra:
            extra["tflops"] = extra["flops"] / median / TFLOP
        if isinstance(extra.get("bytes"), (int, float)) and "gbps" not in extra:
            extra["gbps"] = extra["bytes"] / median / GB
    data.setdefault("suite", {})["schema_version"] = 1
    return data


# Schema N -> N+1. Schema 0 (the pre-1 layout, `"schema": 0` in the suite block) is the only older layout.
MIGRATIONS = {0: _migrate_0_to_1}



def expand_paths(paths: Iterable[str | Path], warnings: list[str]) -> list[Path]:
    """Files as given; folders become every *.json and *.partial.jsonl inside, recursively, sorted."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(_folder(path, warnings))
        elif path.is_file():
            files.append(path)
        else:
            warnings.append(f"{path}: {_not_a_file(path)} — skipped")
    # A finished NAME.json supersedes the NAME.partial.jsonl its run wrote along the way, if it is the later of
    # the two and not empty: a partial file newer than the JSON is a later run's that was killed (an older
    # complete JSON beside it must not hide it), and an empty JSON is a write that failed.
    finished = {p.parent / p.name[: -len(".json")]: p for p in files if p.name.endswith(".json")}
    kept: dict[Path, None] = {}  # ordered and a set: a fleet names thousands of files
    for p in files:
        done = finished.get(p.parent / p.name[: -len(PARTIAL_SUFFIX)]) if p.name.endswith(PARTIAL_SUFFIX) else None
        if done is not None and _supersedes(done, p):
            warnings.append(f"{p}: stale partial results, {done.name} is newer — skipped")
            continue
        kept.setdefault(p)
    return list(kept)


def _folder(path: Path, warnings: list[str]) -> list[Path]:
    """Every results file in a folder, recursively, sorted."""
    patterns = ("*.json", "*" + PARTIAL_SUFFIX, *("*" + suffix for suffix in TEXT_SUFFIXES))
    found = [p for p in sorted({p for pattern in patterns for p in path.rglob(pattern)}) if p.is_file()]
    if not found:
        warnings.append(f"{path}: folder holds no results files (*.json, *{PARTIAL_SUFFIX}) — skipped")
    return found


def _not_a_file(path: Path) -> str:
    """What a path that is neither a file nor a folder is: missing, a symlink loop, a FIFO or a device."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (a link that leads back to itself); point the link at a results file"
        return "no such file or folder" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
    return "a FIFO, socket or device, not a results file; save the results to a file and pass that"


def _supersedes(json_path: Path, partial: Path) -> bool:
    try:
        done, part = json_path.stat(), partial.stat()
    except OSError:
        return True
    return done.st_size > 0 and done.st_mtime >= part.st_mtime


def _read_text(path: Path) -> tuple[str | None, str | None]:
    """(text, problem) of a file that should hold UTF-8 text."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read ({exc.__class__.__name__})"
    return (text, None) if text.strip() else (None, "empty file")


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    text, problem = _read_text(path)
    if problem:
        return None, problem
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None, "not JSON (truncated?)"
    return data, None


def _read_partial(path: Path, warnings: list[str]) -> tuple[dict | None, str | None]:
    text, problem = _read_text(path)
    if problem:
        return None, problem
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        return None, "first line is not a JSON header (truncated?)"
    if not isinstance(header, dict):
        return None, "first line is not a JSON object"
    return {**header, "benchmarks": _journal_benchmarks(path, lines[1:], warnings), "partial": True}, None


def _journal_benchmarks(path: Path, lines: list[str], warnings: list[str]) -> list[dict]:
    """The benchmark lines of a journal after its header."""
    benchmarks, bad = [], 0
    for i, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            # The writer may have been killed mid-line: only the last line can legitimately be cut.
            if i == len(lines):
                warnings.append(f"{path}: run was cut short; ignored its truncated last line")
            bad += i < len(lines)
            continue
        # The writer (suite.partial) also logs {"started": ...} / {"finished": ...} progress lines.
        if isinstance(entry, dict) and "stats" in entry:
            benchmarks.append(entry)
    if bad:
        warnings.append(f"{path}: ignored {bad} unparsable benchmark line(s)")
    return benchmarks


def _schema_of(data: dict) -> tuple[int | None, str | None]:
    """(schema version, problem); version None means a foreign pytest-benchmark file (no `suite` block)."""
    block = data.get("suite")
    if not isinstance(block, dict):
        return None, None
    version = block.get("schema_version", block.get("schema", 0))
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return None, f"suite.schema_version {version!r} is not a non-negative integer"
    return version, None


def _read_other_tool(path: Path, warnings: list[str]) -> tuple[dict | None, str | None]:
    """nccl-tests text or nvbandwidth JSON, recognised by content; None, None when it is neither."""
    from suite.importers import read_other_tool

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read ({exc.__class__.__name__})"
    return read_other_tool(path, text, warnings) or (None, None)


def is_diagnostics(path: Path) -> bool:
    """A DCGM document behind the line dcgmi prints above its JSON (`Successfully ran diagnostic ...`)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return any(f'"{key}"' in head for key in DIAGNOSTICS)


def _is_binary(path: Path) -> bool:
    """A NUL byte near the start: an image, an archive, a core dump, never results (which are text). Read whole,
    such a file would cost ~10x its size in memory on the way to being refused."""
    try:
        with open(path, "rb") as fh:
            return b"\x00" in fh.read(4096)
    except OSError:
        return False  # said by the reader that follows


def read_results_file(path: Path, warnings: list[str]) -> tuple[dict, int | None] | None:
    """A results file as a pytest-benchmark object in the current schema, and the schema it was written in
    (None: another tool's pytest-benchmark file); None, with a warning, where it is not results we can read."""
    data, problem = _read_any(path, warnings)
    version = None
    if problem is None:
        version, problem = _check(data)
    if problem:
        warnings.append(f"{path}: {problem} — skipped")
        return None
    if version is not None:
        for step in range(version, SCHEMA_VERSION):
            data = MIGRATIONS[step](data)
    return data, version


def _read_any(path: Path, warnings: list[str]) -> tuple[object, str | None]:
    """(content, problem) of a partial journal, a JSON file, or another tool's output recognised by content."""
    if _is_binary(path):
        return None, "a binary file, not results"
    if path.name.endswith(PARTIAL_SUFFIX):
        return _read_partial(path, warnings)
    data, problem = _read_json(path)
    if problem is None and not (isinstance(data, dict) and "benchmarks" not in data):
        return data, None
    if DIAGNOSTICS.intersection(data) if isinstance(data, dict) else problem and is_diagnostics(path):
        return None, DIAGNOSTICS_NOTE
    imported, other_problem = _read_other_tool(path, warnings)
    if imported is not None or other_problem is not None:
        return imported, other_problem
    if path.suffix in TEXT_SUFFIXES:
        return data, NOT_RESULTS
    return data, problem


def _check(data: object) -> tuple[int | None, str | None]:
    """(schema version, problem) of what a file held: a pytest-benchmark object in a schema we can read."""
    if not isinstance(data, dict):
        return None, f"not a pytest-benchmark results object (top level is a JSON {type(data).__name__})"
    if not isinstance(data.get("benchmarks"), list):
        return None, f"no 'benchmarks' list: {NOT_RESULTS}"
    version, problem = _schema_of(data)
    if problem is None and version is not None and version > SCHEMA_VERSION:
        writer = data["suite"].get("version")
        by = f"gpubench-suite {writer}" if isinstance(writer, str) else "a newer gpubench-suite"
        problem = (
            f"written by {by} (results schema {version}); this is {__version__}, which reads schema "
            f"<= {SCHEMA_VERSION}: upgrade to {writer if isinstance(writer, str) else 'a newer release'} or later to read it"
        )
    return version, problem
