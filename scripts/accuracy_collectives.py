"""Accuracy of the collectives: the suite's all_reduce busbw against a plain torch.distributed loop, one run.

    python scripts/accuracy_collectives.py [--nproc 2] [--size 64MiB] [--rounds 15] [--iterations 2]

Re-launches itself under torchrun (--standalone). Every rank times a plain loop (barrier; t0; iterations x
dist.all_reduce; t1; max over ranks), then the suite (pytest benchmarks/test_collectives.py in-process, same
process group, same rounds/iterations/warm-up), then the plain loop again; rank 0 prints the ratio of the
suite's median busbw to the plain loop's (the mean of the two plain runs, so drift between them shows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Target: the suite's busbw within this fraction of the plain loop's (tracker: within 15%).
TOLERANCE = 0.15


def _args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--size", default="64MiB")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--warmup-rounds", type=int, default=2)
    parser.add_argument("--backend", default="gloo")
    return parser.parse_args(argv)


def plain_loop(nbytes: int, rounds: int, iterations: int, warmup: int, device: str) -> float:
    """Median seconds per all_reduce: barrier, host clock around `iterations` calls, max over ranks."""
    import torch
    import torch.distributed as dist

    buf = torch.arange(nbytes // 4, dtype=torch.float32, device=device).remainder_(8).add_(1)
    times = []
    for r in range(warmup + rounds):
        dist.barrier()
        if device != "cpu":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(buf)
        if device != "cpu":
            torch.cuda.synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if r >= warmup:
            times.append(elapsed.item() / iterations)
    return statistics.median(times)


def suite_run(args, workdir: Path) -> float | None:
    """Median seconds per call of the suite's all_reduce case (rank 0 reads the JSON; None elsewhere)."""
    import pytest
    import torch.distributed as dist
    import yaml

    cfg = workdir / "accuracy.yaml"
    out = workdir / "accuracy.json"
    if dist.get_rank() == 0:
        cfg.write_text(yaml.safe_dump({"devices": "all", "cases": {
            **{name: {"enabled": False} for name in ("matmul",)},
            "collectives": {"ops": ["all_reduce"], "sizes": [args.size], "dtypes": ["float32"],
                            "backend": args.backend, "rounds": args.rounds, "iterations": args.iterations,
                            "warmup_rounds": args.warmup_rounds, "timeout_s": 120}}}))
    dist.barrier()
    code = pytest.main([str(ROOT / "benchmarks" / "test_collectives.py"), f"--rootdir={ROOT}", "-q",
                        "-p", "no:cacheprovider", f"--suite-config={cfg}", f"--benchmark-json={out}"])
    if code != 0:
        raise SystemExit(f"suite run failed on rank {dist.get_rank()} (pytest exit {code})")
    if dist.get_rank() != 0:
        return None
    (bench,) = json.loads(out.read_text())["benchmarks"]
    return bench["stats"]["median"]


def worker(args) -> int:
    import torch
    import torch.distributed as dist

    from suite.units import parse_size  # suite.distributed is imported by pytest.main (assertion rewriting)

    dist.init_process_group(args.backend)
    n = dist.get_world_size()
    device = f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if args.backend == "nccl" else "cpu"
    if device != "cpu":
        torch.cuda.set_device(device)
    nbytes = parse_size(args.size)
    nbytes -= nbytes % 4
    workdir = Path(os.environ.get("ACCURACY_WORKDIR", tempfile.gettempdir()))
    before = plain_loop(nbytes, args.rounds, args.iterations, args.warmup_rounds, device)
    suite = suite_run(args, workdir)
    after = plain_loop(nbytes, args.rounds, args.iterations, args.warmup_rounds, device)
    if dist.get_rank() == 0:
        from suite.cases.collectives.measure import busbw

        plain = (before + after) / 2
        bw_suite, bw_plain = busbw("all_reduce", nbytes, suite, n), busbw("all_reduce", nbytes, plain, n)
        ratio = bw_suite / bw_plain
        print(f"\nall_reduce {args.size} float32, {args.backend}, {n} ranks, {args.rounds} rounds x "
              f"{args.iterations} iterations")
        print(f"plain loop busbw: {busbw('all_reduce', nbytes, before, n):.3f} GB/s (before), "
              f"{busbw('all_reduce', nbytes, after, n):.3f} GB/s (after)")
        print(f"suite busbw:      {bw_suite:.3f} GB/s")
        verdict = "PASS" if abs(ratio - 1) <= TOLERANCE else "FAIL"
        print(f"ratio suite/plain: {ratio:.3f}  {verdict} (target within {TOLERANCE:.0%})", flush=True)
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    args = _args(argv)
    if "RANK" in os.environ:
        return worker(args)
    with tempfile.TemporaryDirectory(prefix="accuracy-coll-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               __file__, *(argv if argv is not None else sys.argv[1:])]
        return subprocess.call(cmd, cwd=ROOT, env={**os.environ, "ACCURACY_WORKDIR": tmp})


if __name__ == "__main__":
    sys.exit(main())
