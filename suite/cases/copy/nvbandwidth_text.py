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
SMALL_BUFFER_WARNING = "smaller than the default buffer size"  # its root warning: a smaller buffer was chosen


def recognises(text: str) -> bool:
    head = text[:8192]
    return "nvbandwidth Version:" in head or bool(re.search(r"^Running \w+_(?:ce|sm|copy)\.$", head, re.MULTILINE))


class _Reader:
    """One line at a time, in the order the text prints them; each handler says whether the line was its."""

    def __init__(self) -> None:
        self.root: dict = {"testcases": []}
        self.case: dict | None = None
        self.width: int | None = None  # columns of the matrix being read; -1 before its label line
        self.closed = False  # the last SUM ended its test (a bidirectional test prints three)
        self.previous = ""

    def line(self, line: str) -> None:
        tokens = line.split()
        handlers = (self._header, self._device, self._running, self._description, self._matrix, self._case)
        if not any(handler(line, tokens) for handler in handlers) and SMALL_BUFFER_WARNING in line:
            self.root["warning"] = line
        if not line and self.width != -1:
            self.width = None
        self.previous = line or self.previous

    def _open(self, name: str) -> None:
        self.case, self.closed = {"name": name, "status": "Error"}, False  # until a matrix says otherwise
        self.root["testcases"].append(self.case)

    def _header(self, line: str, _tokens: list[str]) -> bool:
        key = next((k for k in _HEADERS if line.startswith(k)), None)
        if key:
            self.root[_HEADERS[key]] = line[len(key):].strip()
        return key is not None

    def _device(self, line: str, _tokens: list[str]) -> bool:
        device = _DEVICE.match(line)
        if device:
            devices = self.root.setdefault("GPU Device list", [])
            if not devices and self.previous and not set(" :") & set(self.previous):
                self.root["Hostname"] = self.previous  # v0.8+ prints the host name above the device list
            devices.append(f"{device.group(1)}: {device.group(2)}")
        return device is not None

    def _running(self, line: str, _tokens: list[str]) -> bool:
        running = _RUNNING.match(line)
        if running:
            self._open(running.group(1))
        return running is not None

    def _description(self, line: str, _tokens: list[str]) -> bool:
        if not _DESCRIPTION.search(line):
            return False
        if self.case is None or self.closed:  # a paste that left out its `Running` line: SUM names the test
            self._open("")
        self.case.update(bandwidth_description=line, status="Passed")
        self.width = -1
        return True

    def _matrix(self, _line: str, tokens: list[str]) -> bool:
        if self.width == -1 and tokens and all(t.isdigit() for t in tokens):
            self.width = len(tokens)
        elif self.width and self.width > 0 and len(tokens) == self.width + 1:
            self.case.setdefault("bandwidth_matrix", []).append(tokens[1:])
        else:
            return False
        return True

    def _case(self, line: str, _tokens: list[str]) -> bool:
        """The SUM that ends a matrix, a waiver, or the error a failed test printed where its matrix would be."""
        case, total = self.case, _SUM.match(line)
        if case is None:
            return False
        if total:
            case["sum"], self.width = float(total.group(2)), None
            case["name"] = case["name"] or _PART.sub("", total.group(1))
            self.closed = not _PART.search(total.group(1)) or total.group(1).endswith("_total")
        elif line.startswith("Waived") and "bandwidth_matrix" not in case:
            case["status"] = "Waived"
        elif line and case["status"] == "Error" and "error" not in case:
            case["error"] = line
        else:
            return False
        return True


def root_from_text(text: str) -> dict:
    """The `{"nvbandwidth": ...}` root object that `nvbandwidth -j` would have written for this run."""
    reader = _Reader()
    for raw in text.splitlines():
        reader.line(raw.strip())
    return {"nvbandwidth": reader.root}
