"""The conv family's part of the tooling: its GPU-check step, its accuracy round and its evidence rows
(suite/tools)."""

from __future__ import annotations

from suite.cases.conv.measure import NAME
from suite.tools.checkrow import truth_s
from suite.tools.evidence import against, fmt
from suite.tools.paired import Pair, Target, one, timer_seconds

# --- GPU check ---------------------------------------------------------------------------------------------

# The GPU check's layer: ResNet-50 stage 4 3x3, channels_last bf16 (what AMP training runs), at batch 256:
# its forward is 59 GFLOP, ~0.1 ms on an H200, where at batch 64 (~30 us) launch costs and the gap between the
# event and host clocks would be a visible part of the time the check compares.
CHECK_BATCH = 256
STEP_ESTIMATE_S = truth_s(NAME, 2, 2, True)  # fwd and fwd+bwd
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 50
# The dry run's stand-in for configs/quick.yaml's conv cases.
DRY_QUICK = {"dtypes": ["float32"], "layouts": ["nchw"], "steps": ["fwd"], "batch": 1,
             "shapes": [{"name": "tiny", "in_channels": 4, "out_channels": 4, "size": 8, "kernel": 3, "padding": 1}]}


def gpu_checks(ctx) -> list:
    """The suite's conv2d median, forward and forward+backward, against CUDA events (alternating, same
    process, the same case built anew)."""
    layer = {"name": "resnet50-conv4-3x3", "in_channels": 256, "out_channels": 256, "size": ctx.pick(14, 8),
             "kernel": 3, "padding": 1}
    config = {"devices": [ctx.device], "cases": {"conv": {
        "dtypes": [ctx.pick("bfloat16", "float32")], "layouts": [ctx.pick("channels_last", "nchw")],
        "steps": ["fwd", "fwd+bwd"], "batch": ctx.pick(CHECK_BATCH, 1), "shapes": [layer],
        "cudnn_benchmark": True}}}
    rows, _ = ctx.timing_truth(NAME, config, "benchmarks/test_conv.py")
    return rows


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

ACCURACY_LAYER = {"name": "resnet50-conv2-3x3", "in_channels": 64, "out_channels": 64, "size": 56, "kernel": 3,
                  "padding": 1}
# Its batch (--quick: the machinery only).
ACCURACY_BATCH, QUICK_BATCH = 2, 1


def accuracy_round(runner, scale) -> list[Pair]:
    import torch.nn.functional as F

    from suite.cases.conv.measure import make_operands

    batch = scale.pick(ACCURACY_BATCH, QUICK_BATCH)
    layer = {**ACCURACY_LAYER, "batch": batch}
    results = runner.run(NAME, {"conv": {"dtypes": ["float32"], "layouts": ["nchw"], "steps": ["fwd"],
                                         "shapes": [layer]}})
    bench = one(results, case="conv")
    p = bench["extra_info"]
    x, w, _ = make_operands(p, "cpu")
    env = {"F": F, "x": x, "w": w, "s": tuple(p["stride"]), "p": tuple(p["padding"]), "g": p["groups"]}
    ref = timer_seconds("F.conv2d(x, w, None, s, p, 1, g)", env, scale.timer_min_run_s)
    return [Pair(NAME, f"conv2d fwd {layer['name']} b{batch}", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): every convolution."""
    return [(f"conv {i['layer']} {i['precision']} {i['layout']} {i['step']} b{i['batch']}",
             f"{fmt(i['tflops'])} TFLOP/s", against(i)) for i, _ in results if i.get("tflops") is not None]
