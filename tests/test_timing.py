"""The timer measures the completion of device work, not its launch (fake clock + fake async device)."""

from __future__ import annotations

import pytest

from suite.timing import MIN_WARMUP_CALLS, SyncTimer, warm_up
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


def test_the_dry_run_reference_times_each_call_after_synchronising():
    from suite.timing import MIN_REFERENCE_CALLS, host_times

    clock = FakeClock()
    gpu = FakeAsyncDevice(clock, launch_s=1e-6, work_s=1e-3)
    times = host_times(gpu.launch, "cuda:0", seconds=0.05, clock=clock, synchronize=gpu.synchronize)
    assert len(times) >= MIN_REFERENCE_CALLS and sum(times) >= 0.05 - 1e-3
    assert times[0] == pytest.approx(1e-3 + 1e-6), "each call's time must include its device work"
    assert len(host_times(gpu.launch, "cuda:0", calls=7, clock=clock, synchronize=gpu.synchronize)) == 7
