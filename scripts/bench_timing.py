"""Run-time targets of issue 12, measured and printed side by side (never asserted: the machine is shared).

1. `python -m suite plan --gpus 1/2/8` on the default config: at most 3 / 5 / 12 minutes.
2. The per-benchmark overhead the plan assumes, re-measured here: pytest's per-test duration (setup + call +
   teardown) minus the timed rounds minus the warm-up, median per family, on the default config.
3. On this CPU: the default config against the old default (configs/full.yaml with precision stopping off,
   which is what `pytest benchmarks` ran before), and `--suite-budget 60s` (wall time, every benchmark measured).
4. A fake asynchronous device with 0.5% jitter: stops on precision within 0.2 s of device time, median within
   1% of a 5 s run's.
5. Accuracy on the CPU with the default timing: `python -m suite accuracy` (suite vs Timer, paired).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

PLAN_TARGETS_S = {1: 180, 2: 300, 8: 720}
BUDGET_S = 60.0
BUDGET_TOLERANCE = 0.10
# max_time of the run the budget must cut: long enough that the unbudgeted run needs well over BUDGET_S.
LONG_MAX_TIME_S = 3.0
FAKE_PRECISE_LIMIT_S = 0.2
FAKE_MEDIAN_TOLERANCE = 0.01

# Records each test's setup + call + teardown seconds into $SUITE_DURATIONS (a pytest plugin, loaded with -p).
RECORDER = """
import json, os
_D = {}
def pytest_runtest_logreport(report):
    _D[report.nodeid] = _D.get(report.nodeid, 0.0) + report.duration
def pytest_unconfigure(config):
    with open(os.environ["SUITE_DURATIONS"], "w") as fh:
        json.dump(_D, fh)
"""


def run_pytest(workdir: Path, *args: str) -> tuple[float, dict, dict]:
    """`pytest benchmarks ARGS` in a subprocess: (wall seconds, results JSON, per-test durations)."""
    out, durations = workdir / "r.json", workdir / "d.json"
    out.unlink(missing_ok=True)
    (workdir / "suite_recorder.py").write_text(RECORDER)
    env = {**__import__("os").environ, "SUITE_DURATIONS": str(durations), "PYTHONPATH": f"{workdir}:{ROOT}"}
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "benchmarks"),
            f"--rootdir={ROOT}",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "suite_recorder",
            f"--benchmark-json={out}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"pytest failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return wall, json.loads(out.read_text()), json.loads(durations.read_text())


def plan_rows() -> list[str]:
    from suite import devices as dev
    from suite.config import load_config
    from suite.plan import NodePlatform, make_plan
    from suite.timing import format_duration

    config = load_config(ROOT / "configs/default.yaml")
    rows = []
    for gpus, limit in PLAN_TARGETS_S.items():
        with dev.use_platform(NodePlatform(gpus)):
            plan = make_plan(config, dev.resolve_spec(config.devices), gpus=gpus)
        ok = plan.estimated_s <= limit
        rows.append(
            f"plan --gpus {gpus} (default config)   {plan.benchmarks:5d} benchmarks  at most "
            f"{format_duration(plan.estimated_s):>7}  target <= {format_duration(limit):>6}  "
            f"{'PASS' if ok else 'FAIL'}"
        )
    return rows


def overheads(data: dict, durations: dict, config_path: Path) -> dict[str, list[float]]:
    from suite.config import load_config
    from suite.timing import warmup_seconds

    config = load_config(config_path)
    out: dict[str, list[float]] = defaultdict(list)
    for bench in data["benchmarks"]:
        family = bench["extra_info"]["case"]
        timed = bench["stats"]["total"] * bench["stats"]["iterations"]
        wall = durations.get(bench["fullname"])
        if wall is None:
            continue
        device = bench["extra_info"].get("device", "cpu")
        fake_case = type("C", (), {"family": family, "devices": (device,)})()
        out[family].append(wall - timed - warmup_seconds(fake_case, config.timing_for(family)))
    return out


def fake_device_rows() -> list[str]:
    """Precision stopping on the fake device (pytest-benchmark's loop, our timer) against a 5 s run."""
    from pytest_benchmark.fixture import BenchmarkFixture

    from suite.timing import SyncTimer, stopping_info
    from tests.fakes import FakeClock, JitteryAsyncDevice

    class Node:
        name = fullname = nodeid = "fake"

    class Logger:
        def debug(self, *a, **k):
            pass

        info = warning = debug

    def measure(precision, max_time):
        clock = FakeClock(tick=1e-9)
        gpu = JitteryAsyncDevice(clock, launch_s=1e-6, work_s=2e-3, jitter=0.005, seed=7)
        timer = SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize)
        wrapped = type("T", (), {"target": timer})()
        fixture = BenchmarkFixture(
            Node(),
            disable_gc=False,
            timer=wrapped,
            min_rounds=5,
            min_time=1e-4,
            max_time=max_time,
            precision=precision,
            confidence=0.99,
            warmup=False,
            warmup_iterations=0,
            calibration_precision=10,
            add_stats=lambda s: None,
            logger=Logger(),
            warner=None,
            disabled=False,
            cprofile=False,
            cprofile_loops=None,
            cprofile_dump=None,
        )
        start = clock.now
        fixture(gpu.launch)
        return fixture.stats.stats.median, clock.now - start, stopping_info(fixture.stats)

    median, spent, info = measure(0.01, 5.0)
    long_median, long_spent, _ = measure(None, 5.0)
    ok = info["stopped_on"] == "precision" and spent <= FAKE_PRECISE_LIMIT_S
    close = abs(median / long_median - 1) <= FAKE_MEDIAN_TOLERANCE
    return [
        f"fake device, 0.5% jitter: stopped on {info['stopped_on']} after {info['rounds']} rounds, "
        f"{spent:.3f} s of device time (target <= {FAKE_PRECISE_LIMIT_S} s)  {'PASS' if ok else 'FAIL'}",
        f"  median {median * 1e3:.4f} ms vs {long_median * 1e3:.4f} ms over a {long_spent:.1f} s run: "
        f"{abs(median / long_median - 1):.3%} apart (target <= 1%)  {'PASS' if close else 'FAIL'}",
    ]


def accuracy_rows(rounds: int) -> list[str]:
    """`python -m suite accuracy` (suite vs Timer, paired and alternating) runs with the shipped default
    timing, precision stopping included: its table lines for the CPU families the issue names."""
    cmd = [sys.executable, "-m", "suite", "accuracy", "matmul", "copy", "conv", "placement", "--rounds", str(rounds)]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return [f"accuracy ({' '.join(cmd[2:])}, exit {proc.returncode}):", *("  " + line for line in lines[-12:])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accuracy-rounds", type=int, default=5)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument(
        "--accuracy-only",
        action="store_true",
        help="only the accuracy comparisons (run in a fresh process: pytest.main must import the "
        "suite itself)",
    )
    args = parser.parse_args()
    if args.accuracy_only:
        print("\n".join(accuracy_rows(args.accuracy_rounds)))
        return 0
    from suite.plan import OVERHEAD_S, SESSION_OVERHEAD_S

    rows = plan_rows()
    shown = len(rows)
    print("\n".join(rows), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-timing-") as tmp:
        work = Path(tmp)
        old_cfg = work / "old_default.yaml"
        full = yaml.safe_load((ROOT / "configs/full.yaml").read_text())
        full["timing"]["precision"] = (
            None  # the old default: the same cases, max_time 1 s, no precision stopping
        )
        old_cfg.write_text(yaml.safe_dump(full))
        old_wall, old_data, old_d = run_pytest(work, f"--suite-config={old_cfg}")
        new_wall, new_data, new_d = run_pytest(work)
        short_wall, short_data, _ = run_pytest(work, f"--suite-budget={BUDGET_S:g}s")
        # A budget only shortens: to show it is met, give it a run that needs more than the budget unbudgeted.
        long_cfg = work / "long.yaml"
        full["timing"]["max_time"] = LONG_MAX_TIME_S
        long_cfg.write_text(yaml.safe_dump(full))
        from suite import devices as dev
        from suite.config import load_config
        from suite.plan import make_plan

        long_config = load_config(long_cfg)
        long_need = make_plan(long_config, dev.resolve_spec(long_config.devices)).estimated_s
        budget_wall, budget_data, _ = run_pytest(work, f"--suite-config={long_cfg}", f"--suite-budget={BUDGET_S:g}s")
    old_t, new_t = sum(old_d.values()), sum(new_d.values())
    rows.append(
        f"CPU, old default (full.yaml, no precision stopping): {len(old_data['benchmarks'])} benchmarks, "
        f"pytest time {old_t:.1f} s, wall {old_wall:.1f} s"
    )
    rows.append(
        f"CPU, default config: {len(new_data['benchmarks'])} benchmarks, pytest time {new_t:.1f} s, wall "
        f"{new_wall:.1f} s  target faster than the old default  {'PASS' if new_t < old_t else 'FAIL'}"
    )
    stopped = defaultdict(int)
    for bench in new_data["benchmarks"]:
        stopped[bench["extra_info"].get("stopped_on")] += 1
    rows.append(f"  stopped: {dict(stopped)}")
    within = abs(budget_wall - BUDGET_S) <= BUDGET_TOLERANCE * BUDGET_S
    rows.append(
        f"CPU, --suite-budget {BUDGET_S:g}s on full.yaml with precision off and max_time {LONG_MAX_TIME_S:g} s "
        f"(planned at most {long_need:.0f} s unbudgeted): wall {budget_wall:.1f} s, "
        f"{len(budget_data['benchmarks'])} benchmarks measured (unbudgeted: {len(old_data['benchmarks'])})  "
        f"target {BUDGET_S:g} s +-10%  "
        f"{'PASS' if within and len(budget_data['benchmarks']) == len(old_data['benchmarks']) else 'FAIL'}"
    )
    rows.append(
        f"CPU, --suite-budget {BUDGET_S:g}s on the default config: wall {short_wall:.1f} s (unbudgeted "
        f"{new_wall:.1f} s), {len(short_data['benchmarks'])} measured: a budget never lengthens a run  "
        f"{'PASS' if short_wall <= BUDGET_S and len(short_data['benchmarks']) == len(new_data['benchmarks']) else 'FAIL'}"
    )
    measured = overheads(new_data, new_d, ROOT / "configs/default.yaml")
    rows.append(
        "per-benchmark overhead (median s; test duration - timed rounds - warm-up), measured vs plan:"
    )
    for family, values in sorted(measured.items()):
        rows.append(
            f"  {family:<12} {statistics.median(values):.3f} (n={len(values)})  plan assumes "
            f"{OVERHEAD_S.get(family, float('nan')):.3f}"
        )
    rows.append(
        f"  session (wall - sum of test durations): {new_wall - new_t:.1f} s; plan assumes "
        f"{SESSION_OVERHEAD_S:.1f} s"
    )
    rows += fake_device_rows()
    print("\n".join(rows[shown:]), flush=True)
    if not args.skip_accuracy:
        proc = subprocess.run(
            [sys.executable, __file__, "--accuracy-only", f"--accuracy-rounds={args.accuracy_rounds}"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        lines = proc.stdout.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("accuracy (")), len(lines))
        accuracy = lines[start:]
        print("\n".join(accuracy) or f"accuracy run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
