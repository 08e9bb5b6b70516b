"""Probe what sets the GPU check's H200 figures, in one short run (~1 minute):

A. Is the LeNet training step at a batch bound by the host (Python dispatch) or the GPU? For a few batch
   sizes: the host's issue time per step (no synchronisation) against the step's time with synchronisation,
   the suite's way of timing (rounds of >= 5 ms between synchronisations) and CUDA events around each call.
B. Does the suite's figure drift across in-process suite runs? The check's own timing_truth with 5 alternations.
C. How long does a GPU hold its bf16 burst figure (suite/expectations.yaml's gpu_check.burst)? After an idle
   pause: the mean of 10 after 3 warm-ups (how that figure is read), mamf-finder's older statistic (mean of 100
   after 50, L2 flushed), and a 3 s run read in windows, each with NVML's clock-limit shares and the SM clock.

    python -m suite.tools.h200_probe        # on the GPU node, with PYTHONPATH holding the checkout
    python -m suite.tools.h200_probe cpu    # the same steps on the CPU (host clock for the events)
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from suite.cases import family_module
from suite.cases.ceiling.checks import held_note
from suite.cases.precision import mode_for
from suite.config import load_config
from suite.devices import ClockWatch, resolve_spec
from suite.tools.paired import reference_times

# `cpu` runs the same steps on the CPU: a check that the probe itself works before it spends GPU time.
DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"


def pick(gpu, cpu):
    return gpu if DEV.startswith("cuda") else cpu


def sync() -> None:
    if DEV.startswith("cuda"):
        torch.cuda.synchronize(DEV)


def sm_clock() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return (f"SM {pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)} MHz, "
                f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1000:.0f} W, {pynvml.nvmlDeviceGetTemperature(h, 0)} C")
    except Exception as exc:  # noqa: BLE001 - a probe: say what NVML said
        return f"NVML: {exc}"


def held(watch: ClockWatch) -> str:
    return held_note(watch.stop(), "during it").lstrip("; ") or "NVML told nothing"


def model_cases(batches: list[int]):
    cfg = Path(tempfile.mkdtemp()) / "model.yaml"
    cfg.write_text(yaml.safe_dump({"devices": [DEV], "cases": {"model": {
        "models": ["lenet"], "dtypes": ["float32"], "batch_sizes": batches}}}))
    config = load_config(cfg)
    module = family_module("model")
    return module, config, module.enumerate_cases(config, resolve_spec(config.devices))


def probe_model() -> None:
    print("== A. LeNet float32 training step: host issue time vs synchronised time vs CUDA events")
    module, config, cases = model_cases(pick([256, 4096, 16384, 65536], [8, 16]))
    for case in cases:
        with mode_for(case):
            work = module.build(case, config)
            fn = work.fn
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                fn()
            sync()
            for attempt in range(3):
                calls = 20
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                t1 = time.perf_counter()
                sync()
                t2 = time.perf_counter()
                issue, total = (t1 - t0) / calls, (t2 - t0) / calls
                per_round = max(1, int(0.005 / total) + 1)
                rounds = []
                for _ in range(15):
                    sync()
                    r0 = time.perf_counter()
                    for _ in range(per_round):
                        fn()
                    sync()
                    rounds.append((time.perf_counter() - r0) / per_round)
                events = reference_times(fn, DEV, seconds=0.3)
                print(f"  {case.id:<32} issue {issue * 1e3:7.3f} ms/step, synchronised {total * 1e3:7.3f}, "
                      f"suite-style rounds of {per_round} {statistics.median(rounds) * 1e3:7.3f}, events "
                      f"{statistics.median(events) * 1e3:7.3f}  (issue share {issue / total:.0%})", flush=True)
                if case.info["batch_size"] != pick(256, 8):
                    break
        del work
        torch.cuda.empty_cache()


def probe_drift() -> None:
    print("== B. the check's model row with 5 alternations (in-process suite runs)")
    from suite.tools.gpu_check import CHECK_TIMING, CheckContext

    ctx = CheckContext(device=DEV, workdir=Path(tempfile.mkdtemp()), rounds=5, timing=dict(CHECK_TIMING),
                       print_table=False)
    for batch in pick((256, 16384), (8,)):
        rows, seen = ctx.timing_truth("model", {"devices": [DEV], "cases": {"model": {
            "models": ["lenet"], "dtypes": ["float32"], "batch_sizes": [batch]}}}, "benchmarks/test_model.py")
        for row in rows:
            suite = [b["stats"]["median"] * 1e3 for b in next(iter(seen.values()))]
            print(f"  {row.name}: suite {row.suite:.3f} ms, events {row.reference:.3f} ms; pairs "
                  f"{', '.join(f'{p:.3f}' for p in row.pairs or [])}; suite per run "
                  f"{', '.join(f'{s:.3f}' for s in suite)}; gc objects {len(gc.get_objects())}", flush=True)


def probe_matmul() -> None:
    print("== C. bf16 8192^3 matmul: burst vs mamf-finder's statistic vs sustained (random normal inputs)")
    from suite.cases.common import randn

    n = pick(8192, 256)
    a = randn(n, n, dtype=torch.bfloat16, device=DEV, seed=1)
    b = randn(n, n, dtype=torch.bfloat16, device=DEV, seed=2)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=DEV)
    flush = torch.empty(pick(256 * 2**20, 2**20), dtype=torch.uint8, device=DEV)
    flop = 2 * n**3

    def op() -> None:
        torch.matmul(a, b, out=out)

    def rate(times: list[float]) -> float:
        return flop / (sum(times) / len(times)) / 1e12

    for label in ("burst 1", "burst 2"):
        sync()
        time.sleep(pick(4.0, 0.1))
        print(f"  idle: {sm_clock()}")
        watch = ClockWatch([DEV])
        reference_times(op, DEV, calls=3)
        burst = reference_times(op, DEV, calls=10)
        print(f"  {label}: mean of 10 after 3: {rate(burst):6.1f} TFLOP/s; held: {held(watch)}; after: "
              f"{sm_clock()}", flush=True)
        watch = ClockWatch([DEV])
        reference_times(op, DEV, calls=50, before=flush.zero_)
        mamf = reference_times(op, DEV, calls=100, before=flush.zero_)
        print(f"  then mamf-finder's (mean of 100 after 50, L2 flushed): {rate(mamf):6.1f} TFLOP/s; first 10 "
              f"{rate(mamf[:10]):6.1f}, last 10 {rate(mamf[-10:]):6.1f}; held: {held(watch)}; after: "
              f"{sm_clock()}", flush=True)
    sync()
    time.sleep(pick(4.0, 0.1))
    watch = ClockWatch([DEV])
    times = reference_times(op, DEV, seconds=pick(3.0, 0.5))
    edges, elapsed, start, spans = [0.05, 0.25, 0.5, 1.0, 2.0, 3.0], 0.0, 0, []
    for i, t in enumerate(times):
        elapsed += t
        if edges and elapsed >= edges[0]:
            spans.append(f"{edges.pop(0):.2f}s {rate(times[start:i + 1]):.0f}")
            start = i + 1
    print(f"  3 s from idle, windows ending at: {'; '.join(spans)} TFLOP/s; held: {held(watch)}; after: "
          f"{sm_clock()}", flush=True)


if __name__ == "__main__":
    name = torch.cuda.get_device_name(0) if DEV.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, {name}; {sm_clock()}", flush=True)
    probe_model()
    probe_matmul()
    probe_drift()
