"""The model family's part of the tooling: its GPU-check step and its evidence rows (suite/tools)."""

from __future__ import annotations

from suite.cases.model.measure import NAME
from suite.tools.checkrow import bound_row, truth_s
from suite.tools.evidence import against, fmt

# The GPU check's LeNet step runs at a batch where the GPU, not the host, sets its time. At the configs'
# batch 256 an H200 finishes each kernel before Python issues the next, so suite and events would both time
# the host's Python, which drifts by tens of % within a minute of one process; at 16384 issuing is ~20% of a
# ~9 ms step and the paired ratios hold within a few %.
CHECK_BATCH = 16384
STEP_ESTIMATE_S = truth_s(NAME, 1, 1, True)  # the LeNet step, ~10 ms
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 60
# The quick config's models that are host-bound on a GPU at its batch (an H200 finished each kernel of LeNet and
# the MLP at batch 256 before Python issued the next): their results must say so.
HOST_BOUND = ("lenet", "mlp")
QUICK_BATCH = 256
# The dry run's stand-in for configs/quick.yaml's model cases.
DRY_QUICK = {"models": ["linear"], "dtypes": ["float32"], "batch_sizes": [8]}


def gpu_checks(ctx) -> list:
    """The suite's LeNet training step against CUDA events (alternating, same process), at CHECK_BATCH, where
    the step waits for the GPU. The one-liner's microsecond forward and the small batches are launch-bound:
    events around such a call time the host's Python, no fair reference, so they are left out."""
    config = {"devices": [ctx.device], "cases": {"model": {
        "models": ["lenet"], "dtypes": ["float32"], "batch_sizes": [ctx.pick(CHECK_BATCH, 8)]}}}
    rows, _ = ctx.timing_truth(NAME, config, "benchmarks/test_model.py")
    return rows


def quick_checks(ctx, benchmarks: list[dict]) -> list:
    """LeNet and the MLP at QUICK_BATCH in the quick config's run on the GPU (it runs one GPU's own cases): bound
    by the host."""
    found = {b["extra_info"].get("model"): b for b in benchmarks
             if str(b["extra_info"].get("device")).startswith("cuda")
             and b["extra_info"].get("batch_size") == QUICK_BATCH}
    return [bound_row(ctx, f"model {model} b{QUICK_BATCH} (quick config): bound", found.get(model), "host")
            for model in HOST_BOUND]


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): every model step."""
    return [(f"model {i['model']} {i.get('step', '')} {i['precision']} b{i['batch_size']}",
             f"{fmt(i['samples_per_s'])} samples/s", against(i))
            for i, _ in results if i.get("samples_per_s") is not None]
