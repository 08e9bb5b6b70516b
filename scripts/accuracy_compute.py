"""Accuracy of the compute cases on the CPU: the suite's numbers against torch.utils.benchmark.Timer, side by side.

Runs `pytest benchmarks` in a subprocess on a generated config (as the GPU check does), reads its JSON, then
times the same ops on the same inputs with Timer(..., num_threads=torch.get_num_threads()).blocked_autorange()
in this process, and prints one table of ratios. Targets (each within 10%):
  - fp32 matmul 2048x2048x2048: the suite's median vs Timer's median (the foundation target);
  - conv2d forward of a ResNet-50 layer: the suite's median vs Timer's median;
  - the CPU's measured fp32 matmul ceiling vs the best TFLOP/s of a Timer sweep over the same shapes.

    .venv/bin/python scripts/accuracy_compute.py [--min-run-time 1.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch.utils.benchmark import Timer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.cases import conv  # noqa: E402
from suite.cases.common import randn  # noqa: E402
from suite.cases.matmul.measure import flops  # noqa: E402

# |suite / Timer - 1| allowed.
TOLERANCE = 0.10
MATMUL = (2048, 2048, 2048)
CEILING_SWEEP = ((512, 512, 512), (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048))
CONV_LAYER = {"name": "resnet50-conv2-3x3", "in_channels": 64, "out_channels": 64, "size": 56, "kernel": 3,
              "padding": 1, "batch": 2}
# The suite's default timing (configs/default.yaml), so the ratio says how the default run measures.
TIMING = {"warmup_s": 0.05, "max_time": 1.0, "min_rounds": 5}


def shape_id(shape) -> str:
    return "x".join(str(d) for d in shape)


def run_suite(workdir: Path) -> dict:
    config = {
        "devices": ["cpu"],
        "timing": TIMING,
        "cases": {
            "matmul": {"dtypes": ["float32"], "shapes": [shape_id(MATMUL)]},
            "ceiling": {"dtypes": ["float32"], "shapes": [shape_id(s) for s in CEILING_SWEEP]},
            "conv": {"dtypes": ["float32"], "layouts": ["nchw"], "steps": ["fwd"], "shapes": [CONV_LAYER]},
        },
    }
    cfg, out = workdir / "accuracy.yaml", workdir / "accuracy.json"
    cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", "benchmarks/test_matmul.py", "benchmarks/test_ceiling.py",
           "benchmarks/test_conv.py", "-q", "-p", "no:cacheprovider", f"--suite-config={cfg}",
           f"--benchmark-json={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if not out.exists():
        sys.exit(f"suite run failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def timer_median(stmt: str, env: dict, min_run_time: float) -> float:
    timer = Timer(stmt=stmt, globals=env, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def matmul_env(shape) -> dict:
    m, n, k = shape
    return {"torch": torch, "a": randn(m, k, dtype=torch.float32, device="cpu", seed=1),
            "b": randn(k, n, dtype=torch.float32, device="cpu", seed=2), "out": torch.empty(m, n)}


# The suite and Timer run alternately (suite, Timer, suite, Timer, ...) and each side's median over its
# repetitions is compared: a shared VM's speed drifts by 10% and more over tens of seconds, and alternating
# spreads that drift over both sides instead of charging it to whichever ran second.
REPEATS = 3


def timer_phase(args, p: dict) -> list[float]:
    """Timer's figures for the three targets: matmul median (s), conv median (s), best sweep TFLOP/s.
    `p` is the conv case's extra_info from the suite run, so both time the same layer on the same inputs."""
    matmul = timer_median("torch.matmul(a, b, out=out)", matmul_env(MATMUL), args.min_run_time)
    x, weight, _ = conv.make_operands(p, "cpu")
    env = {"F": F, "x": x, "w": weight, "stride": tuple(p["stride"]), "padding": tuple(p["padding"]),
           "groups": p["groups"]}
    conv_s = timer_median("F.conv2d(x, w, None, stride, padding, 1, groups)", env, args.min_run_time)
    best = max(flops(*shape) / timer_median("torch.matmul(a, b, out=out)", matmul_env(shape), args.min_run_time)
               / 1e12 for shape in CEILING_SWEEP)
    return [matmul, conv_s, best]


def suite_phase(workdir: Path) -> tuple[list[float], dict]:
    results = run_suite(workdir)
    benches = results["benchmarks"]
    mm = next(b for b in benches if b["name"] == f"test_matmul[cpu-float32-{shape_id(MATMUL)}]")
    conv_bench = next(b for b in benches if b["extra_info"].get("case") == "conv")
    # The suite's own ceiling, as every result's pct_of_ceiling uses it.
    ceiling = results["suite"]["ceilings"]["cpu"]["float32"]["tflops"]
    return [mm["stats"]["median"], conv_bench["stats"]["median"], ceiling], conv_bench["extra_info"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-run-time", type=float, default=1.0, help="Timer.blocked_autorange min_run_time (s)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="suite runs, alternating with Timer")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; suite timing {TIMING}; "
          f"{args.repeats} suite runs alternating with {args.repeats} Timer passes", flush=True)
    timer_runs, suite_runs = [], []
    with tempfile.TemporaryDirectory(prefix="accuracy-compute-") as tmp:
        for _ in range(args.repeats):
            values, conv_info = suite_phase(Path(tmp))
            suite_runs.append(values)
            timer_runs.append(timer_phase(args, conv_info))
    names = [(f"fp32 matmul {shape_id(MATMUL)} median", 1e3, "ms"),
             (f"conv2d fwd {CONV_LAYER['name']} b{CONV_LAYER['batch']} median", 1e3, "ms"),
             ("fp32 matmul ceiling (best of sweep)", 1e3, "GFLOP/s")]

    print(f"\n{'target':<40} {'suite':>10} {'Timer':>10} {'unit':<8} {'ratio':>6}  verdict (within {TOLERANCE:.0%})"
          "   spread suite | Timer (min-max over runs)")
    failed = 0
    for i, (name, scale, unit) in enumerate(names):
        suite_values = [run[i] * scale for run in suite_runs]
        timer_values = [run[i] * scale for run in timer_runs]
        suite, ref = statistics.median(suite_values), statistics.median(timer_values)
        ratio = suite / ref
        ok = abs(ratio - 1) <= TOLERANCE
        failed += not ok
        spread = (f"{min(suite_values):.3g}-{max(suite_values):.3g} | {min(timer_values):.3g}-{max(timer_values):.3g}")
        print(f"{name:<40} {suite:10.3f} {ref:10.3f} {unit:<8} {ratio:6.3f}  {'PASS' if ok else 'FAIL'}   {spread}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
