"""The tidy table's columns: which keys it keeps, one file's columns, and the frame every file's make."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from suite.cases import FAMILIES, family_read
from suite.telemetry import KEYS as TELEMETRY_KEYS

FOREIGN_CASE = "other"  # family given to rows of a pytest-benchmark file that is not ours
OUR_TOOL = "gpubench-suite"

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
        "issue",  # a copy batch's launch: one graph replay or a launch per copy (how it ran; the bytes say what)
        "nccl_algo",  # what NCCL chose for a collective (its TUNING log): how it ran, shown, never matched on
        "nccl_proto",
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
        # What the device drew and ran at over the timed rounds (suite.telemetry).
        *TELEMETRY_KEYS,
    }
)
# extra_info of how precision stopping ended, carried as columns (the report shows them) but never matched on.
STOP_KEYS = ("stopped_on", "margin", "precision_target", "confidence")
# extra_info of the machine's state, carried as columns but never matched on: `link`, what joins a GPU pair
# (`NV18`, `SYS`; devices.nvml_links: health groups peer pairs by it); clocks_held*, how long a limit held the
# clocks down over warm-up and timing (devices.ClockWatch: health names it beside a slow result);
# host_numa_node (devices.host_near); bound and host_share, whether the host set an accelerator figure's time
# (suite.timing.bound_info), so a host-bound figure is never judged as the device's.
STATE_KEYS = ("link", "host_numa_node", "host_share", "bound", "clocks_held", "clocks_held_power", "clocks_held_thermal", "clocks_held_board_limit",
              "clocks_held_reliability", "clocks_held_hw_thermal", "clocks_held_hw_power_brake",
              "clocks_held_rank", "per_device_tflops", "nccl_algo", "nccl_proto",
              *TELEMETRY_KEYS)  # telemetry: health's causes, perf per watt; NCCL's per-case choice: the fleet note
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



def _scalar(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


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


class _File(Protocol):
    """What rows reads of a suite.results.Machine (imported from there, it would make an import circle)."""

    label: str
    file: str
    host: str
    partial: bool
    foreign: bool
    schema_version: int | None
    tool: str


def rows(data: dict, machine: _File, warnings: list[str], path: Path, extra_keys: dict) -> dict[str, list]:
    """One file's table as columns (one entry per benchmark); parameter columns beyond COLUMNS are recorded,
    in first-seen order, in `extra_keys`.

    Built column by column: a fleet of 1,000 files holds 300,000 benchmarks, and a dict per row cost half
    of the load time.
    """
    benches = _benchmarks(data, machine.foreign, warnings, path)
    n = len(benches)
    stats = [b["stats"] for b in benches]
    extras = [e if isinstance(e := b.get("extra_info"), dict) else {} for b in benches]
    names, fullnames = _names(benches)
    cases, params_cols, found = _parameters(benches, extras, fullnames, machine.foreign)
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
        "params": [f[0] for f in found],
        "params_json": [f[1] for f in found],
        "match_key": [f[2] for f in found],
        **_measured(stats, extras, zero_rate_ok=machine.tool != OUR_TOOL),
    }
    for key, values in params_cols.items():
        if key not in columns and key not in DERIVED_COLUMNS:
            columns[key] = _parameter_column(values)
            extra_keys.setdefault(key)
    return columns


def _names(benches: list[dict]) -> tuple[list[str], list[str]]:
    """(name, fullname) columns: each falls back on the other, "?" where a benchmark has neither."""
    names = [str(b.get("name") or b.get("fullname") or "?") for b in benches]
    return names, [str(b.get("fullname") or name) for b, name in zip(benches, names)]


def _parameter_column(values: list) -> list:
    """Absent is NaN, as pandas fills a column a row lacks; a parameter set to None stays None."""
    return [math.nan if v is _MISSING else v for v in values]


def _parameters(
    benches: list[dict], extras: list[dict], fullnames: list[str], foreign: bool
) -> tuple[list[str], dict[str, list], list[tuple[str, str, str]]]:
    """(case per benchmark, parameter columns by name, (params text, params JSON, match key) per benchmark).

    Ours are identified by case and parameters (every extra_info key not measured); another tool's
    pytest-benchmark file by fullname, its `params` shown, and the file has no parameter columns."""
    if foreign:
        return [FOREIGN_CASE] * len(benches), {}, _foreign_texts(benches, fullnames)
    cases = [e["case"] for e in extras]  # _benchmarks kept only ours with a case
    keys = [k for k in dict.fromkeys(k for e in extras for k in e) if k not in MEASURED_KEYS]
    params_cols = {k: _scalars([e.get(k, _MISSING) for e in extras]) for k in keys}
    return cases, params_cols, _own_texts(cases, keys, params_cols)


def _benchmarks(data: dict, foreign: bool, warnings: list[str], path: Path) -> list[dict]:
    """The file's benchmarks that can be tabled: each with a stats.median, and if ours, an extra_info.case."""
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
    if foreign:
        return benches
    # The suite's own file: a row that lost its extra_info (a hand edit, a broken tool) cannot be matched
    # or drawn; left out, it does not turn the whole file into another tool's.
    own = [b for b in benches if isinstance(b.get("extra_info"), dict)
           and isinstance(b["extra_info"].get("case"), str)]
    if len(own) < len(benches):
        warnings.append(f"{path}: ignored {len(benches) - len(own)} benchmark(s) without the suite's "
                        "extra_info.case")
    return own


def _own_texts(cases: list[str], keys: list[str], params_cols: dict[str, list]) -> list[tuple[str, str, str]]:
    """(params text, params JSON, match key) per benchmark of ours, from its case and parameter values."""
    # (case, parameter values) -> texts, per parameter-name list: files of one kind of machine share them.
    texts = _TEXTS.setdefault(tuple(keys), {}) if len(_TEXTS) < 10_000 else {}
    found = []
    for key in zip(cases, *params_cols.values()):
        texts_of = texts.get(key)
        if texts_of is None:
            text, as_json = _params_text({k: v for k, v in zip(keys, key[1:]) if v is not _MISSING})
            texts_of = (text, as_json, key[0] + "|" + as_json)
            if len(texts) < 100_000:
                texts[key] = texts_of
        found.append(texts_of)
    return found


def _foreign_texts(benches: list[dict], fullnames: list[str]) -> list[tuple[str, str, str]]:
    """(params text, params JSON, match key) per benchmark of another tool: its `params`, matched by fullname."""
    found = []
    for bench, fullname in zip(benches, fullnames):
        raw = bench.get("params") if isinstance(bench.get("params"), dict) else {}
        text, as_json = _params_text({k: _scalar(v) for k, v in raw.items()})
        found.append((text, as_json, "fullname:" + fullname))
    return found


def _measured(stats: list[dict], extras: list[dict], zero_rate_ok: bool) -> dict[str, list]:
    """The number columns, why a row is invalid, and the stopping and machine-state columns."""
    raw = {key: [st.get(key) for st in stats] for key in STAT_KEYS}
    raw.update({key: [e.get(key) for e in extras] for key in NUMERIC_KEYS})
    columns = {key: _floats(values) for key, values in raw.items()}
    columns["invalid"] = [reason or _non_finite(st) or _non_finite(e) for reason, st, e in
                          zip(_invalid(raw, len(stats), zero_rate_ok), stats, extras)]
    for key in (*STOP_KEYS, *STATE_KEYS):
        columns[key] = _scalars([e.get(key) for e in extras])
    return columns


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


def frame(parts: list[tuple[int, dict[str, list]]], extra: list[str]) -> pd.DataFrame:
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
