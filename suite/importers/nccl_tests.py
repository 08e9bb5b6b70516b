"""nccl-tests' text output (`all_reduce_perf` and friends) as results of the collectives family.

The format is nccl-tests' own (src/common.cu, src/util.cu): a `# nThread .. iters: N` line, one `#  Rank ..
on HOST device D [BUS] NAME` line per rank, a header naming the columns (size count type redop root, then
time algbw busbw #wrong for out-of-place and again for in-place), one line per size, and `# Avg bus
bandwidth` at the end. Times are microseconds (the mean over `iters` calls), rates GB/s (1e9 B/s): the same
units and algbw/busbw definitions as ours.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from suite.importers import imported, stats_from_time

TOOL = "nccl-tests"
# nccl-tests' binary names -> our collectives op names.
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
DEFAULT_ITERS = 20  # nccl-tests' default -n, used when the `iters:` header line is missing
_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # Open MPI's --tag-output prefix
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$"
)
_ITERS = re.compile(r"\biters:\s*(\d+)")
_OP_NAME = re.compile(r"\b(" + "|".join(sorted(OPS, key=len, reverse=True)) + r")_perf\b")


def _op(text: str, path: Path) -> str | None:
    found = _OP_NAME.search(text)
    if found:
        return found.group(1)
    stem = path.name.lower()
    return next((op for op in sorted(OPS, key=len, reverse=True) if op in stem), None)


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem): rows of every size, out-of-place and in-place, as collectives benchmarks."""
    lines = [_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    ranks, columns, rows = {}, None, []
    iters = DEFAULT_ITERS
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            rank = _RANK.match(stripped)
            if rank:
                ranks[int(rank.group(1))] = (rank.group(2), int(rank.group(3)), rank.group(4))
            elif _ITERS.search(stripped):
                iters = int(_ITERS.search(stripped).group(1))
            elif columns is None and "size" in stripped and "busbw" in stripped:
                columns = stripped.lstrip("#").split()
            continue
        if columns is not None:
            rows.append(stripped.split())
    op = _op(text, path)
    if columns is None or not rows:
        return None, "no nccl-tests result lines (not nccl-tests output, or cut before the first size)"
    if op is None:
        return None, (
            "cannot tell which collective this nccl-tests output measured; name the file after the "
            "binary, e.g. all_reduce_perf.txt"
        )
    first_time = columns.index("time") if "time" in columns else None
    if first_time is None:
        return None, "nccl-tests header without a time column (unknown format)"
    prefix = columns[:first_time]
    hosts = sorted({host for host, _, _ in ranks.values()})
    world = len(ranks) or None
    benchmarks, bad = [], 0
    for tokens in rows:
        head, body = tokens[: len(prefix)], tokens[len(prefix) :]
        fields = dict(zip(prefix, head))
        size = _number(fields.get("size", ""))
        groups = [body[i : i + 4] for i in range(0, len(body), 4)]
        if size is None or len(head) < len(prefix) or not groups or any(len(g) < 3 for g in groups):
            bad += 1
            continue
        # Two groups: out-of-place, in-place; one: in-place only (nccl-tests' trace replay).
        modes = ["outofplace", "inplace"] if len(groups) >= 2 else ["inplace"]
        for mode, group in zip(modes, groups):
            time_us, algbw, busbw = (_number(t) for t in group[:3])
            if not time_us or time_us <= 0 or algbw is None or busbw is None:
                bad += 1
                continue
            dtype = DTYPES.get(fields.get("type", ""), fields.get("type", ""))
            extra = {
                "case": "collectives",
                "op": OPS[op],
                "dtype": dtype,
                "size": int(size),
                "bytes": int(size),
                "in_place": mode == "inplace",
                "backend": "nccl",
                "tool": TOOL,
                "world_size": world,
                "nnodes": len(hosts) or None,
                "ranks_per_node": (world // len(hosts)) if world and hosts else None,
                "algbw": algbw,
                "busbw": busbw,
                "iters": iters,
            }
            if fields.get("redop") not in (None, "none"):
                extra["redop"] = fields["redop"]
            name = f"{op}_perf[{dtype}-{int(size)}B-{mode}]"
            benchmarks.append(
                {
                    "name": name,
                    "fullname": f"nccl-tests::{name}",
                    "extra_info": extra,
                    # One timed loop of `iters` calls averaged: a single round, no spread known.
                    "stats": stats_from_time(time_us * 1e-6, rounds=1, iterations=iters),
                }
            )
    if not benchmarks:
        return None, "nccl-tests output without a readable result line"
    if bad:
        warnings.append(f"{path}: ignored {bad} unreadable nccl-tests result line(s)")
    if not any("Avg bus bandwidth" in line for line in lines):
        warnings.append(
            f"{path}: nccl-tests output ends before its summary (cut short?); kept the sizes it has"
        )
    names = Counter()
    devices = []
    for rank in sorted(ranks):
        host, index, name = ranks[rank]
        device_id = f"cuda:{index}" if len(hosts) == 1 else f"{host}/cuda:{index}"
        if any(d["id"] == device_id for d in devices):
            continue
        names[name] += 1
        devices.append({"id": device_id, "kind": "cuda", "name": name})
    info = {"node": ",".join(hosts), "devices": devices, "software": {"nccl-tests": "text output"}}
    data = imported(TOOL, path, info, benchmarks)
    data["partial"] = not any("Avg bus bandwidth" in line for line in lines)
    return data, None
