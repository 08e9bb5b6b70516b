"""DCGM diagnostics (`dcgmi diag -r N -j`) judged beside the results: a failed plugin is a finding, a warning a line.

dcgmi's JSON (DCGM 3: root key "DCGM GPU Diagnostic", results per `gpu_ids`/`gpu_id`; DCGM 4: "DCGM
Diagnostic", results per `entity_group`/`entity_id`, versions under "metadata") lists each plugin ("test") by
category with one status per GPU: Pass, Warn, Fail, Skip or Not Run, and what it saw under "warnings". It
names no host: its verdicts join the node judged beside it when there is one, else a node of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from suite.health.findings import Finding, Health, NodeVerdict
from suite.loading import DIAGNOSTICS, expand_paths, is_diagnostics

FAMILY = "dcgm"  # the findings' family column: what judged them
# dcgmi's status words (any case) -> ours; anything else (Skip, Not Run, a word a later DCGM adds) ran nothing.
STATUSES = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn"}


@dataclass
class Diagnostics:
    """The DCGM documents among RESULTS: their findings and warning lines, and the paths left to load."""

    files: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    findings: dict[str, list[Finding]] = field(default_factory=dict)  # file -> its failed plugins
    warnings: list[str] = field(default_factory=list)


def _document(path: Path) -> dict | None:
    if not is_diagnostics(path):
        return None
    try:  # dcgmi prints `Successfully ran diagnostic for group.` above its JSON
        text = path.read_text(encoding="utf-8", errors="replace")
        data = json.loads(text[text.find("{") : text.rfind("}") + 1])
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _gpus(result: dict) -> list[str]:
    if result.get("entity_group", "GPU") == "GPU" and "entity_id" in result:
        return [str(result["entity_id"])]
    ids = result.get("gpu_ids", result.get("gpu_id", ""))
    return [g.strip() for g in (ids if isinstance(ids, list) else str(ids).split(",")) if str(g).strip()]


def _said(result: dict) -> str:
    said = [w.get("warning", "") if isinstance(w, dict) else str(w) for w in result.get("warnings") or []]
    return "; ".join(s for s in said if s) or "no reason given"


def _results(body: dict):
    """(plugin name, one result) of every plugin in every category."""
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or [] if isinstance(category, dict) else []:
            for result in test.get("results") or []:
                yield str(test.get("name") or "?"), result


def _read(path: Path, data: dict, out: Diagnostics) -> None:
    body = next((data[k] for k in DIAGNOSTICS if isinstance(data.get(k), dict)), None)
    if body is None:
        out.warnings.append(f"{path}: DCGM diagnostics that do not parse (cut short?) — skipped")
        return
    version = {**body, **(data.get("metadata") or {})}.get("version") or ""
    findings = out.findings.setdefault(str(path), [])
    for name, result in _results(body):
        status = STATUSES.get(str(result.get("status", "")).strip().lower())
        for gpu in _gpus(result) if status in ("fail", "warn") else []:
            text = f"DCGM {version} diag plugin '{name}' {status}ed on GPU {gpu}: {_said(result)}"
            if status == "fail":
                findings.append(Finding("wrong", "", f"GPU {gpu}", FAMILY, text, source=str(path)))
            else:
                out.warnings.append(f"{path}: {text}")


def read_diagnostics(paths: list[str]) -> Diagnostics:
    """The DCGM documents among files and folders; `others` are the paths that hold anything else."""
    out = Diagnostics()
    for raw in paths:
        files = expand_paths([raw], [])
        found = [(p, d) for p in files if p.suffix == ".json" and (d := _document(p)) is not None]
        for path, data in found:
            out.files.append(str(path))
            _read(path, data, out)
        if not found or len(found) < len(files):
            out.others.append(raw)
    return out


def empty_health() -> Health:
    """The verdict DCGM documents join when no results were given beside them."""
    return Health(nodes=[], pct_of_expected=pd.Series(dtype=float))


def join(health: Health, diagnostics: Diagnostics) -> None:
    """Each document's failed plugins as findings of the node judged beside it, else of a node of its own."""
    judged = list(health.nodes)
    for path, findings in diagnostics.findings.items():
        node = judged[0] if len(judged) == 1 else None
        if node is None:
            node = NodeVerdict(node=f"{Path(path).stem} (DCGM)", gpu_model="", labels=[path], tools=[])
            health.nodes.append(node)
            if judged:
                diagnostics.warnings.append(f"{path}: DCGM names no host and several nodes were judged: its "
                                       f"verdicts are shown as a node of their own")
        node.findings += [replace(f, node=node.node) for f in findings]
        node.checks.add(FAMILY)
        node.tools += [] if FAMILY in node.tools else [FAMILY]
