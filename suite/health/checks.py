"""The health verdict: results against expected figures, then the peer checks, per node and fleet."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.cases import family_read
from suite.health.causes import explain, repeat_offenders
from suite.health.expect import HOST_LINKS, OK_AT_PCT, Expectations, Measure, measures, taken_from
from suite.health.findings import DEFAULT_FAIL_ON  # noqa: F401 -- suite.report.command imports it from here
from suite.health.findings import KEY_SEP, KINDS, MAX_EXAMPLES, Finding, Health, NodeVerdict, clocks_held
from suite.health.findings import format_figure
from suite.health.peers import concurrent_stragglers, fleet, nvlinks_down, pcie_narrow, stragglers
from suite.results import FOREIGN_CASE, OUR_TOOL, LoadedResults, latest_runs, like_ours, peer_keys
from suite.results import route_kinds


def _nodes_text(nodes: list) -> str:
    """'node 1', 'nodes 0,1'."""
    return f"node{'s' if len(nodes) > 1 else ''} {','.join(str(n) for n in nodes)}"


def _numa_note(device: str, node: object, cpu: dict) -> str:
    """Why a host copy of `device` may have come from far memory, from the inventory (the GPU's NUMA node;
    the nodes the run's CPUs and memory could use); '' where the machine has one node with CPUs or the
    inventory does not say. Likely, not certain: the memory policy and PyTorch's reuse of pinned blocks
    decide where each buffer lands."""
    used, mems = cpu.get("numa_nodes_used"), cpu.get("numa_mems_allowed")
    if not _several_nodes(node, cpu.get("numa_nodes"), used):
        return ""
    fix = f"numactl --cpunodebind={node} --membind={node} measures the near path"
    if isinstance(mems, list) and mems and node not in mems:
        return (f"; {device} is on NUMA node {node}, and this run's memory could come only from "
                f"{_nodes_text(mems)} ({fix})")
    if node not in used:
        return (f"; {device} is on NUMA node {node}, this run's CPUs on {_nodes_text(used)}: its host memory "
                f"was likely on another node ({fix})")
    if len(used) > 1:
        return (f"; this run was not bound to {device}'s NUMA node ({node}): its host memory may have been "
                f"on another ({fix})")
    return ""


def _several_nodes(node: object, nodes: object, used: object) -> bool:
    """Whether the inventory names the GPU's NUMA node, a machine of 2 nodes or more and the nodes the run used."""
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (node, nodes))
    return whole and nodes >= 2 and isinstance(used, list) and bool(used)  # type: ignore[operator]


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
    # The subject's first device (the source of a peer route's `src->dst`) names the model and PCIe
    # generation; one lookup per distinct (label, device), mapped back onto the rows. KEY_SEP, not NUL:
    # pandas < 3 (object dtype) silently drops a NUL in string concatenation.
    first = rows["subject"].where(rows["route_"] != "peer", rows["src"].astype(object)).astype(str)
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
    host = rows["route_"].isin(HOST_LINKS)
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
    sizes = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)] if isinstance(
        values, list) else []
    return max(sizes, default=math.inf if values else 0)  # unresolved text: assume it may be large enough


# A measure's `where` key -> the config list that selects it, and what the family measures where the list is
# absent (None: whatever the measure wants, the family measures every value).
SELECTED_BY = {"precision": ("dtypes", ()), "op": ("ops", ()), "memory": ("memory", None),
               "direction": ("directions", ("uni",))}


def selected(config: dict, measure: Measure) -> bool | None:
    """Whether a run's config asked for results this measure judges; None where no config says (imports)."""
    cases = config.get("cases") if isinstance(config.get("cases"), dict) else None
    if not cases:
        return None
    return any(_section_selects(cases.get(family), measure) for family in measure.families)


def _section_selects(section: object, measure: Measure) -> bool:
    """Whether one family's config section asks for what `measure` judges."""
    if not isinstance(section, dict) or section.get("enabled") is False:
        return False
    for key, wanted in measure.where:
        if key not in SELECTED_BY:
            continue
        option, default = SELECTED_BY[key]
        chosen = section.get(option) or ([wanted] if default is None else default)
        if wanted not in chosen:
            return False
    if measure.min_bytes and _largest(section.get("sizes")) < measure.min_bytes:
        return False
    return not measure.min_flops or _largest_flops(section.get("shapes") or []) >= measure.min_flops


def _largest_flops(shapes: object) -> float:
    """2·m·n·k of the largest matmul shape a config lists; infinite where it lists none to read."""
    flops = [2 * math.prod(s) for s in shapes if isinstance(s, list) and all(isinstance(x, int) for x in s)]
    return max(flops, default=math.inf)


def _expected(rows: pd.DataFrame, loaded: LoadedResults, labels: list[str], expectations: Expectations,
              findings: list[Finding], tables: dict[str, list[dict]]) -> pd.Series:
    """pct_of_expected per qualifying row; low/missing findings; per-node tables of the judged figures."""
    pct = pd.Series(np.nan, index=rows.index)
    measured_families = rows.groupby("label")["case"].unique().map(set).to_dict()
    for measure_name, measure in measures().items():
        mask = taken_from(rows, measure) & (rows[measure.rate] > 0 if measure.rate in rows else False)
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


def _judge_measure(sub: pd.DataFrame, loaded: LoadedResults, measure_name: str, measure: Measure,
                   expectations: Expectations, pct: pd.Series, findings: list[Finding],
                   tables: dict[str, list[dict]]) -> pd.DataFrame:
    """Judge one measure's qualifying rows against their figures; the rows that had a figure."""
    if measure.per_machine:
        sub = sub.assign(model=sub["label"].map({k: m.gpu_model for k, m in loaded.machines.items()}),
                         subject=sub["world_size"].map(lambda w: "" if pd.isna(w) else f"{w:.0f} GPUs"))
    fig_of = _figures(sub, measure_name, measure, expectations)
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
        _table_entry(tables, r, measure_name, measure, rate, fig.value, r.pct_, verdict, fig.source)
        if verdict == "low":
            text = (f"{measure_name} {format_figure(rate, measure.unit)} = {r.pct_:.0f}% of the expected "
                    f"{format_figure(fig.value, measure.unit)} (best: {r.name}; {fig.source}){clocks_held(r)}"
                    f"{r.numa_note_}")
            findings.append(Finding("low", r.node, r.subject, r.case, text, rate, fig.value, r.pct_, fig.source,
                                    benchmark=r.name, run=r.label))
    return judged


def _figures(sub: pd.DataFrame, measure_name: str, measure: Measure, expectations: Expectations) -> pd.Series:
    """Each row's Expected figure (or None): one lookup per distinct (model, PCIe generation, world size)."""
    gens = [g if isinstance(g, int) and not isinstance(g, bool) else None for g in sub["pcie_gen"]]
    sizes = [None if pd.isna(w) else int(w) for w in sub["world_size"]] if measure.per_machine else [None] * len(sub)
    lookup = list(zip(sub["model"], gens, sizes))
    figures = {k: expectations.figure(k[0], measure_name, k[1], k[2]) for k in set(lookup)}
    return pd.Series([figures[k] for k in lookup], index=sub.index, dtype=object)


def _table_entry(tables: dict, r, measure_name: str, measure: Measure, measured: float, expected, pct,
                 verdict: str, source: str) -> None:
    """One judged (or unjudged) figure in its node's table of expected figures."""
    tables.setdefault(r.node, []).append({
        "device": r.subject, "measure": measure_name, "measured": measured, "expected": expected,
        "unit": measure.unit, "pct_of_expected": pct, "verdict": verdict, "source": source, "benchmark": r.name,
    })


def _no_figure(sub: pd.DataFrame, measure_name: str, measure: Measure, expectations: Expectations,
               tables: dict) -> None:
    """Host-link results of a known model whose link has no figure (PCIe gen3, say): listed, not judged."""
    if sub.empty:
        return
    best = sub.loc[sub.groupby(["label", "subject"], sort=True)[measure.rate].idxmax()]
    for r in best.itertuples(index=False):
        model = expectations.model_of(r.model)
        if model is None:
            continue
        gen = r.pcie_gen if isinstance(r.pcie_gen, int) else None
        link = model.get("host_link", "")
        link = f"pcie{gen}" if gen and str(link).startswith("pcie") else link
        _table_entry(tables, r, measure_name, measure, getattr(r, measure.rate), None, None, "no figure",
                     f"no expected {measure_name} figure for link {link or 'unknown'}; add one with --expect")


def _could_measure(machine, measure: Measure) -> bool:
    """Whether a run launched as this one was could hold the measure's results, whatever its config asked:
    a torchrun job runs only the families that run under torchrun (its config still lists every family), a
    single process never runs them, and a job on 2 nodes has no 1-node result."""
    torchrun = any(family_read(family, "TORCHRUN") for family in measure.families)
    if bool(machine.distributed) != torchrun and machine.tool == OUR_TOOL:
        return False
    nnodes = dict(measure.where).get("nnodes")
    return nnodes is None or not machine.distributed or machine.distributed.get("nnodes") in (None, nnodes)


def _should_have(machine, measured_families: set, measure: Measure) -> bool:
    """Whether a run chose to measure what `measure` judges, so that its absence is a gap."""
    if not _could_measure(machine, measure):
        return False
    chosen = selected(machine.config, measure)
    if chosen is False:
        return False  # the config did not ask for it: absence is a choice, not a gap
    if chosen is None and not measured_families & set(measure.families):
        return False
    return measure.route != "peer" or sum(machine.accelerators.values()) >= 2  # one GPU has no peer to copy to


def _missing(loaded: LoadedResults, labels: list[str], measured_families: dict[str, set], judged: pd.DataFrame,
             measure_name: str, measure: Measure, expectations: Expectations, findings: list[Finding]) -> None:
    """A device with a figure, in a run that chose to measure this setting, but without a result to judge."""
    seen = set(zip(judged["label"], judged["subject"].str.split("->", n=1).str[0])) if len(judged) else set()
    for label in labels:
        machine = loaded.machines[label]
        if not _should_have(machine, measured_families.get(label, set()), measure):
            continue
        for d in machine.devices:
            if d.get("kind") == "cpu" or (label, str(d.get("id"))) in seen:
                continue
            fig = expectations.figure(str(d.get("name") or ""), measure_name, d.get("pcie_gen_max"))
            if fig is None:
                continue
            findings.append(Finding(
                "missing", machine.node, str(d.get("id")), measure.families[0],
                f"{measure_name}: no result to judge (expected {format_figure(fig.value, measure.unit)}; "
                f"the run has no {measure_name} at the size the figure needs)", source=fig.source))


def _identity(device: dict) -> str:
    """`PCI 0000:3b:00.0, GPU-5a1c…, serial 1652…`: what identifies a device whatever CUDA_VISIBLE_DEVICES
    numbered it (the serial is what is printed on the board)."""
    parts = [f"PCI {device['pci_bus_id']}" if device.get("pci_bus_id") else "", str(device.get("uuid") or ""),
             f"serial {device['serial']}" if device.get("serial") else ""]
    return ", ".join(p for p in parts if p)


def judge(loaded: LoadedResults, expectations: Expectations) -> Health:
    """Every check over the latest run of each node and tool; deterministic for the same files."""
    warnings: list[str] = []
    labels = latest_runs(loaded.machines, by="node", warnings=warnings)
    rows = _prepare(loaded, labels)
    invalid = rows["invalid"] != ""
    findings = [Finding("invalid", r.node, r.subject, r.case, f"{r.name}: {r.invalid}")
                for r in rows[invalid].itertuples(index=False)]
    rows = _without_host_bound(rows[~invalid], warnings)
    tables: dict[str, list[dict]] = {}
    pct = _expected(rows, loaded, labels, expectations, findings, tables)
    checked = {
        "straggler": _peer_checks(rows, loaded, labels, findings),
        "fleet": fleet(rows, loaded, findings),
        "expected": {n for n, t in tables.items() if any(e["verdict"] in ("ok", "low") for e in t)},
    }
    findings += [f for label in labels if (f := _wrong(loaded, label))]
    nodes = _nodes(loaded, labels, checked)
    explain(rows, loaded, findings, peers_by=["label", "model", "peer_key"])
    _identify(loaded, labels, findings)
    order = {k: i for i, k in enumerate(KINDS)}
    for f in sorted(findings, key=lambda f: (f.node, order[f.kind], f.device, f.family, f.text)):
        if f.node in nodes:
            nodes[f.node].findings.append(f)
    for node, table in tables.items():
        nodes[node].expectations = sorted(table, key=lambda e: (e["device"], e["measure"]))
    full = pd.Series(np.nan, index=loaded.table.index)
    full.loc[pct.index] = pct
    offenders = repeat_offenders(findings + _past_findings(loaded, labels, expectations), _boards(loaded, labels))
    return Health([nodes[k] for k in sorted(nodes)], full, warnings, offenders)


def _boards(loaded: LoadedResults, labels: list[str]) -> dict[str, str]:
    """UUID (and serial) -> the node whose latest run has that GPU now."""
    return {key: loaded.machines[label].node for label in labels for d in loaded.machines[label].devices
            for key in _board(d) if key}


def _past_findings(loaded: LoadedResults, latest: list[str], expectations: Expectations) -> list[Finding]:
    """What the per-run checks find in the runs before each node's latest: how often a GPU was flagged (the
    fleet check compares machines of one time, so it is left out)."""
    older = [label for label in loaded.machines if label not in set(latest)]
    if not older:
        return []
    rows = _prepare(loaded, older)
    rows = _without_host_bound(rows[rows["invalid"] == ""], [])
    found: list[Finding] = []
    _expected(rows, loaded, older, expectations, found, {})
    _peer_checks(rows, loaded, older, found)
    _identify(loaded, older, found)
    return found


def _peer_checks(rows: pd.DataFrame, loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> set:
    """Every check of a device against its peers; the nodes they applied to."""
    found = stragglers(rows, findings) | nvlinks_down(loaded, labels, findings)
    concurrent_stragglers(rows, findings)
    return found | pcie_narrow(loaded, labels, findings)


def _without_host_bound(rows: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """A figure whose time the host set (Python issuing calls slower than the GPU runs them) says how fast
    this host drives the device, not how fast the device is: shown in the report, never judged."""
    host_bound = rows["bound"] == "host" if "bound" in rows else pd.Series(False, index=rows.index)
    if not host_bound.any():
        return rows
    warnings.append(f"{int(host_bound.sum())} host-bound result(s) not judged (the host, not the device, "
                    f"set their time): {', '.join(sorted(rows.loc[host_bound, 'name'])[:3])}"
                    + (", …" if host_bound.sum() > 3 else ""))
    return rows[~host_bound]


def _wrong(loaded: LoadedResults, label: str) -> Finding | None:
    """A run whose tool's own data check failed: the node computes wrong results."""
    m = loaded.machines[label]
    if not m.wrong_results:
        return None
    shown = "; ".join(m.wrong_results[:MAX_EXAMPLES])
    extra = len(m.wrong_results) - MAX_EXAMPLES
    text = f"{m.tool} data check failed: {shown}" + (f"; … {extra} more" if extra > 0 else "")
    # The family is the tool's: an importer reads one tool's output as one family's results.
    family = min(set(loaded.table.loc[loaded.table["label"] == label, "case"]), default="")
    return Finding("wrong", m.node, "", family, text)


def _nodes(loaded: LoadedResults, labels: list[str], checked: dict[str, set[str]]) -> dict[str, NodeVerdict]:
    """Each node's verdict, without findings yet: its runs, tools, the checks that applied to it."""
    nodes: dict[str, NodeVerdict] = {}
    for label in labels:
        m = loaded.machines[label]
        node = nodes.setdefault(m.node, NodeVerdict(m.node, m.gpu_model, [], []))
        node.labels.append(label)
        node.tools.append(m.tool)
        node.checks |= {check for check, where in checked.items() if m.node in where}
        if m.partial:
            node.partial.append(m.file)
        if not m.n_benchmarks:
            node.empty.append(m.file)
    return nodes


def _identify(loaded: LoadedResults, labels: list[str], findings: list[Finding]) -> None:
    """Each finding's hardware: the PCI address and UUID of its device (both ends of a copy), as its run
    recorded it; and, for one device, its UUID and serial, which follow it to another node."""
    devices = {(label, str(d.get("id"))): d for label in labels for d in loaded.machines[label].devices}
    by_node = {(loaded.machines[label].node, device): d for (label, device), d in devices.items()}
    for f in findings:
        ends = [devices.get((f.run, end)) or by_node.get((f.node, end)) or {} for end in f.device.split("->")
                if f.device]
        texts = [_identity(d) for d in ends]
        f.identity = " -> ".join(texts) if any(texts) else ""
        if len(ends) == 1:
            f.uuid, f.serial = _board(ends[0])


def _board(device: dict) -> tuple[str, str]:
    """(UUID, serial) of a device's board: a MIG instance's parent GPU's UUID."""
    return str(device.get("mig_parent_uuid") or device.get("uuid") or ""), str(device.get("serial") or "")
