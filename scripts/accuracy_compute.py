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
from suite.cases.matmul import flops  # noqa: E402

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-run-time", type=float, default=1.0, help="Timer.blocked_autorange min_run_time (s)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; suite timing {TIMING}", flush=True)
    with tempfile.TemporaryDirectory(prefix="accuracy-compute-") as tmp:
        results = run_suite(Path(tmp))
    benches = results["benchmarks"]
    by_name = {b["name"]: b for b in benches}
    rows = []

    mm = by_name[f"test_matmul[cpu-float32-{shape_id(MATMUL)}]"]
    reference = timer_median("torch.matmul(a, b, out=out)", matmul_env(MATMUL), args.min_run_time)
    rows.append((f"fp32 matmul {shape_id(MATMUL)} median", mm["stats"]["median"] * 1e3, reference * 1e3, "ms"))

    conv_bench = next(b for b in benches if b["extra_info"].get("case") == "conv")
    p = conv_bench["extra_info"]
    x, weight, _ = conv.make_operands(p, "cpu")
    env = {"F": F, "x": x, "w": weight, "stride": tuple(p["stride"]), "padding": tuple(p["padding"]),
           "groups": p["groups"]}
    reference = timer_median("F.conv2d(x, w, None, stride, padding, 1, groups)", env, args.min_run_time)
    rows.append((f"conv2d fwd {p['layer']} b{p['batch']} median", conv_bench["stats"]["median"] * 1e3,
                 reference * 1e3, "ms"))

    # The suite's own ceiling, as every result's pct_of_ceiling uses it (the sweep includes the 2048^3 matmul).
    ceiling = results["suite"]["ceilings"]["cpu"]["float32"]["tflops"]
    best = 0.0
    for shape in CEILING_SWEEP:
        seconds = timer_median("torch.matmul(a, b, out=out)", matmul_env(shape), args.min_run_time)
        best = max(best, flops(*shape) / seconds / 1e12)
    rows.append(("fp32 matmul ceiling (best of sweep)", ceiling * 1e3, best * 1e3, "GFLOP/s"))

    print(f"\n{'target':<40} {'suite':>10} {'Timer':>10} {'unit':<8} {'ratio':>6}  verdict (within {TOLERANCE:.0%})")
    failed = 0
    for name, suite, ref, unit in rows:
        ratio = suite / ref
        ok = abs(ratio - 1) <= TOLERANCE
        failed += not ok
        print(f"{name:<40} {suite:10.3f} {ref:10.3f} {unit:<8} {ratio:6.3f}  {'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
