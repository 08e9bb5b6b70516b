"""Load results files (pytest-benchmark JSON plus the suite's additions) into one tidy pandas table."""

from __future__ import annotations

import importlib.util
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from suite import SCHEMA_VERSION, __version__
from suite.cases import FAMILIES, family_read
from suite.errors import UserError
from suite.units import GB, TFLOP

PARTIAL_SUFFIX = ".partial.jsonl"
# Other tools' text output (nccl-tests) found in a folder; a file of another kind is a one-line warning.
TEXT_SUFFIXES = (".txt", ".log", ".out")
FOREIGN_CASE = "other"  # family given to rows of a pytest-benchmark file that is not ours
OUR_TOOL = "gpubench-suite"
# What a results file with no benchmark is: a run whose every benchmark was skipped, or that stopped first.
NOTHING_MEASURED = "holds no benchmark results (every benchmark skipped, or the run stopped before the first)"

# Higher-is-better rates, in the order a row's headline metric is picked; the first one present wins.
RATE_UNITS: dict[str, str] = {
    "tflops": "TFLOP/s",
    "gbps": "GB/s",
    "busbw": "GB/s",
    "samples_per_s": "samples/s",
}


def family_rates() -> dict[str, str]:
    """family -> the rate that says how fast it is (its read module's RATE), where it has several (a model
    reports TFLOP/s and samples/s; what users compare is samples/s). The one definition used by the table's
    `metric`, report, compare and health."""
    rates = {name: family_read(name, "RATE") for name in FAMILIES}
    return {name: rate for name, rate in rates.items() if rate in RATE_UNITS}


# Keys that name the device(s) a benchmark ran on: two benchmarks equal but for these measured the same thing
# on different devices (the peers a straggler is judged against).
DEVICE_KEYS = ("device", "src", "dst", "gpus")

# extra_info keys the table keeps as float columns.
NUMERIC_KEYS = (
    "flops",
    "bytes",
    "traffic_bytes",
    "tflops",
    "gbps",
    "traffic_gbps",
    "algbw",
    "busbw",
    "samples_per_s",
    "pct_of_ceiling",
    "pct_of_datasheet",
)
# extra_info keys that are measurements or follow from the parameters; everything else is a parameter.
# Derived rates change from run to run, so they must never be part of a benchmark's identity. `bytes` is
# the one numeric key that is a parameter (the size of a copy or collective).
MEASURED_KEYS = frozenset(
    {"case", *(k for k in NUMERIC_KEYS if k != "bytes")}
    | {
        # Figures of the run or the machine, not parameters of the benchmark: matching on them would make
        # two runs of the same case never line up.
        "samples",
        "ceiling_tflops",
        "datasheet_tflops",
        "datasheet_gpu",
        "per_device_tflops",
        "slowest_device",
        "slowest_tflops",
        "peer_access",
        "link",
        "clocks_held",
        "clocks_held_power",
        "clocks_held_thermal",
        "clocks_held_board_limit",
        "clocks_held_reliability",
        "clocks_held_hw_thermal",
        "clocks_held_hw_power_brake",
        "clocks_held_rank",
        "clocks_window_s",
        "copy_engines",
        "host_numa_node",
        "host_share",
        "bound",
        "timeout_s",
        # Where an imported result came from and how often it ran: provenance, not a parameter.
        "iters",
        "tool_version",
        # How the benchmark stopped (suite.timing.stopping_info): differs on every run, kept as STOP_KEYS columns.
        "rounds",
        "margin",
        "confidence",
        "precision_target",
        "stopped_on",
        # The max_time a benchmark ran under (the config's, or less under --suite-budget): how, not what.
        "max_time",
    }
)
# extra_info of how precision stopping ended, carried as columns (the report shows them) but never matched on.
STOP_KEYS = ("stopped_on", "margin", "precision_target", "confidence")
# extra_info of the machine's state, carried as columns but never matched on: what joins a GPU pair (`NV18`,
# `SYS`; devices.nvml_links), which health groups peer pairs by and the copy matrix shows; and how long a
# power, thermal, board or reliability limit held the GPUs' clocks down while a benchmark was warmed up and
# timed (devices.ClockWatch), which health names beside a slow result; and the NUMA node a host copy's host
# side was bound to (devices.host_near); and whether the host or the device set an accelerator figure's time,
# with the share of a round the host spent issuing it (suite.timing.bound_info), so a host-bound figure is
# never judged as the device's.
STATE_KEYS = ("link", "host_numa_node", "host_share", "bound", "clocks_held", "clocks_held_power", "clocks_held_thermal", "clocks_held_board_limit",
              "clocks_held_reliability", "clocks_held_hw_thermal", "clocks_held_hw_power_brake",
              "clocks_held_rank")
STAT_KEYS = ("median", "iqr", "q1", "q3", "min", "max", "mean", "stddev", "rounds", "iterations")
# A result is invalid (a finding, never a pass) when a number of its stats or extra_info is non-finite, one it
# is measured by (CHECKED_KEYS) negative, or its time or a rate zero: the `invalid` column holds why ("NaN
# median"), "" for a valid one. Absent keys are not checked: a habit has no rate, another tool's timing no
# spread. A zero rate of another tool is its print precision (nccl-tests writes 0.00 GB/s for 8 bytes), not
# a broken figure.
POSITIVE_KEYS = ("median", *RATE_UNITS, "traffic_gbps", "algbw")
CHECKED_KEYS = (*POSITIVE_KEYS, *(k for k in (*STAT_KEYS, *NUMERIC_KEYS) if k not in POSITIVE_KEYS))
DERIVED_COLUMNS = ("metric", "metric_name", "metric_unit")  # set from the rate columns once per table

COLUMNS = (
    "label",
    "file",
    "host",
    "partial",
    "schema_version",
    "case",
    "name",
    "fullname",
    "device",
    "src",
    "dst",
    "params",
    "params_json",
    "match_key",
    *STAT_KEYS,
    *NUMERIC_KEYS,
    *STOP_KEYS,
    *STATE_KEYS,
    "invalid",
    "metric",
    "metric_name",
    "metric_unit",
)


def _migrate_0_to_1(data: dict) -> dict:
    """Schema 0 stored only `flops`/`bytes` per call; schema 1 adds the derived `tflops`/`gbps` (from the median)."""
    for bench in data.get("benchmarks") or []:
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


@dataclass
class Machine:
    """One loaded results file: who ran it, on what, with which software."""

    label: str
    file: str
    host: str
    partial: bool
    foreign: bool
    schema_version: int | None
    devices: list[dict] = field(default_factory=list)
    software: dict = field(default_factory=dict)
    cpu_name: str = ""
    suite_version: str = ""
    datetime: str = ""
    commit: dict = field(default_factory=dict)
    config_path: str = ""
    n_benchmarks: int = 0
    wrong_results: list[str] = field(default_factory=list)  # another tool's failed data checks
    config: dict = field(default_factory=dict)  # the resolved config the run was measured with, if ours
    tool: str = OUR_TOOL  # which program measured: gpubench-suite, nccl-tests, nvbandwidth, pytest-benchmark
    # The suite.distributed block of a torchrun job, as written ({} for a single-process run).
    distributed: dict = field(default_factory=dict)

    @property
    def launch(self) -> str:
        """How the run was launched: "" one process; "torchrun 16 ranks on 2 nodes" for the collectives, which
        run in a torchrun job of their own beside the node's single-process run. Runs launched differently
        measure different things, so each has its own latest run."""
        return _launch(self.distributed) if self.distributed else ""

    @property
    def accelerators(self) -> Counter:
        """GPU (or other accelerator) model -> count, from machine_info.devices."""
        names = (str(d.get("name") or d.get("id") or "?") for d in self.devices if d.get("kind") != "cpu")
        return Counter(names)

    @property
    def gpu_model(self) -> str:
        """The accelerator model machines are grouped by ("NVIDIA H100 80GB HBM3"), or the CPU's name."""
        counts = self.accelerators
        return counts.most_common(1)[0][0] if counts else (f"CPU ({self.cpu_name})" if self.cpu_name else "")

    @property
    def gpus(self) -> str:
        """Its accelerators counted (`8×NVIDIA H100`), or the CPU's name where it has none."""
        return " + ".join(f"{n}×{name}" for name, n in sorted(self.accelerators.items())) or self.gpu_model

    @property
    def node(self) -> str:
        """Host and accelerators (`node-7 · 8×NVIDIA H100`): the node one health verdict is about."""
        gpus = self.gpus
        return " · ".join(part for part in (self.host or (self.label if not gpus else ""), gpus) if part)

    @property
    def identity(self) -> str:
        """The same machine across runs: host, accelerator models and count, driver; never volatile figures.

        The CPU's current clock, temperatures or the idle PCIe link state change from run to run of one
        machine; a driver upgrade starts a new history, since it changes the numbers on purpose.
        """
        drivers = sorted({str(d["driver_version"]) for d in self.devices if d.get("driver_version")})
        return self.node + (f" · driver {','.join(drivers)}" if drivers else "")


def gpu_uuids(machine: Machine) -> frozenset[str]:
    """The machine's GPUs by UUID (NVML's, recorded per device; a MIG instance by its parent GPU's, as MIG
    instances are made anew): what makes two nodes two."""
    return frozenset(str(d.get("mig_parent_uuid") or d["uuid"]) for d in machine.devices
                     if d.get("kind") != "cpu" and d.get("uuid"))


def _tell_shared_hostnames_apart(machines: dict[str, Machine], parts: list, warnings: list[str]) -> None:
    """Two nodes that report one hostname (a cloud image's `ubuntu`, a container's) with different GPUs are two
    machines: without this, health and compare took the newer run for the other's and judged only one.

    Runs of one host are one machine while their GPUs overlap: a GPU replaced under warranty, or a run on
    some of the node's GPUs (CUDA_VISIBLE_DEVICES), keeps the others. Only runs whose GPUs share none are
    told apart, each named with its hostname and the first UUID of its GPUs (`ubuntu [3f2a9c1e]`). Runs
    without UUIDs (CPU-only, older files) keep the plain name."""
    by_host: dict[str, list[tuple[str, frozenset]]] = {}
    for label, m in machines.items():
        if uuids := gpu_uuids(m):
            by_host.setdefault(m.host, []).append((label, uuids))
    rows = {label: columns for (_, columns), label in zip(parts, machines)}
    for host, runs in by_host.items():
        groups: list[tuple[set[str], list[str]]] = []  # (GPUs, labels): joined while their GPUs overlap
        for label, uuids in runs:
            joined = [g for g in groups if g[0] & uuids]
            merged = (set(uuids).union(*(g[0] for g in joined)), [label, *(x for g in joined for x in g[1])])
            groups = [g for g in groups if not any(g is j for j in joined)] + [merged]
        if len(groups) < 2:
            continue
        names = []
        for uuids, labels in groups:
            tag = min(uuids).removeprefix("GPU-").removeprefix("MIG-")[:8]
            names.append(f"{host} [{tag}]")
            for label in labels:
                machines[label].host = names[-1]
                rows[label]["host"] = [names[-1]] * len(rows[label]["host"])
        warnings.append(
            f"hostname {host!r} is reported by {len(groups)} machines with different GPUs (by UUID): told "
            f"apart as {', '.join(sorted(names))}; give the nodes distinct hostnames"
        )


@dataclass
class LoadedResults:
    """The tidy table (one row per machine and benchmark), the machines by label, and the load warnings."""

    table: pd.DataFrame
    machines: dict[str, Machine]
    warnings: list[str]


def parse_label_args(values: Iterable[str] | None) -> dict[str, str]:
    """`["results/a.json=box A"]` -> `{"results/a.json": "box A"}`; a value without `=` is a UserError."""
    labels: dict[str, str] = {}
    for value in values or []:
        path, sep, name = value.partition("=")
        if not sep or not path or not name.strip():
            raise UserError(
                f"--label {value!r} is not FILE=NAME; write e.g. --label results/box3.json='box 3'"
            )
        labels[path] = name.strip()
    return labels


def expand_paths(paths: Iterable[str | Path], warnings: list[str]) -> list[Path]:
    """Files as given; folders become every *.json and *.partial.jsonl inside, recursively, sorted."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            patterns = ("*.json", "*" + PARTIAL_SUFFIX, *("*" + suffix for suffix in TEXT_SUFFIXES))
            found = sorted({p for pattern in patterns for p in path.rglob(pattern)})
            found = [p for p in found if p.is_file()]
            if not found:
                warnings.append(
                    f"{path}: folder holds no results files (*.json, *{PARTIAL_SUFFIX}) — skipped"
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            warnings.append(f"{path}: no such file or folder — skipped")
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


def _supersedes(json_path: Path, partial: Path) -> bool:
    try:
        done, part = json_path.stat(), partial.stat()
    except OSError:
        return True
    return done.st_size > 0 and done.st_mtime >= part.st_mtime


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read ({exc.__class__.__name__})"
    if not text.strip():
        return None, "empty file"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        return None, "not JSON (truncated?)"
    return data, None


def _read_partial(path: Path, warnings: list[str]) -> tuple[dict | None, str | None]:
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read ({exc.__class__.__name__})"
    if not lines:
        return None, "empty file"
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        return None, "first line is not a JSON header (truncated?)"
    if not isinstance(header, dict):
        return None, "first line is not a JSON object"
    benchmarks, bad = [], 0
    for i, line in enumerate(lines[1:], start=2):
        try:
            entry = json.loads(line)
            # The writer (suite.partial) also logs {"started": ...} / {"finished": ...} progress lines.
            if isinstance(entry, dict) and "stats" in entry:
                benchmarks.append(entry)
        except (ValueError, RecursionError):
            # The writer may have been killed mid-line: only the last line can legitimately be cut.
            bad += 1 if i < len(lines) else 0
            if i == len(lines):
                warnings.append(f"{path}: run was cut short; ignored its truncated last line")
    if bad:
        warnings.append(f"{path}: ignored {bad} unparsable benchmark line(s)")
    return {**header, "benchmarks": benchmarks, "partial": True}, None


def _schema_of(data: dict) -> tuple[int | None, str | None]:
    """(schema version, problem); version None means a foreign pytest-benchmark file (no `suite` block)."""
    block = data.get("suite")
    if not isinstance(block, dict):
        return None, None
    version = block.get("schema_version", block.get("schema", 0))
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return None, f"suite.schema_version {version!r} is not a non-negative integer"
    return version, None


def _machine_label(info: dict, foreign: bool, stem: str) -> tuple[str, str]:
    """(label, cpu name): `8xNVIDIA H100 80GB HBM3 @ host`, `CPU (name) @ host`, or the node / file stem."""
    host = str(info.get("node") or "")
    cpu = info.get("cpu") if isinstance(info.get("cpu"), dict) else {}
    devices = [d for d in info.get("devices") or [] if isinstance(d, dict)]
    cpu_name = next((str(d.get("name")) for d in devices if d.get("kind") == "cpu" and d.get("name")), "")
    cpu_name = cpu_name or str(cpu.get("brand_raw") or info.get("processor") or "")
    if foreign or not devices:
        return host or stem, cpu_name
    counts = Counter(str(d.get("name") or d.get("id") or "?") for d in devices if d.get("kind") != "cpu")
    where = f" @ {host}" if host else ""
    if not counts:
        return f"CPU ({cpu_name or 'unknown'}){where}", cpu_name
    names = " + ".join(f"{n}x{name}" if n > 1 else name for name, n in counts.items())
    return names + where, cpu_name


def _scalar(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def map_devices(params: Mapping[str, object], device_map: Mapping[str, str] | None) -> dict[str, object]:
    """Parameters with device ids renamed (`cuda:0` -> `cuda:1`), so runs on different devices line up."""
    if not device_map:
        return dict(params)
    return {k: device_map.get(v, v) if isinstance(v, str) else v for k, v in params.items()}


def match_key(
    case: str, params_json: str, fullname: str, foreign: bool, device_map: Mapping[str, str] | None = None
) -> str:
    """What identifies a benchmark across machines: its family and parameters, or the fullname if foreign."""
    if foreign:
        return "fullname:" + fullname
    params = map_devices(json.loads(params_json), device_map)
    return case + "|" + json.dumps(params, sort_keys=True, default=str)


def rate_name(case: str, values: Mapping[str, float]) -> str | None:
    """Which rate column says how fast a benchmark of `case` is: its family's, else the first one present."""
    preferred = family_read(case, "RATE")
    if preferred and not _missing(values.get(preferred)):
        return preferred
    return next((k for k in RATE_UNITS if not _missing(values.get(k))), None)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def benchmark_keys(table: pd.DataFrame, device_map: Mapping[str, str] | None = None) -> pd.Series:
    """Which benchmarks are the same, one key per row: the table's match_key, with device ids mapped if asked.

    The one definition compare, the report's relative speed, history and health use.
    """
    if not device_map:
        return table["match_key"]
    keys = [
        match_key(c, p, f, m.startswith("fullname:"), device_map)
        for c, p, f, m in zip(table["case"], table["params_json"], table["fullname"], table["match_key"])
    ]
    return pd.Series(keys, index=table.index, dtype=object)


def route_kind(src: object, dst: object) -> str:
    """h2d, d2h, local (one device), peer, or host (cpu to cpu): what limits bytes moved from src to dst."""
    if not isinstance(src, str) or not isinstance(dst, str):
        return ""
    if src == "cpu" and dst == "cpu":
        return "host"
    if src == "cpu":
        return "h2d"
    if dst == "cpu":
        return "d2h"
    return "local" if src == dst else "peer"


def like_ours(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` less the variants of an imported figure that the suite does not measure (each family's
    `like_ours`), so that an imported figure is judged and drawn like the suite's own."""
    for family in FAMILIES:
        keep = family_read(family, "like_ours")
        mine = rows["case"] == family
        if keep is not None and mine.any():
            rows = rows[~mine | rows.index.isin(keep(rows[mine]).index)]
    return rows


def route_kinds(src: pd.Series, dst: pd.Series) -> pd.Series:
    """route_kind of every row at once (a fleet has hundreds of thousands)."""
    s, d = src.astype(object), dst.astype(object)
    valid = (s.map(type) == str) & (d.map(type) == str)
    s_cpu, d_cpu = (s == "cpu") & valid, (d == "cpu") & valid
    kinds = np.select(
        [~valid, s_cpu & d_cpu, s_cpu, d_cpu, s == d], ["", "host", "h2d", "d2h", "local"], "peer"
    )
    return pd.Series(kinds, index=src.index, dtype=object)


def peer_keys(table: pd.DataFrame, kinds: pd.Series | None = None) -> tuple[pd.Series, pd.Series]:
    """(peer key, subject) per row: benchmarks equal but for the device share a peer key; subject: the device.

    A copy's subject is its GPU end (`cuda:0` for cpu->cuda:0) or its route between GPUs. Rows of a foreign
    file, or with no device, get an empty subject: they have no peers within the run.
    """
    src, dst, dev = table["src"].astype(object), table["dst"].astype(object), table["device"].astype(object)
    kinds = route_kinds(src, dst) if kinds is None else kinds
    subject = dev.where(dev.notna(), None)
    subject = subject.where(kinds != "h2d", dst).where(kinds != "d2h", src).where(kinds != "local", src)
    subject = subject.where(kinds != "peer", src.astype(str) + "->" + dst.astype(str))
    subject = subject.where(table["case"] != FOREIGN_CASE, None).fillna("").astype(str)
    # Parameters without the device ids; `params_json` is sorted JSON, so one parse per distinct string.
    stripped = {
        p: json.dumps({k: v for k, v in json.loads(p).items() if k not in DEVICE_KEYS}, sort_keys=True)
        for p in table["params_json"].unique()
    }
    key = table["case"] + "|" + kinds + "|" + table["params_json"].map(stripped)
    return key, subject


# Parameter sets -> (params text, params JSON): a fleet repeats a few hundred sets in every file, and
# serialising each row's again was a third of the load time of 1,000 files.
_PARAM_TEXT: dict[tuple, tuple[str, str]] = {}
_NUMBER_TYPES = (int, float)


def _params_text(params: dict) -> tuple[str, str]:
    key = tuple(params.items())
    try:
        return _PARAM_TEXT[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value slipped through: serialise without the cache
        key = None
    text = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    texts = (text, json.dumps(params, sort_keys=True, default=str))
    if key is not None and len(_PARAM_TEXT) < 100_000:
        _PARAM_TEXT[key] = texts
    return texts


_MISSING = object()  # a parameter a benchmark does not have (distinct from one set to None)
_TEXTS: dict[tuple, dict[tuple, tuple[str, str, str]]] = {}
_SCALAR_TYPES = frozenset({type(None), bool, int, float, str, object})  # object: _MISSING


def _floats(values: list) -> list:
    """Numbers as they are (None becomes NaN in the float array); bools, text and the like as NaN."""
    if set(map(type, values)) <= {float, int, type(None)}:
        return values
    return [float(v) if v.__class__ in _NUMBER_TYPES else math.nan for v in values]


def _invalid(raw: dict[str, list], n: int, zero_rate_ok: bool) -> list[str]:
    """Per row, why its numbers make it invalid (the first of CHECKED_KEYS that does), "" where none does."""
    reasons = np.full(n, "", dtype=object)
    for key in reversed(CHECKED_KEYS):  # the first key's reason is written last
        values = raw[key]
        numbers = np.array(_floats(values), dtype="float64")
        nan = np.isnan(numbers)
        if nan.any():  # None is a key not recorded; NaN, text or a bool in its place is a broken number
            nan[nan] = [values[i] is not None for i in np.flatnonzero(nan)]
        zero = numbers == 0 if key == "median" or (key in POSITIVE_KEYS and not zero_rate_ok) else False
        word = np.select([nan, np.isinf(numbers), numbers < 0, zero], ["NaN", "infinite", "negative", "zero"],
                         "")
        reasons = np.where(word != "", np.char.add(word, " " + key).astype(object), reasons)
    return list(reasons)


def _non_finite(numbers: dict) -> str:
    """"NaN k" for the first NaN or infinite number among a benchmark's stats or extra_info, else "". Run on
    every row of a fleet: values first (x - x is NaN only for NaN and ±inf), the key once one is found."""
    for value in numbers.values():
        if value.__class__ is float and value - value != 0.0:
            key = next(k for k, v in numbers.items() if v is value)
            return f"{'NaN' if value != value else 'infinite'} {key}"
    return ""


def _scalars(values: list) -> list:
    if set(map(type, values)) <= _SCALAR_TYPES:
        return values
    return [v if v is _MISSING else _scalar(v) for v in values]


def _rows(
    data: dict,
    machine: Machine,
    foreign: bool,
    warnings: list[str],
    path: Path,
    extra_keys: dict | None = None,
) -> dict[str, list]:
    """One file's table as columns (one entry per benchmark); parameter columns beyond COLUMNS are recorded,
    in first-seen order, in `extra_keys`.

    Built column by column: a fleet of 1,000 files holds 300,000 benchmarks, and a dict per row cost half
    of the load time.
    """
    extra_keys = {} if extra_keys is None else extra_keys
    benches = [
        b
        for b in data["benchmarks"]
        if isinstance(b, dict)
        and isinstance(b.get("stats"), dict)
        and isinstance(b["stats"].get("median"), (int, float))
    ]
    skipped = len(data["benchmarks"]) - len(benches)
    if skipped:
        warnings.append(f"{path}: ignored {skipped} benchmark(s) without stats.median")
    if not foreign:
        # The suite's own file: a row that lost its extra_info (a hand edit, a broken tool) cannot be matched
        # or drawn; left out, it does not turn the whole file into another tool's.
        own = [b for b in benches if isinstance(b.get("extra_info"), dict)
               and isinstance(b["extra_info"].get("case"), str)]
        if len(own) < len(benches):
            warnings.append(f"{path}: ignored {len(benches) - len(own)} benchmark(s) without the suite's "
                            "extra_info.case")
            benches = own
    n = len(benches)
    stats = [b["stats"] for b in benches]
    extras = [e if isinstance(e := b.get("extra_info"), dict) else {} for b in benches]
    names = [str(b.get("name") or b.get("fullname") or "?") for b in benches]
    fullnames = [str(b.get("fullname") or name) for b, name in zip(benches, names)]
    ours = [not foreign and isinstance(e.get("case"), str) for e in extras]
    cases = [e["case"] if o else FOREIGN_CASE for e, o in zip(extras, ours)]
    if all(ours):
        keys = [k for k in dict.fromkeys(k for e in extras for k in e) if k not in MEASURED_KEYS]
        params_cols = {k: _scalars([e.get(k, _MISSING) for e in extras]) for k in keys}
    else:  # another tool's pytest-benchmark file: its `params`, and the file has no parameter columns
        keys = []
        raws = [b.get("params") if isinstance(b.get("params"), dict) else {} for b in benches]
        params_cols = {}
    # (case, parameter values) -> texts, per parameter-name list: files of one kind of machine share them.
    texts = _TEXTS.setdefault(tuple(keys), {}) if len(_TEXTS) < 10_000 else {}
    params_text, params_json, match_keys = [], [], []
    per_row = zip(cases, ours, fullnames, *params_cols.values()) if keys else zip(cases, ours, fullnames)
    for i, row in enumerate(per_row):
        case, own, fullname = row[0], row[1], row[2]
        if own:
            key = (case, *row[3:])
            found = texts.get(key)
            if found is None:
                params = {k: v for k, v in zip(keys, row[3:]) if v is not _MISSING}
                text, as_json = _params_text(params)
                found = (text, as_json, case + "|" + as_json)
                if len(texts) < 100_000:
                    texts[key] = found
        else:
            text, as_json = _params_text({k: _scalar(v) for k, v in raws[i].items()})
            found = (text, as_json, "fullname:" + fullname)
        params_text.append(found[0])
        params_json.append(found[1])
        match_keys.append(found[2])
    columns: dict[str, list] = {
        "label": [machine.label] * n,
        "file": [machine.file] * n,
        "host": [machine.host] * n,
        "partial": [machine.partial] * n,
        "schema_version": [machine.schema_version] * n,
        "case": cases,
        "name": names,
        "fullname": fullnames,
        "device": _scalars([e.get("device") for e in extras]),
        "src": _scalars([e.get("src") for e in extras]),
        "dst": _scalars([e.get("dst") for e in extras]),
        "params": params_text,
        "params_json": params_json,
        "match_key": match_keys,
    }
    raw = {key: [st.get(key) for st in stats] for key in STAT_KEYS}
    raw.update({key: [e.get(key) for e in extras] for key in NUMERIC_KEYS})
    for key, values in raw.items():
        columns[key] = _floats(values)
    columns["invalid"] = [reason or _non_finite(st) or _non_finite(e) for reason, st, e in
                          zip(_invalid(raw, n, zero_rate_ok=machine.tool != OUR_TOOL), stats, extras)]
    for key in (*STOP_KEYS, *STATE_KEYS):
        columns[key] = _scalars([e.get(key) for e in extras])
    for key in keys:
        if key not in columns and key not in DERIVED_COLUMNS:
            # Absent is NaN, as pandas fills a column a row lacks; a parameter set to None stays None.
            columns[key] = [math.nan if v is _MISSING else v for v in params_cols[key]]
            extra_keys.setdefault(key)
    return columns


def _read_other_tool(path: Path, warnings: list[str]) -> tuple[dict | None, str | None]:
    """nccl-tests text or nvbandwidth JSON, recognised by content; None, None when it is neither."""
    from suite.importers import read_other_tool

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read ({exc.__class__.__name__})"
    return read_other_tool(path, text, warnings) or (None, None)


def _is_binary(path: Path) -> bool:
    """A NUL byte near the start: an image, an archive, a core dump, never results (which are text). Read whole,
    such a file cost ~10x its size in memory on the way to being refused."""
    try:
        with open(path, "rb") as fh:
            return b"\x00" in fh.read(4096)
    except OSError:
        return False  # said by the reader that follows


def _load_one(path: Path, warnings: list[str]) -> tuple[dict, int | None] | None:
    if _is_binary(path):
        warnings.append(f"{path}: a binary file, not results — skipped")
        return None
    if path.name.endswith(PARTIAL_SUFFIX):
        data, problem = _read_partial(path, warnings)
    else:
        data, problem = _read_json(path)
        if problem is not None or (isinstance(data, dict) and "nvbandwidth" in data):
            imported, other_problem = _read_other_tool(path, warnings)
            if imported is not None or other_problem is not None:
                data, problem = imported, other_problem
            elif path.suffix in TEXT_SUFFIXES:
                problem = "neither pytest-benchmark JSON nor nccl-tests or nvbandwidth output"
    if problem is None and not isinstance(data, dict):
        problem = f"not a pytest-benchmark results object (top level is a JSON {type(data).__name__})"
    if problem is None and not isinstance(data.get("benchmarks"), list):
        problem = "no 'benchmarks' list (not a pytest-benchmark --benchmark-json file?)"
    version = None
    if problem is None:
        version, problem = _schema_of(data)
    if problem is None and version is not None and version > SCHEMA_VERSION:
        writer = data["suite"].get("version")
        by = f"gpubench-suite {writer}" if isinstance(writer, str) else "a newer gpubench-suite"
        problem = (
            f"written by {by} (results schema {version}); this is {__version__}, which reads schema "
            f"<= {SCHEMA_VERSION}: upgrade to {writer if isinstance(writer, str) else 'a newer release'} or later to read it"
        )
    if problem:
        warnings.append(f"{path}: {problem} — skipped")
        return None
    if version is not None:
        for step in range(version, SCHEMA_VERSION):
            data = MIGRATIONS[step](data)
    return data, version


def _label_override(path: Path, labels: Mapping[str, str], used: set[str]) -> str | None:
    for key, name in labels.items():
        if key in (str(path), path.name) or Path(key).resolve() == path.resolve():
            used.add(key)
            return name
    return None


def load_results(paths: Iterable[str | Path], labels: Mapping[str, str] | None = None) -> LoadedResults:
    """Read files and folders into one table; unreadable files become warnings, nothing readable a UserError."""
    warnings: list[str] = []
    labels = dict(labels or {})
    used_labels: set[str] = set()
    machines: dict[str, Machine] = {}
    parts: list[tuple[int, dict[str, list]]] = []
    extra_keys: dict[str, None] = {}  # parameter columns, in first-seen order
    for path in expand_paths(paths, warnings):
        loaded = _load_one(path, warnings)
        if loaded is None:
            continue
        data, version = loaded
        info = data.get("machine_info") if isinstance(data.get("machine_info"), dict) else {}
        block = data.get("suite") if isinstance(data.get("suite"), dict) else {}
        foreign = version is None
        stem = path.name[: -len(PARTIAL_SUFFIX)] if path.name.endswith(PARTIAL_SUFFIX) else path.stem
        label, cpu_name = _machine_label(info, foreign, stem)
        if block.get("tool"):  # another tool's output: say which, so it never passes for a run of ours
            label = f"{label if info.get('node') else stem} ({block['tool']})"
        elif isinstance(block.get("distributed"), dict):  # a node's torchrun job beside its own run
            label = f"{label} ({_launch(block['distributed'])})"
        label = _label_override(path, labels, used_labels) or label
        if label in machines:  # two boxes of the same kind: tell them apart by file
            label = f"{label} [{stem}]"
            base, n = label, 2
            while label in machines:
                label, n = f"{base} #{n}", n + 1
        software = info.get("software") if isinstance(info.get("software"), dict) else {}
        host = str(info.get("node") or "")
        if not host:  # never merge two unnamed machines into one node: the file stands for the machine
            host = stem
            warnings.append(f"{path}: names no host; its machine is called {stem!r} after the file")
        wrong = block.get("wrong_results")
        machine = Machine(
            label=label,
            file=str(path),
            host=host,
            partial=bool(data.get("partial")),
            foreign=foreign,
            schema_version=version,
            devices=[d for d in info.get("devices") or [] if isinstance(d, dict)],
            software=dict(software),
            cpu_name=cpu_name,
            suite_version=str(block.get("version") or software.get("suite") or ""),
            datetime=str(data.get("datetime") or ""),
            commit=data.get("commit_info") if isinstance(data.get("commit_info"), dict) else {},
            config_path=str(block.get("config_path") or ""),
            tool=str(block.get("tool") or (OUR_TOOL if not foreign else "pytest-benchmark")),
            wrong_results=[str(w) for w in wrong] if isinstance(wrong, list) else [],
            config=block.get("config") if isinstance(block.get("config"), dict) else {},
        )
        machine.distributed = dict(block["distributed"]) if isinstance(block.get("distributed"), dict) else {}
        columns = _rows(data, machine, foreign, warnings, path, extra_keys)
        machine.n_benchmarks = len(columns["label"])
        if not machine.n_benchmarks:
            # Kept as a machine: where it is the latest run, compare and health must see that it measured
            # nothing rather than judge an older run in its place.
            warnings.append(f"{path}: {NOTHING_MEASURED}")
        machines[label] = machine
        parts.append((machine.n_benchmarks, columns))
    for key in labels.keys() - used_labels:
        warnings.append(f"--label {key}: matches no loaded file — ignored")
    _tell_shared_hostnames_apart(machines, parts, warnings)
    if not machines:
        detail = "; ".join(warnings[:3]) or "no paths given"
        raise UserError(
            f"no results could be read ({detail}); pass results JSON files (ours or pytest-benchmark's), "
            "nccl-tests text output, nvbandwidth -j JSON, or folders of them"
        )
    if not any(n for n, _ in parts):
        empty = [m.file for m in machines.values()]
        more = f" and {len(empty) - 1} more file(s)" if len(empty) > 1 else ""
        raise UserError(
            f"no results: {empty[0]}{more} {NOTHING_MEASURED}; see the run's skip reasons "
            "(pytest -rs) and rerun it, or pass files that hold results"
        )
    return LoadedResults(table=_frame(parts, list(extra_keys)), machines=machines, warnings=warnings)


_STR_DTYPE = pd.Series(["text"]).dtype  # what pandas makes of a column of text: "str", Arrow-backed if it can


def _text_column(values: object) -> object:
    """A column of text (with gaps) straight to Arrow, as pandas would store it: its own conversion of an
    object list cost ~1 s per load of 1,000 files. Any other column is left to pandas."""
    if not isinstance(values, list) or getattr(_STR_DTYPE, "storage", None) != "pyarrow":
        return values
    kinds = set(map(type, values))
    if str not in kinds or not kinds <= {str, type(None), float}:
        return values
    if float in kinds and not all(math.isnan(v) for v in values if v.__class__ is float):
        return values  # a real number among the text: pandas keeps such a column as objects
    import pyarrow as pa  # present: pandas' str dtype is backed by it

    return pd.array(pa.array(values, type=pa.large_string(), from_pandas=True), dtype=_STR_DTYPE)


def _frame(parts: list[tuple[int, dict[str, list]]], extra: list[str]) -> pd.DataFrame:
    """One table from every file's columns: numbers as float arrays, the rest joined and padded with NaN."""
    total = sum(n for n, _ in parts)
    numeric = (*STAT_KEYS, *NUMERIC_KEYS)
    data: dict[str, object] = {}
    for key in [*COLUMNS, *extra]:
        if key in DERIVED_COLUMNS:
            continue
        values: list = []
        for n, columns in parts:
            values.extend(columns.get(key) or [math.nan] * n)
        data[key] = np.array(values, dtype="float64") if key in numeric else values
    cases = np.array(data["case"], dtype=object)
    # The headline rate: the family's own (family_rates) where present, else the first rate present.
    metric_name = np.full(total, None, dtype=object)
    for key in reversed(RATE_UNITS):
        metric_name[~np.isnan(data[key])] = key
    for case, key in family_rates().items():
        metric_name[(cases == case) & ~np.isnan(data[key])] = key
    metric = np.full(total, np.nan)
    for key in RATE_UNITS:
        chosen = metric_name == key
        metric[chosen] = data[key][chosen]
    data["metric"] = metric
    data["metric_name"] = list(metric_name)
    data["metric_unit"] = [RATE_UNITS.get(k) if k else None for k in metric_name]
    table = pd.DataFrame({key: _text_column(data[key]) for key in [*COLUMNS, *extra]})
    table["schema_version"] = table["schema_version"].astype("Int64")
    table["partial"] = table["partial"].fillna(False).astype(bool)
    return table


def speed_ratios(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per benchmark common to the baseline and another machine: how many times faster the other one is.

    With a higher-is-better rate on both sides (same metric): candidate / baseline; otherwise
    baseline median time / candidate median time. Invalid results are left out. Columns: case, label,
    match_key, ratio.
    """
    table = table[table["invalid"] == ""]
    cols = ["match_key", "case", "metric", "metric_name", "median"]
    base = table.loc[table["label"] == baseline, cols].drop_duplicates("match_key")
    others = table.loc[table["label"] != baseline, ["label", *cols]].drop_duplicates(["label", "match_key"])
    both = others.merge(base, on=["match_key", "case"], suffixes=("", "_base"))
    use_rate = (
        (both["metric_name"] == both["metric_name_base"])
        & both["metric"].notna()
        & both["metric_base"].notna()
        & (both["metric_base"] > 0)
    )
    by_time = both["median_base"] / both["median"]
    both["ratio"] = np.where(use_rate, both["metric"] / both["metric_base"].where(use_rate, 1.0), by_time)
    both = both[np.isfinite(both["ratio"]) & (both["ratio"] > 0)]
    return both[["case", "label", "match_key", "ratio"]].reset_index(drop=True)


def geometric_mean(values: Iterable[float]) -> float:
    """exp(mean(log x)); NaN for no values. The mean that treats 2x faster and 2x slower symmetrically."""
    arr = np.asarray(list(values), dtype="float64")
    return float(np.exp(np.log(arr).mean())) if arr.size else math.nan


def relative_speed(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Geometric mean of speed_ratios per (case, label): columns case, label, speed, n."""
    ratios = speed_ratios(table, baseline)
    if ratios.empty:
        return pd.DataFrame({"case": [], "label": [], "speed": [], "n": []})
    ratios["log"] = np.log(ratios["ratio"])
    grouped = ratios.groupby(["case", "label"], sort=False)["log"].agg(["mean", "size"]).reset_index()
    return pd.DataFrame(
        {
            "case": grouped["case"],
            "label": grouped["label"],
            "speed": np.exp(grouped["mean"]),
            "n": grouped["size"],
        }
    )


def have_pyarrow() -> bool:
    """Whether pandas can write Parquet here (pyarrow is an optional dependency)."""
    return importlib.util.find_spec("pyarrow") is not None


def export_table(table: pd.DataFrame, csv: str | None = None, parquet: str | None = None) -> list[str]:
    """Write the tidy table as CSV and/or Parquet; return the paths written."""
    written = []
    if csv:
        Path(csv).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(csv, index=False)
        written.append(csv)
    if parquet:
        if not have_pyarrow():
            raise UserError("--parquet needs pyarrow; run `pip install pyarrow` or use --csv")
        flat = table.copy()
        for column in flat.columns:  # free-form parameters may mix numbers and strings across families
            if flat[column].dtype == object:
                flat[column] = flat[column].map(lambda v: None if v is None or v is pd.NA else str(v))
        Path(parquet).parent.mkdir(parents=True, exist_ok=True)
        flat.to_parquet(parquet, index=False)
        written.append(parquet)
    return written


def _launch(distributed: object) -> str:
    """Machine.launch of a run whose suite block records `distributed` (suite.distributed's describe())."""
    if not isinstance(distributed, dict):
        return ""
    world, nodes = distributed.get("world_size"), distributed.get("nnodes")
    text = f"torchrun {world} ranks" if isinstance(world, int) else "torchrun"
    return text + (f" on {nodes} nodes" if isinstance(nodes, int) and nodes > 1 else "")


def latest_runs(
    machines: Mapping[str, Machine], by: str = "identity", warnings: list[str] | None = None
) -> list[str]:
    """Labels of each machine's latest run per tool and launch: the newest `datetime`, ties broken by file
    name. A node's single-process run and its collectives' torchrun job (one per world size) are each kept:
    neither replaces the other.

    `by` is "identity" (host, accelerators, driver: one history) or "node" (host and accelerators: what
    health judges, so a driver upgrade does not leave the old driver's runs beside the new ones). Runs that
    record no time (other tools' output) are ordered by file name, never by the file's modification time
    (a copy changes it); where that decides, a warning in `warnings` says so.
    """
    runs: dict[tuple[str, str, str], list[Machine]] = {}
    for m in machines.values():
        runs.setdefault((getattr(m, by), m.tool, m.launch), []).append(m)
    latest = []
    for (_, tool, _launch), ms in sorted(runs.items()):
        ms = sorted(ms, key=lambda m: (m.datetime, Path(m.file).name, m.file))
        latest.append(ms[-1].label)
        if len(ms) > 1 and warnings is not None and not all(m.datetime for m in ms):
            warnings.append(
                f"{ms[-1].host}: {len(ms)} {tool} runs, not all recording when they ran; judged the last "
                f"by file name, {Path(ms[-1].file).name} (pass one run per machine to choose)"
            )
    return sorted(latest)
