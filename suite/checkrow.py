"""What a family's GPU-check rows need (CheckRow, the verdict rule, running a command): a leaf module."""

# suite.gpu_check runs the families' `gpu_checks(ctx)`; they build their rows from this module, not from
# suite.gpu_check, so the families and the check do not import each other.

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

# The checkout: commands run from it, and it comes first on their PYTHONPATH.
ROOT = Path(__file__).resolve().parent.parent
# Timing truth: the median of the paired ratios (suite / reference) may differ from 1 by this much.
RATIO_TOLERANCE = 0.10


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


def run_command(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """Run a command from the checkout (environment: subprocess_env()), its output copied line by line to ours
    (the console and the log) as it comes: (exit code, or None if it ran past `timeout` and was stopped; its
    output)."""
    print(f"+ {shlex.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env or subprocess_env(), stdout=subprocess.PIPE,
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


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
