"""How long `python -m suite health` and `report` take on a big fleet: wall time, CPU time, peak RSS.

Fabricates N results files of 300 benchmarks each (SYNTHETIC: tests/data/make_fixtures.py machines, sampled
to 300), runs `health` on 1,000 files and `report` on 500 in child processes, and prints the figures beside
the targets: health < 15 s and < 2 GiB, report of 500 files < 45 s. Not a timed test: a shared machine's
load changes wall time, so CPU time is printed too.

    .venv/bin/python scripts/bench_health.py [--health-files 1000] [--report-files 500] [--keep DIR]

--keep DIR writes the fleet into DIR once and reuses it on later runs (and for profiling, e.g.
`python -m cProfile -o prof.out -m suite health DIR --format json`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_PER_FILE = 300
TARGET_HEALTH_S = 15.0
TARGET_REPORT_S = 45.0
TARGET_RSS_BYTES = 2 * 2**30
# (accelerator, count, speed): a fleet of 8-GPU nodes of three models, as a cluster has.
KINDS = (("NVIDIA H200", 8, 1.0), ("NVIDIA H100 80GB HBM3", 8, 0.8), ("NVIDIA A100-SXM4-80GB", 8, 0.4))


def _fixtures():
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", ROOT / "tests" / "data" / "make_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_files(folder: Path, n: int) -> None:
    fixtures, rng = _fixtures(), random.Random(n)
    templates = {}
    for i in range(n):
        gpu, count, speed = KINDS[i % len(KINDS)]
        if gpu not in templates:
            templates[gpu] = fixtures.synthetic_results("t", gpu=gpu, n_gpus=count, speed=speed, seed=1)
        data = json.loads(json.dumps(templates[gpu]))
        data["machine_info"]["node"] = f"node-{i:04d}"
        benches = data["benchmarks"]
        keep = sorted(rng.sample(range(len(benches)), min(BENCHMARKS_PER_FILE, len(benches))))
        data["benchmarks"] = [benches[j] for j in keep]
        for b in data["benchmarks"]:  # ±3% per benchmark: ordinary noise
            f = 1 + rng.uniform(-0.03, 0.03)
            b["stats"]["median"] /= f
            for key in ("tflops", "gbps", "busbw", "algbw", "samples_per_s", "traffic_gbps"):
                if isinstance(b["extra_info"].get(key), float):
                    b["extra_info"][key] *= f
        (folder / f"node-{i:04d}.json").write_text(json.dumps(data), encoding="utf-8")


def timed(argv: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS bytes, exit code) of `python -m suite ARGV` in a child process."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "p = subprocess.run([sys.executable, '-m', 'suite', *sys.argv[1:]], stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss * 1024, p.returncode)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True
    ).stdout.split()
    return float(out[0]), float(out[1]), float(out[2]), int(out[3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--health-files", type=int, default=1000)
    parser.add_argument("--report-files", type=int, default=500)
    parser.add_argument("--keep", metavar="DIR", help="write the fleet here once and reuse it")
    args = parser.parse_args()
    ok = True
    n = max(args.health_files, args.report_files)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp) / "fleet"
        folder.mkdir(parents=True, exist_ok=True)
        if len(list(folder.glob("*.json"))) < n:
            start = time.perf_counter()
            write_files(folder, n)
            took = time.perf_counter() - start
            print(f"wrote {n} SYNTHETIC files of {BENCHMARKS_PER_FILE} benchmarks in {took:.1f} s")
        else:
            print(f"reusing the SYNTHETIC files in {folder}")
        files = sorted(folder.glob("*.json"))[:n]
        print(f"{'command':<8} {'files':>6} {'wall s':>7} {'CPU s':>6} {'peak RSS':>9} {'exit':>4}  target")
        wall, cpu, rss, code = timed(["health", *map(str, files[: args.health_files])])
        good = wall < TARGET_HEALTH_S and rss < TARGET_RSS_BYTES and code in (0, 1)
        ok &= good
        print(
            f"{'health':<8} {args.health_files:>6} {wall:>7.2f} {cpu:>6.2f} {rss / 2**20:>6.0f}MiB"
            f" {code:>4}  "
            f"< {TARGET_HEALTH_S:g} s, < 2 GiB: {'met' if good else 'MISSED'}"
        )
        out = Path(tmp) / "report.html"
        wall, cpu, rss, code = timed(["report", *map(str, files[: args.report_files]), "-o", str(out)])
        good = wall < TARGET_REPORT_S and code == 0
        ok &= good
        print(
            f"{'report':<8} {args.report_files:>6} {wall:>7.2f} {cpu:>6.2f} {rss / 2**20:>6.0f}MiB"
            f" {code:>4}  "
            f"< {TARGET_REPORT_S:g} s: {'met' if good else 'MISSED'}"
        )
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
