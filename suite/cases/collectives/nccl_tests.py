"""nccl-tests' output (`all_reduce_perf` and friends: its text, or its `-J` JSON) as collectives results.

The text is nccl-tests' own (src/common.cu, src/util.cu): newer versions open each run with `# nccl-tests
version V nccl-headers=H nccl-library=L` and `# Collective test starting: NAME`, then a `# nThread .. warmup
iters: W iters: N` line, one `#  Rank .. on HOST device D [BUS] NAME` line per rank (older ones without
`Group`), a header naming the columns (size count type redop root, then time algbw busbw #wrong for
out-of-place and again for in-place, each group followed by i_min i_max i_p99 i_cv% under -I, and a timestamp
column with -T), one line per size, then `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth`.
Times are microseconds (the mean over `iters` calls), rates GB/s (1e9 B/s): the same units and algbw/busbw
definitions as ours. One file may hold several runs (a script's log); each is read apart. The JSON
(nccl_tests_json) is read into the same runs, so both formats of one run give the same results.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from suite.importers import READ_AS, imported, stats_from_time

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
READ_AS_CHOICES = tuple(OPS) + tuple(v for k, v in OPS.items() if v != k)  # --as takes either spelling
# busbw / algbw of each op over n ranks (nccl-tests doc/PERFORMANCE.md and each test's GetBw), whether it
# prints a reduction operator (redop not `none`) and a root (not -1): what tells an unnamed run's collective.
# hypercube's factor equals sendrecv's and it is rare: it is read only when named.
SHAPES = {
    "all_reduce": (lambda n: 2 * (n - 1) / n, True, False),
    "reduce_scatter": (lambda n: (n - 1) / n, True, False),
    "reduce": (lambda n: 1.0, True, True),
    "all_gather": (lambda n: (n - 1) / n, False, False),
    "alltoall": (lambda n: (n - 1) / n, False, False),
    "sendrecv": (lambda n: 1.0, False, False),
    "broadcast": (lambda n: 1.0, False, True),
    "gather": (lambda n: (n - 1) / n, False, True),
    "scatter": (lambda n: (n - 1) / n, False, True),
}
# busbw and algbw are printed to 2 decimals: from 1.00 GB/s up their ratio is good to 1%, so 3% tells
# 2(n-1)/n from (n-1)/n and from 1 at every rank count above 2.
RATIO_TOLERANCE = 0.03
# nccl-tests' type names -> torch's dtype names, which our results use, where they differ (bfloat16, int8...
# are spelled alike).
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "f8e4m3": "float8_e4m3fn",
          "f8e5m2": "float8_e5m2"}
# Under -C the time is derived from algbw, printed to 2 decimals: from 1.00 GB/s up it has 3 digits or more.
MIN_ALGBW_FOR_TIME = 1.0
DEFAULT_ITERS = 20  # nccl-tests' default -n, used when the `iters:` header line is missing
TIME_COLUMNS = ("time", "cputime")  # each starts one result group (out-of-place, in-place); -C prints cputime
# Open MPI's --tag-output tag `[1,0]<stdout>:` (anywhere: ranks' output interleaves mid-line), srun -l's `0: `.
_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
_SRUN = re.compile(r"^\s*\d+: ")
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.+?)\s*$"
)
# `iters: 20`, not `warmup iters: 5` nor `agg iters: 1`, which come first on the same line.
_ITERS = re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_STARTING = re.compile(r"Collective test starting:\s*([a-z0-9_]+?)(?:_perf)?\b")
_ANY_PERF = re.compile(r"\b([a-z0-9_]+?)_perf\b")
# In a file name, `allreduce` and `all-reduce` name all_reduce too; alltoallv is not alltoall.
_OP_SPELLINGS = "|".join(k.replace("_", "[_-]?") for k in sorted(OPS, key=len, reverse=True))
_OP_IN_FILE = re.compile(r"(?<![a-z])(" + _OP_SPELLINGS + r")(?![a-z])")
_NCCL_LIBRARY = re.compile(r"nccl-library=(\d+)|NCCL version (\d+\.\d+\.\d+)")
_NTHREAD = re.compile(r"^#\s*nThread\s+\d+")
# nccl-tests' first line or its column header: what no JSON file of ours contains.
_HEADER = re.compile(r"^(?:\[\d+,\d+\]<stdout>:|\s*\d+: )?\s*#\s*(?:nThread\s+\d+|size\s+count\s)", re.MULTILINE)


def _number(token: object) -> float | None:
    try:
        return float(token)
    except (TypeError, ValueError):
        return None


def nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE (major*10000 + minor*100 + patch since 2.9) as `2.21.5`."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def library_version(text: str) -> str:
    """The NCCL version a text names (nccl-tests' `nccl-library=N`, NCCL's `NCCL version 2.21.5+cuda12.4`),
    or ""."""
    found = _NCCL_LIBRARY.search(text)
    return "" if not found else nccl_version(int(found.group(1))) if found.group(1) else found.group(2)


def bus_id(text: str) -> str:
    """`0000:04:00` or old versions' `0x34` (the bus alone) in our `pci_bus_id` spelling, `0000:04:00.0`."""
    if text.lower().startswith("0x"):
        return f"0000:{int(text, 16):02x}:00.0"
    return text.lower() + ".0" if text.count(":") == 2 else text.lower()


@dataclass
class Run:
    """One nccl-tests run, from either format: ranks, result rows (fields and out/in-place groups), checks."""

    hint: str = ""  # text that may name the collective: the lines before the run, its command line
    ranks: dict[int, tuple[str, int, str, str]] = field(default_factory=dict)  # rank -> host, device, bus, name
    columns: list[str] | None = None
    rows: list[tuple[dict, list[tuple[str, dict]]]] = field(default_factory=list)
    bad: int = 0
    iters: int = DEFAULT_ITERS
    out_of_bounds: int = 0
    finished: bool = False
    nccl: str = ""

    def comment(self, line: str) -> None:
        rank = _RANK.match(line)
        bounds = _OUT_OF_BOUNDS.search(line)
        if rank:
            self.ranks[int(rank.group(1))] = (rank.group(2), int(rank.group(3)), rank.group(4), rank.group(5))
        elif bounds:
            self.out_of_bounds += int(bounds.group(1))
        elif "Avg bus bandwidth" in line:
            self.finished = True
        elif "nThread" in line and _ITERS.search(line):
            self.iters = int(_ITERS.search(line).group(1))
        elif self.columns is None and "size" in line and "busbw" in line:
            self.columns = line.lstrip("#").split()

    def line(self, line: str) -> None:
        self.nccl = self.nccl or library_version(line)
        if line.startswith("#"):
            self.comment(line)
            return
        tokens = line.split()
        # Result lines start with the size; NCCL INFO/WARN lines and other log noise are not result lines.
        if self.columns is not None and _number(tokens[0]) is not None:
            self.row(tokens)

    def row(self, tokens: list[str]) -> None:
        starts = [i for i, c in enumerate(self.columns) if c in TIME_COLUMNS]
        if not starts:
            return
        width = starts[1] - starts[0] if len(starts) > 1 else len(self.columns) - starts[0]
        prefix, names = self.columns[: starts[0]], self.columns[starts[0] : starts[0] + width]
        head, body = tokens[: len(prefix)], tokens[len(prefix) :]
        if len(head) < len(prefix) or len(body) < 3 or _number(head[0]) is None:
            self.bad += 1
            return
        # Two groups: out-of-place, in-place; one: in-place only (nccl-tests' trace replay).
        modes = ("outofplace", "inplace") if len(body) >= 2 * width else ("inplace",)
        groups = [(mode, {n: _number(t) for n, t in zip(names, body[i * width : (i + 1) * width])})
                  for i, mode in enumerate(modes)]
        self.rows.append((dict(zip(prefix, head)), groups))

    @property
    def n(self) -> int | None:
        return len(self.ranks) or None


def split_runs(text: str) -> list[Run]:
    """The runs of one text output, each with the text before it (a command line, a starting line)."""
    runs: list[Run] = []
    pending: list[str] = []
    for raw in text.splitlines():
        line = _SRUN.sub("", _TAG.sub("", raw)).strip()
        header = _NTHREAD.match(line) or (line.startswith("#") and "size" in line and "busbw" in line)
        if header and (not runs or runs[-1].columns is not None):  # a run's first line (a paste lacks nThread)
            runs.append(Run(hint="\n".join(pending)))
            # `# nccl-tests version ... nccl-library=N` comes first
            runs[-1].nccl = library_version(runs[-1].hint)
            pending = []
        if runs and not runs[-1].finished:
            runs[-1].line(line)
        elif line and "test concluded" not in line:
            pending.append(line)
    return runs


def _named(hint: str, path: Path) -> tuple[str | None, str | None]:
    """(op the text or file name says, binary name when it is one we do not import)."""
    names = _STARTING.findall(hint) or _ANY_PERF.findall(hint)
    known = [n for n in names if n in OPS]
    if names:
        return (known[-1], None) if known else (None, names[-1] + "_perf")
    found = _OP_IN_FILE.search(path.name.lower())
    if not found:
        return None, None
    return next(k for k in OPS if k.replace("_", "") == re.sub("[_-]", "", found.group(1))), None


def candidates(run: Run) -> list[str]:
    """The collectives an unnamed run's content fits: its redop and root columns, busbw/algbw over n ranks."""
    found = list(SHAPES)
    for column, at, absent in (("redop", 1, "none"), ("root", 2, "-1")):
        values = {f.get(column) for f, _ in run.rows} - {None}
        if values:
            found = [op for op in found if SHAPES[op][at] == (values != {absent})]
    ratio = _bus_ratio(run)
    if run.n and ratio is not None:
        found = [op for op in found if abs(SHAPES[op][0](run.n) - ratio) <= RATIO_TOLERANCE * max(ratio, 0.1)]
    return found


def _bus_ratio(run: Run) -> float | None:
    """The median busbw / algbw of a run's rows, where algbw has digits enough to say it."""
    pairs = [(g.get("algbw"), g.get("busbw")) for _, groups in run.rows for _, g in groups]
    ratios = [b / a for a, b in pairs if a and b is not None and a >= MIN_ALGBW_FOR_TIME]
    return statistics.median(ratios) if ratios else None


def resolve(run: Run, path: Path) -> tuple[str | None, str | None]:
    """(nccl-tests op, refusal): named by the output or its file, else `--as`, else the one its content fits."""
    named, other = _named(run.hint, path)
    if named or other:
        return named, other and f"{other} has no counterpart among our collectives; not imported"
    chosen = READ_AS.get()
    if chosen:
        return next(k for k, v in OPS.items() if chosen in (k, v)), None
    found = candidates(run)
    return (found[0], None) if len(found) == 1 else (None, _unresolved(run, found))


def _unresolved(run: Run, found: list[str]) -> str:
    why = f"{len(found)} fit its redop/root columns and busbw/algbw" if found else "none fits its columns"
    over = f" over {run.n} ranks" if run.n else ""
    flags = " or ".join(f"--as {op}" for op in found) if found else "--as NAME"
    return (f"cannot tell which collective this nccl-tests output measured ({why}{over}: "
            f"{' or '.join(found or SHAPES)}); add {flags} to read it")


def _refusal(run: Run, op: str | None) -> str | None:
    """Why this run cannot be imported at all, or None."""
    if run.columns is None or not run.rows:
        return "no nccl-tests result lines (not nccl-tests output, or cut before the first size)"
    # With -C the time column is the host's time to launch the loop, read before the collectives complete
    # (common.cu: cputimeSec), while algbw and busbw still come from the completed loop: the time is then
    # derived from algbw (S / algbw). hypercube's algbw counts (n-1)/n of the size column (HyperCubeGetBw),
    # so its time cannot be had from it.
    if "cputime" in run.columns and op == "hypercube":
        return ("nccl-tests hypercube_perf run with -C: its time column is launch time and its algbw does "
                "not count the size column's bytes, so no time can be derived; rerun without -C")
    return None


def _noise(stats: dict, group: dict, time_us: float) -> None:
    """Per-iteration timing (-I) as the result's spread: min, max, stdev (from cv%), quartiles where listed."""
    if group.get("i_min") is None:
        return
    stats.update(min=group["i_min"] * 1e-6, max=(group.get("i_max") or group["i_min"]) * 1e-6, iterations=1,
                 rounds=len(group.get("times") or ()) or stats["iterations"])
    if group.get("i_cv%") is not None:
        stats["stddev"] = group["i_cv%"] / 100 * time_us * 1e-6
    times = group.get("times") or []
    if len(times) >= 4:
        q1, _, q3 = statistics.quantiles(times, n=4)
        stats.update(q1=q1 * 1e-6, q3=q3 * 1e-6, iqr=(q3 - q1) * 1e-6)


@dataclass
class _Rows:
    """Reading a run's rows into benchmarks, with the count of each kind of row left out."""

    op: str
    run: Run
    benchmarks: list[dict] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    no_time: int = 0

    def read(self) -> None:
        for fields, groups in self.run.rows:
            for mode, group in groups:
                self.group(fields, _number(fields.get("size")), mode, group)

    def group(self, fields: dict, size: float, mode: str, group: dict) -> None:
        time_us, algbw, busbw = group.get("time"), group.get("algbw"), group.get("busbw")
        if "cputime" in group:
            # algbw is printed to 2 decimals: below 1.00 GB/s it has 2 digits or fewer (0.05 is +-10%).
            if not algbw or algbw < MIN_ALGBW_FOR_TIME:
                self.no_time += 1
                return
            time_us = size / (algbw * 1e9) * 1e6
        if not time_us or time_us <= 0 or algbw is None or busbw is None:
            self.run.bad += 1
            return
        dtype = DTYPES.get(fields.get("type", ""), fields.get("type", ""))
        name = f"{self.op}_perf[{dtype}-{int(size)}B-{mode}]"
        if group.get("#wrong"):  # the data check failed: the rate of a wrong result is no measurement
            self.wrong.append(f"{name}: {group['#wrong']:g} wrong element(s)")
            return
        extra = {"case": "collectives", "op": OPS[self.op], "dtype": dtype, "size": int(size),
                 "bytes": int(size), "in_place": mode == "inplace", "backend": "nccl", "tool": TOOL,
                 **_topology(self.run), "algbw": algbw, "busbw": busbw, "iters": self.run.iters}
        if fields.get("redop") not in (None, "none"):
            extra["redop"] = fields["redop"]
        # One timed loop of `iters` calls averaged: a single round, no spread known unless -I timed each.
        stats = stats_from_time(time_us * 1e-6, rounds=1, iterations=self.run.iters)
        _noise(stats, group, time_us)
        self.benchmarks.append({"name": name, "fullname": f"nccl-tests::{name}", "extra_info": extra,
                                "stats": stats})


def _hosts(ranks: dict) -> list[str]:
    return sorted({rank[0] for rank in ranks.values()})


def _topology(run: Run) -> dict:
    hosts, world = _hosts(run.ranks), run.n
    return {
        "world_size": world,
        "nnodes": len(hosts) or None,
        "ranks_per_node": (world // len(hosts)) if world and hosts else None,
    }


def _warn(path: Path, read: _Rows, warnings: list[str]) -> None:
    wrong = read.wrong
    if wrong:
        more = f"; … {len(wrong) - 3} more" if len(wrong) > 3 else ""
        warnings.append(f"{path}: nccl-tests' data check failed ({'; '.join(wrong[:3])}{more}); those sizes are "
                        "not imported")
    if not read.benchmarks and not wrong:
        return
    if read.run.bad:
        warnings.append(f"{path}: ignored {read.run.bad} unreadable nccl-tests result line(s)")
    if read.no_time:
        warnings.append(f"{path}: run with -C (its time column is launch time, so the time comes from "
                        f"algbw): {read.no_time} result(s) with algbw under {MIN_ALGBW_FOR_TIME:.2f} GB/s, "
                        "printed to too few digits to give a time, are not imported")
    if not read.run.finished:
        warnings.append(f"{path}: nccl-tests output ends before its summary (cut short?); kept the sizes it "
                        "has")


def _devices(ranks: dict) -> list[dict]:
    """One device per (host, index) in rank order; the host is named only across several hosts."""
    hosts, devices = _hosts(ranks), {}
    for rank in sorted(ranks):
        host, index, bus, name = ranks[rank]
        device_id = f"cuda:{index}" if len(hosts) == 1 else f"{host}/cuda:{index}"
        devices.setdefault(device_id, {"id": device_id, "kind": "cuda", "name": name,
                                       **({"pci_bus_id": bus_id(bus)} if bus else {})})
    return list(devices.values())


def _read_runs(path: Path, runs: list[Run], warnings: list[str]) -> tuple[list[_Rows], list[str]]:
    """Each importable run's rows read (its warnings given), and why each other run is refused."""
    reads, refusals = [], []
    for run in runs:
        op, refusal = resolve(run, path)
        refusal = refusal or _refusal(run, op)
        if refusal:
            refusals.append(refusal)
            continue
        read = _Rows(op, run)
        read.read()
        if run.out_of_bounds and not read.wrong:
            read.wrong.append(f"{op}_perf: {run.out_of_bounds} out-of-bounds value(s)")
        _warn(path, read, warnings)
        reads.append(read)
    return reads, refusals


def results(path: Path, runs: list[Run], warnings: list[str], software: dict) -> tuple[dict | None, str | None]:
    """(results data, problem): every run's rows, out-of-place and in-place, as collectives benchmarks."""
    reads, refusals = _read_runs(path, runs, warnings)
    if not any(r.benchmarks or r.wrong for r in reads):
        return None, (refusals[0] if refusals else "nccl-tests output without a readable result line")
    if refusals:
        warnings.append(f"{path}: {len(refusals)} of its {len(runs)} nccl-tests runs not imported: "
                        f"{refusals[0]}")
    ranks = {k: v for r in reads for k, v in r.run.ranks.items()}
    nccl = next((r.run.nccl for r in reads if r.run.nccl), "")
    info = {"node": ",".join(_hosts(ranks)), "devices": _devices(ranks),
            "software": {**software, **({"nccl": nccl} if nccl else {})}}
    data = imported(TOOL, info, [b for r in reads for b in r.benchmarks])
    data["suite"]["wrong_results"] = [w for r in reads for w in r.wrong]
    data["partial"] = not all(r.run.finished for r in reads)
    return data, None


def recognises(text: str) -> bool:
    return _HEADER.search(text) is not None


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem) of nccl-tests' text output."""
    runs = split_runs(text)
    if not runs:
        return None, "no nccl-tests result lines (not nccl-tests output, or cut before the first size)"
    return results(path, runs, warnings, {"nccl-tests": "text output"})
