"""The collectives family's part of the tooling: its GPU-check step and its accuracy rounds, a plain
torch.distributed loop paired with the suite's case under torchrun (suite/tools)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from suite.cases.collectives.measure import NAME
from suite.plan import DEFAULT_OVERHEAD_S, OVERHEAD_S, TORCHRUN_OVERHEAD_S
from suite.tools.checkrow import (IN_PROCESS_RUN_S, PROCESS_START_S, ROOT, ROUNDS, CheckRow, last_line,
                                  run_command)
from suite.tools.paired import Pair, Target, one, run_suite
from suite.units import format_size

# --- GPU check ---------------------------------------------------------------------------------------------

# Seconds the GPU check gives each of its collective runs (start-up included) before it stops them.
CHECK_TIMEOUT_S = 60
# The most ranks the check starts (one node of eight GPUs; a larger node's other GPUs are 'not checked').
MAX_RANKS = 8
# The all_reduce the check pairs with a plain loop: NCCL at a size where bandwidth, not latency, sets its time
# (the loop's host clock then agrees with the suite's); Gloo on the CPU at a size a 2-core machine does quickly.
NCCL_CHECK_BYTES, GLOO_CHECK_BYTES = 64 * 2**20, 2**20
# Per backend: (bytes, whether the pairing is judged: NCCL on the GPUs is; Gloo on the CPU is shown, and
# alternates once except in the dry run, which alternates as NCCL does to check that path's plumbing).
PLAIN_LOOP = {"nccl": (NCCL_CHECK_BYTES, True), "gloo": (GLOO_CHECK_BYTES, False)}
# The collectives' (timed rounds, calls per round, untimed rounds), in the suite's runs and the plain loop.
CHECK_ROUNDS = (5, 3, 1)
# The suite's busbw may differ from the plain loop's by this much (the accuracy round's Gloo tolerance).
PLAIN_LOOP_TOLERANCE = 0.15
# NCCL's start with one rank; then, after torchrun's start, alternations of the plain loop and an in-process
# run of the collectives file (two cases of a few ms: their fixed per-case cost): one for Gloo on a node of one
# GPU (shown, not judged), ROUNDS for NCCL.
NCCL_START_S = 3.0
ALTERNATION_S = IN_PROCESS_RUN_S + 2 * OVERHEAD_S.get(NAME, DEFAULT_OVERHEAD_S)
STEP_ESTIMATE_S = PROCESS_START_S + NCCL_START_S + TORCHRUN_OVERHEAD_S + ALTERNATION_S
MULTI_GPU_S = (ROUNDS - 1) * ALTERNATION_S
# Its place in the check (suite.tools.gpu_check: lower first): first of all, before the check's own OOM and
# SIGKILL steps.
CHECK_ORDER = 0


def gpu_checks(ctx) -> list:
    """NCCL starts on the GPU with one rank through the suite's own start-up and timer; then the collectives file
    end to end through torchrun, paired with a plain loop: NCCL with min(MAX_RANKS, n) ranks on a node of n >= 2
    GPUs, else 2 Gloo ranks. The dry run starts Gloo in place of NCCL."""
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
    rows.append(CheckRow(f"collectives: {backend} starts, all_reduce with 1 rank", None, None, "", ok,
                         last_line(text, 90) or ("timed out" if code is None else f"exit {code}")))
    # With two GPUs, what one cannot show: NCCL between min(MAX_RANKS, n) of them.
    ranks = min(MAX_RANKS, ctx.gpus) if ctx.gpus >= 2 else 2
    return rows + _ranks_vs_plain_loop(ctx, "nccl" if ctx.gpus >= 2 else "gloo", ranks)


def _ranks_vs_plain_loop(ctx, backend: str, ranks: int) -> list:
    """The collectives file under torchrun with `ranks` ranks of `backend`, alternating ctx.rounds times with a
    plain all_reduce loop in the same ranks (paired_worker): a busbw row per op, and the all_reduce against the
    plain loop (judged for NCCL; Gloo on the CPU is shown). Its results are kept in the merged results."""
    import tempfile

    import yaml

    from suite.tools.paired import summarise

    work = Path(tempfile.mkdtemp(prefix=f"gpu-check-{backend}-", dir=ctx.workdir))
    nbytes, judged = PLAIN_LOOP[backend]
    size = format_size(nbytes)
    devices = [f"cuda:{i}" for i in range(ranks)] if judged else "cpu"
    config = {"devices": devices, "cases": {"collectives": {
        "backend": backend, "ops": ["all_reduce", "all_gather"], "sizes": [size], "in_place": False,
        "rounds": CHECK_ROUNDS[0], "iterations": CHECK_ROUNDS[1], "warmup_rounds": CHECK_ROUNDS[2],
        "timeout_s": CHECK_TIMEOUT_S}}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    title = f"collectives: {backend} x{ranks} all_reduce {size} busbw vs a plain loop"
    spec = _spec(work, backend, nbytes, CHECK_ROUNDS, ctx.rounds if judged or ctx.dry_run else 1, title)
    code, text = run_command(_torchrun(ranks, spec), ctx.step_seconds(2 * CHECK_TIMEOUT_S))
    results = work / "results.json"
    benches = ctx.keep_results(results, {"tests": f"torchrun x{ranks} benchmarks/test_collectives.py", **config})[
        "benchmarks"] if results.exists() else []
    rows = [CheckRow(f"collectives: {backend} x{ranks} {b['extra_info']['op']} {size} busbw",
                     b["extra_info"]["busbw"], None, "GB/s",
                     code == 0 and b["extra_info"]["world_size"] == ranks and b["extra_info"]["busbw"] > 0,
                     f"{ranks} ranks via torchrun") for b in benches]
    pairs = _read_pairs(work / "pairs.json")
    shown = "" if judged else " (Gloo: shown)"
    for row in summarise(pairs, judge=judged and not ctx.dry_run, min_pairs=1):
        rows.append(CheckRow(row.title, row.suite, row.ref, "GB/s", row.passed,
                             f"vs {row.reference}, {len(row.ratios)} alternations, {row.target.describe()}; pairs "
                             f"{row.low:.3f}-{row.high:.3f}{shown}", pairs=list(row.ratios)))
    if not benches or not pairs:
        rows.append(CheckRow(f"collectives: {backend} x{ranks} via torchrun", None, None, "", False,
                             last_line(text, 90) or f"exit {code}"))
    return rows


def _spec(work: Path, backend: str, nbytes: int, rounds: tuple[int, int, int], alternations: int,
          title: str) -> dict:
    """What paired_worker's ranks do (its one argument, as JSON): files in `work` (config.yaml written)."""
    return {"backend": backend, "bytes": nbytes, "rounds": list(rounds), "alternations": alternations,
            "title": title, "config": str(work / "config.yaml"), "results": str(work / "results.json"),
            "out": str(work / "pairs.json")}


def _torchrun(ranks: int, spec: dict) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "-m",
            __name__, json.dumps(spec)]


def _read_pairs(path: Path) -> list[Pair]:
    if not path.exists():
        return []
    return [Pair(**{**p, "target": Target(**p["target"])}) for p in json.loads(path.read_text(encoding="utf-8"))]


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# Gloo ranks on the CPU (the GPU check covers NCCL): two, as a 2-core machine allows.
ACCURACY_RANKS = 2
ACCURACY_TIMEOUT_S = 300
# The all_reduce the accuracy rounds time: (bytes, timed rounds, calls per round); --quick: the machinery only.
ACCURACY_SIZE, QUICK_SIZE = (64 * 2**20, 15, 2), (2**20, 3, 1)
# The suite's and the plain loop's untimed rounds before timing.
WARMUP_ROUNDS = 2


def accuracy_rounds(scale, workdir: Path) -> list[Pair]:
    """All rounds at once: torchrun starts ACCURACY_RANKS Gloo ranks of this module (paired_worker), which pair
    a plain loop with the suite's case round by round; rank 0 writes the pairs to a JSON file."""
    import yaml

    from suite.errors import UserError
    from suite.units import format_size

    nbytes, rounds, iterations = scale.pick(ACCURACY_SIZE, QUICK_SIZE)
    cases = {"collectives": {"ops": ["all_reduce"], "sizes": [nbytes], "dtypes": ["float32"], "backend": "gloo",
                             "rounds": rounds, "iterations": iterations, "warmup_rounds": WARMUP_ROUNDS,
                             "timeout_s": ACCURACY_TIMEOUT_S}}
    work = workdir / NAME  # the accuracy run's folder is every family's
    work.mkdir(exist_ok=True)
    (work / "config.yaml").write_text(yaml.safe_dump({"devices": "cpu", "cases": cases}), encoding="utf-8")
    spec = _spec(work, "gloo", nbytes, (rounds, iterations, WARMUP_ROUNDS), scale.rounds,
                 f"all_reduce {format_size(nbytes)} busbw, {ACCURACY_RANKS} Gloo ranks")
    proc = subprocess.run(_torchrun(ACCURACY_RANKS, spec), cwd=ROOT, capture_output=True, text=True,
                          timeout=ACCURACY_TIMEOUT_S * 2)
    pairs = _read_pairs(Path(spec["out"]))
    if proc.returncode != 0 or not pairs:
        print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
        raise UserError(f"the collectives accuracy run under torchrun failed (exit {proc.returncode}, output "
                        "above); check that `python -m suite collectives --nproc 2` works")
    return pairs


def plain_all_reduce(nbytes: int, rounds: int, iterations: int, warmup: int, device: str = "cpu") -> float:
    """Median seconds per all_reduce of a loop written as nccl-tests time it: barrier, host clock around
    `iterations` calls and the device's synchronisation, max over ranks."""
    import torch
    import torch.distributed as dist

    from suite.devices import synchronize

    buf = torch.arange(nbytes // 4, dtype=torch.float32, device=device).remainder_(8).add_(1)
    times = []
    for r in range(warmup + rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(buf)
        synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if r >= warmup:
            times.append(elapsed.item() / iterations)
    return statistics.median(times)


def paired_worker(spec: dict) -> int:
    """One rank under torchrun (see _spec): `alternations` times the plain all_reduce loop, then the suite's
    collectives file on the spec's config in this process (same group); rank 0 writes the pairs of the
    all_reduce of the spec's size."""
    import os

    import torch
    import torch.distributed as dist

    from suite.cases.collectives.measure import busbw

    backend, nbytes, (rounds, iterations, warmup) = spec["backend"], spec["bytes"], spec["rounds"]
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    pairs = []
    for _ in range(spec["alternations"]):
        plain = plain_all_reduce(nbytes, rounds, iterations, warmup, device)
        code, log, results = run_suite("benchmarks/test_collectives.py", Path(spec["config"]),
                                       Path(spec["results"]), quiet=True)
        if code != 0:
            print(log[-4000:], file=sys.stderr)
            return 1
        if rank == 0:
            info = one(results, case="collectives", op="all_reduce")["extra_info"]
            pairs.append({"family": NAME, "title": spec["title"], "unit": "GB/s", "reference": "plain dist loop",
                          "target": {"kind": "within", "value": PLAIN_LOOP_TOLERANCE}, "suite": info["busbw"],
                          "ref": busbw("all_reduce", info["bytes"], plain, n)})
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps(pairs), encoding="utf-8")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # Under torchrun (accuracy_rounds, the GPU check): one rank, its spec as the one argument.
    sys.exit(paired_worker(json.loads(sys.argv[1])))
