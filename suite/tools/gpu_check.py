"""The GPU check: gpu tests, the quick config, the suite's figures beside independent references; a table."""

# Run `scripts/gpu-check.sh OUTDIR` on a GPU node (or `python -m suite.tools.gpu_check --out OUTDIR`);
# `--dry-run` runs every step it can on the CPU, with tiny sizes, so a broken check shows in CI
# (tests/test_gpu_check.py). Each case family may add a step by defining `gpu_checks(ctx: CheckContext) ->
# list[CheckRow]` in its checks.py (with STEP_ESTIMATE_S and CHECK_ORDER); this module runs them in turn, each
# as a timed step, and adds its own: out of memory becomes a skip, a SIGKILLed run keeps its finished results.
# docs/gpu-check.md describes every row.

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from suite.errors import UserError
from suite.plan import SESSION_OVERHEAD_S
from suite.timing import process_age
from suite.tools.check_files import RESULTS_NAME, Step, facts, merge_results, write_files
from suite.tools.checkrow import (CHECK_TIMING, DRY_ROUNDS, PROCESS_START_S, ROOT, ROUNDS, CheckContext, CheckRow,
                                  bench_s, last_line, run_command, subprocess_env)
from suite.tools.paired import read_results

# The OOM and SIGKILL steps show structure, not speed: a short warm-up. SIGKILL keeps max_time 1 s so the run
# is still busy with its later cases when it is killed after the first one.
STRUCTURE_TIMING = {**CHECK_TIMING, "compute_warmup_s": 0.1}
# The dry run only shows that every step works: tiny sizes, short rounds.
DRY_TIMING = {"warmup_s": 0.01, "compute_warmup_s": 0.01, "max_time": 0.05, "min_rounds": 3,
              "time_limit_s": 60}
# The check aims to end within this many seconds of its process's start: ~200-240 s on an H200, so that a
# second run fits a 15-minute lease with the machine's start-up. A step whose estimate no longer fits is not
# run and says so ("NOT RUN", not a failure). The estimates add up to ~240 s and leave out fixed costs a first
# run on a node pays (cuDNN's first load, the ceiling's random inputs, a driver without persistence mode): the
# ~25 s above them are for those, so that the last step, the gpu tests, still runs.
# scripts/gpu-check.sh passes GPU_CHECK_BUDGET_S as --budget-s and kills everything HARD_STOP_MARGIN_S later.
BUDGET_S = 265
HARD_STOP_MARGIN_S = 25
# A subprocess step may run past its estimate up to STEP_TIMEOUT_FACTOR x the estimate, and never more than
# this much past the budget: with the stop's TERMINATE_GRACE_S and the output reader's, it ends before the
# hard stop, so the step's own row says what ran long.
STEP_TIMEOUT_FACTOR = 2.0
STEP_GRACE_S = 10
DRY_STEP_TIMEOUT_S = 120
# `pytest tests -m gpu`: collecting every test module (~5 s) and a dozen short in-process GPU tests.
GPU_TESTS_S = 35.0


# pytest plugins the benchmark runs do without: no cache folder in the checkout, and no hypothesis plugin,
# whose end-of-run hook imports hypothesis (about a second of the GPU's time per run).
PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]


# The most GPUs the quick step runs on (quick_gpus), and the one whose cases it runs: its own, and those it
# shares with the other GPU (peer copies both ways, the all-GPUs case); the second GPU's own cases would only
# repeat the first's.
QUICK_GPUS = 2
QUICK_DEVICE = "cuda:0"
# The node the dry run's multi-GPU rows are planned for (suite.plan.NodePlatform: GPUs that enumerate, not run).
DRY_GPUS = 2


def quick_estimate_s(gpus: int = 1) -> float:
    """`pytest benchmarks -k cuda` on configs/quick.yaml: suite.plan's figures for its CUDA cases on a node of
    `gpus` GPUs (its own warm-up, max_time and per-family overheads) and one session's start."""
    from suite.config import load_config
    from suite.devices import check_spec, use_platform
    from suite.plan import NodePlatform, fixed_seconds, runs_here, select

    config = load_config(ROOT / "configs" / "quick.yaml")
    total = SESSION_OVERHEAD_S
    with use_platform(NodePlatform(min(gpus, QUICK_GPUS))):
        for family, cases in select(config, check_spec(config.devices)).items():
            for case in cases:
                if QUICK_DEVICE in case.devices and runs_here(case):
                    total += fixed_seconds(case, config) + config.timing_for(family).max_time
    return total


# Estimated seconds of the check's own steps on one H200 (what the budget reserves for each); a family's step
# has its checks.py's STEP_ESTIMATE_S. The dry run takes less.
STEP_ESTIMATES_S = {
    "out of memory": PROCESS_START_S + 2 * bench_s("matmul", True, STRUCTURE_TIMING),
    "sigkill": PROCESS_START_S + bench_s("matmul", True, {**STRUCTURE_TIMING, "max_time": 1.0}),
    "gpu tests": GPU_TESTS_S,
}
DEFAULT_STEP_ESTIMATE_S = 30.0
# Where each step runs (lower first; a family's step: its checks.py's CHECK_ORDER, DEFAULT_ORDER without one).
# First what only this check shows (the suite's figures against references, OOM, SIGKILL, collectives); last
# the quick config and the gpu tests, which a normal run on the GPU also shows.
OWN_ORDER = {"out of memory": 1, "sigkill": 2, "quick config": 1000, "gpu tests": 1001}
DEFAULT_ORDER = 500


# --- steps of the check itself (the families add theirs) --------------------------------------------------


def _pytest(tests: str | Path, cfg: Path, out: Path, before: Sequence[str] = (), after: Sequence[str] = (),
            quiet: bool = True) -> list[str]:
    """The command line of a `pytest` run in a new process on config `cfg`, writing its results to `out`."""
    return [sys.executable, "-m", "pytest", str(tests), *before, *(["-q", "-rs"] if quiet else []), *PLUGINS_OFF,
            f"--suite-config={cfg}", f"--benchmark-json={out}", *after]


def gpu_tests_rows(ctx: CheckContext, timeout: float) -> list[CheckRow]:
    code, text = run_command([sys.executable, "-m", "pytest", "tests", "-m", "gpu", "-q", "-rs",
                              "-p", "no:cacheprovider"], timeout)
    return [CheckRow("pytest tests -m gpu", None, None, "", code == 0,
                     "timed out" if code is None else last_line(text))]


def dry_quick() -> dict:
    """The dry run's stand-in for configs/quick.yaml: one small case per family (its checks.py's DRY_QUICK
    section), on the CPU."""
    return {"devices": "cpu", "timing": DRY_TIMING,
            "cases": {checks.NAME: checks.DRY_QUICK for checks in _all_checks("DRY_QUICK")}}


def quick_gpus(gpus: int) -> list[str]:
    """The GPUs the quick step runs on: two where the node has them (their peer copies and the all-GPUs case
    are what one GPU cannot show; every ordered pair of eight would be ~12x the results for nothing more)."""
    return [f"cuda:{i}" for i in range(min(gpus, QUICK_GPUS))]


def quick_rows(ctx: CheckContext, out: Path, timeout: float) -> list[CheckRow]:
    """configs/quick.yaml on the GPU (the cases that involve QUICK_DEVICE, `-k "cuda:0 or all-gpus"`; the CPU's
    own cases show nothing about the GPU), its JSON kept as quick.json. The dry run: a tiny config on the CPU."""
    if ctx.dry_run:
        config = ctx.workdir / "quick-dry.yaml"
        config.write_text(yaml.safe_dump(dry_quick()), encoding="utf-8")
        select: list[str] = []
    else:
        config = ROOT / "configs" / "quick.yaml"
        # The all-GPUs case's id names no device (`all-gpus-bfloat16-...`).
        select = ["-k", f"{QUICK_DEVICE} or all-gpus", "--suite-devices", ",".join(["cpu", *quick_gpus(ctx.gpus)])]
    result = out / "quick.json"
    idle_w = _idle_power_w(ctx.device)  # before the quick run: the GPU has idled since the last step
    code, text = run_command(_pytest("benchmarks", config, result, after=select), timeout)
    quick = read_results(result) or {"benchmarks": []}
    count = len(quick["benchmarks"])
    note = "timed out" if code is None else f"{count} results in quick.json; {last_line(text)}"
    ok = code == 0 and count > 0
    title = f"quick config ({' '.join([config.name, *select])})"
    return [CheckRow(title, count or None, None, "results", ok, note),
            *telemetry_rows([data for _, _, data in ctx.runs] + [quick], idle_w),
            *[row for checks in _all_checks("quick_checks") for row in checks.quick_checks(ctx, quick["benchmarks"])]]


# --- telemetry (suite.telemetry), from the results of the quick config and the earlier steps ---------------

# A mean power over the limit by more than this is implausible: NVML holds the limit as a moving average, so a
# window of timed rounds may run a few % over it.
POWER_OVER_LIMIT = 1.05
# The telemetry's power-limit share (timed rounds) and ClockWatch's (warm-up and timed rounds, the note the
# check showed before) read different windows of the same work: they agree within this much.
POWER_SHARE_AGREEMENT = 0.2


def _idle_power_w(device: str) -> float | None:
    """NVML's power reading of `device` now (an upper bound of its idle power); None without NVML."""
    from suite.telemetry import sources_for

    try:
        sources, _ = sources_for([device])
        return sources[0].gauges().get("power_w") if sources else None
    except Exception:  # noqa: BLE001 - no reading: the row says it is not judged
        return None


def telemetry_rows(runs: list[dict], idle_w: float | None) -> list[CheckRow]:
    """Three rows from the results of the check's runs: the best bf16 figure on a GPU drew a mean power
    between idle and its power limit; its power-limit share agrees with ClockWatch's; the PCIe link ran at
    its max under load (the worst host<->GPU copy). Not judged where the figures are absent (the dry run, no
    NVML)."""
    infos = [b["extra_info"] for data in runs for b in data["benchmarks"]
             if isinstance(b.get("extra_info"), dict)]
    devices = {d.get("id"): d for data in runs for d in (data.get("machine_info") or {}).get("devices", [])}
    bf16 = [i for i in infos if i.get("dtype") == "bfloat16" and str(i.get("device")).startswith("cuda")
            and isinstance(i.get("tflops"), (int, float))]
    best = max(bf16, key=lambda i: i["tflops"], default={})
    return [_power_row(best, devices.get(best.get("device"), {}), idle_w), _power_share_row(best),
            _pcie_row(infos, devices)]


def _not_judged(name: str, unit: str, what: str) -> CheckRow:
    return CheckRow(name, None, None, unit, None, f"not judged: {what} (no GPU, or NVML did not tell)")


def _power_row(best: dict, device: dict, idle_w: float | None) -> CheckRow:
    name = "telemetry: bf16 mean power between idle and the power limit"
    power, limit = best.get("power_w"), device.get("power_limit_w")
    if power is None or limit is None or idle_w is None:
        return _not_judged(name, "W", "no bf16 result with power_w, power limit or idle reading")
    energy = f", {best['energy_j']:.0f} J" if "energy_j" in best else f" ({best.get('telemetry_note', '')})"
    return CheckRow(name, power, limit, "W", idle_w < power <= limit * POWER_OVER_LIMIT,
                    f"{best['tflops']:.0f} TFLOP/s at {power:.0f} W{energy}, {best.get('perf_per_w', 0):.2f} "
                    f"TFLOP/s/W; idle {idle_w:.0f} W (NVML, before the quick run), limit {limit:.0f} W")


def _power_share_row(best: dict) -> CheckRow:
    name = "telemetry: power-limit share vs the clock-limit note (ClockWatch)"
    share = (best.get("clocks_limited") or {}).get("power")
    if share is None or "clocks_held" not in best:
        return _not_judged(name, "share", "no bf16 result with both records")
    noted = best.get("clocks_held_power", 0.0)  # ClockWatch names a limit from 1% of its window
    return CheckRow(name, share, noted, "share", abs(share - noted) <= POWER_SHARE_AGREEMENT,
                    f"timed rounds {share:.0%}, warm-up and timed rounds {noted:.0%}; agree within "
                    f"{POWER_SHARE_AGREEMENT:.0%}")


def _pcie_row(infos: list[dict], devices: dict) -> CheckRow:
    name = "telemetry: PCIe link under load = its max"
    linked = [(i["pcie_under_load"], next((d for d in (i.get("src"), i.get("dst")) if d and d != "cpu"), ""))
              for i in infos if isinstance(i.get("pcie_under_load"), dict)]
    if not linked:
        return _not_judged(name, "gen", "no host<->GPU copy with pcie_under_load")
    link, gpu = min(linked, key=lambda lg: (lg[0].get("gen", 0), lg[0].get("width", 0)))
    gen_max, width_max = devices.get(gpu, {}).get("pcie_gen_max"), devices.get(gpu, {}).get("pcie_width_max")
    if gen_max is None or width_max is None:
        return _not_judged(name, "gen", f"no link max for {gpu}")
    return CheckRow(name, link.get("gen"), gen_max, "gen",
                    (link.get("gen"), link.get("width")) == (gen_max, width_max),
                    f"{gpu}: Gen{link.get('gen')} x{link.get('width')} under load, max Gen{gen_max} "
                    f"x{width_max} (the worst of {len(linked)} copies)")


def _fake_suite_dir(ctx: CheckContext) -> Path:
    """A benchmarks folder of the test-only families (tests/fake_families.py), for the dry run's OOM step."""
    folder = ctx.workdir / "fake-suite"
    folder.mkdir(exist_ok=True)
    (folder / "conftest.py").write_text('pytest_plugins = ["suite.plugin", "tests.fake_families"]\n')
    (folder / "test_fake.py").write_text("def test_oom(case, measure):\n    measure(case)\n")
    return folder


def _structure_timing(ctx: CheckContext, **override) -> dict:
    return {**(ctx.timing if ctx.dry_run else STRUCTURE_TIMING), **override}


def oom_rows(ctx: CheckContext, timeout: float) -> list[CheckRow]:
    """A case larger than the GPU's memory is a skip naming its free memory; the next one passes."""
    out = ctx.workdir / "oom.json"
    if ctx.dry_run:
        folder = _fake_suite_dir(ctx)
        cfg = ctx.write_config({"devices": "cpu"})
        cmd = _pytest(folder, cfg, out, before=[f"--rootdir={folder}", "-k", "huge or small"])
        after = "cpu-small"
    else:
        import torch

        total = torch.cuda.get_device_properties(ctx.device).total_memory
        # The output alone (n x n bf16) is twice the GPU's memory; the inputs (n x 64) stay small.
        n = int((2 * total / 2) ** 0.5) + 1
        after = f"{ctx.device}-bfloat16-1024x1024x1024"
        cfg = ctx.write_config({"devices": [ctx.device], "timing": _structure_timing(ctx), "cases": {
            "matmul": {"dtypes": ["bfloat16"], "shapes": [f"{n}x{n}x64", "1024x1024x1024"]}}})
        cmd = _pytest(ROOT / "benchmarks" / "test_matmul.py", cfg, out, before=[f"--rootdir={ROOT}"])
    code, text = run_command(cmd, timeout)
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
    cfg = ctx.write_config({"devices": [ctx.device], "timing": _structure_timing(ctx, max_time=1.0),
                            "cases": {"matmul": {"dtypes": [dtype], "shapes": shapes}}})
    # Not -q: its header and progress in the log show how far it got before the kill.
    cmd = _pytest(ROOT / "benchmarks" / "test_matmul.py", cfg, out, before=[f"--rootdir={ROOT}"],
                  quiet=False)
    print(f"+ {shlex.join(cmd)}  (SIGKILL after its first finished case)", flush=True)
    partial = partial_path(out)
    # Its output goes where ours goes (the console and the log): what it printed before the kill stays there.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env())
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
    print(flush=True)
    killed = proc.returncode == -signal.SIGKILL
    kept = read_partial(partial) if partial.exists() else None
    count = len(kept.benchmarks) if kept else 0
    ok = killed and count >= 1 and not out.exists() and kept.header is not None
    note = (f"killed after {finished} finished case(s); the partial file keeps {count}" if killed
            else f"the run ended by itself (exit {proc.returncode}) before it could be killed")
    return [CheckRow("SIGKILL: finished results kept in the partial file", count, finished or None, "cases",
                     ok, note)]


# --- the run --------------------------------------------------------------------------------------------


def _checks(name: str):
    """A family's checks.py (its GPU-check step, estimate and place), or None."""
    from suite.cases import FAMILIES, family_part

    return family_part(name, "checks") if name in FAMILIES else None


def _all_checks(hook: str) -> list:
    """The families' checks.py that define `hook`, in registry order."""
    from suite.cases import FAMILIES

    return [checks for name in FAMILIES if (checks := _checks(name)) is not None and hasattr(checks, hook)]


def plan(ctx: CheckContext, out: Path) -> list[tuple[str, Callable[[float], list[CheckRow]]]]:
    """The steps in order (OWN_ORDER and each family's CHECK_ORDER, lower first; ties in registry order):
    (name, run(timeout_s) -> rows)."""
    from suite.cases import FAMILIES

    steps: dict[str, Callable[[float], list[CheckRow]]] = {
        "out of memory": lambda t: oom_rows(ctx, t),
        "sigkill": lambda t: sigkill_rows(ctx, t),
    }
    order = dict(OWN_ORDER)
    for name in FAMILIES:
        checks = _checks(name)
        if checks is not None and hasattr(checks, "gpu_checks"):
            steps[name] = lambda t, checks=checks: checks.gpu_checks(ctx)
            order[name] = getattr(checks, "CHECK_ORDER", DEFAULT_ORDER)
    steps.update({"quick config": lambda t: quick_rows(ctx, out, t),
                  "gpu tests": lambda t: gpu_tests_rows(ctx, t)})
    return [(name, steps[name]) for name in sorted(steps, key=lambda n: order[n])]


def step_estimate(name: str, gpus: int = 1) -> float:
    if name == "quick config":
        return quick_estimate_s(gpus)
    if name in STEP_ESTIMATES_S:
        return STEP_ESTIMATES_S[name]
    checks = _checks(name)
    # A family's MULTI_GPU_S: what its step adds on a node of two GPUs or more.
    return getattr(checks, "STEP_ESTIMATE_S", DEFAULT_STEP_ESTIMATE_S) + (getattr(checks, "MULTI_GPU_S", 0.0)
                                                                           if gpus >= 2 else 0.0)


def select_steps(names: list[str], only: str | None) -> list[str]:
    """The steps `--only` names (comma-separated, in the check's order), or all of them; a name that is not a
    step is a UserError naming the steps."""
    if not only:
        return names
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in names]
    if unknown or not wanted:
        raise UserError(f"--only {only!r}: {', '.join(map(repr, unknown)) or 'nothing'} is not a step; the steps "
                        f"are {', '.join(names)}")
    return [n for n in names if n in wanted]


def run_check(ctx: CheckContext, out: Path, budget_s: float = BUDGET_S, only: str | None = None,
              started: float | None = None) -> int:
    """Run the steps (those `only` names, or all) within `budget_s` of `started` (time.monotonic(); default
    now); write OUTDIR's files; the exit code."""
    started = time.monotonic() if started is None else started
    ctx.deadline = started + budget_s
    ctx.results_path = out / RESULTS_NAME
    ctx.merge = merge_results
    planned = plan(ctx, out)
    chosen = select_steps([name for name, _ in planned], only)
    # OUTDIR holds one run: results an earlier run left there (a rerun of some steps into the same folder)
    # would otherwise pass for this run's.
    for stale in (RESULTS_NAME, "quick.json", "quick.partial.jsonl"):
        (out / stale).unlink(missing_ok=True)
    info = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dry_run": ctx.dry_run, "device": ctx.device,
            "budget_s": budget_s, "timing": ctx.timing, "only": chosen if only else None, "facts": facts()}
    steps: list[Step] = []
    rows: list[CheckRow] = []
    write_files(out, info, steps, rows, None)
    for name, run in planned:
        if name in chosen:
            step, got = _run_step(ctx, name, run, budget_s)
            steps.append(step)
            rows += got
            write_files(out, info, steps, rows, None)
    rows += not_checked_rows(ctx.pick(ctx.gpus, DRY_GPUS))
    # Out of time is said in the table and the summary, and is no failure by itself.
    code = int(any(r.ok is False for r in rows) or any(s.ran and not s.ok for s in steps))
    info["seconds"] = time.monotonic() - started
    table = write_files(out, info, steps, rows, code)
    print(f"\n== gpu-check {ctx.pick('', '(dry run) ')}done in {info['seconds']:.0f} s; files in {out}", flush=True)
    if ctx.print_table:
        print(f"\n{table}", flush=True)
    return code


def not_checked_rows(gpus: int) -> list[CheckRow]:
    """What the check leaves out on a node of `gpus` GPUs: with one, everything between GPUs; with more, the
    GPUs and pairs beyond the ones it runs."""
    if gpus < 2:
        return [CheckRow("peer copies, all GPUs at once, NCCL with 2+ ranks", None, None, "", None,
                         "not checked: needs two GPUs (covered by the fake multi-GPU tests)")]
    left = [f"peer copies of the {gpus * (gpus - 1) - 2} ordered pairs other than cuda:0<->cuda:1"] if gpus > 2 else []
    left += [f"cuda:1-cuda:{gpus - 1}'s own cases, the all-GPUs case on all {gpus} at once"] if gpus > QUICK_GPUS else []
    left += [f"NCCL with {gpus} ranks (the check starts 8)"] if gpus > 8 else []
    left += ["peer copies below 256MiB, against a reference (the quick step runs them unjudged)"]
    return [CheckRow(f"not checked on {gpus} GPUs", None, None, "", None, "; ".join(left))]


def _run_step(ctx: CheckContext, name: str, run: Callable[[float], list[CheckRow]], budget_s: float
              ) -> tuple[Step, list[CheckRow]]:
    """One step, timed, or a NOT RUN row where its estimate no longer fits the budget."""
    estimate = step_estimate(name, ctx.gpus)
    left = ctx.seconds_left()
    if not ctx.dry_run and left < estimate:
        note = f"not run: {max(left, 0):.0f} s of the {budget_s:g} s budget left, it needs ~{estimate:.0f} s"
        print(f"\n== {name}: NOT RUN ({note})", flush=True)
        return (Step(name, 0.0, False, note, ran=False, estimate_s=estimate),
                [CheckRow(f"{name}: not run (out of time)", None, None, "", None, note, not_run=True)])
    print(f"\n== {name} (~{estimate:.0f} s on an H200; {left:.0f} s of the budget left)", flush=True)
    t0 = time.monotonic()
    ctx.step = name
    # A subprocess step may overrun its estimate, but not the budget by more than STEP_GRACE_S. The dry run's
    # CPU stand-ins are sized by no GPU's estimate: a loaded CI machine gets DRY_STEP_TIMEOUT_S.
    timeout = DRY_STEP_TIMEOUT_S if ctx.dry_run else min(STEP_TIMEOUT_FACTOR * estimate,
                                                         max(left, estimate) + STEP_GRACE_S)
    ctx.step_deadline = time.monotonic() + timeout
    try:
        got = run(timeout)
        ok, note = not any(r.ok is False for r in got), ""
    except Exception as exc:  # noqa: BLE001 - a crashed step is a failed row; the other steps still run
        import traceback

        traceback.print_exc()
        why = f"{type(exc).__name__}: {exc}"[:200]
        got = [CheckRow(f"{name}: the check crashed", None, None, "", False, why)]
        ok, note = False, "crashed (traceback in the log)"
    step = Step(name, time.monotonic() - t0, ok, note, estimate_s=estimate)
    _free_device_memory()
    return step, got


def _free_device_memory() -> None:
    """Drain and free every GPU a step used (peer copies and the all-GPUs case use several), not the current
    one only."""
    import gc

    import torch

    from suite.devices import current_platform, synchronize

    gc.collect()
    platform = current_platform()
    gpus = [torch.device("cuda", i) for i in range(platform.count("cuda"))]
    synchronize(*gpus)
    for gpu in gpus:
        platform.empty_cache(gpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.tools.gpu_check", description=__doc__)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"folder for table.txt, check.json, quick.json, {RESULTS_NAME} (default: a new "
                             "temporary folder)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run every step that can run without CUDA, on the CPU with tiny sizes; the "
                             "figures are shown, not judged")
    parser.add_argument("--device", default="cuda:0", help="the GPU to check (default cuda:0)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"do not start a step that no longer fits in this many seconds (default "
                             f"{BUDGET_S})")
    parser.add_argument("--only", metavar="STEPS", default=None,
                        help="run only these steps, comma-separated (e.g. 'conv,copy': a rerun of what failed); "
                             "default: every step")
    parser.add_argument("--no-table", action="store_true",
                        help="do not print the table at the end (scripts/gpu-check.sh prints it last itself)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the working folder (configs, each run's raw results) instead of removing "
                             "it")
    args = parser.parse_args(argv)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: torch sees no CUDA device; run on a GPU node, or pass --dry-run to check the steps "
              "on the CPU")
        return 2
    if args.budget_s <= 0:
        print(f"gpu-check: --budget-s {args.budget_s:g}: expected a positive number of seconds (default "
              f"{BUDGET_S})")
        return 64
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-check-out-"))
    out.mkdir(parents=True, exist_ok=True)
    # Not under OUTDIR: the device tool brings back at most 8 files from there, and every run's raw results
    # are merged into OUTDIR/results.json as they come.
    work = Path(tempfile.mkdtemp(prefix="gpu-check-work-"))
    if args.dry_run:
        ctx = CheckContext(device="cpu", dry_run=True, workdir=work, rounds=DRY_ROUNDS, timing=dict(DRY_TIMING),
                           print_table=not args.no_table, gpus=0)
    else:
        ctx = CheckContext(device=args.device, workdir=work, rounds=ROUNDS, timing=dict(CHECK_TIMING),
                           print_table=not args.no_table, gpus=torch.cuda.device_count())
        print(f"gpu-check on {torch.cuda.get_device_name(args.device)} x{torch.cuda.device_count()}, torch "
              f"{torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    from suite.cases.common import keep_inputs

    # gpu-check.sh's hard stop is a SIGTERM: it must end the check at once, as it always did, and not become an
    # in-process suite run's Ctrl-C (suite.plugin leaves a handler set before it alone), whose step would then
    # be a false FAIL row while the check went on.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    # Each timing row builds its case six times in this process (three suite runs, three references): draw
    # each large operand once.
    keep_inputs(True)
    try:
        # The budget counts from this process's start, as the script's hard stop does: the interpreter,
        # importing torch and the CUDA context come out of it.
        return run_check(ctx, out, args.budget_s, args.only, started=time.monotonic() - process_age())
    except UserError as exc:
        print(f"gpu-check: {exc}", flush=True)
        return 64
    finally:
        signal.signal(signal.SIGTERM, previous)  # main() called in-process (the tests) leaves it as it was
        keep_inputs(False)
        if args.keep_work:
            print(f"gpu-check: working folder kept: {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
