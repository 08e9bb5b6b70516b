"""What a family's GPU-check step needs (CheckContext, CheckRow, the verdict rule, running a command, the check's
timing and its step estimates): the families' checks.py build their rows from this module, not from
suite.tools.gpu_check, so the families and the check do not import each other."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from suite.plan import DEFAULT_OVERHEAD_S, OVERHEAD_S
from suite.timing import ACCELERATOR_MIN_ROUND_S, DEFAULT_PRECISION, SUSTAINED_WARMUP_S
from suite.tools import ROOT
from suite.tools.paired import Pair, Target, alternate, event_seconds, run_suite, summarise

EXPECTATIONS = ROOT / "suite" / "expectations.yaml"
# Timing truth: the median of the paired ratios (suite / reference) may differ from 1 by this much.
RATIO_TOLERANCE = 0.10
# Alternations of (suite run, reference) per case: pairs taken seconds apart (suite.tools.paired), so a clock
# or thermal phase of the GPU affects both sides of a pair alike. Odd: the median is a pair.
ROUNDS = 3
DRY_ROUNDS = 2
# The suite's timing in the check's configs, set here rather than inherited so the step estimates below hold
# whatever the defaults become:
# - precision +-1% (the default): the check judges the figures a default run produces; on a GPU it ends most
#   cases after min_rounds, and the reference then runs exactly as long as the suite's timed rounds did;
# - compute_warmup_s = the default sustained warm-up: the ceiling is judged against a sustained figure, and a
#   shorter warm-up would time a boosting GPU (suite.timing.SUSTAINED_WARMUP_S);
# - max_time 0.5 s, not the default 1 s: it only bounds the cases precision stopping does not end (a kernel of
#   1-30 ms still gets 15+ rounds), and halves what those cost the check's 4-minute budget;
# - accelerator_min_time = the default 5 ms rounds on the GPU (suite.timing.ACCELERATOR_MIN_ROUND_S): the
#   conv rows judge whether they keep the launch gap out of a 0.1 ms convolution's figure;
# - time_limit_s: a case hung on the GPU fails after this long instead of eating the whole budget.
CHECK_TIMING = {"warmup_s": 0.05, "compute_warmup_s": SUSTAINED_WARMUP_S, "max_time": 0.5, "min_rounds": 5,
                "accelerator_min_time": ACCELERATOR_MIN_ROUND_S, "precision": DEFAULT_PRECISION,
                "time_limit_s": 60}

# --- how long a step takes on one H200: upper bounds built from the check's timing ------------------------

# A new Python process on the node: the interpreter, importing torch, the CUDA context, pytest's collection.
PROCESS_START_S = 8.0
# One in-process `pytest benchmarks/test_<family>.py` (torch already imported): collection, the inventory,
# writing the JSON.
IN_PROCESS_RUN_S = 1.5


def bench_s(family: str, compute: bool, timing: dict = CHECK_TIMING, overhead: bool = True) -> float:
    """At most one benchmark (or its reference, overhead=False): warm-up, timed rounds to max_time (precision
    stopping usually ends them far sooner), and suite.plan's measured per-benchmark overhead."""
    warm = timing["compute_warmup_s"] if compute else timing["warmup_s"]
    return warm + timing["max_time"] + (OVERHEAD_S.get(family, DEFAULT_OVERHEAD_S) if overhead else 0.0)


def truth_s(family: str, cases: int, references: int, compute: bool) -> float:
    """ROUNDS alternations of an in-process suite run of `cases` benchmarks and `references` references."""
    return ROUNDS * (IN_PROCESS_RUN_S + cases * bench_s(family, compute)
                     + references * bench_s(family, compute, overhead=False))


def expected(section: str) -> dict:
    """One entry of suite/expectations.yaml's `gpu_check` section: a GPU model's figure and its source."""
    return yaml.safe_load(EXPECTATIONS.read_text(encoding="utf-8"))["gpu_check"][section]


@dataclass
class CheckRow:
    """One row of the table: the suite's figure, an independent reference, their ratio, a verdict."""

    name: str
    suite: float | None
    reference: float | None
    unit: str
    ok: bool | None  # None: shown, not judged (see note)
    note: str = ""
    pairs: list[float] | None = None  # paired ratios suite / reference, one per alternation
    not_run: bool = False  # its step did not fit the budget: neither passed nor failed

    @property
    def ratio(self) -> float | None:
        if self.pairs:
            return statistics.median(self.pairs)
        if self.suite is None or not self.reference:
            return None
        return self.suite / self.reference

    @property
    def verdict(self) -> str:
        if self.not_run:
            return "NOT RUN"
        return "n/a" if self.ok is None else ("PASS" if self.ok else "FAIL")

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


def median(values: list[float]) -> float:
    return statistics.median(values)


def judged(ctx, ok: bool) -> bool | None:
    """A timing verdict on the GPU; the dry run checks only the plumbing and leaves the figures unjudged."""
    return None if ctx.dry_run else ok


def bound_row(ctx, title: str, bench: dict | None, want: str) -> CheckRow:
    """Whether a result says that `want` ('host' or 'device') set its time (extra_info.bound, from
    suite.timing.bound_info; the CPU records none): the host share beside it."""
    info = (bench or {}).get("extra_info", {})
    if "bound" not in info:
        why = "no result (skipped or failed: see the log)" if bench is None else "no bound recorded"
        return CheckRow(title, None, None, "host share", judged(ctx, False), why)
    return CheckRow(title, info.get("host_share"), None, "host share", judged(ctx, info["bound"] == want),
                    f"bound: {info['bound']}, must be {want}")


# torchrun's variables: a subprocess started inside a torchrun rank must not think it is one.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
# A subprocess that outlives its time gets SIGTERM (torchrun then stops its ranks), then SIGKILL this much
# later.
TERMINATE_GRACE_S = 5.0


def subprocess_env() -> dict:
    """The environment of every process the check starts: ours (with the carried wheels' folder that
    scripts/gpu-check.sh put on PYTHONPATH), the checkout first on PYTHONPATH, no torchrun variables,
    unbuffered output (so the log has what a process printed before it was killed)."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_command(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """Run a command from the checkout (environment: subprocess_env()), its output copied line by line to ours
    (the console and the log) as it comes: (exit code, or None if it ran past `timeout` and was stopped; its
    output)."""
    print(f"+ {shlex.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lines: list[str] = []

    def pump() -> None:
        with proc.stdout:  # closed at its end of file, when the last process holding it has exited
            for line in proc.stdout:
                lines.append(line)
                sys.stdout.write(line)
                sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"gpu-check: stopping it after {timeout:.0f} s", flush=True)
        _stop(proc)
        code = None
    # A grandchild that outlived its parent may hold the pipe open: do not wait for it.
    reader.join(timeout=TERMINATE_GRACE_S)
    return code, "".join(lines)


def last_line(text: str, width: int = 100) -> str:
    """A command's last non-blank line of output (what it said before it ended), cut to `width`; "" if none."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:width] if lines else ""


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- what a step is given ------------------------------------------------------------------------------


@dataclass
class CheckContext:
    device: str = "cuda:0"
    dry_run: bool = False
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-check-")))
    rounds: int = ROUNDS
    timing: dict = field(default_factory=lambda: dict(CHECK_TIMING))
    deadline: float = float("inf")  # time.monotonic() by which the whole check should be done
    step_deadline: float = float("inf")  # ... and the step now running (run_check sets it)
    results_path: Path | None = None  # the merged results of every suite run (OUTDIR/results.json)
    merge: Callable[[list], dict | None] | None = None  # ... and what merges them (run_check sets both)
    step: str = ""  # the step now running (named in the merged results)
    runs: list[tuple[str, dict, dict]] = field(default_factory=list)
    print_table: bool = True
    gpus: int = 1  # the node's GPUs (run_check counts them): with two, the multi-GPU paths are checked too

    def pick(self, gpu, dry):
        """The GPU's value, or the dry run's (tiny) one."""
        return dry if self.dry_run else gpu

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def step_seconds(self, cap: float) -> float:
        """What a subprocess of the running step may take: `cap`, or less where the step's own time runs out
        sooner (never under 5 s: a stopped command is a failed row, not a hung check)."""
        return max(5.0, min(cap, self.step_deadline - time.monotonic()))

    def write_config(self, config: dict) -> Path:
        config = {"timing": dict(self.timing), **config}
        path = self.workdir / f"config-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def keep_results(self, results: Path, config: dict | None = None) -> dict:
        """Read a results file and add it to the merged results (rewritten at once: a hard stop keeps it)."""
        data = json.loads(results.read_text())
        self.runs.append((self.step, config or {}, data))
        if self.results_path is not None and self.merge is not None:
            merged = self.merge(self.runs)
            if merged is not None:
                self.results_path.write_text(json.dumps(merged, indent=1, default=str), encoding="utf-8")
        return data

    def run_suite(self, config: dict | Path, tests: str = "benchmarks",
                  args: tuple[str, ...] = ()) -> list[dict]:
        """`pytest <tests>` on a config, in this process (the reference runs here too); its benchmarks."""
        cfg = config if isinstance(config, Path) else self.write_config(config)
        out = self.workdir / f"results-{time.monotonic_ns()}.json"
        code, _, data = run_suite(tests, cfg, out, args)
        if data is None:
            raise RuntimeError(f"pytest {tests} wrote no readable results (exit code {code}); see the log above")
        written = yaml.safe_load(cfg.read_text())
        return self.keep_results(out, {"tests": tests, "args": list(args), **written})["benchmarks"]

    def case_ids(self, family: str, cfg: Path) -> list[str]:
        from suite.cases import family_module
        from suite.config import load_config
        from suite.devices import resolve_spec

        config = load_config(cfg)
        return [c.id for c in family_module(family).enumerate_cases(config, resolve_spec(config.devices))]

    def timing_truth(self, family: str, config: dict, tests: str, titles: dict[str, str] | None = None,
                     reference: Callable[[str, Path, dict], float] = event_seconds
                     ) -> tuple[list[CheckRow], dict[str, list[dict]]]:
        """Alternate `rounds` times (suite.tools.paired): the suite's run of `config`, then a reference of each
        case in `titles` (param id -> row name; default: every case of the config): `reference(family, config
        file, the suite's result)`, seconds per call (default: CUDA events, paired.event_seconds). One row per
        case: medians in ms, verdict on the median of the paired ratios. Also returns every round's results by
        param id."""
        cfg = self.write_config(config)
        if titles is None:
            titles = {case_id: f"{family} {case_id}" for case_id in self.case_ids(family, cfg)}
        seen: dict[str, list[dict]] = {}
        label = "host clock (dry run)" if self.dry_run else "CUDA events"
        target = Target("within", RATIO_TOLERANCE)

        def one_round() -> list[Pair]:
            pairs = []
            for bench in self.run_suite(cfg, tests):
                seen.setdefault(bench["param"], []).append(bench)
                if bench["param"] in titles:
                    pairs.append(Pair(family, titles[bench["param"]], "s", label, target,
                                      bench["stats"]["median"], reference(family, cfg, bench)))
            return pairs

        # Every pair counts, however few: the check's ROUNDS are all a GPU's budget has room for, and the dry
        # run's judge nothing.
        done = {row.title: row for row in summarise(alternate(self.rounds, one_round), judge=not self.dry_run,
                                                    min_pairs=1)}
        rows = []
        for param, title in titles.items():
            row = done.get(title)
            if row is None:
                rows.append(CheckRow(title, None, None, "ms", None if self.dry_run else False,
                                     f"no result for {param} (skipped or failed: see the log)"))
                continue
            rows.append(CheckRow(
                title, row.suite * 1e3, row.ref * 1e3, "ms", row.passed,
                f"vs {row.reference}, {len(row.ratios)} alternations, pairs {row.low:.3f}-{row.high:.3f}"
                f"{_rate_note(seen[param][-1])}", pairs=list(row.ratios)))
        return rows, seen


def _rate_note(bench: dict) -> str:
    info = bench.get("extra_info", {})
    for key, unit in (("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("samples_per_s", "samples/s")):
        if isinstance(info.get(key), (int, float)):
            return f"; suite {info[key]:.4g} {unit}"
    return ""
