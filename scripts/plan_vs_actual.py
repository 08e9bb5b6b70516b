"""Run configs on this machine and print the plan's "at most" beside what each family and the run took.

    python scripts/plan_vs_actual.py                         # configs/quick.yaml and configs/default.yaml
    python scripts/plan_vs_actual.py configs/default.yaml -k "matmul or copy"   # a short selection

The plan is `python -m suite plan --json`'s, in a process of its own. A family's actual time is the sum of its
tests' durations (pytest's junit XML: setup, call and teardown); the session row is the rest of the wall time
(interpreter, collection, the JSON). "over" marks a figure the plan put below what the run took. A selection
(-k) is planned as the whole config, so its plan is high. On a machine others share, the overheads (the plan's
measured medians) grow with the load: at a load average about the CPU count every family holds on the
project's 2-core VM; at 2.5x that, those whose time is overhead (conv, model, the session) run 1.5-4x over.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.timing import format_duration  # noqa: E402


def actual(config: Path, extra: list[str]) -> tuple[dict[str, float], float]:
    """family -> seconds its tests took, and the run's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "benchmarks", "--suite-config", str(config), "-q",
                   "-p", "no:cacheprovider", "--junitxml", str(junit), "-o", "junit_duration_report=total",
                   "--benchmark-json", str(Path(tmp) / "results.json"), *extra]
        start = time.monotonic()
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, check=False)
        wall = time.monotonic() - start
        families: dict[str, float] = defaultdict(float)
        for case in ET.parse(junit).iter("testcase"):
            family = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_")
            families[family] += float(case.get("time", 0))
    return dict(families), wall


def compare(path: Path, extra: list[str]) -> bool:
    """Print one config's table; False when the plan put a family, the session or the run below what it took."""
    # The plan as `python -m suite plan` makes it, in a process of its own: its CPU probes see a fresh process,
    # as a user's plan does (in a process that has run cases, the pattern fill reads far faster).
    plan = json.loads(subprocess.run([sys.executable, "-m", "suite", "plan", "--suite-config", str(path), "--json"],
                                     cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    took, wall = actual(path, extra)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{path} on {', '.join(plan['devices'])}{' (' + ' '.join(extra) + ')' if extra else ''}; "
          f"load average after the run {load} on {os.cpu_count()} CPUs (other work slows the overheads)")
    print(f"{'family':<12} {'at most':>9} {'actual':>9}")
    families = plan["families"]
    rows = [(name, f["estimated_s"], took.get(name, 0.0)) for name, f in families.items()]
    rows += [("session", plan["estimated_s"] - sum(f["estimated_s"] for f in families.values()),
              wall - sum(took.values())), ("total", plan["estimated_s"], wall)]
    for name, most, real in rows:
        print(f"{name:<12} {format_duration(most):>9} {format_duration(real):>9}{'  over' if real > most else ''}")
    return all(real <= most for _, most, real in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=["configs/quick.yaml", "configs/default.yaml"])
    parser.add_argument("-k", dest="select", help="pytest -k selection for the runs")
    args = parser.parse_args()
    extra = ["-k", args.select] if args.select else []
    results = [compare(ROOT / name, extra) for name in args.configs]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
