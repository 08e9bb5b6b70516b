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

from suite.cases import FAMILIES, family_read
from suite.errors import UserError
from suite.loading import PARTIAL_SUFFIX, expand_paths, read_results_file
# NUMERIC_KEYS, RATE_UNITS, STAT_KEYS and STOP_KEYS are named from here by the report and the tests.
from suite.table import FOREIGN_CASE, NUMERIC_KEYS, OUR_TOOL, RATE_UNITS, STAT_KEYS, STOP_KEYS, frame, rows

# What a results file with no benchmark is: a run whose every benchmark was skipped, or that stopped first.
NOTHING_MEASURED = "holds no benchmark results (every benchmark skipped, or the run stopped before the first)"
# Keys that name the device(s) a benchmark ran on: two benchmarks equal but for these measured the same thing
# on different devices (the peers a straggler is judged against).
DEVICE_KEYS = ("device", "src", "dst", "gpus")


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
        return _accelerators(self.devices)

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


def _overlapping(runs: list[tuple[str, frozenset]]) -> list[tuple[set[str], list[str]]]:
    """(GPUs, labels) of the runs (label, GPUs) joined while their GPUs overlap."""
    groups: list[tuple[set[str], list[str]]] = []
    for label, uuids in runs:
        joined = [g for g in groups if g[0] & uuids]
        merged = (set(uuids).union(*(g[0] for g in joined)), [label, *(x for g in joined for x in g[1])])
        groups = [g for g in groups if not g[0] & uuids] + [merged]
    return groups


def _tell_shared_hostnames_apart(machines: dict[str, Machine], parts: list, warnings: list[str]) -> None:
    """Two nodes that report one hostname (a cloud image's `ubuntu`, a container's) with different GPUs are two
    machines: else health and compare would take the newer run for the other's and judge only one.

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
        groups = _overlapping(runs)
        if len(groups) < 2:
            continue
        names = []
        for uuids, labels in groups:
            tag = min(uuids).removeprefix("GPU-").removeprefix("MIG-")[:8]
            names.append(f"{host} [{tag}]")
            for label in labels:
                machines[label].host = names[-1]
                rows[label]["host"] = [names[-1]] * len(rows[label]["host"])
        warnings.append(f"hostname {host!r} is reported by {len(groups)} machines with different GPUs (by "
                        f"UUID): told apart as {', '.join(sorted(names))}; give the nodes distinct hostnames")


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
            raise UserError(f"--label {value!r} is not FILE=NAME; write e.g. --label results/box3.json='box 3'")
        labels[path] = name.strip()
    return labels


def map_devices(params: Mapping[str, object], device_map: Mapping[str, str] | None) -> dict[str, object]:
    """Parameters with device ids renamed (`cuda:0` -> `cuda:1`), so runs on different devices line up."""
    if not device_map:
        return dict(params)
    return {k: device_map.get(v, v) if isinstance(v, str) else v for k, v in params.items()}


def match_key(case: str, params_json: str, fullname: str, foreign: bool,
              device_map: Mapping[str, str] | None = None) -> str:
    """What identifies a benchmark across machines: its family and parameters, or the fullname if foreign."""
    if foreign:
        return "fullname:" + fullname
    params = map_devices(json.loads(params_json), device_map)
    return case + "|" + json.dumps(params, sort_keys=True, default=str)


def benchmark_keys(table: pd.DataFrame, device_map: Mapping[str, str] | None = None) -> pd.Series:
    """Which benchmarks are the same, one key per row: the table's match_key, with device ids mapped if asked.

    The one definition compare, the report's relative speed, history and health use.
    """
    if not device_map:
        return table["match_key"]
    keys = [match_key(c, p, f, m.startswith("fullname:"), device_map)
            for c, p, f, m in zip(table["case"], table["params_json"], table["fullname"], table["match_key"])]
    return pd.Series(keys, index=table.index, dtype=object)


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
    """h2d, d2h, local (one device), peer, or host (cpu to cpu) per row: what limits bytes moved from src to dst.
    Vectorised: a fleet has hundreds of thousands of rows."""
    s, d = src.astype(object), dst.astype(object)
    valid = (s.map(type) == str) & (d.map(type) == str)
    s_cpu, d_cpu = (s == "cpu") & valid, (d == "cpu") & valid
    kinds = np.select([~valid, s_cpu & d_cpu, s_cpu, d_cpu, s == d], ["", "host", "h2d", "d2h", "local"], "peer")
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
    stripped = {p: json.dumps({k: v for k, v in json.loads(p).items() if k not in DEVICE_KEYS}, sort_keys=True)
                for p in table["params_json"].unique()}
    key = table["case"] + "|" + kinds + "|" + table["params_json"].map(stripped)
    return key, subject


def as_dict(value: object) -> dict:
    """A results file's value where a dict belongs; {} where it holds anything else."""
    return value if isinstance(value, dict) else {}


def _devices(info: dict) -> list[dict]:
    return [d for d in info.get("devices") or [] if isinstance(d, dict)]


def _accelerators(devices: list[dict]) -> Counter:
    return Counter(str(d.get("name") or d.get("id") or "?") for d in devices if d.get("kind") != "cpu")


def _cpu_name(info: dict) -> str:
    """The CPU's name: its device entry's, else py-cpuinfo's brand or the platform's processor."""
    named = (str(d.get("name")) for d in _devices(info) if d.get("kind") == "cpu" and d.get("name"))
    return next(named, "") or str(as_dict(info.get("cpu")).get("brand_raw") or info.get("processor") or "")


def _machine_label(info: dict, foreign: bool, stem: str) -> str:
    """`8xNVIDIA H100 80GB HBM3 @ host`, `CPU (name) @ host`, or the node / file stem."""
    host = str(info.get("node") or "")
    devices = _devices(info)
    if foreign or not devices:
        return host or stem
    counts = _accelerators(devices)
    where = f" @ {host}" if host else ""
    if not counts:
        return f"CPU ({_cpu_name(info) or 'unknown'}){where}"
    return " + ".join(f"{n}x{name}" if n > 1 else name for name, n in counts.items()) + where


def _label_override(path: Path, labels: Mapping[str, str], used: set[str]) -> str | None:
    for key, name in labels.items():
        if key in (str(path), path.name) or Path(key).resolve() == path.resolve():
            used.add(key)
            return name
    return None


def _label(path: Path, data: dict, foreign: bool, labels: Mapping[str, str], used: set[str],
           taken: Mapping[str, Machine]) -> str:
    """The machine's label: --label's, else from its hardware and how it ran; a second file of one label is
    told apart by its name."""
    info, block, stem = as_dict(data.get("machine_info")), as_dict(data.get("suite")), _stem(path)
    label = _machine_label(info, foreign, stem)
    if block.get("tool"):  # another tool's output: say which, so it never passes for a run of ours
        label = f"{label if info.get('node') else stem} ({block['tool']})"
    elif isinstance(block.get("distributed"), dict):  # a node's torchrun job beside its own run
        label = f"{label} ({_launch(block['distributed'])})"
    label = _label_override(path, labels, used) or label
    if label in taken:  # two boxes of the same kind: tell them apart by file
        label = f"{label} [{stem}]"
        base, n = label, 2
        while label in taken:
            label, n = f"{base} #{n}", n + 1
    return label


def _stem(path: Path) -> str:
    return path.name[: -len(PARTIAL_SUFFIX)] if path.name.endswith(PARTIAL_SUFFIX) else path.stem


def _machine(path: Path, data: dict, version: int | None, label: str, warnings: list[str]) -> Machine:
    """The Machine a loaded file describes (its benchmarks not yet counted)."""
    info, block = as_dict(data.get("machine_info")), as_dict(data.get("suite"))
    software = as_dict(info.get("software"))
    host = str(info.get("node") or "")
    if not host:  # never merge two unnamed machines into one node: the file stands for the machine
        host = _stem(path)
        warnings.append(f"{path}: names no host; its machine is called {host!r} after the file")
    wrong = block.get("wrong_results")
    foreign = version is None
    return Machine(label=label, file=str(path), host=host, partial=bool(data.get("partial")), foreign=foreign,
                   schema_version=version, devices=_devices(info), software=dict(software),
                   cpu_name=_cpu_name(info),
                   suite_version=str(block.get("version") or software.get("suite") or ""),
                   datetime=str(data.get("datetime") or ""), commit=as_dict(data.get("commit_info")),
                   config_path=str(block.get("config_path") or ""),
                   tool=str(block.get("tool") or (OUR_TOOL if not foreign else "pytest-benchmark")),
                   wrong_results=[str(w) for w in wrong] if isinstance(wrong, list) else [],
                   config=as_dict(block.get("config")), distributed=dict(as_dict(block.get("distributed"))))


def load_results(paths: Iterable[str | Path], labels: Mapping[str, str] | None = None) -> LoadedResults:
    """Read files and folders into one table; unreadable files become warnings, nothing readable a UserError."""
    warnings: list[str] = []
    labels = dict(labels or {})
    used_labels: set[str] = set()
    machines: dict[str, Machine] = {}
    parts: list[tuple[int, dict[str, list]]] = []
    extra_keys: dict[str, None] = {}  # parameter columns, in first-seen order
    for path in expand_paths(paths, warnings):
        loaded = read_results_file(path, warnings)
        if loaded is None:
            continue
        data, version = loaded
        label = _label(path, data, version is None, labels, used_labels, machines)
        machine = _machine(path, data, version, label, warnings)
        columns = rows(data, machine, warnings, path, extra_keys)
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
    _refuse_nothing(machines, parts, warnings)
    return LoadedResults(table=frame(parts, list(extra_keys)), machines=machines, warnings=warnings)


def _refuse_nothing(machines: dict[str, Machine], parts: list[tuple[int, dict]], warnings: list[str]) -> None:
    """A UserError where no file could be read, or none of those read holds a result."""
    if not machines:
        detail = "; ".join(warnings[:3]) or "no paths given"
        raise UserError(f"no results could be read ({detail}); pass results JSON files (ours or "
                        "pytest-benchmark's), nccl-tests text or -J JSON output, nvbandwidth -j JSON, or "
                        "folders of them")
    if not any(n for n, _ in parts):
        empty = [m.file for m in machines.values()]
        more = f" and {len(empty) - 1} more file(s)" if len(empty) > 1 else ""
        # Benchmarks were there but malformed (no stats.median, no extra_info.case): say that, not "skipped".
        bad = [w.removeprefix(f"{empty[0]}: ") for w in warnings if w.startswith(f"{empty[0]}: ignored ")]
        if bad:
            raise UserError(f"no results: {empty[0]}{more} holds no readable benchmark ({'; '.join(bad)}); "
                            "the file was edited or written by another tool: rerun the benchmarks to rewrite it")
        raise UserError(f"no results: {empty[0]}{more} {NOTHING_MEASURED}; see the run's skip reasons (pytest "
                        "-rs) and rerun it, or pass files that hold results")


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
    use_rate = ((both["metric_name"] == both["metric_name_base"]) & both["metric"].notna()
                & both["metric_base"].notna() & (both["metric_base"] > 0))
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
    ratios = speed_ratios(table, baseline).assign(log=lambda d: np.log(d["ratio"]))
    speed = ratios.groupby(["case", "label"], sort=False)["log"].agg(speed="mean", n="size").reset_index()
    return speed.assign(speed=np.exp(speed["speed"]))


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


def latest_runs(machines: Mapping[str, Machine], by: str = "identity", warnings: list[str] | None = None) -> list[str]:
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
            warnings.append(f"{ms[-1].host}: {len(ms)} {tool} runs, not all recording when they ran; judged "
                            f"the last by file name, {Path(ms[-1].file).name} (pass one run per machine to "
                            "choose)")
    return sorted(latest)
