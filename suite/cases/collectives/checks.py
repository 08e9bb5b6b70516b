"""The collectives family's part of the tooling: its GPU-check step and its accuracy rounds, a plain
torch.distributed loop paired with the suite's case under torchrun (suite/tools)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from suite.cases.collectives.measure import NAME
from suite.plan import TORCHRUN_OVERHEAD_S
from suite.tools.checkrow import PROCESS_START_S, ROOT, CheckRow, run_command
from suite.tools.paired import Pair, Target, one, run_suite

# --- GPU check ---------------------------------------------------------------------------------------------

# Seconds the GPU check gives each of its collective runs (start-up included) before it stops them.
CHECK_TIMEOUT_S = 60
# NCCL's start with one rank, and the two Gloo ranks' collectives after torchrun's start.
NCCL_START_S, GLOO_CASES_S = 3.0, 3.0
STEP_ESTIMATE_S = PROCESS_START_S + NCCL_START_S + TORCHRUN_OVERHEAD_S + GLOO_CASES_S
# Its place in the check (suite.tools.gpu_check: lower first): first of all, before the check's own OOM and
# SIGKILL steps.
CHECK_ORDER = 0


def gpu_checks(ctx) -> list:
    """NCCL starts on the GPU with one rank through the suite's own start-up and timer; 2 ranks run the
    collectives file end to end through torchrun: NCCL on a node of two GPUs or more, else Gloo. The dry run
    starts Gloo in place of NCCL."""
    rows = []
    backend = ctx.pick("nccl", "gloo")
    expected_device = ctx.pick("cuda:0", "cpu")
    probe = (
        "import torch, torch.distributed as dist\n"
        "from suite import distributed as d\n"
        f"st = d.init(d.LaunchEnv(0, 1, 0, 1, '127.0.0.1', 0, False, 'gpu-check'), {backend!r}, 60, 'gpu-check')\n"
        "x = torch.ones(1 << 20, device=st.device)\n"
        "timer = d.SlowestRankTimer(); t0 = timer(); dist.all_reduce(x); t1 = timer()\n"
        f"assert st.device == {expected_device!r} and t1 > t0, (st.device, t0, t1)\n"
        "print('started', dist.get_backend(), st.device, float(x.sum()),\n"
        "      torch.cuda.nccl.version() if st.device.startswith('cuda') else '')\n"
        "d.shutdown()\n"
    )
    # Each run is stopped at CHECK_TIMEOUT_S, or sooner where the step's own time (ctx.step_seconds) ends: a
    # hung NCCL start must not eat the check's whole budget.
    code, text = run_command([sys.executable, "-c", probe], ctx.step_seconds(CHECK_TIMEOUT_S))
    ok = code == 0 and f"{float(1 << 20)}" in text
    lines = [line for line in text.strip().splitlines() if line.strip()]
    rows.append(CheckRow(f"collectives: {backend} starts, all_reduce with 1 rank", None, None, "", ok,
                         lines[-1][:90] if lines else "timed out" if code is None else f"exit {code}"))
    # With two GPUs, what one cannot show: NCCL between them (the same torchrun path Gloo takes on one GPU).
    rows += _two_ranks(ctx, "nccl", ["cuda:0", "cuda:1"]) if ctx.gpus >= 2 else _two_ranks(ctx, "gloo", "cpu")
    return rows


def _two_ranks(ctx, backend: str, devices) -> list:
    """The collectives file end to end under torchrun with 2 ranks of `backend`, kept in the merged results."""
    import tempfile

    import yaml

    from suite import distributed

    work = Path(tempfile.mkdtemp(prefix=f"gpu-check-{backend}-", dir=ctx.workdir))
    cfg = work / f"{backend}.yaml"
    config = {"devices": devices, "cases": {"collectives": {
        "backend": backend, "ops": ["all_reduce", "all_gather"], "sizes": ["1MiB"], "in_place": False,
        "rounds": 5, "iterations": 3, "warmup_rounds": 1, "timeout_s": CHECK_TIMEOUT_S}}}
    cfg.write_text(yaml.safe_dump(config))
    out = work / f"{backend}.json"
    cmd = distributed.torchrun_command(2, ["benchmarks/test_collectives.py", "-q", "-p", "no:cacheprovider",
                                           f"--suite-config={cfg}", f"--benchmark-json={out}"])
    try:
        code, text = run_command(cmd, ctx.step_seconds(2 * CHECK_TIMEOUT_S))
    except subprocess.SubprocessError as exc:
        code, text = None, str(exc)
    # Kept in the check's merged results too: the node's figures for this backend.
    benches = ctx.keep_results(out, {"tests": "torchrun x2 benchmarks/test_collectives.py", **config})[
        "benchmarks"] if out.exists() else []
    rows = []
    for bench in benches:
        info = bench["extra_info"]
        good = code == 0 and info["world_size"] == 2 and info["busbw"] > 0
        rows.append(CheckRow(f"collectives: {backend} x2 {info['op']} 1MiB busbw", info["busbw"], None, "GB/s",
                             good, "2 ranks via torchrun"))
    if not benches:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        rows.append(CheckRow(f"collectives: {backend} x2 via torchrun", None, None, "", False,
                             lines[-1][:90] if lines else f"exit {code}"))
    return rows


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# Gloo ranks on the CPU (the GPU check covers NCCL): two, as a 2-core machine allows.
ACCURACY_RANKS = 2
ACCURACY_TIMEOUT_S = 300
# The all_reduce the accuracy rounds time: (bytes, timed rounds, calls per round); --quick: the machinery only.
ACCURACY_SIZE, QUICK_SIZE = (64 * 2**20, 15, 2), (2**20, 3, 1)
# The suite's and the plain loop's untimed rounds before timing.
WARMUP_ROUNDS = 2


def accuracy_rounds(scale, workdir: Path) -> list[Pair]:
    """All rounds at once: torchrun starts ACCURACY_RANKS ranks of this module, which pair a plain loop with the
    suite's case round by round; rank 0 writes the pairs to a JSON file."""
    from suite.errors import UserError

    out = workdir / "collectives-pairs.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ACCURACY_RANKS}", "-m", __name__,
           json.dumps({"scale": asdict(scale), "workdir": str(workdir), "out": str(out)})]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=ACCURACY_TIMEOUT_S * 2)
    if proc.returncode != 0 or not out.exists():
        print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
        raise UserError(f"the collectives accuracy run under torchrun failed (exit {proc.returncode}, output "
                        "above); check that `python -m suite collectives --nproc 2` works")
    pairs = json.loads(out.read_text(encoding="utf-8"))
    return [Pair(**{**p, "target": Target(**p["target"])}) for p in pairs]


def plain_all_reduce(nbytes: int, rounds: int, iterations: int, warmup: int) -> float:
    """Median seconds per all_reduce of a loop written as nccl-tests time it: barrier, host clock around
    `iterations` calls, max over ranks."""
    import torch
    import torch.distributed as dist

    buf = torch.arange(nbytes // 4, dtype=torch.float32).remainder_(8).add_(1)
    times = []
    for r in range(warmup + rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(buf)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if r >= warmup:
            times.append(elapsed.item() / iterations)
    return statistics.median(times)


def accuracy_worker(spec: dict) -> int:
    """One rank under torchrun: per round the plain loop, then the suite's all_reduce case (same group)."""
    import torch.distributed as dist
    import yaml

    from suite.cases.collectives.measure import busbw
    from suite.tools.accuracy import Scale
    from suite.units import format_size

    scale = Scale(**spec["scale"])
    nbytes, rounds, iterations = scale.pick(ACCURACY_SIZE, QUICK_SIZE)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    workdir = Path(spec["workdir"])
    cases = {"collectives": {"ops": ["all_reduce"], "sizes": [nbytes], "dtypes": ["float32"],
                             "backend": "gloo", "rounds": rounds, "iterations": iterations,
                             "warmup_rounds": WARMUP_ROUNDS, "timeout_s": ACCURACY_TIMEOUT_S}}
    cfg, out = workdir / "collectives.yaml", workdir / "collectives.json"
    if rank == 0:
        cfg.write_text(yaml.safe_dump({"devices": "cpu", "cases": cases}), encoding="utf-8")
    dist.barrier()
    title = f"all_reduce {format_size(nbytes)} busbw, {n} Gloo ranks"
    pairs = []
    for _ in range(scale.rounds):
        plain = plain_all_reduce(nbytes, rounds, iterations, WARMUP_ROUNDS)
        code, log, results = run_suite("benchmarks/test_collectives.py", cfg, out, quiet=True)
        if code != 0:
            print(log[-4000:], file=sys.stderr)
            return 1
        if rank == 0:
            info = one(results, case="collectives")["extra_info"]
            pairs.append({"family": NAME, "title": title, "unit": "GB/s", "reference": "plain dist loop",
                          "target": {"kind": "within", "value": 0.15}, "suite": info["busbw"],
                          "ref": busbw("all_reduce", info["bytes"], plain, n)})
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps(pairs), encoding="utf-8")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # Under torchrun (accuracy_rounds): one rank, its spec as the one argument.
    sys.exit(accuracy_worker(json.loads(sys.argv[1])))
