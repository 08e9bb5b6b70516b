"""nccl-tests' text output (`all_reduce_perf` and friends) as results of the collectives family.

The format is nccl-tests' own (src/common.cu, src/util.cu): a `# nThread .. warmup iters: W iters: N` line,
one `#  Rank .. on HOST device D [BUS] NAME` line per rank, a header naming the columns (size count type
redop root, then time algbw busbw #wrong for out-of-place and again for in-place, each group followed by
i_min i_max i_p99 i_cv% with per-iteration timing, and a timestamp column with -T), one line per size, then
`# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth`. Times are microseconds (the mean over
`iters` calls), rates GB/s (1e9 B/s): the same units and algbw/busbw definitions as ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from suite.importers import imported, stats_from_time

TOOL = "nccl-tests"
# nccl-tests' binary names -> our collectives op names. alltoallv, bisection and the like have no
# counterpart of ours (their busbw is defined differently) and are not imported.
OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}
# nccl-tests' type names -> torch's dtype names, which our results use.
DTYPES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}
# Under -C the time is derived from algbw, printed to 2 decimals: from 1.00 GB/s up it has 3 digits or more.
MIN_ALGBW_FOR_TIME = 1.0
DEFAULT_ITERS = 20  # nccl-tests' default -n, used when the `iters:` header line is missing
TIME_COLUMNS = ("time", "cputime")  # each starts one result group (out-of-place, in-place); -C prints cputime
# Open MPI's --tag-output prefix `[1,0]<stdout>:`, or srun -l's `0: `.
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$"
)
# `iters: 20`, not `warmup iters: 5` nor `agg iters: 1`, which come first on the same line.
_ITERS = re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_ANY_PERF = re.compile(r"\b([a-z0-9_]+?)_perf\b")
_OP_WORD = "|".join(sorted(OPS, key=len, reverse=True))
_OP_NAME = re.compile(r"\b(" + _OP_WORD + r")_perf\b")
_OP_IN_FILE = re.compile(r"(?<![a-z])(" + _OP_WORD + r")(?![a-z])")  # alltoallv is not alltoall


def _op(text: str, path: Path) -> tuple[str | None, str | None]:
    """(nccl-tests op, binary name when it is one we do not import)."""
    found = _OP_NAME.search(text)
    if found:
        return found.group(1), None
    other = _ANY_PERF.search(text)
    if other:
        return None, other.group(0)
    found = _OP_IN_FILE.search(path.name.lower())
    return (found.group(1), None) if found else (None, None)


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def _groups(columns: list[str]) -> tuple[int, int, int | None]:
    """(first time column, group width, #wrong offset in a group) from the header's column names."""
    starts = [i for i, c in enumerate(columns) if c in TIME_COLUMNS]
    width = starts[1] - starts[0] if len(starts) > 1 else len(columns) - starts[0]
    group = columns[starts[0] : starts[0] + width]
    return starts[0], width, group.index("#wrong") if "#wrong" in group else None


# nccl-tests' first line or its column header: what no JSON file of ours contains.
# Lines may carry Open MPI's --tag-output prefix or srun -l's `0: `.
_HEADER = re.compile(r"^(?:\[\d+,\d+\]<stdout>:|\s*\d+: )?#\s*(?:nThread\s+\d+|size\s+count\s)", re.MULTILINE)


def recognises(text: str) -> bool:
    return _HEADER.search(text) is not None


@dataclass
class _Scan:
    """What the lines of one nccl-tests output say: ranks, the column header, result rows, iters, checks."""

    ranks: dict[int, tuple[str, int, str]] = field(default_factory=dict)
    columns: list[str] | None = None
    rows: list[list[str]] = field(default_factory=list)
    iters: int = DEFAULT_ITERS
    out_of_bounds: int = 0

    def comment(self, line: str) -> None:
        rank = _RANK.match(line)
        bounds = _OUT_OF_BOUNDS.search(line)
        if rank:
            self.ranks[int(rank.group(1))] = (rank.group(2), int(rank.group(3)), rank.group(4))
        elif bounds:
            self.out_of_bounds += int(bounds.group(1))
        elif "nThread" in line and _ITERS.search(line):
            self.iters = int(_ITERS.search(line).group(1))
        elif self.columns is None and "size" in line and "busbw" in line:
            self.columns = line.lstrip("#").split()

    def line(self, line: str) -> None:
        if line.startswith("#"):
            self.comment(line)
            return
        tokens = line.split()
        # Result lines start with the size; NCCL INFO/WARN lines and other log noise are not result lines.
        if self.columns is not None and _number(tokens[0]) is not None:
            self.rows.append(tokens)


def _refusal(scan: _Scan, op: str | None, other: str | None) -> str | None:
    """Why this output cannot be imported at all, or None."""
    if scan.columns is None or not scan.rows:
        return "no nccl-tests result lines (not nccl-tests output, or cut before the first size)"
    if op is None and other:
        return f"{other} has no counterpart among our collectives; not imported"
    if op is None:
        return ("cannot tell which collective this nccl-tests output measured; name the file after the "
                "binary, e.g. all_reduce_perf.txt")
    if not any(c in TIME_COLUMNS for c in scan.columns):
        return "nccl-tests header without a time column (unknown format)"
    # With -C the time column is the host's time to launch the loop, read before the collectives complete
    # (common.cu: cputimeSec), while algbw and busbw still come from the completed loop: the time is then
    # derived from algbw (S / algbw). hypercube's algbw counts (n-1)/n of the size column (HyperCubeGetBw),
    # so its time cannot be had from it.
    if _launch_time(scan.columns) and op == "hypercube":
        return ("nccl-tests hypercube_perf run with -C: its time column is launch time and its algbw does "
                "not count the size column's bytes, so no time can be derived; rerun without -C")
    return None


def _launch_time(columns: list[str]) -> bool:
    return columns[_groups(columns)[0]] == "cputime"


@dataclass
class _Rows:
    """Reading result rows into benchmarks, with the count of each kind of row left out."""

    op: str
    scan: _Scan
    benchmarks: list[dict] = field(default_factory=list)
    bad: int = 0
    wrong: list[str] = field(default_factory=list)
    no_time: int = 0

    def read(self) -> None:
        first_time, width, wrong_at = _groups(self.scan.columns)
        prefix = self.scan.columns[:first_time]
        launch_time = _launch_time(self.scan.columns)
        for tokens in self.scan.rows:
            head, body = tokens[: len(prefix)], tokens[len(prefix) :]
            fields = dict(zip(prefix, head))
            size = _number(fields.get("size", ""))
            if size is None or len(head) < len(prefix) or len(body) < 3:
                self.bad += 1
                continue
            # Two groups: out-of-place, in-place; one: in-place only (nccl-tests' trace replay).
            if len(body) >= 2 * width:
                groups = [("outofplace", body[:width]), ("inplace", body[width : 2 * width])]
            else:
                groups = [("inplace", body[:width])]
            for mode, group in groups:
                self.group(fields, size, mode, group, wrong_at, launch_time)

    def group(self, fields: dict, size: float, mode: str, group: list[str], wrong_at: int | None,
              launch_time: bool) -> None:
        time_us, algbw, busbw = (_number(t) for t in group[:3])
        if launch_time:
            # algbw is printed to 2 decimals: below 1.00 GB/s it has 2 digits or fewer (0.05 is +-10%).
            if not algbw or algbw < MIN_ALGBW_FOR_TIME:
                self.no_time += 1
                return
            time_us = size / (algbw * 1e9) * 1e6
        if not time_us or time_us <= 0 or algbw is None or busbw is None:
            self.bad += 1
            return
        dtype = DTYPES.get(fields.get("type", ""), fields.get("type", ""))
        name = f"{self.op}_perf[{dtype}-{int(size)}B-{mode}]"
        n_wrong = _number(group[wrong_at]) if wrong_at is not None and len(group) > wrong_at else None
        if n_wrong:  # the data check failed: the rate of a wrong result is no measurement
            self.wrong.append(f"{name}: {n_wrong:g} wrong element(s)")
            return
        extra = {"case": "collectives", "op": OPS[self.op], "dtype": dtype, "size": int(size),
                 "bytes": int(size), "in_place": mode == "inplace", "backend": "nccl", "tool": TOOL,
                 **_topology(self.scan.ranks), "algbw": algbw, "busbw": busbw, "iters": self.scan.iters}
        if fields.get("redop") not in (None, "none"):
            extra["redop"] = fields["redop"]
        self.benchmarks.append(
            {
                "name": name,
                "fullname": f"nccl-tests::{name}",
                "extra_info": extra,
                # One timed loop of `iters` calls averaged: a single round, no spread known.
                "stats": stats_from_time(time_us * 1e-6, rounds=1, iterations=self.scan.iters),
            }
        )


def _hosts(ranks: dict) -> list[str]:
    return sorted({host for host, _, _ in ranks.values()})


def _topology(ranks: dict) -> dict:
    hosts, world = _hosts(ranks), len(ranks) or None
    return {
        "world_size": world,
        "nnodes": len(hosts) or None,
        "ranks_per_node": (world // len(hosts)) if world and hosts else None,
    }


def _warn(path: Path, read: _Rows, finished: bool, warnings: list[str]) -> None:
    wrong = read.wrong
    if wrong:
        warnings.append(
            f"{path}: nccl-tests' data check failed ({'; '.join(wrong[:3])}"
            f"{f'; … {len(wrong) - 3} more' if len(wrong) > 3 else ''}); those sizes are not imported"
        )
    if not read.benchmarks and not wrong:
        return
    if read.bad:
        warnings.append(f"{path}: ignored {read.bad} unreadable nccl-tests result line(s)")
    if read.no_time:
        warnings.append(f"{path}: run with -C (its time column is launch time, so the time comes from "
                        f"algbw): {read.no_time} result(s) with algbw under {MIN_ALGBW_FOR_TIME:.2f} GB/s, "
                        "printed to too few digits to give a time, are not imported")
    if not finished:
        warnings.append(
            f"{path}: nccl-tests output ends before its summary (cut short?); kept the sizes it has"
        )


def _devices(ranks: dict) -> list[dict]:
    """One device per (host, index) in rank order; the host is named only across several hosts."""
    hosts, devices = _hosts(ranks), {}
    for rank in sorted(ranks):
        host, index, name = ranks[rank]
        device_id = f"cuda:{index}" if len(hosts) == 1 else f"{host}/cuda:{index}"
        devices.setdefault(device_id, {"id": device_id, "kind": "cuda", "name": name})
    return list(devices.values())


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem): rows of every size, out-of-place and in-place, as collectives benchmarks."""
    lines = [_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    scan = _Scan()
    for line in lines:
        if line.strip():
            scan.line(line.strip())
    op, other = _op(text, path)
    refusal = _refusal(scan, op, other)
    if refusal:
        return None, refusal
    read = _Rows(op, scan)
    read.read()
    if scan.out_of_bounds and not read.wrong:
        read.wrong.append(f"{op}_perf: {scan.out_of_bounds} out-of-bounds value(s)")
    finished = any("Avg bus bandwidth" in line for line in lines)
    _warn(path, read, finished, warnings)
    if not read.benchmarks and not read.wrong:
        return None, "nccl-tests output without a readable result line"
    info = {"node": ",".join(_hosts(scan.ranks)), "devices": _devices(scan.ranks),
            "software": {"nccl-tests": "text output"}}
    data = imported(TOOL, info, read.benchmarks)
    data["suite"]["wrong_results"] = read.wrong
    data["partial"] = not finished
    return data, None
