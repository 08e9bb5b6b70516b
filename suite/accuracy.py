"""`python -m suite accuracy [FAMILY...]`: the suite's figures against an independent reference, paired runs.

For each family the suite runs in this process (`pytest.main` on a generated one-family config, read back
from its JSON), then the reference measures the same op on the same inputs: `torch.utils.benchmark.Timer`
with `num_threads` set to the suite's threads (collectives: a plain torch.distributed loop under torchrun).
That pair repeats `--rounds` times; each row's verdict is on the median of the paired ratios. Shared
VMs switch between fast and slow phases every few seconds (the same 4 KiB clone measures 1.8 us or 3.5 us),
so only pairs taken seconds apart, many times over, make the two methods comparable.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import yaml

from suite.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB = 2**10, 2**20
# Pairs of (suite, reference) per family: enough that one disturbed pair cannot move the median.
ROUNDS = 7
# --quick: the machinery end to end in seconds (tests); too few pairs and too small sizes for a verdict.
QUICK_ROUNDS = 2
# A row's ratio is the median of at least this many paired ratios: the median of two is their mean, which one
# disturbed pair moves anywhere (--quick once showed 43.197 for 0.110 vs 0.109 TFLOP/s); fewer pairs show '-'.
MIN_PAIRS_FOR_RATIO = 3
# The full run times the suite as users run it: the shipped default config's timing (precision stopping
# included); see shipped_timing(). --quick only exercises the machinery.
SHIPPED_TIMING_KEYS = ("warmup_s", "max_time", "min_rounds", "precision", "confidence")
QUICK_TIMING = {"warmup_s": 0.01, "max_time": 0.02, "min_rounds": 2}
# Timer.blocked_autorange keeps measuring blocks this long: several blocks of the slowest op, as the suite.
TIMER_MIN_RUN_S = 0.5
QUICK_TIMER_MIN_RUN_S = 0.02
# Collectives run on Gloo ranks on the CPU (the GPU check covers NCCL): two ranks, as a 2-core machine allows.
COLLECTIVE_RANKS = 2
COLLECTIVE_TIMEOUT_S = 300


def shipped_timing() -> dict:
    """The timing keys of configs/default.yaml: what a user's `pytest benchmarks` runs with."""
    from suite.config import load_config

    timing = load_config(ROOT / "configs" / "default.yaml").timing
    return {key: getattr(timing, key) for key in SHIPPED_TIMING_KEYS}


@dataclass(frozen=True)
class Scale:
    """The sizes of one accuracy run; the targets are set for FULL, QUICK only exercises the machinery."""

    rounds: int
    timing: dict | None  # None: the shipped default config's timing
    timer_min_run_s: float
    matmul: int  # n of the fp32 n x n x n matmul
    sweep: tuple[int, ...]  # n of each ceiling sweep shape
    conv_batch: int
    copy_bytes: int
    small_bytes: int
    big_bytes: int
    collective_bytes: int
    collective_rounds: int
    collective_iterations: int


FULL = Scale(rounds=ROUNDS, timing=None, timer_min_run_s=TIMER_MIN_RUN_S, matmul=2048,
             sweep=(512, 1024, 1536, 2048), conv_batch=2, copy_bytes=256 * MiB, small_bytes=4 * KiB,
             big_bytes=64 * MiB, collective_bytes=64 * MiB, collective_rounds=15, collective_iterations=2)
QUICK = Scale(rounds=QUICK_ROUNDS, timing=QUICK_TIMING, timer_min_run_s=QUICK_TIMER_MIN_RUN_S, matmul=256,
              sweep=(128, 256), conv_batch=1, copy_bytes=1 * MiB, small_bytes=4 * KiB, big_bytes=1 * MiB,
              collective_bytes=1 * MiB, collective_rounds=3, collective_iterations=1)
CONV_LAYER = {"name": "resnet50-conv2-3x3", "in_channels": 64, "out_channels": 64, "size": 56, "kernel": 3,
              "padding": 1}


@dataclass(frozen=True)
class Target:
    """How a row is judged: 'within' |ratio - 1| <= value, 'at_least' ratio >= value, 'below' suite < value"""

    kind: str
    value: float

    def describe(self) -> str:
        if self.kind == "within":
            return f"within {self.value:.0%}"
        if self.kind == "at_least":
            return f">= {self.value:g}x"
        return f"< {fmt_value(self.value, 's')}"

    def passed(self, suite: float, ratio: float) -> bool:
        if self.kind == "within":
            return abs(ratio - 1) <= self.value
        if self.kind == "at_least":
            return ratio >= self.value
        return suite < self.value


@dataclass(frozen=True)
class Pair:
    """One round's figures of one row: the suite's and the reference's, in `unit`."""

    family: str
    title: str
    unit: str  # "s" (seconds per call), or a rate: "TFLOP/s", "GB/s"
    reference: str  # what measured the reference figure
    target: Target
    suite: float
    ref: float


def fmt_value(value: float, unit: str) -> str:
    if unit != "s":
        return f"{value:.3f} {unit}"
    for scale, name in ((1, "s"), (1e3, "ms"), (1e6, "us")):
        if value * scale >= 1:
            return f"{value * scale:.3f} {name}"
    return f"{value * 1e9:.1f} ns"


def size_label(nbytes: int) -> str:
    return f"{nbytes // MiB}MiB" if nbytes >= MiB else f"{nbytes // KiB}KiB"


# --- the suite side: pytest in this process -------------------------------------------------------------


class SuiteRunner:
    """Runs benchmarks/test_<family>.py on a generated config in this process; returns its results JSON."""

    def __init__(self, workdir: Path, timing: dict) -> None:
        self.workdir = workdir
        self.timing = timing
        self.runs = 0

    def run(self, family: str, cases: dict) -> dict:
        self.runs += 1
        cfg, out = self.workdir / f"{family}-{self.runs}.yaml", self.workdir / f"{family}-{self.runs}.json"
        config = {"devices": "cpu", "timing": self.timing, "cases": cases}
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        code, log = run_pytest([str(ROOT / "benchmarks" / f"test_{family}.py"), f"--rootdir={ROOT}", "-q",
                                "-p", "no:cacheprovider", f"--suite-config={cfg}", f"--benchmark-json={out}"])
        if code != 0 or not out.exists():
            print(log[-4000:], file=sys.stderr)
            raise UserError(f"the suite's {family} run failed (pytest exit {code}, output above); fix that "
                            f"first: pytest benchmarks/test_{family}.py --suite-config {cfg}")
        return json.loads(out.read_text(encoding="utf-8"))


def run_pytest(args: list[str]) -> tuple[int, str]:
    """pytest.main with its terminal output kept out of the accuracy table (returned for errors)."""
    import pytest

    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        code = pytest.main(args)
    return int(code), log.getvalue()


def one(results: dict, **match) -> dict:
    """The single benchmark of `results` whose extra_info has every key/value of `match`."""
    found = [b for b in results["benchmarks"] if all(b["extra_info"].get(k) == v for k, v in match.items())]
    if len(found) != 1:
        raise RuntimeError(f"expected one benchmark with {match}, found {len(found)}")
    return found[0]


# --- the reference side: torch.utils.benchmark.Timer on the same op and inputs ------------------------


def timer_median(stmt: str, env: dict, min_run_s: float) -> float:
    """Timer's median seconds per call, with the suite's thread count (Timer's default is one thread)."""
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer(stmt, globals=env, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_s).median


def matmul_env(n: int) -> dict:
    """The matmul case's inputs (suite.cases.matmul: randn with seeds 1 and 2) for Timer."""
    import torch

    from suite.cases.common import randn

    return {"torch": torch, "a": randn(n, n, dtype=torch.float32, device="cpu", seed=1),
            "b": randn(n, n, dtype=torch.float32, device="cpu", seed=2), "out": torch.empty(n, n)}


def cpu_buffer(nbytes: int, data: bool = True):
    from suite.cases.buffers import buffer

    return buffer("cpu", nbytes, data=data)


# --- one round of each family: run the suite, then the reference; return that round's pairs -------------


def matmul_round(runner: SuiteRunner, s: Scale) -> list[Pair]:
    shape = f"{s.matmul}x{s.matmul}x{s.matmul}"
    bench = one(runner.run("matmul", {"matmul": {"dtypes": ["float32"], "shapes": [shape]}}), case="matmul")
    ref = timer_median("torch.matmul(a, b, out=out)", matmul_env(s.matmul), s.timer_min_run_s)
    return [Pair("matmul", f"fp32 matmul {shape}", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]


def ceiling_round(runner: SuiteRunner, s: Scale) -> list[Pair]:
    """The suite's measured fp32 ceiling (best of its sweep) against the best TFLOP/s of a Timer sweep."""
    shapes = [f"{n}x{n}x{n}" for n in s.sweep]
    results = runner.run("ceiling", {"ceiling": {"dtypes": ["float32"], "shapes": shapes}})
    suite = results["suite"]["ceilings"]["cpu"]["float32"]["tflops"]
    ref = max(2 * n**3 / timer_median("torch.matmul(a, b, out=out)", matmul_env(n), s.timer_min_run_s) / 1e12
              for n in s.sweep)
    sweep = ", ".join(f"{n}^3" for n in s.sweep)
    return [Pair("ceiling", f"fp32 ceiling, best of {sweep}", "TFLOP/s", "Timer sweep",
                 Target("within", 0.10), suite, ref)]


def conv_round(runner: SuiteRunner, s: Scale) -> list[Pair]:
    import torch.nn.functional as F

    from suite.cases import family_module

    layer = {**CONV_LAYER, "batch": s.conv_batch}
    results = runner.run("conv", {"conv": {"dtypes": ["float32"], "layouts": ["nchw"], "steps": ["fwd"],
                                           "shapes": [layer]}})
    bench = one(results, case="conv")
    p = bench["extra_info"]
    x, w, _ = family_module("conv").make_operands(p, "cpu")
    env = {"F": F, "x": x, "w": w, "s": tuple(p["stride"]), "p": tuple(p["padding"]), "g": p["groups"]}
    ref = timer_median("F.conv2d(x, w, None, s, p, 1, g)", env, s.timer_min_run_s)
    return [Pair("conv", f"conv2d fwd {layer['name']} b{s.conv_batch}", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]


def copy_round(runner: SuiteRunner, s: Scale) -> list[Pair]:
    n = s.copy_bytes
    bench = one(runner.run("copy", {"copy": {"sizes": [n], "cpu": {"sizes": [n]}}}), src="cpu", dst="cpu")
    src, dst = cpu_buffer(n), cpu_buffer(n, data=False)
    dst.copy_(src)  # first touch of dst's pages outside timing, as the suite's warm-up does
    ref = timer_median("dst.copy_(src)", {"src": src, "dst": dst}, s.timer_min_run_s)
    return [Pair("copy", f"{size_label(n)} CPU->CPU copy_", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]


# `.to` of a tensor already on its device returns it: a Python call, far under this even on a slow host.
TO_SAME_LIMIT_S = 2e-6
# A 64 MiB clone reads and writes 64 MiB: at least this many times a no-op `.to`, on any host.
CLONE_OVER_TO_SAME = 50


def placement_round(runner: SuiteRunner, s: Scale) -> list[Pair]:
    import torch

    small, big = s.small_bytes, s.big_bytes
    results = runner.run("placement", {"placement": {"sizes": [small, big], "ops": ["to_same", "clone"]}})

    def median(op: str, size: int) -> float:
        return one(results, op=op, size=size)["stats"]["median"]

    cpu = torch.device("cpu")
    x_small, x_big = cpu_buffer(small), cpu_buffer(big)
    below = Target("below", TO_SAME_LIMIT_S)
    return [
        Pair("placement", f"{size_label(small)} clone()", "s", "Timer", Target("within", 0.15),
             median("clone", small), timer_median("x.clone()", {"x": x_small}, s.timer_min_run_s)),
        Pair("placement", f"{size_label(small)} .to(same device)", "s", "Timer", below,
             median("to_same", small), timer_median("x.to(d)", {"x": x_small, "d": cpu}, s.timer_min_run_s)),
        Pair("placement", f"{size_label(big)} .to(same device)", "s", "Timer", below,
             median("to_same", big), timer_median("x.to(d)", {"x": x_big, "d": cpu}, s.timer_min_run_s)),
        Pair("placement", f"{size_label(big)} clone() / .to(same device)", "s", "suite .to(same)",
             Target("at_least", CLONE_OVER_TO_SAME), median("clone", big), median("to_same", big)),
    ]


def collectives_rounds(s: Scale, workdir: Path) -> list[Pair]:
    """All rounds at once: torchrun starts COLLECTIVE_RANKS ranks of `python -m suite.accuracy`, which pair
    a plain loop with the suite's case round by round; rank 0 writes the pairs to a JSON file."""
    out = workdir / "collectives-pairs.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={COLLECTIVE_RANKS}", "-m", "suite.accuracy",
           json.dumps({"scale": asdict(s), "workdir": str(workdir), "out": str(out)})]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=COLLECTIVE_TIMEOUT_S * 2)
    if proc.returncode != 0 or not out.exists():
        print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
        raise UserError(f"the collectives accuracy run under torchrun failed (exit {proc.returncode}, output "
                        "above); check that `python -m suite collectives --nproc 2` works")
    pairs = json.loads(out.read_text(encoding="utf-8"))
    return [Pair(**{**p, "target": Target(**p["target"])}) for p in pairs]


def plain_all_reduce(nbytes: int, rounds: int, iterations: int, warmup: int) -> float:
    """Median seconds per all_reduce of a loop written as nccl-tests time it: barrier, host clock around
    `iterations` calls, max over ranks."""
    import torch
    import torch.distributed as dist

    buf = torch.arange(nbytes // 4, dtype=torch.float32).remainder_(8).add_(1)
    times = []
    for r in range(warmup + rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(buf)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if r >= warmup:
            times.append(elapsed.item() / iterations)
    return statistics.median(times)


# The suite's and the plain loop's untimed rounds before timing.
COLLECTIVE_WARMUP_ROUNDS = 2


def collectives_worker(spec: dict) -> int:
    """One rank under torchrun: per round the plain loop, then the suite's all_reduce case (same group)."""
    import torch.distributed as dist

    from suite.cases import family_module

    s = Scale(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["scale"].items()})
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    workdir, nbytes = Path(spec["workdir"]), s.collective_bytes
    cases = {"collectives": {"ops": ["all_reduce"], "sizes": [nbytes], "dtypes": ["float32"],
                             "backend": "gloo", "rounds": s.collective_rounds,
                             "iterations": s.collective_iterations, "warmup_rounds": COLLECTIVE_WARMUP_ROUNDS,
                             "timeout_s": COLLECTIVE_TIMEOUT_S}}
    cfg, out = workdir / "collectives.yaml", workdir / "collectives.json"
    if rank == 0:
        cfg.write_text(yaml.safe_dump({"devices": "cpu", "cases": cases}), encoding="utf-8")
    dist.barrier()
    title = f"all_reduce {size_label(nbytes)} busbw, {n} Gloo ranks"
    pairs = []
    for _ in range(s.rounds):
        plain = plain_all_reduce(nbytes, s.collective_rounds, s.collective_iterations,
                                 COLLECTIVE_WARMUP_ROUNDS)
        code, log = run_pytest([str(ROOT / "benchmarks" / "test_collectives.py"), f"--rootdir={ROOT}", "-q",
                                "-p", "no:cacheprovider", f"--suite-config={cfg}", f"--benchmark-json={out}"])
        if code != 0:
            print(log[-4000:], file=sys.stderr)
            return 1
        if rank == 0:
            # Looked up only now: importing suite.cases.collectives before pytest.main imports
            # suite.distributed, which pytest then cannot rewrite (a warning the project makes an error).
            busbw = family_module("collectives").busbw
            bench = one(json.loads(out.read_text(encoding="utf-8")), case="collectives")
            info = bench["extra_info"]
            pairs.append({"family": "collectives", "title": title, "unit": "GB/s",
                          "reference": "plain dist loop", "target": {"kind": "within", "value": 0.15},
                          "suite": info["busbw"], "ref": busbw("all_reduce", info["bytes"], plain, n)})
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps(pairs), encoding="utf-8")
    dist.destroy_process_group()
    return 0


ROUNDS_OF: dict[str, Callable[[SuiteRunner, Scale], list[Pair]]] = {
    "matmul": matmul_round,
    "ceiling": ceiling_round,
    "conv": conv_round,
    "copy": copy_round,
    "placement": placement_round,
}
FAMILIES = (*ROUNDS_OF, "collectives")


# --- the table ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    family: str
    title: str
    unit: str
    reference: str
    target: Target
    suite: float  # median over rounds
    ref: float
    ratio: float | None  # median of the paired ratios suite / reference: the verdict's figure (None: too few)
    low: float  # the paired ratios' range: the machine's noise
    high: float
    passed: bool | None  # None: not judged (--quick, or fewer than MIN_PAIRS_FOR_RATIO pairs)


def summarise(pairs: list[Pair], judge: bool = True) -> list[Row]:
    """One row per (family, title), in first-seen order: medians and the median of the paired ratios (with at
    least MIN_PAIRS_FOR_RATIO pairs; a row with fewer has no ratio and no verdict)."""
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        groups.setdefault((p.family, p.title), []).append(p)
    rows = []
    for group in groups.values():
        first = group[0]
        ratios = [p.suite / p.ref for p in group]
        enough = len(ratios) >= MIN_PAIRS_FOR_RATIO
        suite = statistics.median(p.suite for p in group)
        ratio = statistics.median(ratios) if enough else None
        rows.append(Row(first.family, first.title, first.unit, first.reference, first.target, suite,
                        statistics.median(p.ref for p in group), ratio, min(ratios), max(ratios),
                        first.target.passed(suite, ratio) if judge and enough else None))
    return rows


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.0f}" if ratio >= 100 else f"{ratio:.3f}"


HEADER = ("family", "measurement", "suite", "reference", "ratio", "pair ratios", "target", "verdict")


def table(rows: list[Row]) -> str:
    cells = [HEADER]
    for r in rows:
        verdict = "-" if r.passed is None else "PASS" if r.passed else "FAIL"
        ratio = "-" if r.ratio is None else fmt_ratio(r.ratio)
        cells.append((r.family, r.title, fmt_value(r.suite, r.unit),
                      f"{fmt_value(r.ref, r.unit)} ({r.reference})", ratio,
                      f"{fmt_ratio(r.low)}-{fmt_ratio(r.high)}", r.target.describe(), verdict))
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# --- the command ----------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("families", nargs="*", metavar="FAMILY",
                        help=f"families to check (default all): {', '.join(FAMILIES)}")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"paired rounds per family (default {ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 2 rounds: checks that everything runs, judges nothing")


def run(args) -> int:
    import torch

    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        raise UserError(f"no accuracy check for {', '.join(map(repr, unknown))}; families with one: "
                        f"{', '.join(FAMILIES)}")
    if not (ROOT / "benchmarks").is_dir():
        raise UserError(f"{ROOT / 'benchmarks'} not found: the accuracy check runs the project's benchmarks/; "
                        "install the project from its checkout (pip install -e .)")
    if args.rounds is not None and args.rounds < (1 if args.quick else MIN_PAIRS_FOR_RATIO):
        if args.quick:
            raise UserError(f"--rounds {args.rounds}: give at least 1")
        raise UserError(f"--rounds {args.rounds}: give at least {MIN_PAIRS_FOR_RATIO} (a verdict is on the "
                        f"median of the paired ratios; default {ROUNDS}), or add --quick to check only that "
                        "it runs")
    scale = QUICK if args.quick else FULL
    if args.rounds is not None:
        scale = replace(scale, rounds=args.rounds)
    families = list(dict.fromkeys(args.families or FAMILIES))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (suite and Timer alike), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {scale.rounds} paired rounds per "
          "family", flush=True)
    pairs: list[Pair] = []
    with tempfile.TemporaryDirectory(prefix="suite-accuracy-") as tmp:
        runner = SuiteRunner(Path(tmp), scale.timing or shipped_timing())
        for family in families:
            start = time.monotonic()
            if family == "collectives":
                pairs += collectives_rounds(scale, Path(tmp))
            else:
                for _ in range(scale.rounds):
                    pairs += ROUNDS_OF[family](runner, scale)
            print(f"  {family}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    rows = summarise(pairs, judge=not args.quick)
    bad = [r for r in rows if not (r.low > 0 and math.isfinite(r.high))]
    # Other processes on the cores make a multi-threaded op wait for a descheduled thread (milliseconds), on
    # both sides: the load says how far a run's figures can be trusted.
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs)\n")
    print(table(rows))
    if any(r.ratio is None for r in rows):
        print(f"\nratio '-': fewer than {MIN_PAIRS_FOR_RATIO} paired rounds; the median of two is their "
              "mean, which one disturbed pair moves anywhere (each pair's ratio is in the range beside it)")
    if args.quick:
        print("\n--quick: sizes and rounds too small for the targets; nothing judged")
    if bad:
        print(f"\nerror: no finite positive ratio for {', '.join(r.title for r in bad)}", file=sys.stderr)
        return 2
    return 1 if any(r.passed is False for r in rows) else 0


if __name__ == "__main__":
    # Under torchrun (collectives_rounds): one rank of the collectives check, its spec as the one argument.
    sys.exit(collectives_worker(json.loads(sys.argv[1])))
