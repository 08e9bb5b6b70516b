"""Why a flagged device is slow, graded, from the evidence its run recorded (telemetry over the timed rounds,
the inventory), never guessed; and the GPUs flagged in several runs, by UUID, whatever node they were in."""

from __future__ import annotations

import json
import math
import statistics

import pandas as pd

from suite.health.expect import HOST_LINKS
from suite.health.findings import Finding

# Grades: CAUSE where the evidence alone accounts for a slow figure (a link at half width, a lower power
# limit than its peers'); CONTRIBUTES where it was recorded and can slow a device, but need not have.
CAUSE, CONTRIBUTES = "cause", "may contribute"
# A clock limit is named from this share of the timed time; a cause where it also held the device this much
# longer than its peers (the power limit holds most busy GPUs: only a difference from the peers says much).
LIMIT_NAMED_FROM = 0.10
# A power limit this far below its peers' median is a cap, not the spread of one model's boards.
POWER_LIMIT_BELOW = 0.02
# An SM clock this far below its peers' median is named (MAMF's 5% spread between healthy GPUs of a node).
CLOCK_BELOW = 0.05
JUDGED_KINDS = ("straggler", "low")  # findings about one device's result: the ones causes explain


def mapping(value: object) -> dict:
    """A telemetry dict as stored (a dict, or the table's JSON text of one); {} where absent or unreadable."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _peers_median(values: list) -> float | None:
    found = [v for v in map(_number, values) if v is not None]
    return statistics.median(found) if found else None


def _share(row: dict, limit: str) -> float | None:
    return _number(mapping(row.get("clocks_limited")).get(limit))


def _span(values: list[float], unit: str) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}{unit}" if lo == hi else f"{lo:.0f}–{hi:.0f}{unit}"


def _link(row: dict, device: dict) -> list[tuple[str, str]]:
    """The PCIe link as sampled during a host copy, against what the GPU and its slot can reach."""
    under = mapping(row.get("pcie_under_load"))
    gen, width = _number(under.get("gen")), _number(under.get("width"))
    gen_max, width_max = _number(device.get("pcie_gen_max")), _number(device.get("pcie_width_max"))
    short = [f"{name}{top:.0f}" for name, now, top in (("Gen", gen, gen_max), ("x", width, width_max))
             if now and top and now < top]
    found = []
    if short and gen and width:
        found.append((CAUSE, f"its link ran at Gen{gen:.0f} x{width:.0f} under load (max {' '.join(short)})"))
    replays = _number(row.get("pcie_replays"))
    if replays:
        found.append((CONTRIBUTES, f"PCIe replays rose by {replays:.0f} during the run"))
    return found


def _numa(row: dict, device: dict) -> list[tuple[str, str]]:
    host, gpu = _number(row.get("host_numa_node")), _number(device.get("numa_node"))
    if host is None or gpu is None or host == gpu:
        return []
    return [(CAUSE, f"host buffer on NUMA node {host:.0f}, GPU on node {gpu:.0f}")]


def _power(row: dict, device: dict, peers: list[dict], same_model: list[dict]) -> list[tuple[str, str]]:
    """A power limit below its peers' (an administrator's cap, a board set low), with the share of the time
    it held the clocks; or, under the same limit, far longer power-limited than its peers."""
    mine = _number(device.get("power_limit_w"))
    theirs = [v for d in same_model if (v := _number(d.get("power_limit_w"))) is not None]
    share = _share(row, "power")
    held = f", clocks power-limited {share:.0%} of the time" if share is not None else ""
    if mine and theirs and mine < statistics.median(theirs) * (1 - POWER_LIMIT_BELOW):
        return [(CAUSE, f"power limit {mine:.0f} W (peers {_span(theirs, ' W')}){held}")]
    others = _peers_median([_share(p, "power") for p in peers])
    if share is not None and share >= LIMIT_NAMED_FROM and others is not None:
        if share - others >= LIMIT_NAMED_FROM:
            return [(CONTRIBUTES, f"clocks power-limited {share:.0%} of the time (peers {others:.0%})")]
    return []


def _thermal(row: dict, peers: list[dict]) -> list[tuple[str, str]]:
    found = []
    temp = _number(row.get("temp_c_max"))
    for limit, words in (("thermal", "thermal slowdown"), ("hw_slowdown", "hardware slowdown")):
        share = _share(row, limit)
        if share is None or share < LIMIT_NAMED_FROM:
            continue
        others = _peers_median([_share(p, limit) for p in peers]) or 0.0
        hot = f", {temp:.0f} °C" if temp is not None else ""
        grade = CAUSE if share - others >= LIMIT_NAMED_FROM else CONTRIBUTES
        found.append((grade, f"{words} {share:.0%} of the time{hot}"))
    return found


def _neighbours(row: dict) -> list[tuple[str, str]]:
    """Another process on the GPU when the benchmark started, and ECC errors counted during the run."""
    found = []
    others = row.get("other_processes")
    procs = mapping(others) or ({"count": len(others)} if isinstance(others, list) else {})
    count, memory = _number(procs.get("count")), _number(procs.get("memory_bytes"))
    if count:
        who = "another process" if count == 1 else f"{count:.0f} other processes"
        found.append((CONTRIBUTES, f"{who} held {memory / 2**30:.0f} GiB" if memory else f"{who} ran on it"))
    ecc = mapping(row.get("ecc_errors"))  # {"corrected": n, "uncorrected": n} (suite.telemetry)
    total = sum(v for v in map(_number, ecc.values()) if v)
    if total:
        worse = _number(ecc.get("uncorrected"))
        found.append((CONTRIBUTES, f"ECC errors rose by {total:.0f} during the run"
                      + (f" ({worse:.0f} uncorrected)" if worse else "")))
    return found


def _clock(row: dict, peers: list[dict]) -> list[tuple[str, str]]:
    mine = _number(mapping(row.get("sm_clock_mhz")).get("median"))
    others = _peers_median([mapping(p.get("sm_clock_mhz")).get("median") for p in peers])
    if mine is None or not others or mine >= others * (1 - CLOCK_BELOW):
        return []
    return [(CAUSE, f"SM clock median {mine:.0f} MHz (peers {others:.0f} MHz)")]


def causes(row: dict, peers: list[dict], device: dict, same_model: list[dict]) -> list[dict]:
    """The graded causes of one result's finding: `row` the result (a table row), `peers` its peers' rows,
    `device` its GPU's inventory, `same_model` the inventory of the run's other GPUs of its model."""
    host = row.get("route_") in HOST_LINKS  # where the PCIe link and the host buffer's NUMA node decide the rate
    found = (_link(row, device) + _numa(row, device) if host else _power(row, device, peers, same_model))
    found += _thermal(row, peers) + _neighbours(row)
    if not any(grade == CAUSE for grade, _ in found):  # the clock is how the causes above act, not another
        found = _clock(row, peers) + found
    return [{"grade": grade, "text": text} for grade, text in found]


def with_causes(text: str, found: list[dict]) -> str:
    """'cuda:3 h2d 26.1 GB/s, peers 55.0–55.3: its link ran at Gen5 x8 under load (max x16)'."""
    strong = [c["text"] for c in found if c["grade"] == CAUSE]
    weak = [c["text"] for c in found if c["grade"] != CAUSE]
    text += f": {'; '.join(strong)}" if strong else ""
    return text + (f" ({CONTRIBUTES}: {'; '.join(weak)})" if weak else "")


def explain(rows: pd.DataFrame, loaded, findings: list[Finding], peers_by: list[str]) -> None:
    """Each result's finding with the causes its run recorded: in `causes`, and named in its text. `peers_by`:
    the columns whose values a result's peers share (run, GPU model, benchmark but the device)."""
    at = {key: i for i, key in enumerate(zip(rows["label"], rows["name"]))}
    judged = [(f, at[(f.run, f.benchmark)]) for f in findings
              if f.kind in JUDGED_KINDS and (f.run, f.benchmark) in at]
    if not judged:
        return
    groups = rows.groupby(peers_by, sort=False).indices
    keys = list(zip(*(rows[column] for column in peers_by)))
    peers_of = {i: groups.get(keys[i], [i]) for _, i in judged}
    # Only the flagged results and their peers as dicts: a fleet's whole table would take seconds.
    needed = sorted({j for group in peers_of.values() for j in group})
    records = dict(zip(needed, rows.iloc[needed].to_dict("records")))
    for f, i in judged:
        row = records[i]
        peers = [records[j] for j in peers_of[i] if records[j]["subject"] != row["subject"]]
        f.causes = causes(row, peers, *_device_and_model(loaded.machines[f.run].devices, f.device))
        f.text = with_causes(f.text, f.causes)


def _device_and_model(devices: list[dict], device_id: str) -> tuple[dict, list[dict]]:
    """A finding's GPU in its run's inventory, and the run's other GPUs of its model."""
    device = next((d for d in devices if str(d.get("id")) == device_id), {})
    return device, [d for d in devices if d is not device and d.get("kind") != "cpu"
                    and d.get("name") == device.get("name")]


def repeat_offenders(findings: list[Finding], now_on: dict[str, str]) -> list[dict]:
    """GPUs (by UUID, else serial) flagged in two runs or more, on whichever node each run was;
    `now_on`: UUID or serial -> the node whose latest run has the GPU ("" where none has it now)."""
    seen: dict[str, dict] = {}
    for f in findings:
        key = f.uuid or f.serial
        if f.kind not in JUDGED_KINDS or not key or not f.run:
            continue
        entry = seen.setdefault(key, {"uuid": f.uuid, "serial": f.serial, "now_on": now_on.get(key, ""),
                                      "runs": {}})
        run = entry["runs"].setdefault(f.run, {"run": f.run, "node": f.node, "device": f.device, "kinds": []})
        run["kinds"] = sorted({*run["kinds"], f.kind})
    return [{**e, "runs": sorted(e["runs"].values(), key=lambda r: r["run"])}
            for _, e in sorted(seen.items()) if len(e["runs"]) >= 2]


def offender_line(entry: dict) -> str:
    """'repeat offender GPU-5a1c… (serial 1652…): flagged in 3 runs: node-7 cuda:2 (straggler), …'."""
    who = entry["uuid"] or f"serial {entry['serial']}"
    who += f" (serial {entry['serial']})" if entry["uuid"] and entry["serial"] else ""
    runs = ", ".join(f"{r['node']} {r['device']} ({', '.join(r['kinds'])}; {r['run']})"
                     for r in entry["runs"])
    return f"repeat offender {who}: flagged in {len(entry['runs'])} runs: {runs}"
