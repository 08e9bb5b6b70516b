"""`python -m suite plan`, the timing section's new keys, and how a budget is shared out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suite import devices as dev
from suite.config import load_config, parse_config
from suite.errors import UserError
from suite.plan import OUTSIDE_CALLS, NodePlatform, Rates, make_plan, overhead_s, select
from suite.timing import MIN_WARMUP_CALLS, SUSTAINED_WARMUP_S

ROOT = Path(__file__).resolve().parent.parent


def _plan(path: str, gpus: int):
    config = load_config(ROOT / path)
    with dev.use_platform(NodePlatform(gpus)):
        return make_plan(config, dev.resolve_spec(config.devices), gpus=gpus)


def test_family_timing_overrides_the_top_level():
    config = parse_config(
        {
            "timing": {"max_time": 0.5, "precision": 0.02},
            "cases": {"copy": {"timing": {"precision": "off", "max_time": 2}}},
        }
    )
    assert config.timing_for("copy").precision is None and config.timing_for("copy").max_time == 2
    assert config.timing_for("matmul").precision == 0.02 and config.timing_for("matmul").max_time == 0.5


@pytest.mark.parametrize(
    "data, message",
    [
        ({"timing": {"budget": "soon"}}, "timing.budget: 'soon' is not a duration"),
        ({"timing": {"precision": 1.5}}, "timing.precision: 1.5 is not a precision"),
        (
            {"cases": {"conv": {"timing": {"budget": "10m"}}}},
            "cases.conv.timing.budget: unknown key 'budget'; allowed keys here: warmup_s",
        ),
        ({"cases": {"conv": {"timing": {"min_rounds": 0}}}}, "cases.conv.timing.min_rounds: 0 is invalid"),
    ],
)
def test_bad_timing_keys_are_one_line(data, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(data)


def test_default_config_meets_the_time_targets_in_the_plan():
    limits = {1: 180, 2: 300, 8: 720}
    for gpus, limit in limits.items():
        plan = _plan("configs/default.yaml", gpus)
        assert plan.estimated_s <= limit, (gpus, plan.estimated_s)
    full = _plan("configs/full.yaml", 8)
    assert full.benchmarks > 2 * _plan("configs/default.yaml", 8).benchmarks


def test_plan_counts_come_from_enumerate_cases():
    config = load_config(ROOT / "configs/default.yaml")
    with dev.use_platform(NodePlatform(2)):
        devices = dev.resolve_spec(config.devices)
        cases = select(config, devices)
        plan = make_plan(config, devices, gpus=2)
    assert devices == ["cpu", "cuda:0", "cuda:1"]
    assert {f: p.benchmarks for f, p in plan.families.items()} == {f: len(c) for f, c in cases.items()}
    # NCCL collectives on a GPU node, in their own torchrun run.
    assert (
        all(c.info["backend"] == "nccl" for c in cases["collectives"])
        and plan.families["collectives"].separate
    )


def test_compute_on_a_gpu_is_planned_with_the_sustained_warm_up():
    config = parse_config(
        {
            "devices": "gpus",
            "timing": {"max_time": 0.1},
            "cases": {
                name: {"enabled": False}
                for name in ("copy", "placement", "habits", "collectives", "conv", "model", "ceiling")
            }
            | {"matmul": {"shapes": ["1024x1024x1024"], "dtypes": ["bfloat16"]}},
        }
    )
    with dev.use_platform(NodePlatform(1)):
        plan = make_plan(config, ["cuda:0"], gpus=1)
    assert plan.families["matmul"].estimated_s >= SUSTAINED_WARMUP_S + 0.1


def test_a_budget_in_the_plan_only_shortens():
    config = load_config(ROOT / "configs/default.yaml")
    with dev.use_platform(NodePlatform(1)):
        devices = dev.resolve_spec(config.devices)
        free = make_plan(config, devices, gpus=1)
        in_run = free.estimated_s - sum(f.estimated_s for f in free.families.values() if f.separate)
        roomy = make_plan(config, devices, gpus=1, budget_s=3600)
        tight = make_plan(config, devices, gpus=1, budget_s=in_run * 0.9)
    # An hour for a run of seconds: every benchmark keeps its max_time, the estimate does not grow.
    assert roomy.share_s > config.timing.max_time
    assert roomy.estimated_s == pytest.approx(free.estimated_s)
    assert tight.estimated_s < free.estimated_s


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_command_json_and_text():
    out = subprocess.run(
        [sys.executable, "-m", "suite", "plan", "--gpus", "8", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["benchmarks"] == sum(f["benchmarks"] for f in data["families"].values())
    assert set(data["families"]) >= {"matmul", "copy", "collectives"} and data["estimated_s"] > 0
    text = subprocess.run(
        [sys.executable, "-m", "suite", "plan", "--gpus", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "total" in text and "Per-benchmark overhead assumed" in text and "cuda:1" in text


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_refuses_a_budget_that_is_too_small():
    proc = subprocess.run(
        [sys.executable, "-m", "suite", "plan", "--gpus", "8", "--budget", "30s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "is too small for the" in proc.stdout


def _plan_cmd(*args):
    return subprocess.run([sys.executable, "-m", "suite", "plan", *args], cwd=ROOT, capture_output=True,
                          text=True)


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_budget_line_gives_one_figure_and_says_collectives_are_separate():
    proc = _plan_cmd("--gpus", "8", "--budget", "10m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("budget 10m00s:")]
    assert line.count("at least") == 1 and "none left" not in line
    assert "collectives run separately under torchrun" in proc.stdout and "not in the budget" in proc.stdout
    need = line.split("give at least ")[1].split()[0]
    tight = _plan_cmd("--gpus", "8", "--budget", "30s")
    assert tight.returncode == 2
    # one line says it is too small, the refusal, last, with the figure the budget line gives
    (refusal,) = [ln for ln in tight.stdout.splitlines() if "give" in ln and "budget" in ln]
    assert refusal == tight.stdout.rstrip().splitlines()[-1] and f"give {need} or more" in refusal


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_refuses_devices_the_planned_node_lacks():
    proc = _plan_cmd("--gpus", "2", "--devices", "cuda:3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cuda:3: not on a node of 2 GPU(s) (it has: cpu, cuda:0, cuda:1)" in proc.stderr


def test_compute_families_declare_it_and_get_the_sustained_warm_up():
    from suite.cases import FAMILIES, family_module
    from suite.timing import warmup_seconds

    compute = {name for name in FAMILIES if getattr(family_module(name), "COMPUTE", False)}
    assert compute == {"matmul", "ceiling", "conv", "model"}
    config = parse_config({"timing": {"warmup_s": 0.1}})
    config_copy = select(config, ["cuda:0"])
    for family, cases in config_copy.items():
        for case in cases[:1]:
            want = SUSTAINED_WARMUP_S if family in compute else 0.1
            assert warmup_seconds(case, config.timing_for(family)) == want, family


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_counts_what_pytest_collects():
    """The plan's benchmark count is pytest's collected count for the same config on this machine."""
    plan = json.loads(_plan_cmd("--json").stdout)
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--co", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    assert plan["benchmarks"] == len(collected)
    assert plan["families"]["collectives"]["measured"] == 0, "outside torchrun the collectives are skipped"


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
@pytest.mark.parametrize("config", ["configs/quick.yaml", "configs/default.yaml"])
def test_plan_measured_count_is_what_pytest_runs_here(config):
    """The plan's `measured` (benchmarks that will not skip on this machine) equals the tests that pass in a
    real run of the same config (with --benchmark-disable: each case built, checked and called once)."""
    plan = json.loads(subprocess.run(
        [sys.executable, "-m", "suite", "plan", "--suite-config", config, "--json"], cwd=ROOT,
        capture_output=True, text=True, timeout=300, check=True).stdout)
    measured = sum(f["measured"] for f in plan["families"].values())
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", f"--suite-config={config}",
                           "--benchmark-disable", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed, proc.stdout[-2000:]
    assert measured == int(passed.group(1)), proc.stdout[-2000:]


def _long(config: dict, rates, gpus: int = 0):
    from suite.plan import long_calls

    from tests.fakes import FakePlatform

    parsed = parse_config(config, "x.yaml")
    with dev.use_platform(FakePlatform(gpus=gpus)):
        return long_calls(parsed, select(parsed, dev.check_spec(parsed.devices)), rates)


class FixedCpuRate(Rates):
    """Rates with the CPU's measured rate fixed (the real probe depends on the machine's load)."""

    def __init__(self, tflops: float) -> None:
        super().__init__()
        self._cpu = {p: tflops for p in ("float32", "tf32", "bfloat16", "float16", "float64")}


def test_a_case_whose_one_call_is_long_is_named_with_what_its_rounds_take():
    """pytest-benchmark times whole calls: a 16000^3 matmul on a CPU takes min_rounds x ~40 s whatever
    max_time says, and the plan says so instead of calling the run 'at most' a second."""
    config = {"devices": "cpu", "cases": {"matmul": {"dtypes": ["float32"],
                                                      "shapes": ["16000x16000x16000", "256x256x256"]}}}
    long = [c for c in _long(config, FixedCpuRate(0.2)) if c.family == "matmul"]
    assert [c.case_id for c in long] == ["cpu-float32-16000x16000x16000"]
    (c,) = long
    assert c.call_s == pytest.approx(2 * 16000**3 / 0.2e12) and c.rate_from == "measured on this CPU"
    # min_rounds, the warm-up's calls and those outside the rounds (check, calibration, the last), less the
    # overhead and warm-up the plan already counts
    calls = 5 + MIN_WARMUP_CALLS + OUTSIDE_CALLS
    assert c.need_s == pytest.approx(calls * c.call_s - overhead_s("matmul") - parse_config({}).timing.warmup_s)
    assert c.over_s == pytest.approx(c.need_s - 1.0)


def test_a_gpu_case_is_bounded_by_its_datasheet_peak():
    from suite.plan import Rates

    config = {"devices": "cuda:0", "cases": {"matmul": {"dtypes": ["bfloat16"],
                                                         "shapes": ["65536x65536x65536", "8192x8192x8192"]}}}
    (c,) = [c for c in _long(config, Rates(probe_cpu=False), gpus=1) if c.family == "matmul"]
    assert c.case_id == "cuda:0-bfloat16-65536x65536x65536" and c.rate_from == "datasheet peak"
    assert c.call_s == pytest.approx(2 * 65536**3 / (c.rate * 1e12)) and c.rate > 500  # an H100's bf16 peak


def test_at_most_counts_the_whole_calls_of_a_case_that_moves_many_bytes():
    """A 1 GiB host copy at the host floor (1 GB/s on a planned node) takes ~1 s a call: 'at most' counts its
    min_rounds, warm-up and outside calls and the pattern fill, not max_time's 0.1 s; the minimum does not."""
    from suite.plan import FILL_FLOOR_GBPS, FLOOR_GBPS, long_calls

    config = parse_config({"devices": "cpu", "timing": {"max_time": 0.1}, "cases": {
        name: {"enabled": False} for name in ("matmul", "ceiling", "conv", "model", "copy", "habits")}
        | {"placement": {"sizes": ["1GiB"], "ops": ["clone"]}}})
    with dev.use_platform(NodePlatform(0)):
        placement = make_plan(config, ["cpu"], gpus=0).families["placement"]
        (long,) = long_calls(config, select(config, ["cpu"]), Rates(probe_cpu=False))
    call, fill = 2**30 / (FLOOR_GBPS["host"] * 1e9), 2**30 / (FILL_FLOOR_GBPS * 1e9)
    calls = 5 + MIN_WARMUP_CALLS + OUTSIDE_CALLS
    assert placement.estimated_s >= calls * call + fill
    assert placement.minimum_s < 1.0, "a floor rate is no lower bound"
    assert long.call_s == pytest.approx(call) and (long.unit, long.rate_from) == ("GB/s", "host floor")


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_plan_prints_the_long_cases_beside_at_most(tmp_path):
    cfg = tmp_path / "mid.yaml"
    cfg.write_text(
        "devices: cpu\ncases:\n  matmul:\n    dtypes: [float32]\n    shapes: ['16000x16000x16000']\n"
    )
    result = subprocess.run([sys.executable, "-m", "suite", "plan", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stderr
    assert re.search(r"In 'at most': \d+ case\(s\) whose one call is long", result.stdout)
    assert re.search(r"matmul cpu-float32-16000x16000x16000: one call ~\d", result.stdout)
    as_json = subprocess.run([sys.executable, "-m", "suite", "plan", "--config", str(cfg), "--json"],
                             capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert json.loads(as_json.stdout)["long_calls"][0]["case_id"] == "cpu-float32-16000x16000x16000"


def _one_copy(timing: dict):
    return parse_config({"timing": timing, "cases": {
        name: {"enabled": False} for name in ("matmul", "ceiling", "conv", "model", "placement", "habits",
                                              "collectives")} | {"copy": {"sizes": ["4KiB"], "directions": ["uni"],
                                                                          "memory": ["pageable"],
                                                                          "non_blocking": [False]}}})


def test_at_most_counts_min_rounds_and_the_host_bound_probe():
    from suite.timing import BOUND_ROUNDS

    slow_rounds = _one_copy({"min_time": 0.5, "accelerator_min_time": 0.5, "min_rounds": 1000, "max_time": 1})
    with dev.use_platform(NodePlatform(1)):
        plan = make_plan(slow_rounds, ["cuda:0"], gpus=1)
    copy = plan.families["copy"]
    # 1000 rounds of at least 0.5 s, not max_time's 1 s; then BOUND_ROUNDS more rounds of the probe
    assert copy.runs == 1 and copy.estimated_s >= (1000 + BOUND_ROUNDS) * 0.5 and copy.minimum_s == copy.estimated_s
    with dev.use_platform(NodePlatform(0)):
        cpu = make_plan(slow_rounds, ["cpu"], gpus=0).families["copy"]
    assert cpu.estimated_s < copy.estimated_s - BOUND_ROUNDS * 0.5 + 0.1, "no probe on the CPU"


def test_the_budget_counts_the_probe_until_the_family_overhead_is_seen():
    from suite.budget import BudgetItem, BudgetSchedule
    from suite.plan import END_RESERVE_S

    items = {f"t{i}": BudgetItem("copy", 0.04, True, 0.025, 1.0, 5, probe_s=0.025) for i in range(2)}
    schedule = BudgetSchedule(100, items, started=0.0, clock=lambda: 0.0)
    assert schedule.minimum_s() == pytest.approx(END_RESERVE_S + 2 * (0.04 + 0.025 + 0.025))
    schedule.start("t0")
    schedule.finish("t0", 0.3)  # its overhead as the run saw it, the probe's rounds in it
    assert schedule.minimum_s() == pytest.approx(END_RESERVE_S + 0.3 + 0.025)
