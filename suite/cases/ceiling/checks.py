"""The ceiling family's part of the tooling: its GPU-check step (a burst against a GPU model's figure, the
MAMF-style mean, the suite's sustained ceiling), its accuracy round and its evidence rows
(suite/tools)."""

from __future__ import annotations

from suite.cases.ceiling.measure import NAME
from suite.cases.datasheet import find_gpu
from suite.tools.checkrow import IN_PROCESS_RUN_S, CheckRow, bench_s, expected, judged
from suite.tools.evidence import against, best_per_precision, fmt
from suite.tools.paired import Pair, Target, timer_seconds

# --- GPU check ---------------------------------------------------------------------------------------------

# A GPU model's burst figure and how it was read (suite/expectations.yaml's gpu_check.burst): the check reads
# the same statistic the same way, from idle, and judges it within 1 - CEILING_TARGET (mamf-finder's author
# notes a 5%+ spread between the GPUs of one node). A power-limited GPU holds it only for a moment, so the
# rows below show what it holds past the burst and judge the suite's sustained figure against that.
BURST = expected("burst")
BURST_TFLOPS = float(BURST["tflops"])
BURST_POWER_W = float(BURST["power_limit_w"])
BURST_SHAPE = int(BURST["shape"])
BURST_WARMUP, BURST_CALLS = int(BURST["warmup"]), int(BURST["calls"])
IDLE_BEFORE_BURST_S = float(BURST["idle_s"])
CEILING_TARGET = 0.90
CHECK_SWEEP = ("4096x4096x4096", "8192x8192x8192", "8192x8192x16384", "12288x12288x12288")
# The suite's sustained median against the MAMF-style mean of the same shape, on the same GPU in the same
# process: the sustained figure is expected a few % lower (a longer window holds a power-limited GPU's lower
# clock for more of its time; suite/timing.py's SUSTAINED_WARMUP_S), never much higher (a round that does not
# wait for the GPU would be).
SUSTAINED_OF_MAMF = (0.85, 1.05)
MAMF_WARMUP = 50
MAMF_ITERATIONS = 100
MAMF_FLUSH_BYTES = 256 * 2**20
# The MAMF-style figure: 150 calls of the best shape (~5 ms each), the L2 flushed before each.
MAMF_S = 1.5
# The burst: the idle pause, then 13 products of ~1.4 ms.
BURST_S = IDLE_BEFORE_BURST_S + 0.5
# The sweep shapes get only the general compute warm-up (counted in bench_s).
STEP_ESTIMATE_S = IN_PROCESS_RUN_S + 4 * bench_s(NAME, True) + MAMF_S + BURST_S
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 40
# The dry run's stand-in for configs/quick.yaml's ceiling cases.
DRY_QUICK = {"dtypes": ["float32"], "shapes": ["128x128x128"]}


def burst_target(name: str, power_limit_w: object = None) -> tuple[bool, str]:
    """Whether the burst is judged against BURST_TFLOPS on the GPU called `name` with this NVML power limit
    (None: not read), and the note that says why or why not."""
    peak = find_gpu(name)
    if peak is None or peak.gpu != BURST["gpu"]:
        return False, f"not judged: {name} is not an {BURST['gpu']} ({peak.gpu if peak else 'unknown GPU'})"
    target = f"target >= {CEILING_TARGET:.0%}"
    if not isinstance(power_limit_w, (int, float)) or isinstance(power_limit_w, bool):
        return True, f"{target}; power limit not read (no NVML): judged as a full-power SXM"
    if power_limit_w < BURST_POWER_W:
        return False, (f"not judged: power limit {power_limit_w:.0f} W, below the SXM's "
                       f"{BURST_POWER_W:.0f} W the figure was read at")
    return True, f"{target}; power limit {power_limit_w:.0f} W"


def gpu_checks(ctx) -> list:
    """Three rows. A burst from idle against a GPU model's figure (BURST: bf16 8192^3, mean of 10 after 3), read
    the same way: is the GPU and its software as fast as the published one? The sweep's best shape
    measured mamf-finder's older way ("MAMF-style": mean of 100 after 50, L2 flushed) against that burst,
    not judged: what the power limit leaves of it. The suite's ceiling (its best sustained median) against the
    MAMF-style figure of the same shape, GPU and process: does the suite's timing lose or invent time?"""
    import time

    import torch

    from suite.cases.common import randn
    from suite.cases.matmul.measure import flops
    from suite.devices import ClockWatch, inventory, synchronize
    from suite.tools.paired import reference_times

    dtype = ctx.pick(BURST["dtype"], "float32")
    tdtype = getattr(torch, dtype)
    entry = next((d for d in inventory().devices if d.get("id") == ctx.device), {})
    judge, why = burst_target(str(entry.get("name") or ctx.device), entry.get("power_limit_w"))

    # The burst first, from an idle GPU: the check's earlier steps leave it warm.
    n = ctx.pick(BURST_SHAPE, 128)
    a = randn(n, n, dtype=tdtype, device=ctx.device, seed=1)
    b = randn(n, n, dtype=tdtype, device=ctx.device, seed=2)
    out = torch.empty(n, n, dtype=tdtype, device=ctx.device)

    def square() -> None:
        torch.matmul(a, b, out=out)

    synchronize(ctx.device)
    time.sleep(ctx.pick(IDLE_BEFORE_BURST_S, 0.0))
    watch = ClockWatch([ctx.device])
    reference_times(square, ctx.device, calls=BURST_WARMUP)
    times = reference_times(square, ctx.device, calls=BURST_CALLS)
    burst = flops(n, n, n) / (sum(times) / len(times)) / 1e12
    burst_held = held_note(watch.stop(), "during it")
    del a, b, out

    sweep = list(ctx.pick(CHECK_SWEEP, ("64x64x64", "128x128x128")))
    benches = ctx.run_suite({"devices": [ctx.device], "cases": {"ceiling": {"dtypes": [dtype], "shapes": sweep}}},
                            "benchmarks/test_ceiling.py")
    burst_row = CheckRow(
        f"ceiling {dtype} {n}x{n}x{n}: burst from idle vs {BURST['label']} figure", burst, BURST_TFLOPS,
        "TFLOP/s", judged(ctx, burst >= CEILING_TARGET * BURST_TFLOPS) if judge else None,
        f"mean of {BURST_CALLS} after {BURST_WARMUP}, {ctx.pick(IDLE_BEFORE_BURST_S, 0.0):g} s idle before, as "
        f"the figure was read; {why}{burst_held}")
    if not benches:
        return [burst_row, CheckRow(f"ceiling {dtype}", None, None, "TFLOP/s", False, "no result (see the log)")]
    info = max(benches, key=lambda bench: bench["extra_info"]["tflops"])["extra_info"]
    ceiling = info["tflops"]
    shape = f"{info['m']}x{info['n']}x{info['k']}"
    a = randn(info["m"], info["k"], dtype=tdtype, device=ctx.device, seed=1)
    b = randn(info["k"], info["n"], dtype=tdtype, device=ctx.device, seed=2)
    out = torch.empty(info["m"], info["n"], dtype=tdtype, device=ctx.device)
    flush = torch.empty(ctx.pick(MAMF_FLUSH_BYTES, 2**20), dtype=torch.uint8, device=ctx.device)

    def op() -> None:
        torch.matmul(a, b, out=out)

    watch = ClockWatch([ctx.device])
    reference_times(op, ctx.device, calls=ctx.pick(MAMF_WARMUP, 2), before=flush.zero_)
    times = reference_times(op, ctx.device, calls=ctx.pick(MAMF_ITERATIONS, 5), before=flush.zero_)
    mamf = flops(info["m"], info["n"], info["k"]) / (sum(times) / len(times)) / 1e12
    mamf_held = held_note(watch.stop(), "during it")
    # What held the clocks while the suite's best shape ran (NVML): the power limit is the usual cause of a
    # sustained figure below the burst on a full-power GPU, thermal slowdown the cooling's.
    sustained_held = held_note(info, "in the suite's warm-up and timing")
    low, high = SUSTAINED_OF_MAMF
    return [
        burst_row,
        CheckRow(f"ceiling {dtype} {shape}: MAMF-style mean vs the burst", mamf, burst, "TFLOP/s", None,
                 f"mamf-finder's older statistic (mean of {MAMF_ITERATIONS} after {MAMF_WARMUP}, L2 flushed) on "
                 f"the sweep's best shape: what the GPU holds past a burst, shown, not judged{mamf_held}"),
        CheckRow(f"ceiling {dtype} (sustained median, best of {len(sweep)}) vs MAMF-style mean", ceiling,
                 mamf, "TFLOP/s", judged(ctx, low <= ceiling / mamf <= high),
                 f"at {shape}; expected {low:.2f}-{high:.2f} (sustained below a boosting mean){sustained_held}"),
    ]


def held_note(info: dict, when: str) -> str:
    """'; clocks held back <when> (NVML): power 94%' from a ClockWatch record (or a result's extra_info
    holding one); '' where NVML told nothing."""
    from suite.limits import limits_held

    if "clocks_held" not in info:
        return ""
    held = ", ".join(f"{name} {share:.0%}" for name, share in limits_held(info).items())
    return f"; clocks held back {when} (NVML): {held}" if held else f"; no clock limit held them {when} (NVML)"


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# n of each shape of the sweep the accuracy round times (--quick: the machinery only).
ACCURACY_SWEEP, QUICK_SWEEP = (512, 1024, 1536, 2048), (128, 256)


def accuracy_round(runner, scale) -> list[Pair]:
    """The suite's measured fp32 ceiling (best of its sweep) against the best TFLOP/s of a Timer sweep."""
    from suite.cases.matmul.checks import timer_env

    sweep = scale.pick(ACCURACY_SWEEP, QUICK_SWEEP)
    shapes = [f"{n}x{n}x{n}" for n in sweep]
    results = runner.run(NAME, {"ceiling": {"dtypes": ["float32"], "shapes": shapes}})
    suite = results["suite"]["ceilings"]["cpu"]["float32"]["tflops"]
    ref = max(2 * n**3 / timer_seconds("torch.matmul(a, b, out=out)", timer_env(n), scale.timer_min_run_s) / 1e12
              for n in sweep)
    label = ", ".join(f"{n}^3" for n in sweep)
    return [Pair(NAME, f"fp32 ceiling, best of {label}", "TFLOP/s", "Timer sweep", Target("within", 0.10), suite,
                 ref)]


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): the best sustained shape per precision."""
    return [(f"ceiling (sustained median, best shape) {precision} {i['m']}×{i['n']}×{i['k']}",
             f"{fmt(i['tflops'])} {i.get('unit', 'TFLOP/s')}", against(i, ceiling=False))
            for precision, i in best_per_precision(results, "tflops").items()]
