"""How long `python -m suite report` takes and how much memory it needs as the number of results files grows.

Fabricates N results files of 100 benchmarks each (a mixture of machines and case families), builds the
report in a child process for each N, and prints wall time, time per file and peak RSS; then the size of a
single-machine report of ~300 benchmarks. Targets: 200 files < 20 s and < 2 GiB; one machine < 5 MB.

    .venv/bin/python scripts/bench_report.py [--sizes 20 50 100 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_PER_FILE = 100
TARGET_SECONDS_200 = 20.0
TARGET_RSS_BYTES = 2 * 2**30
TARGET_SINGLE_BYTES = 5 * 10**6
# (accelerator, count, speed): a spread of boxes a team might own.
MACHINE_KINDS = (
    ("NVIDIA H200", 8, 1.0),
    ("NVIDIA H100 80GB HBM3", 8, 0.8),
    ("NVIDIA A100-SXM4-80GB", 4, 0.4),
    ("NVIDIA GeForce RTX 4090", 1, 0.3),
    (None, 0, 0.02),
)


def _fixtures():
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", ROOT / "tests" / "data" / "make_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sample(data: dict, n: int, rng: random.Random) -> dict:
    """Keep n benchmarks spread over every family, in their original order."""
    benches = data["benchmarks"]
    keep = sorted(rng.sample(range(len(benches)), min(n, len(benches))))
    return {**data, "benchmarks": [benches[i] for i in keep]}


def write_files(folder: Path, n: int) -> None:
    fixtures = _fixtures()
    rng = random.Random(n)
    for i in range(n):
        gpu, count, speed = MACHINE_KINDS[i % len(MACHINE_KINDS)]
        data = fixtures.synthetic_results(f"node-{i:03d}", gpu=gpu, n_gpus=count, speed=speed, seed=i)
        data = _sample(data, BENCHMARKS_PER_FILE, rng)
        (folder / f"node-{i:03d}.json").write_text(json.dumps(data), encoding="utf-8")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(inputs: list[str], out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one report; CPU time stays honest on a machine busy with other work."""
    cpu = _child_cpu()
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "suite", "report", *inputs, "-o", str(out)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    return time.perf_counter() - start, _child_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100, 200])
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        print(
            f"{'files':>6} {'benchmarks':>10} {'wall s':>7} {'CPU s':>6} {'CPU s/file':>10} {'peak RSS':>9} {'HTML':>7}"
        )
        for n in sorted(args.sizes):  # increasing, so the children's peak RSS so far is this size's peak
            folder = tmp_path / f"n{n}"
            folder.mkdir()
            write_files(folder, n)
            out = tmp_path / f"report-{n}.html"
            seconds, cpu = build([str(folder)], out)
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
            print(
                f"{n:>6} {n * BENCHMARKS_PER_FILE:>10} {seconds:>7.2f} {cpu:>6.2f} {cpu / n:>10.3f} "
                f"{rss / 2**20:>6.0f}MiB {out.stat().st_size / 1e6:>5.1f}MB"
            )
            if n == 200:
                # CPU time: the 2-core target box may be busy with other work, which inflates wall time only.
                ok &= cpu < TARGET_SECONDS_200 and rss < TARGET_RSS_BYTES
        fixtures = _fixtures()
        single = fixtures.synthetic_results("one-box", n_gpus=8, seed=1)
        single = _sample(single, 300, random.Random(1))
        path = tmp_path / "single.json"
        path.write_text(json.dumps(single), encoding="utf-8")
        out = tmp_path / "single.html"
        seconds, cpu = build([str(path)], out)
        size = out.stat().st_size
        ok &= size < TARGET_SINGLE_BYTES
        print(
            f"single machine, {len(single['benchmarks'])} benchmarks: {size / 1e6:.2f} MB in {seconds:.2f} s wall, {cpu:.2f} s CPU "
            f"(target < {TARGET_SINGLE_BYTES / 1e6:.0f} MB)"
        )
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
