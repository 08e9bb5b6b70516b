"""`python -m suite accuracy [FAMILY...]`: the suite's figures against an independent reference, paired runs.

`--telemetry` pairs instead the suite's own figure with its telemetry on (suite.telemetry) and off, every
benchmark of each family's accuracy runs, on against off: reading must not perturb what is measured.

For each family the suite runs in this process (`pytest.main` on a generated one-family config, read back
from its JSON), then the reference measures the same op on the same inputs: `torch.utils.benchmark.Timer`
with `num_threads` set to the suite's threads (collectives: a plain torch.distributed loop under torchrun).
That pair repeats `--rounds` times; each row's verdict is on the median of the paired ratios
(suite.tools.paired). A family takes part with `accuracy_round(runner, scale)` (or `accuracy_rounds(scale,
workdir)`, all rounds at once) in its checks.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from suite.errors import UserError
from suite.tools import ROOT
from suite.telemetry import Source
from suite.tools.paired import (MIN_PAIRS_FOR_RATIO, Pair, Row, Target, alternate, fmt_value, run_suite,
                                summarise)

# Pairs of (suite, reference) per family: enough that one disturbed pair cannot move the median.
ROUNDS = 7
# --quick: the machinery end to end in seconds (tests); too few pairs and too small sizes for a verdict.
QUICK_ROUNDS = 2
# The full run times the suite as users run it: the shipped default config's timing (precision stopping
# included); see shipped_timing(). --quick only exercises the machinery.
SHIPPED_TIMING_KEYS = ("warmup_s", "max_time", "min_rounds", "precision", "confidence")
QUICK_TIMING = {"warmup_s": 0.01, "max_time": 0.02, "min_rounds": 2}
# Timer.blocked_autorange keeps measuring blocks this long: several blocks of the slowest op, as the suite.
TIMER_MIN_RUN_S = 0.5
QUICK_TIMER_MIN_RUN_S = 0.02
# --telemetry: the suite's median with telemetry on may differ from the same run's with it off by this much.
TELEMETRY_TARGET = 0.01


def shipped_timing() -> dict:
    """The timing keys of configs/default.yaml: what a user's `pytest benchmarks` runs with."""
    from suite.config import load_config

    timing = load_config(ROOT / "configs" / "default.yaml").timing
    return {key: getattr(timing, key) for key in SHIPPED_TIMING_KEYS}


@dataclass(frozen=True)
class Scale:
    """One accuracy run: the targets are set for the full sizes, --quick only exercises the machinery."""

    rounds: int
    timing: dict | None  # None: the shipped default config's timing
    timer_min_run_s: float
    quick: bool

    def pick(self, full, quick):
        """A family's full size, or its --quick one."""
        return quick if self.quick else full


FULL = Scale(rounds=ROUNDS, timing=None, timer_min_run_s=TIMER_MIN_RUN_S, quick=False)
QUICK = Scale(rounds=QUICK_ROUNDS, timing=QUICK_TIMING, timer_min_run_s=QUICK_TIMER_MIN_RUN_S, quick=True)


class SuiteRunner:
    """Runs benchmarks/test_<family>.py on a generated config in this process; returns its results JSON."""

    def __init__(self, workdir: Path, timing: dict) -> None:
        self.workdir = workdir
        self.timing = timing
        self.runs = 0

    def run(self, family: str, cases: dict, args: tuple[str, ...] = ()) -> dict:
        self.runs += 1
        cfg, out = self.workdir / f"{family}-{self.runs}.yaml", self.workdir / f"{family}-{self.runs}.json"
        config = {"devices": "cpu", "timing": self.timing, "cases": cases}
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        # Quiet: pytest's terminal output stays out of the accuracy table (shown on an error).
        code, log, results = run_suite(f"benchmarks/test_{family}.py", cfg, out, args, quiet=True)
        if code != 0 or results is None:
            print(log[-4000:], file=sys.stderr)
            raise UserError(f"the suite's {family} run failed (pytest exit {code}, output above); fix that "
                            f"first: pytest benchmarks/test_{family}.py --suite-config {cfg}")
        return results


class TelemetryRunner(SuiteRunner):
    """Runs each config twice, telemetry on and off (which goes first alternates); `pairs` holds every
    benchmark's median on against off. The family's own reference is left aside."""

    def __init__(self, workdir: Path, timing: dict) -> None:
        super().__init__(workdir, timing)
        self.pairs: list[Pair] = []

    def run(self, family: str, cases: dict, args: tuple[str, ...] = ()) -> dict:
        results = {}
        for on in (True, False) if self.runs // 2 % 2 == 0 else (False, True):
            results[on] = super().run(family, cases, args if on else (*args, "--suite-no-telemetry"))
        off = {b["fullname"]: b["stats"]["median"] for b in results[False]["benchmarks"]}
        target = Target("within", TELEMETRY_TARGET)
        self.pairs += [Pair(family, f"{b['param']}: telemetry on / off", "s", "telemetry off", target,
                            b["stats"]["median"], off[b["fullname"]])
                       for b in results[True]["benchmarks"] if b["fullname"] in off]
        return results[True]


class StandInSource(Source):
    """Where no RAPL counter is readable: a read of a small /proc file per reading (what a powercap read
    costs), so that telemetry on still runs the Sampler's thread at its rate. It records nothing."""

    def gauges(self) -> dict:
        Path("/proc/self/stat").read_bytes()
        return {}

    counters = gauges


@contextlib.contextmanager
def cpu_telemetry():
    """The CPU's telemetry for --telemetry: RAPL where readable, else StandInSource; yields its name."""
    from suite import telemetry

    real = telemetry.sources_for
    if real(["cpu"])[0]:
        yield "RAPL"
        return
    telemetry.sources_for = lambda devices: ([StandInSource()], [])
    try:
        yield "a stand-in source (RAPL not readable here): /proc reads at the sampling rate"
    finally:
        telemetry.sources_for = real


def families() -> dict:
    """{family: its checks module} for every registered family with an accuracy round, in registry order."""
    from suite.cases import FAMILIES, family_part

    found = {}
    for name in FAMILIES:
        checks = family_part(name, "checks")
        if checks is not None and (hasattr(checks, "accuracy_round") or hasattr(checks, "accuracy_rounds")):
            found[name] = checks
    return found


# --- the table ------------------------------------------------------------------------------------------


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.0f}" if ratio >= 100 else f"{ratio:.3f}"


HEADER = ("family", "measurement", "suite", "reference", "ratio", "pair ratios", "target", "verdict")
# A row's verdict (Row.passed) as the table shows it.
VERDICTS = {None: "-", True: "PASS", False: "FAIL"}


def table(rows: list[Row]) -> str:
    cells = [HEADER]
    for r in rows:
        unresolved = r.passed is None and r.ratio is not None and r.target.passed(r.suite, r.ratio) is not False
        verdict = "noise" if unresolved and len(r.ratios) else VERDICTS[r.passed]
        ratio = "-" if r.ratio is None else fmt_ratio(r.ratio)
        cells.append((r.family, r.title, fmt_value(r.suite, r.unit),
                      f"{fmt_value(r.ref, r.unit)} ({r.reference})", ratio,
                      f"{fmt_ratio(r.low)}-{fmt_ratio(r.high)}", r.target.describe(), verdict))
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# --- the command ----------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("families", nargs="*", metavar="FAMILY",
                        help=f"families to check (default all): {', '.join(families())}")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"paired rounds per family (default {ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 2 rounds: checks that everything runs, judges nothing")
    parser.add_argument("--telemetry", action="store_true",
                        help=f"the suite's figures with telemetry on against off instead (target within "
                             f"{TELEMETRY_TARGET:.0%}%): does reading power and clocks perturb them?")


def run(args) -> int:
    import torch

    known = families()
    scale = _scale(args, known)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (suite and Timer alike), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {scale.rounds} paired rounds per "
          "family", flush=True)
    chosen = {family: known[family] for family in args.families or known}
    with cpu_telemetry() if args.telemetry else contextlib.nullcontext() as source:
        if source:
            print(f"telemetry on: {source}; off: --suite-no-telemetry", flush=True)
        rows = summarise(_pairs(chosen, scale, args.telemetry), judge=not args.quick)
    return _report(rows, args.quick)


def _scale(args, known: dict) -> Scale:
    """The run's scale from the command line; a UserError for a family without a check, a checkout without
    benchmarks/, or too few rounds for a verdict."""
    unknown = [f for f in args.families if f not in known]
    if unknown:
        raise UserError(f"no accuracy check for {', '.join(map(repr, unknown))}; families with one: "
                        f"{', '.join(known)}")
    if not (ROOT / "benchmarks").is_dir():
        raise UserError(f"{ROOT / 'benchmarks'} not found: the accuracy check runs the project's benchmarks/; "
                        "install the project from its checkout (pip install -e .)")
    scale = QUICK if args.quick else FULL
    if args.rounds is None:
        return scale
    if args.rounds < (1 if args.quick else MIN_PAIRS_FOR_RATIO):
        if args.quick:
            raise UserError(f"--rounds {args.rounds}: give at least 1")
        raise UserError(f"--rounds {args.rounds}: give at least {MIN_PAIRS_FOR_RATIO} (a verdict is on the "
                        f"median of the paired ratios; default {ROUNDS}), or add --quick to check only that "
                        "it runs")
    return replace(scale, rounds=args.rounds)


def _pairs(chosen: dict, scale: Scale, telemetry: bool = False) -> list[Pair]:
    """Every family's rounds, in turn; how long each took goes to stderr. `telemetry`: the pairs of
    TelemetryRunner (families whose rounds run apart from the runner, under torchrun, take no part)."""
    pairs: list[Pair] = []
    with tempfile.TemporaryDirectory(prefix="suite-accuracy-") as tmp:
        runner = (TelemetryRunner if telemetry else SuiteRunner)(Path(tmp), scale.timing or shipped_timing())
        for family, checks in chosen.items():
            start = time.monotonic()
            if hasattr(checks, "accuracy_rounds"):
                pairs += [] if telemetry else checks.accuracy_rounds(scale, Path(tmp))
            else:
                pairs += alternate(scale.rounds, lambda checks=checks: checks.accuracy_round(runner, scale))
            print(f"  {family}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return runner.pairs if telemetry else pairs


def _report(rows: list[Row], quick: bool) -> int:
    """Print the table and what it cannot say; the exit code (2: a ratio not finite and positive, 1: a FAIL)."""
    bad = [r for r in rows if not (r.low > 0 and math.isfinite(r.high))]
    # Other processes on the cores make a multi-threaded op wait for a descheduled thread (milliseconds), on
    # both sides: the load says how far a run's figures can be trusted.
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs)\n")
    print(table(rows))
    notes = ((any(r.ratio is None for r in rows),
              f"ratio '-': fewer than {MIN_PAIRS_FOR_RATIO} paired rounds; the median of two is their mean, which "
              "one disturbed pair moves anywhere (each pair's ratio is in the range beside it)"),
             (not quick and any(r.passed is None and r.ratio is not None for r in rows),
              "verdict 'noise': the median is within the target, but the pairs' ~90% interval of it is not (too "
              "few or too scattered pairs): not judged; more --rounds on a quieter machine"),
             (quick, "--quick: sizes and rounds too small for the targets; nothing judged"))
    for shown, note in notes:
        if shown:
            print(f"\n{note}")
    if bad:
        print(f"\nerror: no finite positive ratio for {', '.join(r.title for r in bad)}", file=sys.stderr)
        return 2
    return 1 if any(r.passed is False for r in rows) else 0
