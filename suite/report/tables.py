"""Plain values for the report's HTML tables: machine summaries, relative speed, per-family result rows."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass

import pandas as pd

from suite.health.findings import nccl_said
from suite.results import OUR_TOOL, STOP_KEYS, Machine, as_dict, relative_speed
from suite.units import format_size

# Keys already shown in their own column, so the params column does not repeat them; how precision stopping
# ended (results.STOP_KEYS) is shown in the rounds column as `12 · precision ±0.4%`.
_SHOWN_KEYS = frozenset({"device", "src", "dst", "rounds", *STOP_KEYS})


def format_time(seconds: float) -> str:
    """3 significant digits in the unit that keeps the number between 1 and 1000: `195 µs`, `1.23 ms`."""
    if seconds is None or math.isnan(seconds):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_number(value: float) -> str:
    """For people: 3 significant figures (`0.121`, `672`), whole numbers grouped to 99,999 (`2,086`), then
    k, M, G (`10.8 M`)."""
    if abs(value) < 1e5:
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    scale, prefix = next((s, p) for s, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if abs(value) >= s)
    return f"{value / scale:.3g} {prefix}"


def format_rate(value: float, unit: str | None) -> str:
    """`672 TFLOP/s`, `10.8 M samples/s`; "—" for no rate."""
    if value is None or math.isnan(value) or not unit:
        return "—"
    return f"{format_number(value)} {unit}"


def format_memory(n: object) -> str:
    """A device's memory in GiB, as `python -m suite devices` and the evidence write it: `79.6 GiB`."""
    if not isinstance(n, (int, float)) or isinstance(n, bool) or math.isnan(n):
        return "—"
    return f"{n / 2**30:.1f} GiB"


@dataclass
class MachineView:
    """What the header shows about one machine."""

    label: str
    partial: bool
    host: str
    file: str
    devices: list[dict]
    software: list[tuple[str, str]]
    suite_version: str
    date: str
    commit: str
    config_path: str
    n_benchmarks: int
    foreign: bool
    driver: str = ""
    links: str = ""  # what joins the GPU pairs, counted: `NV18 × 28 pairs`, `NV4 × 2 pairs, SYS × 4 pairs`
    launch: str = ""  # a torchrun job: ranks, hosts, backend, NCCL version
    # How the run was launched, in a word or three for the compact table: `one process`, `torchrun 16 ranks on
    # 2 nodes` (Machine.launch); "—" for another tool's results, which do not say.
    launched: str = ""
    environment: str = ""  # its NCCL_*/GLOO_*/... variables and what NCCL chose: what changes a busbw


# The collective libraries a torchrun job's suite.distributed block names a version of.
_LIBRARY_VERSIONS = (("nccl_version", "NCCL"), ("xccl_version", "oneCCL"))


def launch_texts(m: Machine) -> tuple[str, str]:
    """(launch, environment) lines of a torchrun job's card, from its suite.distributed block."""
    d = m.distributed
    if not d:
        return "", ""
    hosts = ", ".join(f"{h} ({n})" for h, n in as_dict(d.get("ranks_per_host")).items())
    parts = [m.launch + (f": {hosts}" if hosts else ""), str(d.get("backend") or "")]
    parts += [f"{library} {d[key]}" for key, library in _LIBRARY_VERSIONS if d.get(key)]
    differ = as_dict(d.get("environment_by_rank"))
    said = nccl_said(d)  # what NCCL's start-up log said
    chose = ", ".join(f"{k}={v}" for k, v in said.items())
    chose = f"unknown ({said['unknown']})" if "unknown" in said else chose
    environment = [", ".join(f"{k}={v}" for k, v in as_dict(d.get("environment")).items()),
                   f"rank(s) {', '.join(differ)} set other values (JSON)" if differ else "",
                   f"NCCL chose: {chose}" if said else ""]
    return " · ".join(p for p in parts if p), "; ".join(e for e in environment if e)


def links_text(devices: list[dict]) -> str:
    """The machine's GPU pairs by link (each device's `links` row, from NVML), each pair counted once."""
    counts: dict[str, int] = {}
    for d in devices:
        row = d.get("links")
        for peer, link in (row.items() if isinstance(row, dict) else ()):
            if isinstance(link, str) and str(d.get("id")) < str(peer):
                counts[link] = counts.get(link, 0) + 1
    order = sorted(counts, key=lambda k: (not k.startswith("NV"), -counts[k], k))
    return ", ".join(f"{k} × {counts[k]} pair{'s' if counts[k] != 1 else ''}" for k in order)


# The software versions a machine card shows, in this order (each where the results file has it).
SOFTWARE_SHOWN = ("torch", "cuda", "hip", "cudnn", "miopen", "nccl", "rccl", "python")


def machine_views(machines: dict[str, Machine]) -> list[MachineView]:
    return [_machine_view(m) for m in machines.values()]


def _device_lines(m: Machine) -> list[dict]:
    """A machine card's devices: an 8-GPU box shows one line `cuda:0 … cuda:7 (8×)`, not eight."""
    devices: list[dict] = []
    for d in m.devices:
        entry = {
            "id": str(d.get("id", "")),
            "name": str(d.get("name", "")),
            "memory": format_memory(d.get("memory_bytes")),
            "capability": str(d.get("capability") or ""),
            "count": 1,
        }
        last = devices[-1] if devices else None
        if (
            last
            and all(last[k] == entry[k] for k in ("name", "memory", "capability"))
            and d.get("kind") != "cpu"
        ):
            last["count"] += 1
            last["last_id"] = entry["id"]
            continue
        devices.append(entry)
    for entry in devices:
        if entry["count"] > 1:
            entry["id"] = f"{entry['id']} … {entry['last_id']} ({entry['count']}×)"
    if not devices and m.cpu_name:
        devices = [{"id": "cpu", "name": m.cpu_name, "memory": "—", "capability": "", "count": 1}]
    return devices


def _machine_view(m: Machine) -> MachineView:
    # A ROCm run records hip, miopen and rccl where a CUDA one has cuda, cudnn and nccl (older ROCm files
    # have MIOpen's and RCCL's versions under cudnn and nccl: shown as they were written).
    software = [(k, str(m.software[k])) for k in SOFTWARE_SHOWN if m.software.get(k)]
    commit = str(m.commit.get("id") or "")[:12] + (" (dirty)" if m.commit.get("dirty") else "")
    drivers = sorted({str(d["driver_version"]) for d in m.devices if d.get("driver_version")})
    launch, environment = launch_texts(m)
    return MachineView(
        label=m.label,
        partial=m.partial,
        host=m.host,
        file=m.file,
        devices=_device_lines(m),
        software=software,
        suite_version=m.suite_version,
        date=m.datetime[:19],
        commit=commit,
        config_path=m.config_path,
        n_benchmarks=m.n_benchmarks,
        foreign=m.foreign,
        driver=", ".join(drivers),
        links=links_text(m.devices),
        launch=launch,
        environment=environment,
        launched=m.launch or ("one process" if m.tool == OUR_TOOL and not m.foreign else "—"),
    )


def speed_table(table: pd.DataFrame, labels: list[str], baseline: str) -> tuple[list[str], list[dict]]:
    """Families (columns) and one row per machine: geometric-mean speed relative to the baseline."""
    cases = list(dict.fromkeys(table["case"]))
    speeds = relative_speed(table, baseline)
    lookup = {
        (c, lab): (s, n)
        for c, lab, s, n in zip(speeds["case"], speeds["label"], speeds["speed"], speeds["n"])
    }
    base_cases = set(table.loc[table["label"] == baseline, "case"])
    rows = []
    for label in labels:
        cells = []
        for case in cases:
            if label == baseline:
                cells.append(("baseline", "", 1.0) if case in base_cases else ("—", "", math.nan))
            elif (case, label) in lookup:
                speed, n = lookup[(case, label)]
                cells.append((f"{speed:.3g}×", f"{int(n)} common", speed))
            else:
                cells.append(("—", "none in common", math.nan))
        rows.append({"label": label, "cells": cells})
    return cases, rows


def _sort(value: float) -> str:
    """The number a column sorts by, as text for a data attribute; empty sorts last."""
    return "" if value is None or math.isnan(value) else f"{value:.6g}"


def _params_text(params_json: str, name: str) -> str:
    """The parameters the test id does not already say (`allow_tf32=False`): a compact cell, not ten lines."""
    parts = []
    for key, value in json.loads(params_json).items():
        if key in _SHOWN_KEYS or key == "case" or value is None:
            continue
        if key in ("bytes", "size") and isinstance(value, int):
            value = format_size(value)
        if not all(piece in name for piece in str(value).split(":")):  # `pair=habit:cuda:0` is in its id
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def _fraction(value: object) -> float | None:
    """A non-negative finite number (numpy's too) as a float; None for anything else (NaN, None, text)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return None
    return float(value) if value >= 0 else None


def _percent(fraction: float) -> str:
    """`±0.93%`, `±470%`: never `±4.7e+02%`."""
    pct = 100 * fraction
    return f"±{pct:.2g}%" if pct < 100 else f"±{pct:,.0f}%"


def share_text(pct: object) -> str:
    """A percentage of a ceiling or datasheet figure: `99%`, `0.31%`, `<0.01%`; "" for none."""
    pct = _fraction(pct)
    if pct is None:
        return ""
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%" if pct >= 0.01 else "<0.01%"


# What a rate is set against, where a result recorded it: the measured ceiling, the GPU's datasheet.
SHARES = ("pct_of_ceiling", "pct_of_datasheet")


def against_text(row: dict) -> str:
    """`99% of ceiling · 68% of datasheet`, of what a row records (SHARES)."""
    return " · ".join(f"{share_text(row.get(k))} of {k.removeprefix('pct_of_')}" for k in SHARES
                      if share_text(row.get(k)))


def stop_text(rounds: float, stopped_on: object, margin: object, target: object) -> str:
    """The rounds cell: the rounds and how the benchmark stopped, the margin of error it reached, and the
    target where it stopped short of it: `12 · precision ±0.4%`, `40 · time ±3.1% (target ±1%)`,
    `10 · fixed ±2%` (fixed rounds). The rounds come first, so the column still sorts by them."""
    text = "" if rounds is None or not math.isfinite(rounds) else str(int(rounds))  # an invalid row's too
    if not isinstance(stopped_on, str) or not stopped_on:
        return text  # another tool's result, or one written before precision stopping
    how = stopped_on
    reached, aim = _fraction(margin), _fraction(target)
    if reached is not None:
        how += f" {_percent(reached)}"
    if stopped_on == "time" and aim:
        how += f" (target {_percent(aim)})"
    return f"{text} · {how}" if text else how


def _column(rows: pd.DataFrame, key: str) -> list:
    """A column's values, None where the table has no such column (no result recorded the key)."""
    return list(rows[key]) if key in rows.columns else [None] * len(rows)


_STOPPED = ("stopped_on", "margin", "precision_target")  # what stop_text tells from


def _rate_note(traffic: object, bound: object, host_share: object) -> str:
    """Beside a rate: the traffic it moved, and whether the host set its time (how fast this host drives the
    device, with its share of the time spent issuing)."""
    notes = [f"traffic {format_rate(traffic, 'GB/s')}"] if _fraction(traffic) else []
    if bound == "host":
        share = _fraction(host_share)
        notes.append("host-bound" + (f" ({100 * share:.0f}% issuing)" if share is not None else ""))
    return " · ".join(notes)


def result_rows(rows: pd.DataFrame, partial_labels: set[str]) -> list[dict]:
    """Per result, its cells' texts and sort keys: machine, benchmark (and the parameters its id does not
    say), where, median, IQR, rounds and how it stopped, its rate (and a note: traffic, host-bound), its %
    of the measured ceiling and of the datasheet."""
    out = []
    where = [
        f"{s}→{d}" if isinstance(s, str) and isinstance(d, str) else (dev if isinstance(dev, str) else "")
        for s, d, dev in zip(rows["src"], rows["dst"], rows["device"])
    ]
    keys = (*_STOPPED, "bound", "host_share", "invalid", "traffic_gbps", *SHARES)
    cols = {k: _column(rows, k) for k in keys}
    for i, r in enumerate(
        rows[["label", "name", "params_json", "median", "iqr", "rounds", "metric", "metric_unit"]].itertuples(
            index=False
        )
    ):
        iqr_text = format_time(r.iqr)
        if 0 < r.median < math.inf and math.isfinite(r.iqr):
            iqr_text += f" ({100 * r.iqr / r.median:.1f}%)"
        invalid = cols["invalid"][i]
        if invalid:  # its numbers are no measurement: say why, and show none of them as its rate
            rate = {"metric": f"invalid: {invalid}", "metric_v": "", "note": "", **dict.fromkeys(SHARES, "")}
        else:
            rate = {"metric": format_rate(r.metric, r.metric_unit), "metric_v": _sort(r.metric),
                    "note": _rate_note(cols["traffic_gbps"][i], cols["bound"][i], cols["host_share"][i]),
                    **{k: share_text(cols[k][i]) for k in SHARES}}
        out.append({
            "label": r.label + (" (partial)" if r.label in partial_labels else ""),
            "name": r.name,
            "params": _params_text(r.params_json, r.name),
            "where": where[i],
            "median": format_time(r.median), "median_v": _sort(r.median),
            "iqr": iqr_text, "iqr_v": _sort(r.iqr),
            "rounds": stop_text(r.rounds, *(cols[k][i] for k in _STOPPED)),
            **rate,
        })
    return out


@dataclass
class Table:
    """A family's own table under its charts (a `TABLES` function of its `charts` module returns one, or None):
    headings and rows of text; the first `words` columns are words, the rest figures, right-aligned ("—"
    where empty)."""

    name: str  # its CSS class beside `results`, and what a reader's filter or style can find it by
    columns: list[str]
    rows: list[list[str]]
    words: int = 1
    explain: str = ""  # a sentence above it
    strong: int | None = None  # the column shown in bold: the verdict a reader looks for first
    scroll: bool = False  # in a scroll box: one column per run can outgrow the page
