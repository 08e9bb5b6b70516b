"""The health checks over the tidy table: expected figures, stragglers within a run, the fleet's spread."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from suite.cases import family_read
from suite.compare import NOISE_IQR_SHARE
from suite.limits import limits_held
from suite.health.expect import HOST_LINKS, OK_AT_PCT, Expectations, Measure, measures
from suite.results import (
    FOREIGN_CASE,
    OUR_TOOL,
    LoadedResults,
    latest_runs,
    like_ours,
    peer_keys,
    route_kinds,
)

# A device is a straggler when it is more than this far below the median of its peers (same model, same
# benchmark, same run), and further than their noise. MAMF's author saw a 5%+ matmul spread between healthy
# GPUs of one node; twice that is beyond it, while faults seen in the field are far larger (a PCIe link at
# a quarter of its peers', nvbandwidth issue 6).
STRAGGLER_MARGIN = 0.10
# A machine whose geometric-mean speed in a family lies more than this below the fleet's median machine of
# its GPU model, and below the fleet's own spread (Tukey's lower fence), is flagged: the same margin as for
# devices, since identical machines differ by what identical GPUs do.
FLEET_MARGIN = 0.10
TUKEY_K = 1.5  # lower fence = q1 - 1.5 x IQR: the usual outlier rule, robust to the outlier itself
# With fewer machines of one model there is no fleet to speak of: two machines cannot say which is slow.
FLEET_MIN_MACHINES = 3
MAX_EXAMPLES = 3  # findings shown per device and family; the JSON keeps every one
KINDS = ("wrong", "invalid", "low", "straggler", "fleet", "missing")
# missing is reported, not failed: a run may skip a case. wrong: another tool's data check failed
# (nccl-tests #wrong). invalid: a result whose numbers are missing, not finite, zero or negative (the table's
# `invalid`); it is judged by no other check.
DEFAULT_FAIL_ON = ("wrong", "invalid", "low", "straggler", "fleet")
NO_RESULTS = "no results"  # status of a node whose latest run measured nothing: neither healthy nor judged
# Status of a node no check applied to: no expected figure for its results, no peer device of its model to
# compare with, no fleet of FLEET_MIN_MACHINES of its kind (a CPU-only run, another tool's timings). Calling
# it healthy would be a verdict nothing supports.
NOT_JUDGED = "not judged"

# Joins a machine label and a device id (or more) into one key; not NUL (see its use).
KEY_SEP = "\x1f"


@dataclass
class Finding:
    """One thing wrong (or absent), with the numbers that show it."""

    kind: str
    node: str
    device: str
    family: str
    text: str
    measured: float = math.nan
    reference: float = math.nan  # expected figure, peers' median, or fleet median (1.0 for fleet ratios)
    pct: float = math.nan
    source: str = ""
    # The hardware behind `device` (PCI address, UUID) as the run recorded it: cuda:N is renumbered by
    # CUDA_VISIBLE_DEVICES (Slurm, Kubernetes), so it alone does not say which board to pull.
    identity: str = ""


@dataclass
class NodeVerdict:
    """One node: its runs, findings, and expected-figure table."""

    node: str
    gpu_model: str
    labels: list[str]
    tools: list[str]
    findings: list[Finding] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # files of its judged runs that hold no results
    checks: set[str] = field(default_factory=set)  # the checks that applied: expected, straggler, fleet
    partial: list[str] = field(default_factory=list)  # its judged runs that a kill cut short (partial files)

    def status(self, fail_on: tuple[str, ...]) -> str:
        if self.empty:  # a run that measured nothing says nothing of the node's health
            return NO_RESULTS
        if any(f.kind in fail_on for f in self.findings):
            return "flagged"
        return "healthy" if self.checks or self.findings else NOT_JUDGED


@dataclass
class Health:
    """The fleet verdict: nodes in a stable order, and the pct_of_expected of every judged result row."""

    nodes: list[NodeVerdict]
    pct_of_expected: pd.Series
    judged_labels: list[str]
    warnings: list[str] = field(default_factory=list)  # how the runs judged were chosen, where it mattered

    def flagged(self, fail_on: tuple[str, ...]) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.status(fail_on) == "flagged"]

    def nothing_judged(self, fail_on: tuple[str, ...]) -> bool:
        return bool(self.nodes) and all(n.status(fail_on) == NOT_JUDGED for n in self.nodes)

    def as_dict(self, fail_on: tuple[str, ...]) -> dict:
        counts = {k: sum(f.kind == k for n in self.nodes for f in n.findings) for k in KINDS}
        unjudged = any(n.empty for n in self.nodes)
        return {
            "verdict": "flagged" if self.flagged(fail_on) else NO_RESULTS if unjudged
            else NOT_JUDGED if self.nothing_judged(fail_on) else "healthy",
            "fail_on": list(fail_on),
            "counts": {"nodes": len(self.nodes), "flagged": len(self.flagged(fail_on)), **counts},
            "tolerances": {
                "ok_at_pct_of_expected": OK_AT_PCT,
                "straggler_margin": STRAGGLER_MARGIN,
                "fleet_margin": FLEET_MARGIN,
                "fleet_min_machines": FLEET_MIN_MACHINES,
                "noise_iqr_share": NOISE_IQR_SHARE,
            },
            "nodes": [
                {
                    "node": n.node,
                    "gpu_model": n.gpu_model,
                    "status": n.status(fail_on),
                    "runs": n.labels,
                    "partial_runs": n.partial,
                    "tools": n.tools,
                    "checks": sorted(n.checks),
                    "findings": [_clean(vars(f)) for f in n.findings],
                    "expectations": [_clean(e) for e in n.expectations],
                }
                for n in self.nodes
            ],
        }


def _clean(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _fmt(value: float, unit: str) -> str:
    return f"{value:.3g} {unit}" if unit != "s" else f"{value * 1e6:.3g} µs"


# A slow result whose GPU a power, thermal, board or reliability limit held for at least this share of its
# run says so beside its numbers: the likely cause, read from NVML (devices.ClockWatch).
CLOCKS_HELD_SHOWN_FROM = 0.05
LIMIT_NAMES = {"power": "the power limit", "thermal": "(software) thermal slowdown",
               "board_limit": "a board limit", "reliability": "a reliability limit",
               "hw_thermal": "hardware thermal slowdown (clocks halved or more)",
               "hw_power_brake": "the hardware power brake (clocks halved or more)"}


def _numa_note(device: str, node: object, cpu: dict) -> str:
    """Why a host copy of `device` may have come from far memory, from the inventory (the GPU's NUMA node;
    the nodes the run's CPUs and memory could use); '' where the machine has one node with CPUs or the
    inventory does not say. Likely, not certain: the memory policy and PyTorch's reuse of pinned blocks
    decide where each buffer lands."""
    nodes, used = cpu.get("numa_nodes"), cpu.get("numa_nodes_used")
    mems = cpu.get("numa_mems_allowed")
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (node, nodes))
    if not whole or nodes < 2 or not isinstance(used, list) or not used:  # type: ignore[operator]
        return ""
    fix = f"numactl --cpunodebind={node} --membind={node} measures the near path"
    if isinstance(mems, list) and mems and node not in mems:
        where = ",".join(str(n) for n in mems)
        return (f"; {device} is on NUMA node {node}, and this run's memory could come only from "
                f"node{'s' if len(mems) > 1 else ''} {where} ({fix})")
    if node not in used:
        where = ",".join(str(n) for n in used)
        return (f"; {device} is on NUMA node {node}, this run's CPUs on node{'s' if len(used) > 1 else ''} "
                f"{where}: its host memory was likely on another node ({fix})")
    if len(used) > 1:
        return (f"; this run was not bound to {device}'s NUMA node ({node}): its host memory may have been "
                f"on another ({fix})")
    return ""


def _held(row) -> str:
    """'; clocks held back 62% of the time by thermal slowdown, 30% by the power limit (NVML)' for a row
    whose GPU a limit held for CLOCKS_HELD_SHOWN_FROM of its warm-up and timing or more, else ''."""
    limits = {n: s for n, s in limits_held(row._asdict()).items() if s >= CLOCKS_HELD_SHOWN_FROM}
    if not limits:
        return ""
    parts = [f"{share:.0%} of the time by {LIMIT_NAMES[n]}" for n, share in limits.items()]
    return "; clocks held back " + ", ".join(parts) + " (NVML)"


def _prepare(loaded: LoadedResults, labels: list[str]) -> pd.DataFrame:
    """The latest run of each node and tool, with node, subject device, its model, speed and noise."""
    table = loaded.table
    # An imported figure measured the suite's way, not the better of the ways a tool measured it.
    rows = like_ours(table[table["label"].isin(labels) & (table["case"] != FOREIGN_CASE)]).copy()
    machines = loaded.machines
    rows["node"] = rows["label"].map({k: m.node for k, m in machines.items()})
    rows["route_"] = route_kinds(rows["src"], rows["dst"])
    rows["peer_key"], rows["subject"] = peer_keys(rows, rows["route_"])
    # GPU pairs are peers only over the same kind of link: on a node mixing NVLink and PCIe, or PCIe switches
    # and the sockets' interconnect (SYS), the slower pairs are slower by design. Every NVLink pair is one
    # kind whatever its count: a pair with links down (NV6 among NV18) or without peer access stays among
    # the NVLink pairs, and stands out as it should.
    link = rows["link"].where(rows["link"].map(type) == str, "").astype(str)
    link = link.where(~link.str.startswith("NV"), "NVLink")
    rows["peer_key"] = rows["peer_key"].where(rows["route_"] != "peer", rows["peer_key"] + "|" + link)
    # The subject's first device (cuda:0 of cuda:0->cuda:1) names the model and PCIe generation; one lookup
    # per distinct (label, device), mapped back onto the rows.
    # A peer route's subject is `src->dst`: its first device is the source.
    first = rows["subject"].where(rows["route_"] != "peer", rows["src"].astype(object)).astype(str)
    # The unit separator, not NUL: pandas < 3 (object dtype) silently drops a NUL in string concatenation, so
    # no key matched and no device had a model: health judged nothing.
    pair = rows["label"] + KEY_SEP + first
    names, gens, numa = {}, {}, {}
    for label in labels:
        cpu = next((d for d in machines[label].devices if d.get("kind") == "cpu"), {})
        for d in machines[label].devices:
            key = f"{label}{KEY_SEP}{d.get('id')}"
            names[key] = str(d.get("name") or "")
            gens[key] = d.get("pcie_gen_max")
            numa[key] = _numa_note(str(d.get("id")), d.get("numa_node"), cpu)
    rows["model"] = pair.map(names).fillna("").astype(object)
    rows["pcie_gen"] = pair.map(gens).astype(object)
    # A host copy's GPU on another NUMA node than the run's CPUs: the likely cause of a slow host link. Not
    # for a copy whose host side the run bound to its GPU's node (host_numa_node): its memory was near.
    host = rows["route_"].isin(["h2d", "d2h"])
    if "host_numa_node" in rows:
        host &= rows["host_numa_node"].isna()
    rows["numa_note_"] = pair.map(numa).where(host, "").fillna("").astype(object)
    rate = rows["metric"]
    # Higher is better everywhere: the family's rate, or calls per second where a benchmark has no rate.
    rows["speed"] = rate.where(rate > 0, 1.0 / rows["median"].where(rows["median"] > 0))
    rows["unit"] = rows["metric_unit"].where(rate > 0, "s")
    rows["value"] = rate.where(rate > 0, rows["median"])
    rows["noise"] = (rows["iqr"] / rows["median"]).where(rows["median"] > 0).fillna(0.0)
    rows["precision_"] = rows["precision"].fillna(rows["dtype"]) if "precision" in rows else rows.get("dtype")
    return rows


def _largest(values: object) -> float:
    """The largest size a config list selects (sizes are resolved to bytes in a results file)."""
    sizes = (
        [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if isinstance(values, list)
        else []
    )
    return max(sizes, default=math.inf if values else 0)  # unresolved text: assume it may be large enough


def selected(config: dict, measure: Measure) -> bool | None:
    """Whether a run's config asked for results this measure judges; None where no config says (imports)."""
    cases = config.get("cases") if isinstance(config.get("cases"), dict) else None
    if not cases:
        return None
    for family in measure.families:
        section = cases.get(family)
        if not isinstance(section, dict) or section.get("enabled") is False:
            continue
        wanted = dict(measure.where)
        if "precision" in wanted and wanted["precision"] not in (section.get("dtypes") or []):
            continue
        if "op" in wanted and wanted["op"] not in (section.get("ops") or []):
            continue
        if "memory" in wanted and wanted["memory"] not in (section.get("memory") or [wanted["memory"]]):
            continue
        if "direction" in wanted and wanted["direction"] not in (section.get("directions") or ["uni"]):
            continue
        if measure.min_bytes and _largest(section.get("sizes") or []) < measure.min_bytes:
            continue
        if measure.min_flops:
            shapes = section.get("shapes") or []
            flops = [
                2 * math.prod(s) for s in shapes if isinstance(s, list) and all(isinstance(x, int) for x in s)
            ]
            if flops and max(flops) < measure.min_flops:
                continue
        return True
    return False


def _expected(
    rows: pd.DataFrame,
    loaded: LoadedResults,
    labels: list[str],
    expectations: Expectations,
    findings: list[Finding],
    tables: dict[str, list[dict]],
) -> pd.Series:
    """pct_of_expected per qualifying row; low/missing findings; per-node tables of the judged figures."""
    pct = pd.Series(np.nan, index=rows.index)
    measured_families = rows.groupby("label")["case"].unique().map(set).to_dict()
    for measure_name, measure in measures().items():
        mask = rows["case"].isin(measure.families) & (
            rows[measure.rate] > 0 if measure.rate in rows else False
        )
        if measure.route:
            mask &= rows["route_"] == measure.route
        for key, wanted in measure.where:
            column = "precision_" if key == "precision" else key
            mask &= rows[column] == wanted if column in rows else False
        if measure.min_flops:
            mask &= rows["flops"] >= measure.min_flops
        if measure.min_bytes:
            mask &= rows["bytes"] >= measure.min_bytes
        sub = rows[mask]
        judged = sub.iloc[:0]
        if not sub.empty:
            judged = _judge_measure(sub, loaded, measure_name, measure, expectations, pct, findings, tables)
        if not measure.per_machine:
            _missing(loaded, labels, measured_families, judged, measure_name, measure, expectations, findings)
    return pct


def _judge_measure(
    sub: pd.DataFrame,
    loaded: LoadedResults,
    measure_name: str,
    measure: Measure,
    expectations: Expectations,
    pct: pd.Series,
    findings: list[Finding],
    tables: dict[str, list[dict]],
) -> pd.DataFrame:
    """Judge one measure's qualifying rows against their figures; the rows that had a figure."""
    if measure.per_machine:
        sub = sub.assign(
            model=sub["label"].map({k: m.gpu_model for k, m in loaded.machines.items()}),
            subject=sub["world_size"].map(lambda w: "" if pd.isna(w) else f"{w:.0f} GPUs"),
        )
    # One lookup per distinct (model, PCIe generation, world size), not per row.
    gens = [g if isinstance(g, int) and not isinstance(g, bool) else None for g in sub["pcie_gen"]]
    sizes = (
        [None if pd.isna(w) else int(w) for w in sub["world_size"]]
        if measure.per_machine
        else [None] * len(sub)
    )
    lookup = list(zip(sub["model"], gens, sizes))
    figures = {k: expectations.figure(k[0], measure_name, k[1], k[2]) for k in set(lookup)}
    fig_of = pd.Series([figures[k] for k in lookup], index=sub.index, dtype=object)
    expected = fig_of.map(lambda f: f.value if f else np.nan).astype(float)
    share = sub[measure.rate] / expected * 100
    pct.loc[sub.index] = share.to_numpy()
    if measure.route in HOST_LINKS:
        _no_figure(sub[expected.isna()], measure_name, measure, expectations, tables)
    judged = sub.assign(expected_=expected, pct_=share, fig_=fig_of).dropna(subset=["expected_"])
    if judged.empty:
        return judged
    best = judged.loc[judged.groupby(["label", "subject"], sort=True)["pct_"].idxmax()]
    for r in best.itertuples(index=False):
        fig, rate = r.fig_, getattr(r, measure.rate)
        verdict = "ok" if r.pct_ >= OK_AT_PCT else "low"
        tables.setdefault(r.node, []).append(
            {
                "device": r.subject,
                "measure": measure_name,
                "measured": rate,
                "expected": fig.value,
                "unit": measure.unit,
                "pct_of_expected": r.pct_,
                "verdict": verdict,
                "source": fig.source,
                "benchmark": r.name,
            }
        )
        if verdict == "low":
            findings.append(
                Finding(
                    "low",
                    r.node,
                    r.subject,
                    r.case,
                    f"{measure_name} {_fmt(rate, measure.unit)} = {r.pct_:.0f}% of the expected "
                    f"{_fmt(fig.value, measure.unit)} (best: {r.name}; {fig.source}){_held(r)}{r.numa_note_}",
                    rate,
                    fig.value,
                    r.pct_,
                    fig.source,
                )
            )
    return judged


def _no_figure(
    sub: pd.DataFrame, measure_name: str, measure: Measure, expectations: Expectations, tables: dict
) -> None:
    """Host-link results of a known model whose link has no figure (PCIe gen3, say): listed, not judged."""
    if sub.empty:
        return
    best = sub.loc[sub.groupby(["label", "subject"], sort=True)[measure.rate].idxmax()]
    for r in best.itertuples(index=False):
        model = expectations.model_of(r.model)
        if model is None:
            continue
        gen = r.pcie_gen if isinstance(r.pcie_gen, int) else None
        link = (
            f"pcie{gen}"
            if gen and str(model.get("host_link", "")).startswith("pcie")
            else model.get("host_link", "")
        )
        tables.setdefault(r.node, []).append(
            {
                "device": r.subject,
                "measure": measure_name,
                "measured": getattr(r, measure.rate),
                "expected": None,
                "unit": measure.unit,
                "pct_of_expected": None,
                "verdict": "no figure",
                "source": f"no expected {measure_name} figure for link {link or 'unknown'}; "
                "add one with --expect",
                "benchmark": r.name,
            }
        )


def _could_measure(machine, measure: Measure) -> bool:
    """Whether a run launched as this one was could hold the measure's results, whatever its config asked:
    a torchrun job runs only the families that run under torchrun (its config still lists every family), a
    single process never runs them, and a job on 2 nodes has no 1-node result."""
    torchrun = any(family_read(family, "TORCHRUN") for family in measure.families)
    if bool(machine.distributed) != torchrun and machine.tool == OUR_TOOL:
        return False
    nnodes = dict(measure.where).get("nnodes")
    return nnodes is None or not machine.distributed or machine.distributed.get("nnodes") in (None, nnodes)


def _missing(
    loaded: LoadedResults,
    labels: list[str],
    measured_families: dict[str, set],
    judged: pd.DataFrame,
    measure_name: str,
    measure: Measure,
    expectations: Expectations,
    findings: list[Finding],
) -> None:
    """A device with a figure, in a run that chose to measure this setting, but without a result to judge."""
    seen = set(zip(judged["label"], judged["subject"].str.split("->", n=1).str[0])) if len(judged) else set()
    for label in labels:
        machine = loaded.machines[label]
        if not _could_measure(machine, measure):
            continue
        chosen = selected(machine.config, measure)
        if chosen is False:
            continue  # the config did not ask for it: absence is a choice, not a gap
        if chosen is None and not measured_families.get(label, set()) & set(measure.families):
            continue
        if measure.route == "peer" and sum(machine.accelerators.values()) < 2:
            continue  # one GPU has no peer to copy to
        for d in machine.devices:
            if d.get("kind") == "cpu" or (label, str(d.get("id"))) in seen:
                continue
            fig = expectations.figure(str(d.get("name") or ""), measure_name, d.get("pcie_gen_max"))
            if fig is None:
                continue
            findings.append(
                Finding(
                    "missing",
                    machine.node,
                    str(d.get("id")),
                    measure.families[0],
                    f"{measure_name}: no result to judge (expected {_fmt(fig.value, measure.unit)}; "
                    f"the run has no {measure_name} at the size the figure needs)",
                    source=fig.source,
                )
            )


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


def _stragglers(rows: pd.DataFrame, findings: list[Finding]) -> set[str]:
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
        text = (
            f"{r.name} {_fmt(own, r.unit)}, peers {_fmt(lo, r.unit)}–{_fmt(hi, r.unit)}"
            if r.unit != "s"
            else f"{r.name} {_fmt(own, 's')}, peers {_fmt(lo, 's')}–{_fmt(hi, 's')}"
        ) + _held(r) + r.numa_note_
        findings.append(
            Finding(
                "straggler",
                r.node,
                r.subject,
                r.case,
                text,
                own,
                float(np.median(rest)),
                100 * (1 - r.short_),
            )
        )
    return checked


def _nvlinks_down(loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> set[str]:
    """A GPU with fewer active NVLinks than the other GPUs of its model in the run, where those reach
    NVSwitches (machine_info's `nvlinks_active` / `nvlinks_to_switch`, from NVML): a link is down, and every
    peer copy and collective through it is slower. Only on a switch fabric, where every GPU has the same
    links: on PCIe cards, which pairs carry an NVLink bridge is the builder's choice, not a fault."""

    def whole(d: dict, key: str) -> int | None:
        value = d.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    checked: set[str] = set()
    for label in labels:
        machine = loaded.machines[label]
        by_model: dict[str, list[tuple[str, int, int]]] = {}
        for d in machine.devices:
            active, to_switch = whole(d, "nvlinks_active"), whole(d, "nvlinks_to_switch")
            if d.get("kind") != "cpu" and active is not None and to_switch is not None:
                entry = (str(d.get("id")), active, to_switch)
                by_model.setdefault(str(d.get("name") or ""), []).append(entry)
        for gpus in by_model.values():
            if len(gpus) > 1 and any(s for _, _, s in gpus):
                checked.add(machine.node)
            for device, active, _ in gpus:
                others = [a for d, a, _ in gpus if d != device]
                switched = [s for d, _, s in gpus if d != device]
                if not others or not statistics.median(switched) or active >= statistics.median(others):
                    continue
                expected = float(statistics.median(others))
                peers = f"{min(others)}" if min(others) == max(others) else f"{min(others)}–{max(others)}"
                findings.append(Finding(
                    "straggler", machine.node, device, "nvlink",
                    f"nvlinks_active {active}, peers {peers}: {expected - active:g} NVLink(s) down (NVML)",
                    float(active), expected, 100 * active / expected))
    return checked


# What a PCIe link can be: anything else (NVML's 0xFFFFFFFF for "not available") is no figure to judge.
PCIE_WIDTHS = frozenset({1, 2, 4, 8, 12, 16, 32})
PCIE_GENERATIONS = frozenset(range(1, 8))


def _pcie_narrow(loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> set[str]:
    """A GPU whose PCIe link is narrower, or of an older generation, than the other GPUs of its model in the
    run (machine_info's `pcie_width_max` / `pcie_gen_max`: what the GPU and its slot can reach, from NVML): a
    riser or slot at x4. Every host copy through it is capped (x4 is a quarter of x16). The idle
    `*_current` values are not judged: a GPU at rest lowers its link's generation to save power (so a link
    that trained down in an x16 slot is not caught here; its host copies are, as a straggler)."""

    def whole(d: dict, key: str) -> int | None:  # a link's width or generation; else NVML had none to give
        value = d.get(key)
        valid = PCIE_WIDTHS if key == "pcie_width_max" else PCIE_GENERATIONS
        return value if isinstance(value, int) and not isinstance(value, bool) and value in valid else None

    checked: set[str] = set()
    for label in labels:
        machine = loaded.machines[label]
        by_model: dict[str, list[dict]] = {}
        for d in machine.devices:
            if d.get("kind") != "cpu" and (whole(d, "pcie_width_max") or whole(d, "pcie_gen_max")):
                by_model.setdefault(str(d.get("name") or ""), []).append(d)
        for gpus in by_model.values():
            if len(gpus) < 2:
                continue
            checked.add(machine.node)
            for d in gpus:
                for key, unit in (("pcie_width_max", "x"), ("pcie_gen_max", "gen ")):
                    mine = whole(d, key)
                    others = [v for g in gpus if g is not d and (v := whole(g, key)) is not None]
                    if mine is None or not others or mine >= statistics.median(others):
                        continue
                    expected = float(statistics.median(others))
                    peers = (f"{unit}{min(others)}" if min(others) == max(others)
                             else f"{unit}{min(others)}–{max(others)}")
                    findings.append(Finding(
                        "straggler", machine.node, str(d.get("id")), "pcie",
                        f"{key} {unit}{mine}, peers {peers} (NVML): its host copies are capped below theirs "
                        "(its slot or riser)",
                        float(mine), expected, 100 * mine / expected))
    return checked


def _fleet(rows: pd.DataFrame, loaded: LoadedResults, findings: list[Finding]) -> set[str]:
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
    spread = gm.groupby(["fleet_", "case"])["speed"].describe()[["count", "min", "max"]]
    gm = gm.join(spread, on=["fleet_", "case"])
    # Each machine against the OTHER machines of its model: their median and their lower fence. With the
    # machine itself among them, three machines could never flag one (its own speed drags q1 and the IQR down
    # so far that the fence stays below it, however slow).
    others_median = []
    for speeds in gm.groupby(["fleet_", "case"], sort=False)["speed"]:
        values = speeds[1].to_numpy()
        for i in range(len(values)):
            rest = np.delete(values, i)
            q1, q3 = np.percentile(rest, [25, 75]) if len(rest) else (np.nan, np.nan)
            others_median.append((speeds[1].index[i], np.median(rest) if len(rest) else np.nan,
                                  q1 - TUKEY_K * (q3 - q1)))
    order = pd.DataFrame(others_median, columns=["i", "median", "fence"]).set_index("i")
    gm = gm.join(order)
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
        relative = float(r["speed"] / r["median"])
        findings.append(Finding("fleet", r["node"], "", r["case"], text, relative, 1.0, 100 * relative))
    return checked


def _identity(device: dict) -> str:
    """`PCI 0000:3b:00.0, GPU-5a1c…`: what identifies a device whatever CUDA_VISIBLE_DEVICES numbered it."""
    parts = [f"PCI {device['pci_bus_id']}" if device.get("pci_bus_id") else "", str(device.get("uuid") or "")]
    return ", ".join(p for p in parts if p)


def judge(loaded: LoadedResults, expectations: Expectations) -> Health:
    """Every check over the latest run of each node and tool; deterministic for the same files."""
    warnings: list[str] = []
    labels = latest_runs(loaded.machines, by="node", warnings=warnings)
    rows = _prepare(loaded, labels)
    invalid = rows["invalid"] != ""
    findings = [Finding("invalid", r.node, r.subject, r.case, f"{r.name}: {r.invalid}")
                for r in rows[invalid].itertuples(index=False)]
    rows = rows[~invalid]
    # A figure whose time the host set (Python issuing calls slower than the GPU runs them) says how fast
    # this host drives the device, not how fast the device is: shown in the report, never judged.
    host_bound = rows["bound"] == "host" if "bound" in rows else pd.Series(False, index=rows.index)
    if host_bound.any():
        warnings.append(f"{int(host_bound.sum())} host-bound result(s) not judged (the host, not the device, "
                        f"set their time): {', '.join(sorted(rows.loc[host_bound, 'name'])[:3])}"
                        + (", …" if host_bound.sum() > 3 else ""))
        rows = rows[~host_bound]
    tables: dict[str, list[dict]] = {}
    pct = _expected(rows, loaded, labels, expectations, findings, tables)
    checked = {
        "straggler": (_stragglers(rows, findings) | _nvlinks_down(loaded, labels, findings)
                      | _pcie_narrow(loaded, labels, findings)),
        "fleet": _fleet(rows, loaded, findings),
        "expected": {n for n, t in tables.items() if any(e["verdict"] in ("ok", "low") for e in t)},
    }
    nodes: dict[str, NodeVerdict] = {}
    for label in labels:
        m = loaded.machines[label]
        if m.wrong_results:  # the tool's own data check failed: the node computes wrong results
            shown = "; ".join(m.wrong_results[:MAX_EXAMPLES])
            extra = len(m.wrong_results) - MAX_EXAMPLES
            text = f"{m.tool} data check failed: {shown}" + (f"; … {extra} more" if extra > 0 else "")
            # The family is the tool's: an importer reads one tool's output as one family's results.
            family = min(set(loaded.table.loc[loaded.table["label"] == label, "case"]), default="")
            findings.append(Finding("wrong", m.node, "", family, text))
        node = nodes.setdefault(m.node, NodeVerdict(m.node, m.gpu_model, [], []))
        node.labels.append(label)
        node.tools.append(m.tool)
        node.checks |= {check for check, where in checked.items() if m.node in where}
        if m.partial:
            node.partial.append(m.file)
        if not m.n_benchmarks:
            node.empty.append(m.file)
    identities = {(loaded.machines[label].node, str(d.get("id"))): _identity(d)
                  for label in labels for d in loaded.machines[label].devices}
    for f in findings:
        ends = [identities.get((f.node, end), "") for end in f.device.split("->")] if f.device else []
        f.identity = " -> ".join(ends) if any(ends) else ""
    order = {k: i for i, k in enumerate(KINDS)}
    for f in sorted(findings, key=lambda f: (f.node, order[f.kind], f.device, f.family, f.text)):
        if f.node in nodes:
            nodes[f.node].findings.append(f)
    for node, table in tables.items():
        nodes[node].expectations = sorted(table, key=lambda e: (e["device"], e["measure"]))
    full = pd.Series(np.nan, index=loaded.table.index)
    full.loc[pct.index] = pct
    return Health(
        [nodes[k] for k in sorted(nodes)],
        full,
        sorted(l for n in nodes.values() for l in n.labels),
        warnings,
    )
