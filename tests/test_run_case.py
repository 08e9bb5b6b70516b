"""run_case (suite.run): the case's devices are drained after timing, also when the case fails or skips;
the all-GPUs matmul takes its per-device rates after its timed rounds (fake multi-GPU machine)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from suite import devices as dev
from suite.cases import FAMILIES, Work, make_case
from suite.run import run_case
from tests.fakes import FakeAsyncDevice, FakeClock, FakePlatform

CONFIG = SimpleNamespace(timing=SimpleNamespace(warmup_s=0.0))


class DrainingPlatform(FakePlatform):
    """Fake GPUs whose queued work (a FakeAsyncDevice) finishes only when they are synchronised."""

    def __init__(self, device: FakeAsyncDevice, events: list[str]) -> None:
        super().__init__(gpus=2)
        self.device, self.events = device, events

    def synchronize(self, device: torch.device) -> None:
        super().synchronize(device)
        self.device.synchronize()
        self.events.append("sync")


class FakeBenchmark:
    """pytest-benchmark's fixture as run_case sees it: timed rounds, then one more untimed call (_raw)."""

    def __init__(self, events: list[str], fail: BaseException | None = None) -> None:
        self.events, self.fail = events, fail
        self.stats, self.extra_info = None, {}

    def __call__(self, fn) -> None:
        for _ in range(3):
            fn()
        self.events.append("timed")
        if self.fail is not None:
            raise self.fail
        fn()  # the untimed extra call pytest-benchmark makes; nothing waits for it


@pytest.fixture
def family(monkeypatch):
    """A family `fakegpu` whose one case launches work on a fake asynchronous cuda:0."""
    events: list[str] = []
    device = FakeAsyncDevice(FakeClock(), work_s=1e-3)
    module = types.ModuleType("tests._fakegpu_family")

    def build(case, config):
        def fn():
            device.launch()
            events.append("launch")

        return Work(fn=fn, check=lambda: None, flops=1.0)

    module.NAME, module.build = "fakegpu", build
    module.enumerate_cases = lambda config, devices: []
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(FAMILIES, "fakegpu", module.__name__)
    with dev.use_platform(DrainingPlatform(device, events)):
        yield SimpleNamespace(events=events, device=device,
                              case=make_case("fakegpu", ("cuda:0",), ["cuda:0", "x"], device="cuda:0"))


def test_no_work_of_a_case_is_left_queued_when_it_returns(family):
    run_case(family.case, FakeBenchmark(family.events), CONFIG)
    assert family.device.pending == 0, "the untimed extra call was still running after the case"
    last_launch = len(family.events) - 1 - family.events[::-1].index("launch")
    assert "sync" in family.events[last_launch:], family.events


def test_a_gpu_figure_says_what_bounded_it_and_the_probe_leaves_nothing_queued(family):
    bench = FakeBenchmark(family.events)
    bench.stats = SimpleNamespace(stats=SimpleNamespace(median=1e-3, data=[1e-3] * 5), iterations=3, options={})
    info = run_case(family.case, bench, CONFIG)
    # The probe's rounds come after the timed ones (suite.timing.bound_info decides host or device).
    assert info["bound"] in ("host", "device") and 0 <= info["host_share"] <= 1
    assert bench.extra_info["bound"] == info["bound"] and family.device.pending == 0


@pytest.mark.parametrize("error", [AssertionError("wrong result"), RuntimeError("CUDA error: a launch failed")])
def test_a_failing_case_is_drained_too_and_keeps_its_own_error(family, error):
    with pytest.raises(type(error), match=str(error)):
        run_case(family.case, FakeBenchmark(family.events, fail=error), CONFIG)
    assert family.device.pending == 0 and family.events[-1] == "sync"


def test_a_case_that_runs_out_of_memory_while_timing_is_drained_then_skipped(family):
    with pytest.raises(pytest.skip.Exception, match="out of memory for cuda:0-x"):
        oom = torch.OutOfMemoryError("CUDA out of memory")
        run_case(family.case, FakeBenchmark(family.events, fail=oom), CONFIG)
    assert family.device.pending == 0


def test_all_gpus_per_device_rates_are_measured_after_the_timed_rounds(monkeypatch):
    from suite.cases.matmul import measure as matmul

    events: list[str] = []
    monkeypatch.setattr(matmul, "product", lambda dev_, precision, m, n, k, what="matmul": (
        (lambda: None), (lambda label: None)))

    def rates(gpus, operands, flop):
        events.append("per-device rates")
        return {"per_device_tflops": dict.fromkeys(gpus, 1.0), "slowest_device": gpus[0],
                "slowest_tflops": 1.0}

    monkeypatch.setattr(matmul, "per_device_rates", rates)
    case = make_case("matmul", ("cuda:0", "cuda:1"), [matmul.ALL_GPUS, "float32", "8x8x8"],
                     device=matmul.ALL_GPUS, gpus=("cuda:0", "cuda:1"), dtype="float32", precision="float32",
                     m=8, n=8, k=8)
    bench = FakeBenchmark(events)
    bench.stats = SimpleNamespace(stats=SimpleNamespace(median=1e-3, data=[1e-3] * 5), iterations=1, options={})
    with dev.use_platform(FakePlatform(gpus=2)):
        info = run_case(case, bench, CONFIG)
    assert events == ["timed", "per-device rates"], "per-device rates must come after the sustained load"
    assert info["per_device_tflops"] == {"cuda:0": 1.0, "cuda:1": 1.0} and info["gpu_count"] == 2


class FakeTensor:
    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.recorded: list = []

    def record_stream(self, stream) -> None:
        self.recorded.append(stream)


def test_side_stream_tensors_are_tied_to_their_own_devices_stream():
    from suite.cases.buffers import tie_to_streams

    s0, s1 = SimpleNamespace(device=torch.device("cuda:0")), SimpleNamespace(device=torch.device("cuda:1"))
    a, b, host = FakeTensor("cuda:0"), FakeTensor("cuda:1"), FakeTensor("cpu")
    tie_to_streams((a, b, host), [s0, s1])
    assert (a.recorded, b.recorded, host.recorded) == ([s0], [s1], [])


# --- found by mutating run_case: each of these survived every test before ---------------------------------


def test_a_wrong_result_is_never_timed(family, monkeypatch):
    module = sys.modules["tests._fakegpu_family"]
    real = module.build

    def build(case, config):
        work = real(case, config)
        work.check = lambda: (_ for _ in ()).throw(AssertionError("wrong result"))
        return work

    monkeypatch.setattr(module, "build", build)
    with pytest.raises(AssertionError, match="wrong result"):
        run_case(family.case, FakeBenchmark(family.events), CONFIG)
    assert "timed" not in family.events and "launch" not in family.events


def test_the_case_is_warmed_up_before_it_is_timed(family):
    from suite.timing import MIN_WARMUP_CALLS

    run_case(family.case, FakeBenchmark(family.events), CONFIG)
    assert family.events[: family.events.index("timed")].count("launch") == MIN_WARMUP_CALLS + 3


@pytest.mark.parametrize("oom", [MemoryError(), RuntimeError(
    "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")])
def test_the_cpu_allocator_running_out_is_a_skip_too(family, oom):
    with pytest.raises(pytest.skip.Exception, match="out of memory for cuda:0-x"):
        run_case(family.case, FakeBenchmark(family.events, fail=oom), CONFIG)
