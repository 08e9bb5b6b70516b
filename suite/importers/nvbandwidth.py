"""nvbandwidth's JSON output (`nvbandwidth -j`) as results of the copy family.

The format is nvbandwidth's own (json_output.cpp): `{"nvbandwidth": {"Driver Version", "testcases": [{"name",
"status", "bandwidth_description", "bandwidth_matrix": [[str, ...], ...], "sum", ...}]}}`, newer versions
adding "GPU Device list" (`"0: NAME (BUS): (HOST)"`) and "Hostname". The matrix holds GB/s (1e9 B/s) of the
buffer's bytes moved once, as ours; the description says which way rows and columns go (`CPU(row) ->
GPU(column)`, `GPU(row) <- GPU(column)`, `<->` both ways at once).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from suite.importers import imported, stats_from_time

TOOL = "nvbandwidth"
DEFAULT_BUFFER_BYTES = 512 * 2**20  # nvbandwidth's default --bufferSize (512 MiB) when the JSON omits it
DEFAULT_SAMPLES = 3  # nvbandwidth's default --testSamples: it reports the median of 3
UNKNOWN_GPU = "GPU (model not in nvbandwidth output)"
_ROUTE = re.compile(r"(CPU|GPU)\(row\)\s*(<->|->|<-)\s*(CPU|GPU)\(column\)")
_LOCAL = re.compile(r"local GPU\(column\)")
_DEVICE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*(?:\([0-9A-Fa-f:.]+\))?\s*(?::\s*\((.*)\))?\s*$")


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


def _routes(case: dict) -> list[tuple[str, str, str, float]]:
    """(src, dst, direction, GB/s) per matrix cell, or [] for tests that are not one route at a time."""
    description = str(case.get("bandwidth_description") or "")
    matrix = case.get("bandwidth_matrix")
    if "latency" in description or not isinstance(matrix, list):
        return []
    out = []
    local = _LOCAL.search(description)
    route = _ROUTE.search(description)
    for r, row in enumerate(matrix):
        for c, cell in enumerate(row if isinstance(row, list) else []):
            value = _value(cell)
            if value is None:
                continue
            if local:
                out.append((f"cuda:{c}", f"cuda:{c}", "uni", value))
                continue
            if not route:
                return []
            row_end = "cpu" if route.group(1) == "CPU" else f"cuda:{r}"
            col_end = "cpu" if route.group(3) == "CPU" else f"cuda:{c}"
            arrow = route.group(2)
            src, dst = (col_end, row_end) if arrow == "<-" else (row_end, col_end)
            out.append((src, dst, "bi" if arrow == "<->" else "uni", value))
    return out


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem): each one-route-at-a-time test's matrix cells as copy benchmarks."""
    try:
        data = _load(text)
    except ValueError:
        return None, "nvbandwidth output is not JSON (truncated?)"
    root = data.get("nvbandwidth") if isinstance(data, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("testcases"), list):
        return None, "no nvbandwidth testcases (not `nvbandwidth -j` output?)"
    driver = str(root.get("Driver Version") or "")
    host = str(root.get("Hostname") or "")
    names: dict[int, str] = {}
    for entry in root.get("GPU Device list") or []:
        match = _DEVICE.match(str(entry))
        if match:
            names[int(match.group(1))] = match.group(2)
            host = host or (match.group(3) or "")
    benchmarks, skipped, failed = [], [], []
    gpus: set[int] = set()
    for case in root["testcases"]:
        if not isinstance(case, dict):
            continue
        name, status = str(case.get("name") or "?"), str(case.get("status") or "")
        if status != "Passed":
            if status not in ("Waived", "Not Found"):
                failed.append(f"{name} ({status or 'no status'})")
            continue
        # all_to_host, host_to_all, one_to_all, all_to_one: one route measured while others load the link.
        routes = [] if "all" in name.split("_") else _routes(case)
        if not routes:
            skipped.append(name)
            continue
        size = int(case.get("bufferSize") or DEFAULT_BUFFER_BYTES)
        samples = int(case.get("testSamples") or DEFAULT_SAMPLES)
        engine = "sm" if name.endswith("_sm") else "ce"
        for src, dst, direction, gbps in routes:
            gpus.update(int(d.split(":")[1]) for d in (src, dst) if d != "cpu")
            path_kind = (
                "h2d" if src == "cpu" else "d2h" if dst == "cpu" else "local" if src == dst else "peer"
            )
            extra = {
                "case": "copy",
                "src": src,
                "dst": dst,
                "path": path_kind,
                "memory": "pinned" if "cpu" in (src, dst) else "device",
                "direction": direction,
                "engine": engine,
                "size": size,
                "bytes": size,
                "gbps": gbps,
                "tool": TOOL,
                "test": name,
            }
            arrow = "<->" if direction == "bi" else "->"
            bench_name = f"{name}[{src}{arrow}{dst}]"
            benchmarks.append(
                {
                    "name": bench_name,
                    "fullname": f"nvbandwidth::{bench_name}",
                    "extra_info": extra,
                    # nvbandwidth reports the median of its samples as a rate; the time is derived from it.
                    "stats": stats_from_time(size / (gbps * 1e9), rounds=samples, iterations=1),
                }
            )
    if failed:
        warnings.append(f"{path}: nvbandwidth tests that did not pass: {', '.join(failed)}")
    if not benchmarks:
        return None, "nvbandwidth output without a passed one-route test"
    devices = [
        {
            "id": f"cuda:{i}",
            "kind": "cuda",
            "name": names.get(i, UNKNOWN_GPU),
            **({"driver_version": driver} if driver else {}),
        }
        for i in sorted(gpus | set(names))
    ]
    info = {"node": host, "devices": devices, "software": {"nvbandwidth": str(root.get("version") or "")}}
    return imported(TOOL, path, info, benchmarks, version=str(root.get("version") or "")), None
