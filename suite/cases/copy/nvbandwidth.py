"""nvbandwidth's output (`nvbandwidth -j` JSON, or its plain text: nvbandwidth_text) as copy results.

The format is nvbandwidth's own (json_output.cpp): `{"nvbandwidth": {"Driver Version", "testcases": [{"name",
"status", "bandwidth_description", "bandwidth_matrix": [[str, ...], ...], "sum", ...}]}}`, newer versions
adding "GPU Device list" (`"0: NAME (BUS): (HOST)"`) and "Hostname". The matrix holds GB/s (1e9 B/s) of the
buffer's bytes moved once, as ours. Which way a test copies is taken from its name, not from its description
(testcases_ce.cpp, testcases_sm.cpp): the device-to-device read tests copy column -> row though their
description says `GPU(row) -> GPU(column)`, the write tests row -> column under `GPU(row) <- GPU(column)`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.cases.copy.nvbandwidth_text import SMALL_BUFFER_WARNING, root_from_text
from suite.cases.copy.nvbandwidth_text import recognises as recognises_text
from suite.importers import imported, stats_from_time

TOOL = "nvbandwidth"
# nvbandwidth's default --bufferSize (512 MiB, common.h). Its JSON does not record the size it ran with
# (json_output.cpp names a bufferSize key and never sets it): the default is taken unless nvbandwidth's own
# root "warning" says a smaller buffer was chosen; then the size is unknown and the results are not imported
# (labelled 512 MiB, a 2 MiB run's rates would be drawn and judged as large-copy figures). A run with a
# larger -b is labelled 512 MiB: by then the rate no longer grows with the size. nvbandwidth keeps one root
# warning, the last (recordWarning assigns it): where a later one replaced the small-buffer note, a small run
# is labelled 512 MiB all the same; nothing in its JSON tells.
DEFAULT_BUFFER_BYTES = 512 * 2**20
DEFAULT_SAMPLES = 3  # nvbandwidth's default --testSamples: it reports the median of 3
UNKNOWN_GPU = "GPU (model not in nvbandwidth output)"
# The host bidirectional tests run the other direction at once but report only the first copy's rate
# (memcpy.cpp: calculateFirstBandwidth): one direction under load, not our `bi` (both directions summed).
UNDER_LOAD = "uni_loaded"
# The device-to-device bidirectional tests append three matrices to one testcase (addTestcaseResults in
# json_output.cpp appends rows): read1/write1, read2/write2, then their total. Only the total is `bi`.
BIDIR_BLOCKS = 3
_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*(?:\(([0-9A-Fa-f:.]+)\))?\s*(?::\s*\((.*)\))?\s*$")
# test name (without _ce/_sm) -> (source, destination, direction); r = the row's GPU, c = the column's.
ROUTES = {
    "host_to_device_memcpy": ("cpu", "c", "uni"),
    "device_to_host_memcpy": ("c", "cpu", "uni"),
    "host_to_device_bidirectional_memcpy": ("cpu", "c", UNDER_LOAD),
    "device_to_host_bidirectional_memcpy": ("c", "cpu", UNDER_LOAD),
    "device_to_device_memcpy_read": ("c", "r", "uni"),
    "device_to_device_memcpy_write": ("r", "c", "uni"),
    "device_to_device_bidirectional_memcpy_read": ("r", "c", "bi"),
    "device_to_device_bidirectional_memcpy_write": ("r", "c", "bi"),
    "device_local_copy": ("c", "c", "uni"),
}


def _load(text: str) -> object:
    """nvbandwidth prints warnings around its JSON on stdout: read from the first `{` to the last `}`."""
    try:
        return json.loads(text)
    except ValueError:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise
        return json.loads(text[start : end + 1])


def _value(cell: object) -> float | None:
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None  # "N/A": the diagonal of a device-to-device matrix
    return value if value > 0 else None


def _end(which: str, r: int, c: int) -> str:
    return "cpu" if which == "cpu" else f"cuda:{r if which == 'r' else c}"


def _route(name: object) -> tuple[str, str, str] | None:
    return ROUTES.get(re.sub(r"_(ce|sm)$", "", str(name)))


def _routes(name: str, case: dict, gpus: int, problems: list[str]) -> list[tuple[str, str, str, float]]:
    """(src, dst, direction, GB/s) per matrix cell, or [] for tests that are not one route at a time."""
    route = _route(name)
    matrix = case.get("bandwidth_matrix")
    if route is None or not isinstance(matrix, list):
        return []
    rows = [row if isinstance(row, list) else [] for row in matrix]
    src, dst, direction = route
    if direction == "bi":
        if len(rows) != BIDIR_BLOCKS * gpus:
            problems.append(f"{name} ({len(rows)} matrix rows, not {BIDIR_BLOCKS} x {gpus} GPUs)")
            return []
        rows = rows[-gpus:]  # the total block
    cells = [(r, c, value) for r, row in enumerate(rows) for c, cell in enumerate(row)
             if (value := _value(cell)) is not None]
    # A cell of a device the output does not list: never invent one.
    rows_of_gpus = gpus if "r" in (src, dst) else 1
    out = [(_end(src, r, c), _end(dst, r, c), direction, value) for r, c, value in cells
           if c < gpus and r < rows_of_gpus]
    outside = len(cells) - len(out)
    if outside:
        problems.append(f"{name} ({outside} cell(s) outside the {gpus} GPU(s))")
    return out


def recognises(text: str) -> bool:
    """nvbandwidth's JSON names itself near its start, its text in its first line or its `Running` lines."""
    return '"nvbandwidth"' in text[:4096] or recognises_text(text)


def _root(text: str) -> tuple[dict | None, str | None]:
    """(nvbandwidth's root object, problem)."""
    try:
        data = _load(text)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None, "nvbandwidth output is not JSON (truncated?)"
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if isinstance(root, dict) and root.get("error") and not root.get("testcases"):
        return None, f"nvbandwidth stopped with an error: {root['error']}"
    if not isinstance(root, dict) or not isinstance(root.get("testcases"), list):
        return None, "no nvbandwidth testcases (not `nvbandwidth -j` output?)"
    return root, None


def _device_names(root: dict) -> tuple[dict[int, dict], str]:
    """({GPU index: name and PCI address}, host) from the device list, the host from "Hostname" first."""
    host = str(root.get("Hostname") or "")
    names: dict[int, dict] = {}
    for entry in root.get("GPU Device list") or []:
        match = _DEVICE.match(str(entry))
        if match:
            bus = match.group(3)  # `00000000:99:00`: domain, bus, device; ours is `0000:99:00.0`
            names[int(match.group(1))] = {"name": match.group(2),
                                          **({"pci_bus_id": f"{bus.lower()[-10:]}.0"} if bus else {})}
            host = host or (match.group(4) or "")
    return names, host


def _matrix_width(case: dict) -> int:
    """Columns of a test's matrix: one per GPU, in every test whose route it names."""
    matrix = case.get("bandwidth_matrix")
    if _route(case.get("name", "")) is None or not isinstance(matrix, list) or not matrix:
        return 0
    return len(matrix[0]) if isinstance(matrix[0], list) else 0


def _benchmark(name: str, case: dict, route: tuple[str, str, str, float]) -> dict:
    src, dst, direction, gbps = route
    size = int(case.get("bufferSize") or DEFAULT_BUFFER_BYTES)
    moved = size * (2 if direction == "bi" else 1)  # the total of both directions, as our `bi`
    extra = {
        "case": "copy",
        "src": src,
        "dst": dst,
        "path": "h2d" if src == "cpu" else "d2h" if dst == "cpu" else "local" if src == dst else "peer",
        "memory": "pinned" if "cpu" in (src, dst) else "device",
        "direction": direction,
        "engine": "sm" if name.endswith("_sm") else "ce",
        "size": size,
        "bytes": moved,
        "gbps": gbps,
        "tool": TOOL,
        "test": name,
    }
    bench_name = f"{name}[{src}{'<->' if direction == 'bi' else '->'}{dst}]"
    return {
        "name": bench_name,
        "fullname": f"nvbandwidth::{bench_name}",
        "extra_info": extra,
        # nvbandwidth reports the median of its samples as a rate; the time is derived from it.
        "stats": stats_from_time(moved / (gbps * 1e9), rounds=int(case.get("testSamples") or DEFAULT_SAMPLES),
                                 iterations=1),
    }


@dataclass
class _Tests:
    """nvbandwidth's testcases read into benchmarks, with those left out by why."""

    gpus: int
    small_buffer: bool
    benchmarks: list[dict] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unsized: list[str] = field(default_factory=list)

    def read(self, case: dict) -> None:
        name, status = str(case.get("name") or "?"), str(case.get("status") or "")
        if status != "Passed":
            if status not in ("Waived", "Not Found"):
                error = f": {case['error']}" if case.get("error") else ""
                self.failed.append(f"{name} ({status or 'no status'}{error})")
        elif not case.get("bufferSize") and self.small_buffer:
            if _routes(name, case, self.gpus, []):
                self.unsized.append(name)
        else:
            routes = _routes(name, case, self.gpus, self.problems)
            self.benchmarks += [_benchmark(name, case, route) for route in routes]

    def problem(self, path: Path, warnings: list[str]) -> str | None:
        """Warnings for what was left out; the problem when nothing is imported."""
        unsized_text = (f"nvbandwidth ran with a buffer below its default 512 MiB (-b) and its JSON does not "
                        f"record the size, so {len(self.unsized)} test(s) are not imported "
                        f"({', '.join(self.unsized)}); rerun nvbandwidth without -b (or with -b 512 or more) "
                        "to set its figures beside large copies")
        failed = f"nvbandwidth tests that did not pass: {', '.join(self.failed)}"
        if self.unsized and not self.benchmarks:
            return unsized_text
        if not self.benchmarks:  # one line: what failed, else that nothing was a route
            return failed if self.failed else "nvbandwidth output without a passed one-route test"
        if self.unsized:
            warnings.append(f"{path}: {unsized_text}")
        if self.failed:
            warnings.append(f"{path}: {failed}")
        if self.problems:
            warnings.append(f"{path}: nvbandwidth results not imported: {', '.join(self.problems)}")
        return None


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem): each one-route-at-a-time test's matrix cells as copy benchmarks."""
    json_text = text.lstrip().startswith("{") or not recognises_text(text)
    root, problem = _root(text) if json_text else (root_from_text(text)["nvbandwidth"], None)
    if problem:
        return None, problem
    names, host = _device_names(root)
    cases = [c for c in root["testcases"] if isinstance(c, dict)]
    # Without a device list, the GPU count is the width of a matrix (one column per GPU).
    gpus = len(names) or max(map(_matrix_width, cases), default=0)
    tests = _Tests(gpus, SMALL_BUFFER_WARNING in str(root.get("warning") or "").lower())
    for case in cases:
        tests.read(case)
    problem = tests.problem(path, warnings)
    if problem:
        return None, problem
    version = str(root.get("version") or "")
    info = {"node": host, "devices": _devices(root, names, gpus), "software": {"nvbandwidth": version}}
    return imported(TOOL, info, tests.benchmarks, version=version), None


def _devices(root: dict, names: dict[int, dict], gpus: int) -> list[dict]:
    driver = str(root.get("Driver Version") or "")
    return [{"id": f"cuda:{i}", "kind": "cuda", "name": UNKNOWN_GPU, **names.get(i, {}),
             **({"driver_version": driver} if driver else {})} for i in range(gpus)]
