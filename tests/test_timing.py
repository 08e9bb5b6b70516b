"""The timer measures the completion of device work, not its launch (fake clock + fake async device)."""

from __future__ import annotations

import math

import pytest

from suite.timing import HOST_BOUND_SHARE, MIN_WARMUP_CALLS, SyncTimer, bound_info, warm_up
from tests.fakes import FakeAsyncDevice, FakeClock


def test_sync_timer_measures_the_work_not_the_launch():
    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=1e-6, work_s=1e-3)
    timer = SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize)
    start = timer()
    for _ in range(10):
        gpu.launch()
    elapsed = timer() - start
    assert elapsed == pytest.approx(10 * (1e-3 + 1e-6))


def test_an_unsynchronised_clock_would_only_see_the_launch():
    # The same loop read with the bare clock: what the suite must NOT report.
    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=1e-6, work_s=1e-3)
    start = clock()
    for _ in range(10):
        gpu.launch()
    assert clock() - start == pytest.approx(1e-5)


def test_earlier_work_is_drained_before_the_start():
    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=0.0, work_s=5e-3)
    timer = SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize)
    gpu.launch()  # left over from before the round
    start = timer()
    gpu.launch()
    assert timer() - start == pytest.approx(5e-3)


def test_cpu_only_timer_does_not_synchronise():
    calls = []
    timer = SyncTimer(["cpu"], clock=lambda: 1.0, synchronize=lambda *d: calls.append(d))
    assert timer() == 1.0 and calls == []


def test_timer_works_inside_pytest_benchmark(pytester):
    """pytest-benchmark with our timer (via the benchmark marker) reports the device's work per call."""
    pytester.makepyfile(
        """
        import pytest
        from suite.timing import SyncTimer
        from tests.fakes import FakeAsyncDevice, FakeClock

        clock = FakeClock(tick=1e-9)
        gpu = FakeAsyncDevice(clock, launch_s=1e-7, work_s=2e-3)

        @pytest.mark.benchmark(timer=SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize),
                               min_rounds=5, max_time=0.01, calibration_precision=10)
        def test_fake(benchmark):
            benchmark(gpu.launch)
            assert benchmark.stats.stats.median == pytest.approx(2e-3 + 1e-7, rel=1e-4)
        """
    )
    from pathlib import Path

    pytester.syspathinsert(Path(__file__).resolve().parent.parent)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_warm_up_calls_at_least_twice_and_stops_after_the_time():
    clock = FakeClock()
    calls = []

    def fn():
        calls.append(1)
        clock.now += 0.25

    timer = SyncTimer(["cpu"], clock=clock)
    assert warm_up(fn, timer, seconds=0.0) == MIN_WARMUP_CALLS
    calls.clear()
    assert warm_up(fn, timer, seconds=1.0) == 4



def _warm_fake_gpu(seconds: float, work_s: float = 13e-6) -> tuple[FakeAsyncDevice, int, int]:
    """warm_up on a fake GPU whose calls take `work_s`: (the device, calls made, synchronisations)."""
    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=1e-6, work_s=work_s)
    syncs = []

    def synchronize(*devices):
        syncs.append(devices)
        gpu.synchronize()

    calls = warm_up(gpu.launch, SyncTimer(["cuda:0"], clock=clock, synchronize=synchronize), seconds)
    return gpu, calls, len(syncs)


def test_the_sustained_warm_up_keeps_a_fast_gpu_busy_for_its_whole_time():
    from suite.timing import MAX_WARMUP_CALLS

    gpu, calls, syncs = _warm_fake_gpu(1.0)
    # An H200 small conv (13 us a call): a call cap or a sync after each call would end the warm-up after
    # ~0.14 s; the clock question needs the device busy for the whole second.
    assert calls > MAX_WARMUP_CALLS
    assert 0.9 <= calls * gpu.work_s and gpu.clock.now <= 1.1, "busy for about the warm-up's 1 s, not longer"
    # Synchronised after doubling batches: a handful of syncs, not one per call.
    assert syncs <= math.log2(calls) + 4
    _, calls_4s, syncs_4s = _warm_fake_gpu(4.0)
    assert calls_4s > 3.5 * calls and syncs_4s <= syncs + 3, "4x the calls, only a few more syncs"


def test_a_short_warm_up_syncs_after_each_call_and_stays_capped():
    from suite.timing import MAX_WARMUP_CALLS, SUSTAINED_WARMUP_FROM_S

    seconds = SUSTAINED_WARMUP_FROM_S / 2
    _, calls, syncs = _warm_fake_gpu(seconds)
    assert calls == MAX_WARMUP_CALLS and syncs == calls
    _, calls, syncs = _warm_fake_gpu(seconds, work_s=0.01)
    assert calls == math.ceil(seconds / (0.01 + 1e-6)) and syncs == calls


def test_a_sustained_warm_up_still_makes_two_calls_when_one_outlasts_it():
    gpu, calls, _ = _warm_fake_gpu(1.0, work_s=3.0)
    assert calls == MIN_WARMUP_CALLS and gpu.clock.now == pytest.approx(2 * (3.0 + 1e-6))

def test_the_dry_run_reference_times_each_call_after_synchronising():
    from suite.tools.paired import MIN_REFERENCE_CALLS, host_times

    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=1e-6, work_s=1e-3)
    times = host_times(gpu.launch, "cuda:0", seconds=0.05, clock=clock, synchronize=gpu.synchronize)
    assert len(times) >= MIN_REFERENCE_CALLS and sum(times) >= 0.05 - 1e-3
    assert times[0] == pytest.approx(1e-3 + 1e-6), "each call's time must include its device work"
    assert len(host_times(gpu.launch, "cuda:0", calls=7, clock=clock, synchronize=gpu.synchronize)) == 7


def test_rounds_on_an_accelerator_last_at_least_accelerator_min_time():
    # One launch gap per round (the device idles while the first call is launched): 5 ms rounds keep 50 us of
    # it under 1%; the CPU, which runs ops synchronously, keeps min_time.
    from suite.cases.matmul import measure as matmul
    from suite.config import parse_config
    from suite.timing import ACCELERATOR_MIN_ROUND_S, min_round_seconds

    timing = parse_config({}).timing_for("matmul")
    gpu = matmul.matmul_case("matmul", "cuda:0", "bfloat16", 64, 64, 64)
    cpu = matmul.matmul_case("matmul", "cpu", "float32", 64, 64, 64)
    assert timing.accelerator_min_time == ACCELERATOR_MIN_ROUND_S == 0.005
    assert min_round_seconds(gpu, timing) == 0.005 and min_round_seconds(cpu, timing) == timing.min_time
    longer = parse_config({"timing": {"min_time": 0.02}}).timing_for("matmul")
    assert min_round_seconds(gpu, longer) == 0.02, "a longer min_time wins everywhere"
    own = parse_config({"cases": {"matmul": {"timing": {"accelerator_min_time": 0.001}}}}).timing_for("matmul")
    assert min_round_seconds(gpu, own) == 0.001, "a family may set its own"


def test_the_plugin_gives_each_benchmark_its_shortest_round(pytester, tmp_path):
    # Collected, not run: a cuda:0 case exists (and would skip) on a machine without one, with its marker.
    import yaml

    from tests.conftest import ROOT

    seen = {}

    class Markers:
        def pytest_collection_finish(self, session):
            for item in session.items:
                kwargs = item.get_closest_marker("benchmark").kwargs
                if "min_time" in kwargs:
                    seen[item.callspec.params["case"]] = kwargs["min_time"]

    cfg = tmp_path / "suite.yaml"
    cfg.write_text(yaml.safe_dump({"devices": ["cpu", "cuda:0"], "timing": {"min_time": 0.0002},
                                   "cases": {"matmul": {"dtypes": ["float32"], "shapes": ["32x32x32"]}}}))
    args = [str(ROOT / "benchmarks" / "test_matmul.py"), f"--rootdir={ROOT}", f"--suite-config={cfg}",
            "--collect-only", "-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    pytester.runpytest_inprocess(*args, plugins=[Markers()])
    assert seen == {"cpu-float32-32x32x32": 0.0002, "cuda:0-float32-32x32x32": 0.005}
    seen.clear()
    pytester.runpytest_inprocess(*args, "--benchmark-min-time=0.001", plugins=[Markers()])
    assert seen == {}, "the user's --benchmark-min-time: the suite sets none (pytest-benchmark applies it)"


def test_each_benchmark_s_timer_waits_for_every_device_of_its_case(pytester, tmp_path):
    # Found by mutation: timers built for a case's first device only passed every test (no test collected a
    # case of two GPUs). A peer copy's timer must wait for both GPUs, a cuda:1 case's for cuda:1.
    import yaml

    from suite.devices import use_platform
    from tests.conftest import ROOT
    from tests.fakes import FakePlatform

    seen = {}

    class Timers:
        def pytest_collection_finish(self, session):
            for item in session.items:
                seen[item.callspec.params["case"]] = repr(item.get_closest_marker("benchmark").kwargs["timer"])

    cfg = tmp_path / "suite.yaml"
    cfg.write_text(yaml.safe_dump({"devices": ["cuda:0", "cuda:1"], "cases": {
        "matmul": {"dtypes": ["float32"], "shapes": ["32x32x32"]},
        "copy": {"sizes": ["4KiB"], "pairs": ["cuda:0->cuda:1"], "memory": ["pageable"]}}}))
    args = [str(ROOT / "benchmarks" / "test_matmul.py"), str(ROOT / "benchmarks" / "test_copy.py"),
            f"--rootdir={ROOT}", f"--suite-config={cfg}", "--collect-only", "-q", "-p", "no:cacheprovider",
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    with use_platform(FakePlatform(gpus=2)):
        pytester.runpytest_inprocess(*args, plugins=[Timers()])
    peer = [case for case in seen if case.startswith("cuda:0->cuda:1")]
    assert peer and {seen[case] for case in peer} == {"SyncTimer(cuda:0,cuda:1)"}
    assert seen["cuda:1-float32-32x32x32"] == "SyncTimer(cuda:1)"


def test_a_timer_over_the_cpu_and_a_gpu_synchronises_the_gpu():
    # Found by mutation: a timer that synchronised only when every device needed it passed every test.
    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=0.0, work_s=5e-3)
    timer = SyncTimer(["cpu", "cuda:0"], clock=clock, synchronize=lambda *d: gpu.synchronize())
    start = timer()
    gpu.launch()
    assert timer() - start == pytest.approx(5e-3)



class TimelineGpu:
    """A GPU that runs its queue while the host goes on: each call starts when the host has launched it and
    the previous one is done; a launch waits while `queue` calls are queued and not started (CUDA's launch
    queue)."""

    def __init__(self, clock: FakeClock, launch_s: float, work_s: float, queue: int) -> None:
        self.clock, self.launch_s, self.work_s, self.queue = clock, launch_s, work_s, queue
        self.ends: list[float] = []

    def launch(self) -> None:
        waiting = [end for end in self.ends if end - self.work_s > self.clock.now]
        if len(waiting) >= self.queue:
            self.clock.now = waiting[-self.queue] - self.work_s  # until the oldest queued call starts
        self.clock.now += self.launch_s
        start = max(self.clock.now, self.ends[-1] if self.ends else 0.0)
        self.ends = [end for end in self.ends if end > self.clock.now] + [start + self.work_s]

    def synchronize(self, *devices) -> None:
        self.clock.now = max([self.clock.now, *self.ends])


def _bound(launch_s: float, work_s: float, calls: int, queue: int = 64) -> dict:
    clock = FakeClock()
    gpu = TimelineGpu(clock, launch_s, work_s, queue)
    return bound_info(gpu.launch, SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize), calls)


def test_a_case_whose_device_waits_for_python_is_host_bound():
    # LeNet at batch 256 on an H200: issuing a step takes longer than the GPU needs for it.
    info = _bound(launch_s=2e-3, work_s=1e-4, calls=10)
    assert info["bound"] == "host" and info["host_share"] > 0.99


def test_a_large_kernel_is_device_bound():
    info = _bound(launch_s=1e-5, work_s=5e-3, calls=10)
    assert info["bound"] == "device" and info["host_share"] < 0.01


def test_a_full_launch_queue_keeps_the_host_busy_but_the_device_sets_the_pace():
    # 1024 calls of 1 ms behind a 64-deep queue: the host issues for 94% of the round, yet the device still
    # has 64 calls to run after the last launch.
    info = _bound(launch_s=1e-6, work_s=1e-3, calls=1024, queue=64)
    assert info["bound"] == "device" and info["host_share"] >= HOST_BOUND_SHARE
    # The same queue with launches slower than the work: the host sets the pace again.
    assert _bound(launch_s=2e-3, work_s=1e-3, calls=1024, queue=64)["bound"] == "host"


def test_the_cpu_has_no_bound_to_report():
    assert bound_info(lambda: None, SyncTimer(["cpu"], clock=FakeClock(tick=1.0)), 10) == {}
