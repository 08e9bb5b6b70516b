"""Health's findings and verdicts: what a check found, each node's verdict and the fleet's, and tolerances."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from suite.compare_verdict import NOISE_IQR_SHARE
from suite.health.expect import OK_AT_PCT
from suite.limits import limits_held

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
    benchmark: str = ""  # the result judged (its test name), where one result shows it
    run: str = ""  # the label of the run it was found in
    # The board's identity across runs and hosts (NVML's UUID, a MIG instance's parent GPU's; the serial
    # where recorded): a GPU moved to another node keeps them.
    uuid: str = ""
    serial: str = ""
    # What explains it, from evidence the run recorded ({"grade": ..., "text": ...}; suite.health.causes).
    causes: list[dict] = field(default_factory=list)


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

    def as_dict(self, fail_on: tuple[str, ...]) -> dict:
        return {"node": self.node, "gpu_model": self.gpu_model, "status": self.status(fail_on), "runs": self.labels,
                "partial_runs": self.partial, "tools": self.tools, "checks": sorted(self.checks),
                "findings": [_clean(vars(f)) for f in self.findings],
                "expectations": [_clean(e) for e in self.expectations]}


@dataclass
class Health:
    """The fleet verdict: nodes in a stable order, and the pct_of_expected of every judged result row."""

    nodes: list[NodeVerdict]
    pct_of_expected: pd.Series
    warnings: list[str] = field(default_factory=list)  # how the runs judged were chosen, where it mattered
    # GPUs flagged in several runs, on any node (suite.health.causes.repeat_offenders)
    repeat_offenders: list[dict] = field(default_factory=list)

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
            "nodes": [n.as_dict(fail_on) for n in self.nodes],
            "repeat_offenders": self.repeat_offenders,
        }


def _clean(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def format_figure(value: float, unit: str) -> str:
    return f"{value:.3g} {unit}" if unit != "s" else f"{value * 1e6:.3g} µs"


def nccl_said(distributed: object) -> dict[str, str]:
    """What NCCL's start-up log said it chose in a torchrun job (its suite.distributed `nccl_choices`), each
    value a word: {"unknown": why} where the log was not read, {} where none is recorded (Gloo, older files)."""
    choices = distributed.get("nccl_choices") if isinstance(distributed, dict) else None
    if not isinstance(choices, dict):
        return {}
    return {str(k): ("yes" if v else "no") if isinstance(v, bool) else str(v) for k, v in choices.items()}


# A slow result whose GPU a power, thermal, board or reliability limit held for at least this share of its
# run says so beside its numbers: the likely cause, read from NVML (devices.ClockWatch).
CLOCKS_HELD_SHOWN_FROM = 0.05
LIMIT_NAMES = {"power": "the power limit", "thermal": "(software) thermal slowdown",
               "board_limit": "a board limit", "reliability": "a reliability limit",
               "hw_thermal": "hardware thermal slowdown (clocks halved or more)",
               "hw_power_brake": "the hardware power brake (clocks halved or more)"}


def clocks_held(row) -> str:
    """'; clocks held back 62% of the time by thermal slowdown, 30% by the power limit (NVML)' for a row
    whose GPU a limit held for CLOCKS_HELD_SHOWN_FROM of its warm-up and timing or more, else ''."""
    info = row._asdict()
    limits = {n: s for n, s in limits_held(info).items() if s >= CLOCKS_HELD_SHOWN_FROM}
    if not limits or isinstance(info.get("clocks_limited"), (str, dict)):  # the causes say it, graded
        return ""
    parts = [f"{share:.0%} of the time by {LIMIT_NAMES[n]}" for n, share in limits.items()]
    return "; clocks held back " + ", ".join(parts) + " (NVML)"

