"""nvbandwidth's plain-text output (its default, versions 0.4 to 0.9) read into the root object of its `-j` JSON.

The text is output.cpp's and inline_common.h's (NVIDIA/nvbandwidth): `nvbandwidth Version: V`, `Driver
Version: D`, from v0.8 the host name, then `Device N: NAME (BUS)`; per test `Running NAME.`, then per matrix a
description line (`memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)`; bidirectional device tests print their
Read1/Read2/Total or Write1/Write2/Total matrices one after another), a column-label line, one line per row
(`N/A` where no value), a blank line and `SUM NAME VALUE`. A waived test prints `Waived:`, a failed one its
error where the matrix would be. Read into json_output.cpp's layout (matrices appended into one, as its
addTestcaseResults does), the `-j` importer maps both formats alike.
"""

from __future__ import annotations

import re

_HEADERS = {  # line prefix -> key of the JSON root
    "nvbandwidth Version:": "version",
    "Driver Version:": "Driver Version",
    "CUDA Runtime Version:": "CUDA Runtime Version",
}
_DEVICE = re.compile(r"^Device (\d+): (.+)$")
_RUNNING = re.compile(r"^Running (\w+)\.$")
_SUM = re.compile(r"^SUM (\w+) ([\d.eE+-]+)$")
_PART = re.compile(r"_(?:read[12]|write[12]|total)$")  # a bidirectional test's matrices (testcases_ce.cpp)
# A matrix's description: memcpy and latency tests alike name their rows and columns.
_DESCRIPTION = re.compile(r"\((?:row|column)\)")


def recognises(text: str) -> bool:
    head = text[:8192]
    return "nvbandwidth Version:" in head or bool(re.search(r"^Running \w+_(?:ce|sm|copy)\.$", head, re.MULTILINE))


def root_from_text(text: str) -> dict:
    """The `{"nvbandwidth": ...}` root object that `nvbandwidth -j` would have written for this run."""
    root: dict = {"testcases": []}
    case: dict | None = None
    width = None  # columns of the matrix being read; None outside a matrix
    previous, closed = "", False  # closed: the last SUM ended its test (a bidirectional test prints three)
    for line in (raw.strip() for raw in text.splitlines()):
        tokens = line.split()
        running, device, total = _RUNNING.match(line), _DEVICE.match(line), _SUM.match(line)
        header = next((k for k in _HEADERS if line.startswith(k)), None)
        if header:
            root[_HEADERS[header]] = line[len(header):].strip()
        elif device:
            if not root.get("GPU Device list") and previous and " " not in previous and ":" not in previous:
                root["Hostname"] = previous  # v0.8+ prints the host name above the device list
            root.setdefault("GPU Device list", []).append(f"{device.group(1)}: {device.group(2)}")
        elif running:
            case, closed = {"name": running.group(1), "status": "Error"}, False  # until a matrix says otherwise
            root["testcases"].append(case)
        elif _DESCRIPTION.search(line):
            if case is None or closed:  # a paste that left out its `Running` line: SUM names the test
                case, closed = {"name": ""}, False
                root["testcases"].append(case)
            case.update(bandwidth_description=line, status="Passed")
            width = -1
        elif width == -1 and tokens and all(t.isdigit() for t in tokens):
            width = len(tokens)
        elif width and width > 0 and len(tokens) == width + 1:
            case.setdefault("bandwidth_matrix", []).append(tokens[1:])
        elif case is not None and total:
            case["sum"], width = float(total.group(2)), None
            case["name"] = case["name"] or _PART.sub("", total.group(1))
            closed = not _PART.search(total.group(1)) or total.group(1).endswith("_total")
        elif case is not None and line.startswith("Waived") and "bandwidth_matrix" not in case:
            case["status"] = "Waived"
        elif case is not None and line and case["status"] == "Error" and "error" not in case:
            case["error"] = line
        elif "smaller than the default buffer size" in line:
            root["warning"] = line
        if not line:
            width = None if width != -1 else width
        previous = line or previous
    return {"nvbandwidth": root}
