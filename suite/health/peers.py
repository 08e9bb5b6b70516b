"""Health's checks against peers: a device slower than the others of its model, a link down or narrow, a
machine slower than its fleet."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pandas as pd

from suite.compare_verdict import NOISE_IQR_SHARE
from suite.health.findings import FLEET_MARGIN, FLEET_MIN_MACHINES, KEY_SEP, STRAGGLER_MARGIN, TUKEY_K
from suite.health.findings import Finding, clocks_held, format_figure, nccl_said
from suite.results import LoadedResults


def _median_of_others(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """For each element, the median of the other elements of its group (NaN for a group of one)."""
    order = np.lexsort((values, groups))
    v, g = values[order], groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, len(g)])
    start = np.repeat(starts, sizes)
    n = np.repeat(sizes, sizes)
    rank = np.arange(len(v)) - start
    m = n - 1  # the others

    def other(k: np.ndarray) -> np.ndarray:
        # k-th smallest of the others: skip this element's own position
        pos = start + k + (k >= rank)
        return v[np.clip(pos, 0, len(v) - 1)]

    lo_k, hi_k = (m - 1) // 2, m // 2
    med = (other(lo_k) + other(hi_k)) / 2
    med = np.where(m >= 1, med, np.nan)
    out = np.empty_like(med)
    out[order] = med
    return out


def stragglers(rows: pd.DataFrame, findings: list[Finding]) -> set[str]:
    """Flag a device slower than its peers; the nodes that had a device with a peer to compare with."""
    peers = rows[(rows["subject"] != "") & rows["speed"].notna() & (rows["model"] != "")]
    peers = peers.drop_duplicates(["label", "peer_key", "subject"])
    if peers.empty:
        return set()
    group = pd.factorize(peers["label"] + KEY_SEP + peers["model"] + KEY_SEP + peers["peer_key"])[0]
    checked = set(peers["node"][np.bincount(group)[group] >= 2])
    speed = peers["speed"].to_numpy(dtype=float)
    others = _median_of_others(speed, group)
    noise_peers = peers.groupby(group)["noise"].transform("median").to_numpy()
    shortfall = (others - speed) / others
    flagged = (speed < others * (1 - STRAGGLER_MARGIN)) & (
        shortfall > NOISE_IQR_SHARE * (peers["noise"].to_numpy() + noise_peers)
    )
    hits = peers[flagged].assign(group_=group[flagged], others_=others[flagged], short_=shortfall[flagged])
    # Each group's members, found by bisection in the rows sorted by group (no Python list per group).
    by_group = np.argsort(group, kind="stable")
    sorted_groups = group[by_group]
    values = peers["value"].to_numpy()
    for r in hits.sort_values(
        ["node", "subject", "case", "short_"], ascending=[True, True, True, False]
    ).itertuples(index=False):
        own = r.value
        lo_at, hi_at = np.searchsorted(sorted_groups, [r.group_, r.group_ + 1])
        rest = [values[i] for i in by_group[lo_at:hi_at]]
        rest.remove(own) if own in rest else None
        lo, hi = min(rest), max(rest)
        text = (f"{r.name} {format_figure(own, r.unit)}, peers {format_figure(lo, r.unit)}–"
                f"{format_figure(hi, r.unit)}{clocks_held(r)}{r.numa_note_}")
        findings.append(Finding("straggler", r.node, r.subject, r.case, text, own, float(np.median(rest)),
                                100 * (1 - r.short_), benchmark=r.name, run=r.label))
    return checked


def concurrent_stragglers(rows: pd.DataFrame, findings: list[Finding]) -> None:
    """Flag a GPU slower than the others while every GPU ran one case at once (its `per_device_tflops`): heat,
    power and NUMA placement show under a whole node's load even where each GPU alone reads fine."""
    if "per_device_tflops" not in rows:
        return
    for r in rows[rows["per_device_tflops"].notna()].itertuples(index=False):
        rates = r.per_device_tflops if isinstance(r.per_device_tflops, dict) else json.loads(r.per_device_tflops)
        for device, rate in rates.items():
            rest = [v for d, v in rates.items() if d != device]
            others = statistics.median(rest) if rest else math.nan
            if rate < others * (1 - STRAGGLER_MARGIN):
                text = (f"{r.name}: {device} {format_figure(rate, 'TFLOP/s')} while all {len(rates)} GPUs ran at "
                        f"once, the others {format_figure(min(rest), 'TFLOP/s')}–{format_figure(max(rest), 'TFLOP/s')}")
                findings.append(Finding("straggler", r.node, device, r.case, text, rate, others,
                                        100 * rate / others, benchmark=r.name, run=r.label))


def _whole(d: dict, key: str, valid: frozenset | None = None) -> int | None:
    """An NVML count as recorded; None where NVML had none to give (absent, or a value no link can have)."""
    value = d.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and (valid is None or value in valid)
    return value if ok else None


def _by_model(machine, usable) -> list[list[dict]]:
    """A run's GPUs that record what a check reads, grouped by model."""
    groups: dict[str, list[dict]] = {}
    for d in machine.devices:
        if d.get("kind") != "cpu" and usable(d):
            groups.setdefault(str(d.get("name") or ""), []).append(d)
    return list(groups.values())


def _short_of_peers(gpus: list[dict], d: dict, key: str, unit: str = "", valid: frozenset | None = None):
    """(its value, its peers' median, their span) where GPU `d`'s `key` is below the median of the others'."""
    mine = _whole(d, key, valid)
    others = [v for g in gpus if g is not d and (v := _whole(g, key, valid)) is not None]
    if mine is None or not others or mine >= statistics.median(others):
        return None
    span = f"{unit}{min(others)}" + (f"–{max(others)}" if min(others) != max(others) else "")
    return mine, float(statistics.median(others)), span


def _link_finding(label: str, node: str, d: dict, family: str, text: str, mine: int, expected: float) -> Finding:
    return Finding("straggler", node, str(d.get("id")), family, text, float(mine), expected, 100 * mine / expected,
                   run=label)


def nvlinks_down(loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> set[str]:
    """A GPU with fewer active NVLinks than the other GPUs of its model in the run, where those reach
    NVSwitches (machine_info's `nvlinks_active` / `nvlinks_to_switch`, from NVML): a link is down, and every
    peer copy and collective through it is slower. Only on a switch fabric, where every GPU has the same
    links: on PCIe cards, which pairs carry an NVLink bridge is the builder's choice, not a fault."""
    checked: set[str] = set()
    for label in labels:
        machine = loaded.machines[label]
        counted = lambda d: None not in (_whole(d, "nvlinks_active"), _whole(d, "nvlinks_to_switch"))  # noqa: E731
        for gpus in _by_model(machine, counted):
            if len(gpus) > 1 and any(d["nvlinks_to_switch"] for d in gpus):
                checked.add(machine.node)
            for d in gpus:
                short = _short_of_peers(gpus, d, "nvlinks_active")
                if short and statistics.median(g["nvlinks_to_switch"] for g in gpus if g is not d):
                    active, expected, peers = short
                    findings.append(_link_finding(
                        label, machine.node, d, "nvlink",
                        f"nvlinks_active {active}, peers {peers}: {expected - active:g} NVLink(s) down (NVML)",
                        active, expected))
    return checked


# What a PCIe link can be: anything else (NVML's 0xFFFFFFFF for "not available") is no figure to judge.
PCIE_WIDTHS = frozenset({1, 2, 4, 8, 12, 16, 32})
PCIE_GENERATIONS = frozenset(range(1, 8))
PCIE_KEYS = (("pcie_width_max", "x", PCIE_WIDTHS), ("pcie_gen_max", "gen ", PCIE_GENERATIONS))


def pcie_narrow(loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> set[str]:
    """A GPU whose PCIe link is narrower, or of an older generation, than the other GPUs of its model in the
    run (machine_info's `pcie_width_max` / `pcie_gen_max`: what the GPU and its slot can reach, from NVML): a
    riser or slot at x4. Every host copy through it is capped (x4 is a quarter of x16). The idle
    `*_current` values are not judged: a GPU at rest lowers its link's generation to save power (so a link
    that trained down in an x16 slot is not caught here; its host copies are, as a straggler)."""
    checked: set[str] = set()
    for label in labels:
        machine = loaded.machines[label]
        for gpus in _by_model(machine, lambda d: any(_whole(d, key, valid) for key, _, valid in PCIE_KEYS)):
            if len(gpus) < 2:
                continue
            checked.add(machine.node)
            for d in gpus:
                for key, unit, valid in PCIE_KEYS:
                    short = _short_of_peers(gpus, d, key, unit, valid)
                    if short:
                        mine, expected, peers = short
                        findings.append(_link_finding(
                            label, machine.node, d, "pcie",
                            f"{key} {unit}{mine}, peers {peers} (NVML): its host copies are capped below theirs "
                            "(its slot or riser)", mine, expected))
    return checked


def _choices(loaded: LoadedResults, label: str) -> dict[str, str]:
    """A run's NCCL choices (nccl_said), with the algorithm/protocol pairs its cases took (extra_info.nccl_algo)."""
    rows = loaded.table[(loaded.table["label"] == label) & loaded.table["nccl_algo"].notna()]
    taken = sorted(set(rows["nccl_algo"].astype(str) + "/" + rows["nccl_proto"].astype(str)))
    return {**nccl_said(loaded.machines[label].distributed), **({"algo/proto": ", ".join(taken)} if taken else {})}


def nccl_differs(loaded: LoadedResults, label: str, others: list[str]) -> str:
    """` (NCCL chose: nvls no here, yes on b, c)`: what NCCL said it chose in this run and otherwise in the other
    machines' (NVLS or not moves all-reduce busbw by a third); "" where nothing recorded differs."""
    said = {other: _choices(loaded, other) for other in others}
    parts = []
    for key, value in _choices(loaded, label).items():
        theirs: dict[str, list[str]] = {}
        for other, choices in said.items():
            if key != "unknown" and choices.get(key, value) != value:
                theirs.setdefault(choices[key], []).append(loaded.machines[other].host)
        parts += [f"{key} {value} here, {v} on {', '.join(hosts[:3])}" + (f" and {len(hosts) - 3} more" if
                  len(hosts) > 3 else "") for v, hosts in theirs.items()]
    return f" (NCCL chose: {'; '.join(parts)})" if parts else ""


def fleet(rows: pd.DataFrame, loaded: LoadedResults, findings: list[Finding]) -> set[str]:
    """Flag a machine slower than its fleet; the nodes that had a fleet to compare with."""
    rows = rows[rows["speed"].notna() & (rows["speed"] > 0)]
    rows = rows.assign(fleet_=rows["label"].map({k: m.gpu_model for k, m in loaded.machines.items()}))
    per = rows.drop_duplicates(["label", "match_key"])
    counts = per.groupby(["fleet_", "match_key"])["label"].transform("nunique")
    per = per[counts >= FLEET_MIN_MACHINES]
    if per.empty:
        return set()
    checked = set(per["node"])
    median = per.groupby(["fleet_", "match_key"])["speed"].transform("median")
    per = per.assign(log_=np.log(per["speed"] / median))
    gm = (
        per.groupby(["fleet_", "case", "label"], sort=True)
        .agg(log=("log_", "mean"), n=("log_", "size"), node=("node", "first"))
        .reset_index()
    )
    gm["speed"] = np.exp(gm["log"])
    gm = gm.join(gm.groupby(["fleet_", "case"])["speed"].agg(["count", "min", "max"]), on=["fleet_", "case"])
    # Each machine against the OTHER machines of its model: their median and their lower fence. With the
    # machine itself among them, three machines could never flag one (its own speed drags q1 and the IQR down
    # so far that the fence stays below it, however slow). Every case has FLEET_MIN_MACHINES or more.
    others = []
    for _, speeds in gm.groupby(["fleet_", "case"], sort=False)["speed"]:
        values = speeds.to_numpy()
        for i, index in enumerate(speeds.index):
            rest = np.delete(values, i)
            q1, q3 = np.percentile(rest, [25, 75])
            others.append((index, np.median(rest), q1 - TUKEY_K * (q3 - q1)))
    gm = gm.join(pd.DataFrame(others, columns=["i", "median", "fence"]).set_index("i"))
    low = (
        (gm["count"] >= FLEET_MIN_MACHINES)
        & (gm["speed"] < gm["median"] * (1 - FLEET_MARGIN))
        & (gm["speed"] < gm["fence"])
    )
    for r in gm[low].to_dict("records"):
        text = (
            f"{r['case']}: {r['speed'] / r['median']:.2f}× the median of the other {int(r['count']) - 1} "
            f"{r['fleet_']} machines (geometric mean over {int(r['n'])} benchmarks; {int(r['count'])} machines "
            f"span {r['min']:.2f}–{r['max']:.2f}×)"
        )
        peers = gm[(gm["fleet_"] == r["fleet_"]) & (gm["case"] == r["case"]) & (gm["label"] != r["label"])]
        text += nccl_differs(loaded, r["label"], list(peers["label"]))
        relative = float(r["speed"] / r["median"])
        findings.append(Finding("fleet", r["node"], "", r["case"], text, relative, 1.0, 100 * relative))
    return checked

