"""The GPU check: on a machine with a GPU, run the gpu-marked tests, the quick config on every device, and
timing-truth checks (the suite's median against an independent CUDA-event measurement in the same run).

Run `python -m suite.gpu_check` (or `scripts/gpu-check.sh`). Each case family may add checks by defining
`gpu_checks(ctx: CheckContext) -> list[CheckRow]` in its module; this file calls them in turn.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# Timing truth: the suite's median and a CUDA-event median of the same op may differ by this much.
RATIO_TOLERANCE = 0.10


@dataclass
class CheckRow:
    name: str
    suite: float | None
    reference: float | None
    unit: str
    ok: bool | None  # None: not checked (see note)
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.suite is None or not self.reference:
            return None
        return self.suite / self.reference


@dataclass
class CheckContext:
    device: str = "cuda:0"
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-check-")))
    timeout_s: int = 240

    def run_suite(self, config: dict, select: str | None = None, tests: str = "benchmarks") -> list[dict]:
        """Run `pytest benchmarks` on a generated config; return the benchmarks of its JSON."""
        stamp = f"{time.monotonic_ns()}"
        cfg = self.workdir / f"config-{stamp}.yaml"
        out = self.workdir / f"results-{stamp}.json"
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        cmd = [sys.executable, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider",
               f"--suite-config={cfg}", f"--benchmark-json={out}"]
        if select:
            cmd += ["-k", select]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=self.timeout_s)
        if not out.exists():
            raise RuntimeError(f"suite run failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return json.loads(out.read_text())["benchmarks"]


def median(values: list[float]) -> float:
    return statistics.median(values)


def _run(title: str, cmd: list[str], timeout: int) -> tuple[bool, str]:
    print(f"\n== {title}: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    tail = (proc.stdout + proc.stderr).strip().splitlines()
    print("\n".join(tail[-15:]))
    return proc.returncode == 0, f"exit {proc.returncode} in {time.monotonic() - start:.0f} s: {tail[-1] if tail else ''}"


def main() -> int:
    import torch

    from suite.cases import FAMILIES, family_module

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible to torch; nothing to check here.")
        return 2
    ctx = CheckContext()
    print(f"gpu-check on {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, torch {torch.__version__}")
    steps: list[tuple[str, bool, str]] = []
    ok, note = _run("gpu tests", [sys.executable, "-m", "pytest", "tests", "-m", "gpu", "-q", "-x"], 240)
    steps.append(("pytest -m gpu", ok, note))
    results = ROOT / "results" / "gpu-check-quick.json"
    ok, note = _run("quick config on every device",
                    [sys.executable, "-m", "pytest", "benchmarks", "-q", "--suite-config=configs/quick.yaml",
                     f"--benchmark-json={results}"], 300)
    steps.append(("pytest benchmarks quick.yaml", ok, note))

    rows: list[CheckRow] = []
    for name in FAMILIES:
        module = family_module(name)
        checks = getattr(module, "gpu_checks", None)
        if checks is None:
            continue
        try:
            rows += checks(ctx)
        except Exception as exc:  # a failing check is a row, the others still run
            rows.append(CheckRow(f"{name}: check crashed", None, None, "", False, f"{type(exc).__name__}: {exc}"))

    if torch.cuda.device_count() < 2:
        rows.append(CheckRow("peer copies / multi-GPU", None, None, "", None, "not checked: needs two GPUs"))

    print("\n== summary")
    for title, ok, note in steps:
        print(f"{'PASS' if ok else 'FAIL'}  {title}: {note}")
    print(f"\n{'check':<44} {'suite':>12} {'reference':>12} {'unit':<9} {'ratio':>6}  verdict")
    for row in rows:
        fmt = lambda v: f"{v:12.4g}" if isinstance(v, (int, float)) else f"{'-':>12}"  # noqa: E731
        ratio = f"{row.ratio:6.3f}" if row.ratio is not None else f"{'-':>6}"
        verdict = "n/a" if row.ok is None else ("PASS" if row.ok else "FAIL")
        print(f"{row.name:<44} {fmt(row.suite)} {fmt(row.reference)} {row.unit:<9} {ratio}  {verdict} {row.note}")
    failed = [s for s in steps if not s[1]] + [r for r in rows if r.ok is False]
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
