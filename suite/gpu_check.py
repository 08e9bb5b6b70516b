"""The GPU check: gpu tests, the quick config, the suite's figures beside independent references; a table."""

# Run `scripts/gpu-check.sh OUTDIR` on a GPU node (or `python -m suite.gpu_check --out OUTDIR`); `--dry-run`
# runs every step it can on the CPU, with tiny sizes, so a broken check shows in CI (tests/test_gpu_check.py).
# Each case family may add rows by defining `gpu_checks(ctx: CheckContext) -> list[CheckRow]`; this module
# runs them in turn, each as a timed step, and adds its own: out of memory becomes a skip, a SIGKILLed run
# keeps its finished results. docs/gpu-check.md describes every row.

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# Timing truth: the median of the paired ratios (suite / reference) may differ from 1 by this much.
RATIO_TOLERANCE = 0.10
# Alternations of (suite run, reference) per case: pairs taken seconds apart, as scripts/accuracy_cpu.py does,
# so a clock or thermal phase of the GPU affects both sides of a pair alike.
ROUNDS = 3
DRY_ROUNDS = 2
# The suite's timing in the check: the default config's second of timed rounds per case, so the reference
# (which runs as long as those rounds did, after the same warm-up) sees the same sustained state.
CHECK_TIMING = {"warmup_s": 0.2, "max_time": 1.0, "min_rounds": 5}
# The dry run only shows that every step works: tiny sizes, short rounds.
DRY_TIMING = {"warmup_s": 0.01, "max_time": 0.05, "min_rounds": 3}
# The check aims to end within this many seconds on an H200 (issue: under 6 minutes); a step whose estimate
# no longer fits is not run, and its row fails. scripts/gpu-check.sh kills it all at HARD_STOP_S.
BUDGET_S = 330
HARD_STOP_S = 510
# Estimated seconds of each step on one H200 (what the budget reserves for it); the dry run takes less.
STEP_ESTIMATES_S = {
    "gpu tests": 90, "quick config": 90, "matmul": 25, "ceiling": 20, "conv": 15, "model": 12, "copy": 45,
    "habits": 15, "collectives": 45, "out of memory": 25, "sigkill": 25,
}
# Subprocess steps may run this much longer than their estimate before they are stopped.
STEP_TIMEOUT_FACTOR = 2.0
# Schema of check.json; raise it when a key changes meaning.
CHECK_SCHEMA = 1


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

    @property
    def ratio(self) -> float | None:
        if self.pairs:
            return statistics.median(self.pairs)
        if self.suite is None or not self.reference:
            return None
        return self.suite / self.reference

    @property
    def verdict(self) -> str:
        return "n/a" if self.ok is None else ("PASS" if self.ok else "FAIL")

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "verdict": self.verdict}


@dataclass
class Step:
    name: str
    seconds: float
    ok: bool
    note: str = ""


def median(values: list[float]) -> float:
    return statistics.median(values)


def judged(ctx: CheckContext, ok: bool) -> bool | None:
    """A timing verdict on the GPU; the dry run checks only the plumbing and leaves the figures unjudged."""
    return None if ctx.dry_run else ok


@dataclass
class CheckContext:
    device: str = "cuda:0"
    dry_run: bool = False
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-check-")))
    rounds: int = ROUNDS
    timing: dict = field(default_factory=lambda: dict(CHECK_TIMING))
    deadline: float = float("inf")  # time.monotonic() by which the whole check should be done

    def pick(self, gpu, dry):
        """The GPU's value, or the dry run's (tiny) one."""
        return dry if self.dry_run else gpu

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def write_config(self, config: dict) -> Path:
        config = {"timing": dict(self.timing), **config}
        path = self.workdir / f"config-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def run_suite(self, config: dict | Path, tests: str = "benchmarks",
                  args: tuple[str, ...] = ()) -> list[dict]:
        """`pytest <tests>` on a config, in this process (the reference runs here too); its benchmarks."""
        import pytest

        cfg = config if isinstance(config, Path) else self.write_config(config)
        out = self.workdir / f"results-{time.monotonic_ns()}.json"
        # --assert=plain: the suite's modules are already imported here, so pytest could not rewrite their
        # asserts and would warn (an error under pyproject's filterwarnings); the cases' checks need none.
        code = pytest.main([str(ROOT / tests), f"--rootdir={ROOT}", "-q", "-rs", "-p", "no:cacheprovider",
                            "--assert=plain", f"--suite-config={cfg}", f"--benchmark-json={out}", *args])
        if not out.exists():
            raise RuntimeError(f"pytest {tests} wrote no results (exit code {int(code)}); see the log above")
        return json.loads(out.read_text())["benchmarks"]

    def reference(self, family: str, cfg: Path, bench: dict) -> float:
        """Median seconds per call of the same case as `bench`, built anew in this process, warmed up as the
        suite does, then timed by CUDA events (host clock in the dry run) for as long as its timed rounds."""
        import torch

        from suite.cases import family_module
        from suite.cases.precision import mode_for
        from suite.config import load_config
        from suite.devices import resolve_spec, synchronize
        from suite.timing import SyncTimer, reference_times, warm_up

        config = load_config(cfg)
        module = family_module(family)
        cases = {c.id: c for c in module.enumerate_cases(config, resolve_spec(config.devices))}
        case = cases[bench["param"]]
        device = next((d for d in case.devices if d != "cpu"), "cpu")
        with mode_for(case):
            work = module.build(case, config)
            warm_up(work.fn, SyncTimer([torch.device(d) for d in case.devices]), config.timing.warmup_s)
            times = reference_times(work.fn, device, seconds=bench["stats"]["total"])
        synchronize(*case.devices)
        del work
        return median(times)

    def case_ids(self, family: str, cfg: Path) -> list[str]:
        from suite.cases import family_module
        from suite.config import load_config
        from suite.devices import resolve_spec

        config = load_config(cfg)
        return [c.id for c in family_module(family).enumerate_cases(config, resolve_spec(config.devices))]

    def timing_truth(self, family: str, config: dict, tests: str, titles: dict[str, str] | None = None
                     ) -> tuple[list[CheckRow], dict[str, list[dict]]]:
        """Alternate `rounds` times: the suite's run of `config`, then a reference of each case in `titles`
        (param id -> row name; default: every case of the config). One row per case: medians in ms, verdict on
        the median of the paired ratios. Also returns every round's results by param id."""
        cfg = self.write_config(config)
        if titles is None:
            titles = {case_id: f"{family} {case_id}" for case_id in self.case_ids(family, cfg)}
        seen: dict[str, list[dict]] = {}
        pairs: dict[str, list[tuple[float, float]]] = {param: [] for param in titles}
        for _ in range(self.rounds):
            for bench in self.run_suite(cfg, tests):
                seen.setdefault(bench["param"], []).append(bench)
                if bench["param"] in titles:
                    reference = self.reference(family, cfg, bench)
                    pairs[bench["param"]].append((bench["stats"]["median"], reference))
        rows = []
        for param, title in titles.items():
            got = pairs[param]
            if not got:
                rows.append(CheckRow(title, None, None, "ms", None if self.dry_run else False,
                                     f"no result for {param} (skipped or failed: see the log)"))
                continue
            ratios = [s / r for s, r in got]
            rate = _rate_note(seen[param][-1])
            rows.append(CheckRow(
                title, median([s for s, _ in got]) * 1e3, median([r for _, r in got]) * 1e3, "ms",
                judged(self, abs(median(ratios) - 1) <= RATIO_TOLERANCE),
                f"vs {'host clock (dry run)' if self.dry_run else 'CUDA events'}, {len(got)} alternations, "
                f"pairs {min(ratios):.3f}-{max(ratios):.3f}{rate}", pairs=ratios))
        return rows, seen


def _rate_note(bench: dict) -> str:
    info = bench.get("extra_info", {})
    for key, unit in (("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("samples_per_s", "samples/s")):
        if isinstance(info.get(key), (int, float)):
            return f"; suite {info[key]:.4g} {unit}"
    return ""


# --- steps of the check itself (the families add theirs) --------------------------------------------------


def run_command(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run a command from the checkout, its output copied to ours (the log): (exit code, or None if it timed
    out; its output)."""
    print(f"+ {' '.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True, env=env,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout or ""
        text = text.decode(errors="replace") if isinstance(text, bytes) else text
        print(text, flush=True)
        return None, text
    print(proc.stdout + proc.stderr, flush=True)
    return proc.returncode, proc.stdout + proc.stderr


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:100] if lines else ""


def gpu_tests_rows(ctx: CheckContext, timeout: float) -> list[CheckRow]:
    code, text = run_command([sys.executable, "-m", "pytest", "tests", "-m", "gpu", "-q", "-rs",
                              "-p", "no:cacheprovider"], timeout)
    return [CheckRow("pytest tests -m gpu", None, None, "", code == 0,
                     "timed out" if code is None else _last_line(text))]


# The dry run's stand-in for configs/quick.yaml: one small case per family, on the CPU.
DRY_QUICK = {
    "devices": "cpu",
    "timing": DRY_TIMING,
    "cases": {
        "matmul": {"dtypes": ["float32"], "shapes": ["64x64x64"]},
        "ceiling": {"dtypes": ["float32"], "shapes": ["128x128x128"]},
        "conv": {"dtypes": ["float32"], "layouts": ["nchw"], "steps": ["fwd"], "batch": 1,
                 "shapes": [{"name": "tiny", "in_channels": 4, "out_channels": 4, "size": 8, "kernel": 3,
                             "padding": 1}]},
        "model": {"models": ["linear"], "dtypes": ["float32"], "batch_sizes": [8]},
        "copy": {"sizes": ["4KiB"]},
        "placement": {"sizes": ["4KiB"]},
        "habits": {"habits": ["small_vs_batched"], "chunk": "1KiB", "chunks": 4},
    },
}


def quick_rows(ctx: CheckContext, out: Path, timeout: float) -> list[CheckRow]:
    """The quick config on every device (the dry run: a tiny one on the CPU), its JSON kept as quick.json."""
    if ctx.dry_run:
        config = ctx.workdir / "quick-dry.yaml"
        config.write_text(yaml.safe_dump(DRY_QUICK), encoding="utf-8")
    else:
        config = ROOT / "configs" / "quick.yaml"
    result = out / "quick.json"
    code, text = run_command([sys.executable, "-m", "pytest", "benchmarks", "-q", "-rs", "-p",
                              "no:cacheprovider", f"--suite-config={config}", f"--benchmark-json={result}"],
                             timeout)
    count = len(json.loads(result.read_text())["benchmarks"]) if result.exists() else 0
    note = "timed out" if code is None else f"{count} results in quick.json; {_last_line(text)}"
    ok = code == 0 and count > 0
    return [CheckRow(f"quick config ({config.name})", count or None, None, "results", ok, note)]


def _fake_suite_dir(ctx: CheckContext) -> Path:
    """A benchmarks folder of the test-only families (tests/fake_families.py), for the dry run's OOM step."""
    folder = ctx.workdir / "fake-suite"
    folder.mkdir(exist_ok=True)
    (folder / "conftest.py").write_text('pytest_plugins = ["suite.plugin", "tests.fake_families"]\n')
    (folder / "test_fake.py").write_text("def test_oom(case, measure):\n    measure(case)\n")
    return folder


def _env_with_root() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def oom_rows(ctx: CheckContext, timeout: float) -> list[CheckRow]:
    """A case larger than the GPU's memory is a skip naming its free memory; the next one passes."""
    out = ctx.workdir / "oom.json"
    if ctx.dry_run:
        folder = _fake_suite_dir(ctx)
        cfg = ctx.write_config({"devices": "cpu"})
        cmd = [sys.executable, "-m", "pytest", str(folder), f"--rootdir={folder}", "-k", "huge or small"]
        after = "cpu-small"
    else:
        import torch

        total = torch.cuda.get_device_properties(ctx.device).total_memory
        # The output alone (n x n bf16) is twice the GPU's memory; the inputs (n x 64) stay small.
        n = int((2 * total / 2) ** 0.5) + 1
        after = f"{ctx.device}-bfloat16-1024x1024x1024"
        cfg = ctx.write_config({"devices": [ctx.device], "cases": {"matmul": {
            "dtypes": ["bfloat16"], "shapes": [f"{n}x{n}x64", "1024x1024x1024"]}}})
        cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_matmul.py"),
               f"--rootdir={ROOT}"]
    cmd += ["-q", "-rs", "-p", "no:cacheprovider", f"--suite-config={cfg}", f"--benchmark-json={out}"]
    code, text = run_command(cmd, timeout, env=_env_with_root())
    skips = [line for line in text.splitlines() if line.startswith("SKIPPED") and "out of memory" in line]
    passed = [b["param"] for b in json.loads(out.read_text())["benchmarks"]] if out.exists() else []
    names_free = any("GiB free" in line for line in skips)
    ok = code == 0 and len(skips) == 1 and after in passed and (names_free or ctx.dry_run)
    note = (skips[0].split("out of memory", 1)[-1][:90] if skips else "no out-of-memory skip in the output")
    return [CheckRow("out of memory: a skip naming free memory, next case passes", len(passed), 1, "passed",
                     ok, note)]


# How often the SIGKILL step looks at the partial file, and how long it waits for a first finished case.
SIGKILL_POLL_S = 0.2


def sigkill_rows(ctx: CheckContext, timeout: float) -> list[CheckRow]:
    """A run SIGKILLed mid-way keeps the cases it finished in <json>.partial.jsonl (suite.partial)."""
    from suite.partial import partial_path, read_partial

    out = ctx.workdir / "killed.json"
    shapes = ctx.pick(["2048x2048x2048", "4096x4096x4096", "8192x8192x8192", "8192x8192x8192"],
                      ["64x64x64", "96x96x96", "128x128x128", "160x160x160"])
    dtype = ctx.pick("bfloat16", "float32")
    cfg = ctx.write_config({"devices": [ctx.device], "timing": {**ctx.timing, "max_time": 1.0},
                            "cases": {"matmul": {"dtypes": [dtype], "shapes": shapes}}})
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_matmul.py"), f"--rootdir={ROOT}",
           "-q", "-p", "no:cacheprovider", f"--suite-config={cfg}", f"--benchmark-json={out}"]
    print(f"+ {' '.join(cmd)}  (SIGKILL after its first finished case)", flush=True)
    partial = partial_path(out)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = time.monotonic() + timeout
    finished = 0
    try:
        while time.monotonic() < stop and proc.poll() is None:
            if partial.exists():
                finished = len(read_partial(partial).benchmarks)
                if finished:
                    break
            time.sleep(SIGKILL_POLL_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    kept = read_partial(partial) if partial.exists() else None
    count = len(kept.benchmarks) if kept else 0
    ok = killed and count >= 1 and not out.exists() and kept.header is not None
    note = (f"killed after {finished} finished case(s); the partial file keeps {count}" if killed
            else f"the run ended by itself (exit {proc.returncode}) before it could be killed")
    return [CheckRow("SIGKILL: finished results kept in the partial file", count, finished or None, "cases",
                     ok, note)]


# --- the run --------------------------------------------------------------------------------------------


def facts() -> dict:
    """What the node has: Python, torch and CUDA, the inventory (driver, PCIe, NVML), and which of the suite's
    needs import (a bare node lacks pydantic; the wheels scripts/prepare-device.sh carried provide it)."""
    import importlib.util

    from suite.devices import inventory

    modules = ["torch", "pydantic", "pydantic_core", "jsonschema", "pytest", "pytest_benchmark",
               "pytest_timeout", "pandas", "matplotlib", "jinja2", "yaml", "pynvml", "cpuinfo", "hypothesis",
               "pyarrow"]
    found = {}
    for name in modules:
        spec = importlib.util.find_spec(name)
        found[name] = spec.origin if spec is not None else None
    return {"python": platform.python_version(), "executable": sys.executable,
            "platform": platform.platform(),
            "modules": found, "machine_info": inventory().as_machine_info()}


def format_table(steps: list[Step], rows: list[CheckRow]) -> str:
    lines = ["steps (seconds):"]
    lines += [f"  {s.seconds:6.1f}  {'ok  ' if s.ok else 'FAIL'}  {s.name}{': ' + s.note if s.note else ''}"
              for s in steps]
    lines.append("")
    lines.append(f"{'check':<58} {'suite':>11} {'reference':>11} {'unit':<9} {'ratio':>6}  verdict  note")
    for row in rows:
        def fmt(v):
            return f"{v:11.4g}" if isinstance(v, (int, float)) else f"{'-':>11}"

        ratio = f"{row.ratio:6.3f}" if row.ratio is not None else f"{'-':>6}"
        lines.append(f"{row.name:<58} {fmt(row.suite)} {fmt(row.reference)} {row.unit:<9} {ratio}  "
                     f"{row.verdict:<7}  {row.note}")
    failed = sum(r.ok is False for r in rows) + sum(not s.ok for s in steps)
    lines.append("")
    passed, failed_rows = sum(r.ok is True for r in rows), sum(r.ok is False for r in rows)
    lines.append(f"{len(rows)} rows: {passed} PASS, {failed_rows} "
                 f"FAIL, {sum(r.ok is None for r in rows)} not judged; "
                 + ("all checks passed" if not failed else f"{failed} failure(s)"))
    return "\n".join(lines)


def _write(out: Path, info: dict, steps: list[Step], rows: list[CheckRow], code: int | None) -> str:
    table = format_table(steps, rows)
    (out / "table.txt").write_text(table + "\n", encoding="utf-8")
    data = {"schema_version": CHECK_SCHEMA, **info, "exit_code": code, "steps": [asdict(s) for s in steps],
            "rows": [r.as_dict() for r in rows]}
    (out / "check.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    return table


def plan(ctx: CheckContext, out: Path) -> list[tuple[str, Callable[[float], list[CheckRow]]]]:
    """The steps in order: (name, run(timeout_s) -> rows)."""
    from suite.cases import FAMILIES, family_module

    steps: list[tuple[str, Callable[[float], list[CheckRow]]]] = [
        ("gpu tests", lambda t: gpu_tests_rows(ctx, t)),
        ("quick config", lambda t: quick_rows(ctx, out, t)),
    ]
    for name in FAMILIES:
        checks = getattr(family_module(name), "gpu_checks", None)
        if checks is not None:
            steps.append((name, lambda t, checks=checks: checks(ctx)))
    steps += [("out of memory", lambda t: oom_rows(ctx, t)), ("sigkill", lambda t: sigkill_rows(ctx, t))]
    return steps


def run_check(ctx: CheckContext, out: Path, budget_s: float = BUDGET_S) -> int:
    started = time.monotonic()
    ctx.deadline = started + budget_s
    info = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dry_run": ctx.dry_run, "device": ctx.device,
            "budget_s": budget_s, "facts": facts()}
    steps: list[Step] = []
    rows: list[CheckRow] = []
    _write(out, info, steps, rows, None)
    for name, run in plan(ctx, out):
        estimate = STEP_ESTIMATES_S.get(name, 30)
        left = ctx.seconds_left()
        if not ctx.dry_run and left < estimate:
            steps.append(Step(name, 0.0, False, f"not run: {left:.0f} s of the {budget_s:g} s budget left, "
                                                f"it needs ~{estimate} s"))
            rows.append(CheckRow(f"{name}: not run (out of time)", None, None, "", False, steps[-1].note))
            _write(out, info, steps, rows, None)
            continue
        print(f"\n== {name} (~{estimate} s on an H200; {left:.0f} s of the budget left)", flush=True)
        t0 = time.monotonic()
        try:
            got = run(STEP_TIMEOUT_FACTOR * estimate)
            ok, note = not any(r.ok is False for r in got), ""
        except Exception as exc:  # noqa: BLE001 - a crashed step is a failed row; the other steps still run
            import traceback

            traceback.print_exc()
            why = f"{type(exc).__name__}: {exc}"[:200]
            got = [CheckRow(f"{name}: the check crashed", None, None, "", False, why)]
            ok, note = False, "crashed (traceback in the log)"
        rows += got
        steps.append(Step(name, time.monotonic() - t0, ok, note))
        _free_device_memory()
        _write(out, info, steps, rows, None)
    if not ctx.dry_run:
        import torch

        if torch.cuda.device_count() < 2:
            rows.append(CheckRow("peer copies, all GPUs at once, NCCL with 2+ ranks", None, None, "", None,
                                 "not checked: needs two GPUs (covered by the fake multi-GPU tests)"))
    code = 1 if any(r.ok is False for r in rows) or not all(s.ok for s in steps) else 0
    info["seconds"] = time.monotonic() - started
    table = _write(out, info, steps, rows, code)
    kind = "(dry run) " if ctx.dry_run else ""
    print(f"\n== gpu-check {kind}done in {info['seconds']:.0f} s; files in {out}\n")
    print(table, flush=True)
    return code


def _free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.gpu_check", description=__doc__)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for table.txt, check.json, quick.json (default: a new temporary folder)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run every step that can run without CUDA, on the CPU with tiny sizes; the "
                             "figures are shown, not judged")
    parser.add_argument("--device", default="cuda:0", help="the GPU to check (default cuda:0)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"skip the steps that no longer fit in this many seconds (default {BUDGET_S})")
    args = parser.parse_args(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: torch sees no CUDA device; run on a GPU node, or pass --dry-run to check the steps "
              "on the CPU")
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-check-out-"))
    out.mkdir(parents=True, exist_ok=True)
    ctx = CheckContext(device="cpu" if args.dry_run else args.device, dry_run=args.dry_run,
                       workdir=Path(tempfile.mkdtemp(prefix="gpu-check-work-")),
                       rounds=DRY_ROUNDS if args.dry_run else ROUNDS,
                       timing=dict(DRY_TIMING if args.dry_run else CHECK_TIMING))
    if not args.dry_run:
        print(f"gpu-check on {torch.cuda.get_device_name(args.device)} x{torch.cuda.device_count()}, torch "
              f"{torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    return run_check(ctx, out, args.budget_s)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
