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


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem): rows of every size, out-of-place and in-place, as collectives benchmarks."""
    lines = [_PREFIX.sub("", line).rstrip() for line in text.splitlines()]
    ranks, columns, rows = {}, None, []
    iters = DEFAULT_ITERS
    out_of_bounds = 0
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            rank = _RANK.match(stripped)
            bounds = _OUT_OF_BOUNDS.search(stripped)
            if rank:
                ranks[int(rank.group(1))] = (rank.group(2), int(rank.group(3)), rank.group(4))
            elif bounds:
                out_of_bounds += int(bounds.group(1))
            elif "nThread" in stripped and _ITERS.search(stripped):
                iters = int(_ITERS.search(stripped).group(1))
            elif columns is None and "size" in stripped and "busbw" in stripped:
                columns = stripped.lstrip("#").split()
            continue
        tokens = stripped.split()
        # Result lines start with the size; NCCL INFO/WARN lines and other log noise are not result lines.
        if columns is not None and _number(tokens[0]) is not None:
            rows.append(tokens)
    op, other = _op(text, path)
    if columns is None or not rows:
        return None, "no nccl-tests result lines (not nccl-tests output, or cut before the first size)"
    if op is None:
        if other:
            return None, f"{other} has no counterpart among our collectives; not imported"
        return None, (
            "cannot tell which collective this nccl-tests output measured; name the file after the "
            "binary, e.g. all_reduce_perf.txt"
        )
    if not any(c in TIME_COLUMNS for c in columns):
        return None, "nccl-tests header without a time column (unknown format)"
    first_time, width, wrong_at = _groups(columns)
    prefix = columns[:first_time]
    # With -C the time column is the host's time to launch the loop, read before the collectives complete
    # (common.cu: cputimeSec), while algbw and busbw still come from the completed loop: the time is then
    # derived from algbw (S / algbw). algbw is printed to 2 decimals: below 1.00 GB/s it has 2 digits or fewer
    # (0.05 is +-10%), so those sizes are left out; and hypercube's algbw counts (n-1)/n of the size column
    # (HyperCubeGetBw), so its time cannot be had from it.
    launch_time = columns[first_time] == "cputime"
    if launch_time and op == "hypercube":
        return None, ("nccl-tests hypercube_perf run with -C: its time column is launch time and its algbw does "
                      "not count the size column's bytes, so no time can be derived; rerun without -C")
    hosts = sorted({host for host, _, _ in ranks.values()})
    world = len(ranks) or None
    benchmarks, bad, wrong, no_time = [], 0, [], 0
    for tokens in rows:
        head, body = tokens[: len(prefix)], tokens[len(prefix) :]
        fields = dict(zip(prefix, head))
        size = _number(fields.get("size", ""))
        if size is None or len(head) < len(prefix) or len(body) < 3:
            bad += 1
            continue
        # Two groups: out-of-place, in-place; one: in-place only (nccl-tests' trace replay).
        if len(body) >= 2 * width:
            groups = [("outofplace", body[:width]), ("inplace", body[width : 2 * width])]
        else:
            groups = [("inplace", body[:width])]
        for mode, group in groups:
            time_us, algbw, busbw = (_number(t) for t in group[:3])
            if launch_time:
                if not algbw or algbw < MIN_ALGBW_FOR_TIME:
                    no_time += 1
                    continue
                time_us = size / (algbw * 1e9) * 1e6
            if not time_us or time_us <= 0 or algbw is None or busbw is None:
                bad += 1
                continue
            dtype = DTYPES.get(fields.get("type", ""), fields.get("type", ""))
            name = f"{op}_perf[{dtype}-{int(size)}B-{mode}]"
            n_wrong = _number(group[wrong_at]) if wrong_at is not None and len(group) > wrong_at else None
            if n_wrong:  # the data check failed: the rate of a wrong result is no measurement
                wrong.append(f"{name}: {n_wrong:g} wrong element(s)")
                continue
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
            benchmarks.append(
                {
                    "name": name,
                    "fullname": f"nccl-tests::{name}",
                    "extra_info": extra,
                    # One timed loop of `iters` calls averaged: a single round, no spread known.
                    "stats": stats_from_time(time_us * 1e-6, rounds=1, iterations=iters),
                }
            )
    if out_of_bounds and not wrong:
        wrong.append(f"{op}_perf: {out_of_bounds} out-of-bounds value(s)")
    if wrong:
        warnings.append(
            f"{path}: nccl-tests' data check failed ({'; '.join(wrong[:3])}"
            f"{f'; … {len(wrong) - 3} more' if len(wrong) > 3 else ''}); those sizes are not imported"
        )
    if not benchmarks and not wrong:
        return None, "nccl-tests output without a readable result line"
    if bad:
        warnings.append(f"{path}: ignored {bad} unreadable nccl-tests result line(s)")
    if no_time:
        warnings.append(f"{path}: run with -C (its time column is launch time, so the time comes from algbw): "
                        f"{no_time} result(s) with algbw under {MIN_ALGBW_FOR_TIME:.2f} GB/s, printed to too few "
                        "digits to give a time, are not imported")
    finished = any("Avg bus bandwidth" in line for line in lines)
    if not finished:
        warnings.append(
            f"{path}: nccl-tests output ends before its summary (cut short?); kept the sizes it has"
        )
    devices = []
    for rank in sorted(ranks):
        host, index, name = ranks[rank]
        device_id = f"cuda:{index}" if len(hosts) == 1 else f"{host}/cuda:{index}"
        if any(d["id"] == device_id for d in devices):
            continue
        devices.append({"id": device_id, "kind": "cuda", "name": name})
    info = {"node": ",".join(hosts), "devices": devices, "software": {"nccl-tests": "text output"}}
    data = imported(TOOL, info, benchmarks)
    data["suite"]["wrong_results"] = wrong
    data["partial"] = not finished
    return data, None
