"""`python -m suite plan`: per family the benchmarks a config selects and how long they take; the budget."""

from __future__ import annotations

import contextlib
import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from suite import devices as dev
from suite.cases import FAMILIES, Case, family_module, family_read
from suite.config import DEFAULT_CONFIG, SuiteConfig, load_config
from suite.errors import UserError
from suite.timing import (BOUND_ROUNDS, MIN_WARMUP_CALLS, format_duration, min_round_seconds, parse_duration,
                          warmup_seconds)
from suite.units import format_size

# Seconds one benchmark costs beyond its warm-up and its timed rounds (pytest's setup, call and teardown,
# building inputs, the check, calibration, the partial-results line): each family's read module's OVERHEAD_S,
# measured by scripts/bench_timing.py (see suite/cases/matmul/read.py); overheads() collects them.
# A family without an OVERHEAD_S of its own.
DEFAULT_OVERHEAD_S = 0.06
# A case that is skipped (a missing device, pinned memory without an accelerator): pytest's bookkeeping only.
SKIP_OVERHEAD_S = 0.005
# Interpreter start, importing torch, collection, the inventory, the CPU's rate probe, writing the JSON and the
# summary: the wall time of `pytest benchmarks` minus the sum of its per-test durations (scripts/bench_timing.py:
# 5.0 s without the probe; scripts/plan_vs_actual.py: 5.9-6.2 s with it, at load 2 on 2 cores).
SESSION_OVERHEAD_S = 6.5
# A torchrun launch of a family that runs under it (every rank imports torch and joins the process group).
TORCHRUN_OVERHEAD_S = 15.0
# What a budget holds back after the last benchmark: pytest-benchmark's and our end of session (JSON, machine
# info, the summary) and the interpreter's exit with torch loaded; 1.8 s + 1.7 s measured on the loaded 2-core VM.
END_RESERVE_S = 3.0
# A budget the plan or the run calls enough is the least the run takes plus this much (5%, and 1 s): the
# overheads above are medians of a loaded machine: a budget cut to the figure itself would be refused often.
BUDGET_MARGIN = 1.05
BUDGET_MARGIN_S = 1.0


class NodePlatform(dev.Platform):
    """A hypothetical node of `gpus` CUDA GPUs with peer access and pinned memory, for planning only."""

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def count(self, kind: str) -> int:
        return self.gpus if kind == "cuda" else 0

    def can_access_peer(self, a: torch.device, b: torch.device) -> bool:
        return a != b

    def link(self, a: torch.device, b: torch.device) -> str | None:
        return None  # links unknown: every GPU pair is one kind, as on a node whose NVML says nothing

    def supports_pinned_memory(self) -> bool:
        return self.gpus > 0


def overheads() -> dict[str, float]:
    """family -> its OVERHEAD_S, for the families that measured theirs, in registry order."""
    found = {name: family_read(name, "OVERHEAD_S") for name in FAMILIES}
    return {name: seconds for name, seconds in found.items() if seconds is not None}


def overhead_s(family: str) -> float:
    return family_read(family, "OVERHEAD_S", DEFAULT_OVERHEAD_S)


def __getattr__(name: str):
    # `suite.plan.OVERHEAD_S`, the name docs/timing.md and scripts/bench_timing.py use: read from the registry
    # on each access, so that a family registered after this import is in it.
    if name == "OVERHEAD_S":
        return overheads()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def timing_of(config: SuiteConfig, family: str, overrides: dict | None = None):
    """The family's timing, with `overrides` (the run's --benchmark-* options, plugin.user_timing) over it."""
    timing = config.timing_for(family)
    return timing.model_copy(update=overrides) if overrides else timing


def select(config: SuiteConfig, devices: list[str]) -> dict[str, list[Case]]:
    """family -> its cases (enumerate_cases of each family, as the plugin parametrises them)."""
    out = {}
    for family in FAMILIES:
        plan_config = family_read(family, "plan_config")
        cfg = plan_config(config, devices) if plan_config else config
        out[family] = family_module(family).enumerate_cases(cfg, devices)
    return out


def runs_here(case: Case) -> bool:
    """False for a case this process will skip (a TORCHRUN family's outside torchrun, a missing device)."""
    if family_read(case.family, "TORCHRUN"):
        from suite import distributed

        return distributed.current() is not None
    if any(dev.missing_reason(d) for d in case.devices):
        return False
    skip_reason = getattr(family_module(case.family), "skip_reason", None)
    return skip_reason is None or skip_reason(case) is None


def fixed_seconds(case: Case, config: SuiteConfig, here: bool | None = None) -> float:
    """What a benchmark costs whatever its timed rounds: overhead and warm-up (fixed-round cases: all of it);
    `here`: whether it runs (default: runs_here), else it costs a skip."""
    if not (runs_here(case) if here is None else here):
        return SKIP_OVERHEAD_S
    base = overhead_s(case.family)
    fixed_rounds = family_read(case.family, "fixed_seconds")
    if fixed_rounds:
        return base + fixed_rounds(case, config)
    return base + warmup_seconds(case, config.timing_for(case.family))


def probe_seconds(case: Case, timing) -> float:
    """The host-bound probe after an accelerator case's timed rounds (suite.timing.bound_info): BOUND_ROUNDS
    more rounds, outside max_time; none on the CPU."""
    return BOUND_ROUNDS * min_round_seconds(case, timing) if any(d != "cpu" for d in case.devices) else 0.0


def shareable(case: Case) -> bool:
    """Whether the case's timed rounds follow max_time (and so a budget); a fixed_seconds family's do not."""
    return family_read(case.family, "fixed_seconds") is None and runs_here(case)


@dataclass
class FamilyPlan:
    benchmarks: int = 0
    runs: int = 0  # benchmarks this process measures (the rest are skipped here)
    estimated_s: float = 0.0
    minimum_s: float = 0.0
    separate: bool = False  # runs in its own command under torchrun (its read module's TORCHRUN)

    def as_dict(self) -> dict:
        return {"benchmarks": self.benchmarks, "measured": self.runs, "estimated_s": round(self.estimated_s, 1),
                "minimum_s": round(self.minimum_s, 1), "separate_run": self.separate}


@dataclass
class Plan:
    devices: list[str]
    gpus: int | None
    families: dict[str, FamilyPlan] = field(default_factory=dict)
    session_s: float = SESSION_OVERHEAD_S
    budget_s: float | None = None
    share_s: float | None = None  # max_time per benchmark under the budget

    @property
    def benchmarks(self) -> int:
        return sum(f.benchmarks for f in self.families.values())

    @property
    def estimated_s(self) -> float:
        return self.session_s + sum(f.estimated_s for f in self.families.values())

    @property
    def minimum_s(self) -> float:
        return self.session_s + sum(f.minimum_s for f in self.families.values())

    @property
    def run_minimum_s(self) -> float:
        """The least the budgeted `pytest benchmarks` run takes: its session and benchmarks, the end reserve;
        a separate torchrun run is not in it."""
        in_run = sum(f.minimum_s for f in self.families.values() if not f.separate)
        return self.session_s + END_RESERVE_S + in_run

    @property
    def measured_in_run(self) -> int:
        return sum(f.runs for f in self.families.values() if not f.separate)

    def as_dict(self) -> dict:
        return {
            "benchmarks": self.benchmarks, "estimated_s": round(self.estimated_s, 1),
            "minimum_s": round(self.minimum_s, 1), "devices": self.devices, "gpus": self.gpus,
            "budget_s": self.budget_s, "max_time_per_benchmark_s": self.share_s,
            "assumptions": {
                "overhead_s": overheads(),
                "session_overhead_s": SESSION_OVERHEAD_S,
                "torchrun_overhead_s": TORCHRUN_OVERHEAD_S,
                **{k: v for name in FAMILIES for k, v in family_read(name, "PLAN_ASSUMPTIONS", {}).items()},
                "floor_gbps": FLOOR_GBPS, "fill_floor_gbps": FILL_FLOOR_GBPS, "outside_calls": OUTSIDE_CALLS,
                "every_benchmark_runs_to_max_time": True,
            },
            "families": {name: f.as_dict() for name, f in self.families.items()},
        }


def make_plan(config: SuiteConfig, devices: list[str], gpus: int | None = None, budget_s: float | None = None,
              overrides: dict | None = None, rates: "Rates | None" = None) -> Plan:
    """The plan of `config` on `devices`: an upper bound, every benchmark running its timed rounds to max_time,
    and whole calls where one call is long (call_costs).

    The families that run under torchrun (TORCHRUN) count as measured on a plan of a node of 2 GPUs or more.
    `overrides`: timing keys the run's command line sets (timing_of).
    `rates`: what a call's FLOPs and bytes take (default: this machine's CPU probed, unless a node is planned).
    """
    plan = Plan(devices=devices, gpus=gpus, budget_s=budget_s)
    if rates is None:
        rates = Rates(probe_cpu=not isinstance(dev.current_platform(), NodePlatform))
    # A torchrun job needs two ranks at least (a world of one skips every case).
    with_torchrun = (gpus or 0) >= 2
    timed = []  # (its FamilyPlan, timing, round, call_costs) of each benchmark that follows max_time
    fixed_total = 0.0
    for family, cases in select(config, devices).items():
        timing = timing_of(config, family, overrides)
        separate = bool(family_read(family, "TORCHRUN"))
        fp = plan.families[family] = FamilyPlan(benchmarks=len(cases), separate=separate)
        for case in cases:
            here = runs_here(case) or (fp.separate and with_torchrun and len(devices) > 0)
            fixed = fixed_seconds(case, config, here)
            fp.runs += here
            if here and not family_read(family, "fixed_seconds"):
                fixed += probe_seconds(case, timing)
                fixed_total += fixed
                more_s, call_s = call_costs(case, timing, one_call(case, rates))
                fixed_total += more_s
                timed.append((fp, timing, min_round_seconds(case, timing), more_s, call_s))
            fp.estimated_s += fixed
            fp.minimum_s += fixed
        if fp.separate and fp.runs:
            fp.estimated_s += TORCHRUN_OVERHEAD_S
            fp.minimum_s += TORCHRUN_OVERHEAD_S
    if budget_s is not None:
        # The time left after the fixed costs (long calls' whole calls too) is shared out equally over the
        # benchmarks that follow max_time.
        # The budget is for one `pytest benchmarks` run; a separate torchrun run is not in it.
        pool = budget_s - END_RESERVE_S - plan.session_s - fixed_total
        plan.share_s = pool / len(timed) if timed else None
    for fp, timing, round_s, more_s, call_s in timed:
        max_time = timing.max_time
        if plan.share_s is not None and plan.share_s > 0 and not fp.separate:
            max_time = min(max_time, plan.share_s)  # a budget only shortens
        # pytest-benchmark runs ceil(max_time / round) rounds, and min_rounds however long they take; a round
        # is one call at least. The least is from min_time alone: a call's estimate is no lower bound.
        long_round = max(round_s, call_s)
        fp.estimated_s += more_s + max(timing.min_rounds * long_round, max_time + long_round)
        fp.minimum_s += timing.min_rounds * round_s
    return plan


# --- one call's time: whole calls where one is long ---------------------------------------------------------

# How long the rate probe of the CPU runs per dtype (a matmul of PROBE_N^3, repeated).
PROBE_N, PROBE_S = 512, 0.05
# The CPU's probes: a copy into a fresh buffer of PROBE_BYTES (its pages fault in, as placement's allocating ops
# and a first copy do: the slowest host copy the families make; above glibc's largest mmap threshold, 32 MiB,
# so every call maps fresh pages) and the pattern fill of PROBE_FILL_BYTES; each PROBE_CALLS times, the slowest
# kept: the plan's figure must hold on a machine others load. ~0.6 s on this loaded 2-core VM. The fill is into
# fresh memory too: its hash's temporaries fault in as a case's build does (a reused buffer fills 30x faster here).
PROBE_BYTES, PROBE_FILL_BYTES, PROBE_CALLS = 64 * 2**20, 4 * 2**20, 3
# Copy rates (GB/s, each byte once) a case's call_bytes are planned at where nothing measures them: below what
# any data-centre GPU node of the last generations reaches, so that "at most" holds there too. A planned node's
# (--gpus N) CPU is not this one; no accelerator is probed.
FLOOR_GBPS = {
    # Host memory, into fresh pages that fault in on first touch (this sandboxed VM, loaded: 0.6-1.1 GB/s).
    "host": 1.0,
    # Host <-> accelerator: PCIe 3.0 x16 carries 15.75 GB/s at most, pinned copies ~12; pageable ones are staged
    # through a driver buffer at half to a third of that.
    "link": 5.0,
    # Within one accelerator (a copy reads and writes each byte): a V100's 900 GB/s HBM2 copies ~400 GB/s.
    "device": 200.0,
    # Between two accelerators with peer access: NVLink, or PCIe peer-to-peer (~10 GB/s on PCIe 3.0 x16).
    "peer": 10.0,
    # ... and without: torch stages the copy through the host, two PCIe hops.
    "staged": 5.0,
}
# The pattern the sources are filled with (suite.cases.buffers.fill_pattern: a hash of each 32-bit word, 8
# elementwise ops) is made on the host: a planned node's CPU at this rate at least. This sandboxed VM hashes
# 1.3 GB/s into a reused buffer and 0.03-0.1 GB/s into fresh memory (its page faults are slow); a server's
# unloaded core is assumed no slower than half its reused-buffer figure.
FILL_FLOOR_GBPS = 0.5
# Calls a benchmark makes beyond its warm-up and its rounds: the check's call and its verification (which
# reads the bytes again), pytest-benchmark's calibration call and the call it makes after the rounds.
OUTSIDE_CALLS = 4
MAX_LONG_SHOWN = 8
# A case is named when its calls run at least this far past its max_time (less is within the overheads).
LONG_OVER_S = 1.0


class Rates:
    """How fast a case's calls go. Compute (TFLOP/s per precision): a datasheet peak for a GPU the table knows (a
    call can take no less than its FLOPs at that rate), a short matmul probe on this machine's CPU (a fair
    figure for a large matmul there, which runs near it); None where neither is known (a planned node). Bytes
    (GB/s): this CPU's copy and pattern fill probed, FLOOR_GBPS and FILL_FLOOR_GBPS elsewhere."""

    def __init__(self, probe_cpu: bool = True) -> None:
        self.probe_cpu = probe_cpu
        self._cpu: dict[str, float | None] = {}

    def tflops(self, device: str, precision: str) -> float | None:
        if device == "cpu":
            return self._cpu_rate(precision) if self.probe_cpu else None
        if not device.startswith("cuda") or isinstance(dev.current_platform(), NodePlatform):
            return None
        from suite.cases.datasheet import lookup

        found = lookup(dev.current_platform().properties(torch.device(device)).get("name"), precision)
        return found.tflops if found else None

    def gbps(self, devices: tuple[str, ...]) -> tuple[float, str]:
        """(GB/s, where the figure is from) of a copy among `devices`."""
        accelerators = set(devices) - {"cpu"}
        if not accelerators:
            return (_cpu_gbps()[0], "measured on this CPU") if self.probe_cpu else (FLOOR_GBPS["host"], "host floor")
        if "cpu" in devices or len(accelerators) == 1:
            path = "link" if "cpu" in devices else "device"
        else:
            a, b = (torch.device(d) for d in devices[:2])
            path = "peer" if dev.current_platform().can_access_peer(a, b) else "staged"
        return FLOOR_GBPS[path], f"{path} floor"

    def fill_gbps(self) -> float:
        return _cpu_gbps()[1] if self.probe_cpu else FILL_FLOOR_GBPS

    def _cpu_rate(self, precision: str) -> float | None:
        if precision not in self._cpu:
            from suite.cases.common import TORCH_DTYPES
            from suite.cases.precision import storage_dtype

            dtype = TORCH_DTYPES.get(storage_dtype(precision))
            self._cpu[precision] = None if dtype is None else _probe(dtype)
        return self._cpu[precision]


def _probe(dtype: torch.dtype) -> float | None:
    """TFLOP/s of a PROBE_N^3 matmul on the CPU, best of its calls over ~PROBE_S."""
    try:
        a = torch.ones(PROBE_N, PROBE_N, dtype=dtype)
        torch.matmul(a, a)
        best, start = float("inf"), time.perf_counter()
        while time.perf_counter() - start < PROBE_S:
            t0 = time.perf_counter()
            torch.matmul(a, a)
            best = min(best, time.perf_counter() - t0)
        return 2 * PROBE_N**3 / best / 1e12
    except RuntimeError:  # a dtype this CPU build cannot multiply
        return None


@functools.cache
def _cpu_gbps() -> tuple[float, float]:
    """(GB/s of a copy into fresh host memory, GB/s of the pattern fill) on this CPU, the slowest of
    PROBE_CALLS each; once a process."""
    from suite.cases.buffers import fill_pattern

    def slowest(fn) -> float:
        took = []
        for _ in range(PROBE_CALLS):
            start = time.perf_counter()
            fn()
            took.append(time.perf_counter() - start)
        return max(took)

    source = torch.ones(PROBE_BYTES, dtype=torch.uint8)
    fill_pattern(torch.empty(2**16, dtype=torch.uint8))  # its first call's one-off start (0.2 s here), paid once
    return (PROBE_BYTES / slowest(lambda: torch.empty_like(source).copy_(source)) / 1e9,
            PROBE_FILL_BYTES / slowest(lambda: fill_pattern(torch.empty(PROBE_FILL_BYTES, dtype=torch.uint8))) / 1e9)


@dataclass
class Call:
    """One call of a case, from its parameters alone (nothing is built): its FLOPs at the device's rate or its
    bytes at the path's, whichever takes longer."""

    seconds: float
    fill_s: float  # filling its sources with the pattern when the case is built
    work: str  # what one call does: "2.75 TFLOP", "64.0 MiB"
    rate: float
    unit: str  # of rate: TFLOP/s or GB/s
    rate_from: str


def one_call(case: Case, rates: Rates) -> Call | None:
    """The case's call, from its family's read module's `call_flops` and `call_bytes` (and `fill_bytes`, default
    its call_bytes); None where neither is known or no rate is."""
    found = []
    call_flops = family_read(case.family, "call_flops")
    flops = call_flops(case.info) if call_flops else None
    rate = flops and rates.tflops(case.devices[0], str(case.info.get("precision", case.info.get("dtype", ""))))
    if rate:
        found.append(Call(flops / (rate * 1e12), 0.0, f"{flops / 1e12:.3g} TFLOP", rate, "TFLOP/s",
                          "measured on this CPU" if case.devices[0] == "cpu" else "datasheet peak"))
    call_bytes = family_read(case.family, "call_bytes")
    nbytes = call_bytes(case.info) if call_bytes else None
    if nbytes is not None:  # 0: a call that moves nothing still has its sources filled
        gbps, source = rates.gbps(case.devices)
        filled = family_read(case.family, "fill_bytes", call_bytes)(case.info)
        found.append(Call(nbytes / (gbps * 1e9), filled / (rates.fill_gbps() * 1e9), format_size(nbytes), gbps,
                          "GB/s", source))
    return max(found, key=lambda c: c.seconds + c.fill_s, default=None)


def call_costs(case: Case, timing, call: Call | None) -> tuple[float, float]:
    """(seconds the case's whole calls add to fixed_seconds, probe_seconds and its timed rounds, the least round
    they make). Filling its sources and OUTSIDE_CALLS calls where they outlast the family's OVERHEAD_S (which
    holds them for the sizes it was measured at), a warm-up of MIN_WARMUP_CALLS calls, probe rounds of a call
    each. (0, 0) without a call."""
    if call is None:
        return 0.0, 0.0
    c = call.seconds
    outside = max(0.0, call.fill_s + OUTSIDE_CALLS * c - overhead_s(case.family))
    warm = max(0.0, MIN_WARMUP_CALLS * c - warmup_seconds(case, timing))
    probe = BOUND_ROUNDS * max(0.0, c - min_round_seconds(case, timing)) if probe_seconds(case, timing) else 0.0
    return outside + warm + probe, c


@dataclass
class LongCall:
    case_id: str
    family: str
    call_s: float  # one call (Call)
    need_s: float  # what its whole calls take: filling, warm-up, outside calls, min_rounds and probe rounds
    over_s: float  # beyond its max_time
    work: str
    rate: float
    unit: str
    rate_from: str


def long_calls(config: SuiteConfig, selected: dict[str, list[Case]], rates: Rates) -> list[LongCall]:
    """Cases whose whole calls alone run past their family's max_time by LONG_OVER_S: pytest-benchmark times
    whole calls, so such a case takes min_rounds x its call however small max_time is ('at most' counts it)."""
    found = []
    for family, cases in selected.items():
        timing = config.timing_for(family)
        for case in cases:
            call = one_call(case, rates) if runs_here(case) else None
            if call is None or family_read(family, "fixed_seconds"):
                continue
            more, round_s = call_costs(case, timing, call)
            need = more + timing.min_rounds * round_s
            if need - timing.max_time >= LONG_OVER_S:
                found.append(LongCall(case.id, family, call.seconds, need, need - timing.max_time, call.work,
                                      call.rate, call.unit, call.rate_from))
    return sorted(found, key=lambda c: -c.need_s)


# --- the budget ------------------------------------------------------------------------------------------


def least_budget_s(minimum_s: float) -> float:
    """The budget to ask for when a run needs at least `minimum_s` (BUDGET_MARGIN): the one figure shown."""
    return minimum_s * BUDGET_MARGIN + BUDGET_MARGIN_S


def budget_error(budget_s: float, minimum_s: float, count: int, source: str) -> UserError:
    need = format_duration(least_budget_s(minimum_s))
    what = "the benchmark that runs" if count == 1 else f"the {count} benchmarks that run"
    return UserError(
        f"{source} {format_duration(budget_s)} is too small for {what} here: give "
        f"{need} or more (warm-up, checks and min_rounds of each), or select fewer (-k, --suite-devices, a "
        "smaller --suite-config)"
    )


# --- `python -m suite plan` -------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("--suite-config", "--config", dest="config", default=None, metavar="PATH",
                        help=f"the YAML config (default: {DEFAULT_CONFIG})")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="plan for a node of N GPUs (cuda:0..N-1) instead of this machine")
    parser.add_argument("--suite-devices", "--devices", dest="devices", default=None, metavar="LIST",
                        help="override the config's devices, as pytest's --suite-devices")
    parser.add_argument("--budget", "--suite-budget", dest="budget", default=None, metavar="DURATION",
                        help="plan under this budget (90s, 10m, 1h); default: the config's timing.budget")
    parser.add_argument("--json", action="store_true",
                        help='print {"benchmarks": int, "estimated_s": float, "families": {...}, ...}')


def _config_file(given: str | None) -> Path:
    if given:
        return Path(given)
    # The project's config, wherever the command is started from (as pytest's plugin does).
    return Path(__file__).resolve().parent.parent / DEFAULT_CONFIG


def run(args) -> int:
    config = load_config(_config_file(args.config))
    if args.gpus is not None and not 0 <= args.gpus <= 4096:
        raise UserError(f"--gpus {args.gpus}: expected a GPU count between 0 and 4096")
    budget = config.timing.budget
    if args.budget is not None:
        try:
            budget = parse_duration(args.budget)
        except ValueError as exc:
            raise UserError(f"--budget: {exc}") from None
    spec = args.devices or config.devices
    node = args.gpus is not None
    with dev.use_platform(NodePlatform(args.gpus)) if node else contextlib.nullcontext():
        if node:
            try:
                missing = dev.missing_devices(dev.resolve_spec(spec))
            except ValueError as exc:
                raise UserError(f"--devices: {exc}") from None
            if missing:
                # A planned node has exactly cpu and cuda:0..N-1: a device beyond them is a typo, not a skip.
                raise UserError(
                    f"--devices {', '.join(missing)}: not on a node of {args.gpus} GPU(s) (it has: "
                    f"{', '.join(dev.present_devices())}); raise --gpus or pick from those"
                )
        devices = dev.check_spec(spec, option="--devices")  # `gpus` on a node of none
        # A planned node's GPUs are unnamed (no datasheet rate) and its CPU is not this one.
        rates = Rates(probe_cpu=not node)
        plan = make_plan(config, devices, gpus=args.gpus, budget_s=budget, rates=rates)
        long = long_calls(config, select(config, devices), rates)
    if args.json:
        print(json.dumps({**plan.as_dict(), "long_calls": [vars(c) for c in long]}, indent=2))
        return 0
    print(render(plan, long))
    if budget is not None and least_budget_s(plan.run_minimum_s) > budget:
        print(f"\n{budget_error(budget, plan.run_minimum_s, plan.measured_in_run, 'the budget')}")
        return 2
    return 0


def _family_line(name: str, fp) -> str:
    note = ""
    if fp.separate and fp.runs:
        note = f"  (separate torchrun run: {family_read(name, 'TORCHRUN')})"
    elif fp.separate:
        note = f"  (skipped here: {name} need torchrun)"
    return f"{name:<12} {fp.benchmarks:>10} {fp.runs:>9} {format_duration(fp.estimated_s):>9}{note}"


def _budget_lines(plan: Plan) -> list[str]:
    """What a budget leaves each benchmark, and the torchrun runs outside it; [] without a budget."""
    if plan.budget_s is None:
        return []
    lines = []
    # A budget too small gets one line, the refusal (main prints it last), not a second wording here.
    if least_budget_s(plan.run_minimum_s) <= plan.budget_s:
        share = (f"timed rounds of each benchmark: at most {plan.share_s:.3g} s (or its max_time, if less)"
                 if plan.share_s and plan.share_s > 0 else "no time is left for timed rounds")
        lines.append(
            f"budget {format_duration(plan.budget_s)}: {share}; give at least "
            f"{format_duration(least_budget_s(plan.run_minimum_s))}"
        )
    separate = [name for name, fp in plan.families.items() if fp.separate and fp.runs]
    if separate:
        cost = sum(plan.families[name].estimated_s for name in separate)
        lines.append(
            f"The budget is for `pytest benchmarks`; {', '.join(separate)} run separately under torchrun "
            f"({format_duration(cost)} more, not in the budget: the total above includes it)."
        )
    return lines


def _long_lines(long: list[LongCall]) -> list[str]:
    """The cases whose whole calls alone run past their max_time, the first MAX_LONG_SHOWN of them named."""
    if not long:
        return []
    lines = [
        f"In 'at most': {len(long)} case(s) whose one call is long, so their whole calls take "
        f"~{format_duration(sum(c.over_s for c in long))} beyond max_time "
        "(pytest-benchmark times whole calls; smaller sizes shorten them):"
    ]
    lines += [
        f"  {c.family} {c.case_id}: one call {'>= ' if c.rate_from == 'datasheet peak' else '~'}"
        f"{format_duration(c.call_s)} ({c.work} at {c.rate:.3g} {c.unit}, {c.rate_from}); "
        f"its calls ~{format_duration(c.need_s)}"
        for c in long[:MAX_LONG_SHOWN]
    ]
    if len(long) > MAX_LONG_SHOWN:
        lines.append(f"  ... and {len(long) - MAX_LONG_SHOWN} more (--json lists them all)")
    return lines


def render(plan: Plan, long: list[LongCall] | None = None) -> str:
    where = f"a node of {plan.gpus} GPU(s)" if plan.gpus is not None else "this machine"
    assumed = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in overheads().items())
    lines = [
        f"plan for {where}: devices {', '.join(plan.devices)}",
        "",
        f"{'family':<12} {'benchmarks':>10} {'measured':>9} {'at most':>9}",
        *(_family_line(name, fp) for name, fp in plan.families.items()),
        f"{'session':<12} {'':>10} {'':>9} {format_duration(plan.session_s):>9}",
        f"{'total':<12} {plan.benchmarks:>10} {sum(f.runs for f in plan.families.values()):>9} "
        f"{format_duration(plan.estimated_s):>9}",
        "",
        *_budget_lines(plan),
        "'at most' assumes every benchmark runs its timed rounds to max_time, in whole calls (FLOPs at the "
        "device's rate, bytes at the path's: this CPU probed, accelerators at floor rates); precision stopping "
        "ends stable ones sooner.",
        *_long_lines(long),
        f"Per-benchmark overhead assumed (pytest, build, check, calibration; measured on a 2-core CPU by "
        f"scripts/bench_timing.py as test duration - timed rounds - warm-up): {assumed}; session "
        f"{SESSION_OVERHEAD_S:.0f} s.",
    ]
    return "\n".join(lines)
