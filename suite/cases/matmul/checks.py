"""The matmul family's part of the tooling: its GPU-check step, its accuracy round and its evidence rows
(suite/tools)."""

from __future__ import annotations

import torch

from suite.cases.matmul.measure import ALL_GPUS, NAME, shape_id
from suite.cases.precision import unsupported_reason
from suite.tools.checkrow import (IN_PROCESS_RUN_S, RATIO_TOLERANCE, ROOT, CheckRow, bench_s, bound_row, judged,
                                  truth_s)
from suite.tools.evidence import against, best_per_precision, fmt
from suite.tools.paired import Pair, Target, event_seconds, one, timer_seconds

# --- GPU check ---------------------------------------------------------------------------------------------

# The GPU check's large matmul: big enough that launch and synchronisation costs vanish (docs/reference.md's
# MAMF figure for one H200 is quoted at 8192^3 bf16).
CHECK_SHAPE = 8192
# TF32 on must make an fp32 matmul at least this much faster than IEEE fp32 (H200 datasheet: 494 vs 67 dense
# TFLOP/s, ~7x): far below the datasheet ratio, far above noise, so a switch that does nothing fails.
TF32_MIN_SPEEDUP = 2.0
# The FP8 row's precision, and its n in the dry run (the CPU's FP8 matmul is a slow reference path: ~4 MFLOP/s,
# 32^3 in ~20 ms).
FP8 = "float8_e4m3fn"
FP8_DRY_N = 32
# bf16 8192^3 against events; fp32 with TF32 on and off; fp8 8192^3 against events once (one pair: the
# check's budget has no room for alternations).
STEP_ESTIMATE_S = (truth_s(NAME, 1, 1, True) + 2 * IN_PROCESS_RUN_S + 3 * bench_s(NAME, True)
                   + bench_s(NAME, True, overhead=False))
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 10
# The dry run's stand-in for configs/quick.yaml's matmul cases.
DRY_QUICK = {"dtypes": ["float32"], "shapes": ["64x64x64"]}


def gpu_checks(ctx) -> list:
    """A large bf16 and a large FP8 matmul against CUDA events (alternating, same process), the bf16 one bound by
    the device; TF32 on faster than off."""
    n = ctx.pick(CHECK_SHAPE, 128)
    dtype = ctx.pick("bfloat16", "float32")
    shape = shape_id(n, n, n)
    tests = "benchmarks/test_matmul.py"
    large = f"{ctx.device}-{dtype}-{shape}"
    rows, seen = ctx.timing_truth(NAME, {"devices": [ctx.device], "cases": {"matmul": {
        "dtypes": [dtype], "shapes": [shape]}}}, tests, {large: f"matmul {dtype} {shape}"})
    benches = ctx.run_suite({"devices": [ctx.device], "cases": {"matmul": {"dtypes": ["float32", "tf32"],
                                                                           "shapes": [shape]}}}, tests)
    rate = {b["extra_info"]["precision"]: b["extra_info"]["tflops"] for b in benches}
    title = f"matmul fp32 {shape}: TF32 on vs off"
    if {"float32", "tf32"} <= set(rate):
        rows.append(CheckRow(title, rate["tf32"], rate["float32"], "TFLOP/s",
                             judged(ctx, rate["tf32"] >= TF32_MIN_SPEEDUP * rate["float32"]),
                             f"TF32 must be >= {TF32_MIN_SPEEDUP:g}x IEEE fp32"))
    else:
        rows.append(CheckRow(title, rate.get("tf32"), rate.get("float32"), "TFLOP/s", judged(ctx, False),
                             f"results for {sorted(rate)} only (tf32 skips off CUDA, and where its result is "
                             "IEEE-exact: see the log)"))
    rows.append(bound_row(ctx, f"matmul {dtype} {shape}: bound", seen.get(large, [None])[-1], "device"))
    rows += _fp8_check(ctx, tests)
    return rows


def _fp8_check(ctx, tests: str) -> list:
    """FP8 e4m3 (torch._scaled_mm): the suite's median against CUDA events of the same case, once; on a GPU
    without FP8, a row that says why it was not checked."""
    n = ctx.pick(CHECK_SHAPE, FP8_DRY_N)
    title = f"matmul {FP8} {shape_id(n, n, n)}"
    reason = unsupported_reason(FP8, ctx.device)
    if reason:
        return [CheckRow(title, None, None, "ms", None, f"not checked: {reason}")]
    cfg = ctx.write_config({"devices": [ctx.device], "cases": {"matmul": {"dtypes": [FP8],
                                                                          "shapes": [shape_id(n, n, n)]}}})
    benches = ctx.run_suite(cfg, tests)
    if not benches:
        return [CheckRow(title, None, None, "ms", judged(ctx, False), "no result (skipped or failed: see the log)")]
    suite = benches[0]["stats"]["median"]
    ref = event_seconds(NAME, cfg, benches[0])
    return [CheckRow(title, suite * 1e3, ref * 1e3, "ms", judged(ctx, abs(suite / ref - 1) <= RATIO_TOLERANCE),
                     f"vs {'host clock (dry run)' if ctx.dry_run else 'CUDA events'}, one pair, within "
                     f"{RATIO_TOLERANCE:.0%}; suite {benches[0]['extra_info']['tflops']:.4g} TFLOP/s")]


def quick_checks(ctx, benchmarks: list[dict]) -> list:
    """The quick config's all-GPUs cases: each aggregate against the sum of the per-device rates the case
    measured right after it (CUDA events per GPU). With one GPU there are none ('not checked'); the dry run
    shows the quick step's all-GPUs case ids on a fake node of two GPUs."""
    infos = [b["extra_info"] for b in benchmarks if b["extra_info"].get("device") == ALL_GPUS]
    if ctx.dry_run:
        from suite.devices import use_platform
        from suite.plan import NodePlatform

        with use_platform(NodePlatform(2)):
            ids = [i for i in ctx.case_ids(NAME, ROOT / "configs" / "quick.yaml") if ALL_GPUS in i]
        return [CheckRow("matmul on all GPUs at once vs sum of per-device rates", None, None, "TFLOP/s",
                         None if ids else False, f"not judged: dry run (quick.yaml on a fake node of two GPUs: "
                         f"{', '.join(ids) or 'no all-GPUs case'})")]
    if ctx.gpus < 2:
        return []
    if not infos:
        return [CheckRow("matmul on all GPUs at once", None, None, "TFLOP/s", False, "no result in quick.json")]
    return [_all_gpus_row(info) for info in infos]


def _all_gpus_row(info: dict) -> CheckRow:
    shape = shape_id(info["m"], info["n"], info["k"])
    title = f"matmul {info['precision']} {shape} on {info['gpu_count']} GPUs at once"
    if "per_device_tflops" not in info:
        return CheckRow(title, info.get("tflops"), None, "TFLOP/s", False, "no per-device rates recorded")
    total = sum(info["per_device_tflops"].values())
    # Both sides are sustained: the aggregate is bounded by the sum and falls short of it only by the spread
    # between the devices (the round waits for the slowest); one thread issuing for all reads about 1/n.
    return CheckRow(title, info["tflops"], total, "TFLOP/s", info["tflops"] >= (1 - RATIO_TOLERANCE) * total,
                    f"vs sum of per-device events right after; slowest {info['slowest_device']}")


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# n of the fp32 n x n x n matmul the accuracy round times (--quick: the machinery only).
ACCURACY_N, QUICK_N = 2048, 256


def timer_env(n: int) -> dict:
    """The matmul case's inputs (suite.cases.matmul: randn with seeds 1 and 2) for Timer."""
    from suite.cases.common import randn

    return {"torch": torch, "a": randn(n, n, dtype=torch.float32, device="cpu", seed=1),
            "b": randn(n, n, dtype=torch.float32, device="cpu", seed=2), "out": torch.empty(n, n)}


def accuracy_round(runner, scale) -> list[Pair]:
    n = scale.pick(ACCURACY_N, QUICK_N)
    shape = f"{n}x{n}x{n}"
    bench = one(runner.run(NAME, {"matmul": {"dtypes": ["float32"], "shapes": [shape]}}), case="matmul")
    ref = timer_seconds("torch.matmul(a, b, out=out)", timer_env(n), scale.timer_min_run_s)
    return [Pair(NAME, f"fp32 matmul {shape}", "s", "Timer", Target("within", 0.10), bench["stats"]["median"], ref)]


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): the largest matmul per precision."""
    return [(f"matmul {precision} {i['m']}×{i['n']}×{i['k']}", f"{fmt(i['tflops'])} {i.get('unit', 'TFLOP/s')}",
             against(i))
            for precision, i in best_per_precision(results, "flops").items()]
