"""How collectives results are read (torch-free): rate, title and note, plan figures, summary rows."""

from __future__ import annotations

from collections import defaultdict

from suite.summary import cell, extra_info, grid, num, size_of
from suite.units import format_size
from suite.health.expect import Measure

RATE = "busbw"  # the rate that says how fast this family is
# Seconds a benchmark costs beyond warm-up and timed rounds (suite.plan; measured as matmul's OVERHEAD_S).
OVERHEAD_S = 0.02
# Other tools' outputs read as this family's results (suite.importers).
IMPORTERS = ("suite.cases.collectives.nccl_tests", "suite.cases.collectives.nccl_tests_json")
TITLE = "Collectives"
# Its cases run in their own torchrun launch (every rank a process), apart from `pytest benchmarks`.
TORCHRUN = "python -m suite collectives"
NOTE = (
    "busbw follows nccl-tests: comparable to the link's hardware bandwidth whatever the world size."
)


def summary(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = extra_info(b)
        bw = num(i.get("busbw"))
        if bw is None or size_of(i) is None:
            continue
        col = f"{i.get('op')}" + (
            "" if i.get("in_place") is None else (" ip" if i.get("in_place") else " oop")
        )
        columns += [col] if col not in columns else []
        rows[(i.get("size"), i.get("dtype"))][col] = cell(bw)
    order = sorted(rows, key=lambda sd: (sd[0], str(sd[1])))
    labelled = {f"{format_size(s)} {d}": rows[(s, d)] for s, d in order}
    return grid("collectives: busbw GB/s (nccl-tests' definition)", labelled, columns, "size dtype")

# Health judges all-reduce only from 256 MiB, the largest size of the default config. NCCL's busbw climbs to
# 1-8 GB and 256 MB is below its peak (nccl-tests maintainers, issue 212): the best judged size is compared,
# and the tolerance (suite.health.expect.OK_AT_PCT) absorbs the shortfall of a run that stops at 256 MiB.
MIN_COLLECTIVE_BYTES = 256 * 2**20
MEASURES = {
    # One node only: the figures are NVLink within a node; across nodes the network decides.
    "all_reduce_busbw": Measure(
        "busbw", "GB/s", (("op", "all_reduce"), ("nnodes", 1)), min_bytes=MIN_COLLECTIVE_BYTES,
        per_machine=True,
    ),
}

# Collectives run fixed rounds, so their time depends on the link: the plan assumes this algbw (GB/s) and
# this latency per call. NCCL: well below an 8-GPU NVLink node's ~270 GB/s all_reduce algbw
# (docs/reference.md), near a PCIe node's; Gloo on a CPU moves well under 1 GB/s (README).
ASSUMED_COLLECTIVE_GBPS = {"nccl": 20.0, "xccl": 20.0, "gloo": 0.5}  # xccl: assumed like NCCL, unmeasured
ASSUMED_COLLECTIVE_LATENCY_S = {"nccl": 50e-6, "xccl": 50e-6, "gloo": 200e-6}
PLAN_ASSUMPTIONS = {"collective_gbps": ASSUMED_COLLECTIVE_GBPS}  # in `suite plan --json`'s assumptions


def fixed_seconds(case, config) -> float:
    """Fixed rounds of a collective at the assumed link speed (ASSUMED_COLLECTIVE_GBPS)."""
    p = case.info
    section = config.cases.collectives.for_device(p["device"])
    calls = (section.warmup_rounds + section.rounds) * section.iterations
    backend = p.get("backend", "gloo")
    per_call = ASSUMED_COLLECTIVE_LATENCY_S.get(backend, 1e-4) + p["size"] / (
        ASSUMED_COLLECTIVE_GBPS.get(backend, 1.0) * 1e9
    )
    return calls * per_call


def _backend(config, devices: list[str]) -> str:
    from suite import distributed

    state = distributed.current()
    if state is not None:
        return state.backend
    setting = config.cases.collectives.backend
    if setting != "auto":
        return setting
    return "nccl" if any(d.startswith("cuda") for d in devices) else "gloo"


def plan_config(config, devices: list[str]):
    """The config the plan enumerates cases with: the plan judges a node by its devices (NCCL for GPUs),
    not by what this process's torch sees."""
    if config.cases.collectives.backend != "auto":
        return config
    section = config.cases.collectives.model_copy(update={"backend": _backend(config, devices)})
    return config.model_copy(update={"cases": config.cases.model_copy(update={"collectives": section})})
