"""Precision-based stopping (pytest-benchmark's loop with a Student-t margin), its record in extra_info, the
wall-time cap, durations."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from suite.pb_adapter import cap_rounds_by_time
from suite.timing import (
    format_duration,
    parse_duration,
    relative_margin,
    stopping_info,
    student_t,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "text, seconds",
    [
        (600, 600.0),
        ("600", 600.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        (" 10M ", 600.0),
        (0.5, 0.5),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "ten minutes", "10ms", "-5", 0, True, None, "1d"])
def test_parse_duration_refuses_with_the_value_named(bad):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(bad)


def test_format_duration():
    assert [format_duration(s) for s in (4.21, 42, 185, 3720)] == ["4.2s", "42s", "3m05s", "1h02m"]


def test_relative_margin_is_the_student_t_interval():
    data = [1.0, 1.02, 0.98, 1.01, 0.99]
    expected = 4.6041 * statistics.stdev(data) / 5**0.5 / statistics.fmean(data)  # t(0.995, 4), not z 2.5758
    assert relative_margin(data, 0.99) == pytest.approx(expected, rel=1e-3)
    assert relative_margin([1.0], 0.99) is None


@pytest.mark.parametrize(("confidence", "df", "table"), [
    (0.99, 1, 63.657), (0.99, 2, 9.925), (0.99, 4, 4.604), (0.95, 10, 2.228), (0.99, 29, 2.756),
    (0.99, 30, 2.750), (0.95, 30, 2.042), (0.99, 40, 2.704), (0.99, 100, 2.626), (0.999, 5, 6.869),
    (0.95, 120, 1.980), (0.99, 1000, 2.581),
])
def test_student_t_matches_the_published_table(confidence, df, table):
    assert student_t(confidence, df) == pytest.approx(table, abs=1e-3)


class _Stats:
    def __init__(self, data, **options):
        self.stats = type("S", (), {"data": data})()
        self.options = options


def test_stopping_info_says_precision_time_or_fixed():
    tight = [1.0, 1.001, 0.999, 1.0, 1.0]
    loose = [1.0, 2.0, 0.5, 1.5, 1.0]
    assert stopping_info(_Stats(tight, precision=0.01, confidence=0.99))["stopped_on"] == "precision"
    info = stopping_info(_Stats(loose, precision=0.01, confidence=0.99))
    assert info["stopped_on"] == "time" and info["margin"] > 0.01 and info["rounds"] == 5
    assert stopping_info(_Stats(tight, precision=None, confidence=0.99))["stopped_on"] == "time"
    assert (
        stopping_info(_Stats(tight, precision=None, confidence=None), pedantic=True)["stopped_on"] == "fixed"
    )


class _Rounds(list):
    update = list.append  # pytest-benchmark's Stats.update


class _FakeFixture:
    """The attributes and the loop cap_rounds_by_time replaces, as pytest-benchmark's fixture has them."""

    def __init__(self, max_time, min_rounds, precision=-1.0, confidence=0.99):
        self._max_time, self._min_rounds = max_time, min_rounds
        self._precision, self._confidence = precision, confidence

    def _run_until_precise(self, runner, loops_range, stats, max_rounds):
        for _ in range(max_rounds):
            stats.update(runner(loops_range))


class _OtherFixture(_FakeFixture):
    """A pytest-benchmark whose private loop takes other arguments: wrapped, not replaced."""

    def _run_until_precise(self, runner, loops, stats, rounds):  # noqa: D102
        for _ in range(rounds):
            stats.update(runner(loops))


def test_the_loop_stops_on_the_t_margin_not_the_normal_one():
    # 0.8% jitter: after 5 rounds the normal margin is within 1%, the t margin is not; after 12 it is.
    jitter = [1.0, 1.008, 0.992, 1.008, 0.992] * 10
    fixture = _FakeFixture(max_time=100.0, min_rounds=5, precision=0.01)
    assert cap_rounds_by_time(fixture, clock=lambda: 0.0)
    normal = 2.5758 * statistics.stdev(jitter[:5]) / 5**0.5
    assert normal < 0.01 < relative_margin(jitter[:5], 0.99)
    rounds = _Rounds()
    it = iter(jitter)
    fixture._run_until_precise(lambda _: next(it), None, rounds, 50)
    assert 5 < len(rounds) < 50 and relative_margin(rounds, 0.99) <= 0.01
    assert relative_margin(rounds[:-1], 0.99) > 0.01  # the first round within the target


def test_another_loop_is_still_ended_at_max_time():
    now = [0.0]
    fixture = _OtherFixture(max_time=1.0, min_rounds=3)
    assert cap_rounds_by_time(fixture, clock=lambda: now[0])

    def slow_round(_):
        now[0] += 0.4
        return 0.4

    rounds = _Rounds()
    fixture._run_until_precise(slow_round, None, rounds, 1000)
    assert len(rounds) == 3


def test_cap_ends_the_loop_at_max_time_after_min_rounds():
    now = [0.0]
    fixture = _FakeFixture(max_time=1.0, min_rounds=3)
    assert cap_rounds_by_time(fixture, clock=lambda: now[0])

    def slow_round(_):
        now[0] += 0.4  # each round is 4x slower than the calibration promised
        return 0.4

    rounds = _Rounds()
    fixture._run_until_precise(slow_round, None, rounds, max_rounds=1000)
    assert len(rounds) == 3  # 1.2 s after 3 rounds: stopped, not 1000 rounds (400 s)


def test_cap_still_runs_min_rounds():
    now = [0.0]
    fixture = _FakeFixture(max_time=0.1, min_rounds=5)
    cap_rounds_by_time(fixture, clock=lambda: now[0])

    def slow_round(_):
        now[0] += 1.0
        return 1.0

    rounds = _Rounds()
    fixture._run_until_precise(slow_round, None, rounds, max_rounds=1000)
    assert len(rounds) == 5


def test_low_noise_device_stops_on_precision_close_to_a_long_run(pytester):
    """A fake GPU with 0.5% jitter: stops on precision in well under 0.2 s of device time, median within 1% of
    a 5 s run's (the speed target's logic; scripts/bench_timing.py prints the figures)."""
    pytester.makepyfile(
        """
        import json, pytest
        from suite.timing import SyncTimer, stopping_info
        from tests.fakes import FakeClock, JitteryAsyncDevice

        RESULTS = {}

        def make():
            clock = FakeClock(tick=1e-9)
            gpu = JitteryAsyncDevice(clock, launch_s=1e-6, work_s=2e-3, jitter=0.005, seed=3)
            return clock, gpu

        @pytest.mark.parametrize("mode", ["precise", "long"])
        def test_fake(benchmark, mode):
            clock, gpu = make()
            benchmark._timer = SyncTimer(["cuda:0"], clock=clock, synchronize=gpu.synchronize)
            if mode == "precise":
                benchmark._precision, benchmark._confidence, benchmark._max_time = 0.01, 0.99, 5.0
            else:
                benchmark._precision, benchmark._max_time = None, 5.0
            start = clock.now
            benchmark(gpu.launch)
            info = stopping_info(benchmark.stats)
            RESULTS[mode] = (benchmark.stats.stats.median, clock.now - start, info["stopped_on"])
            if len(RESULTS) == 2:
                with open("out.json", "w") as fh:
                    json.dump(RESULTS, fh)
        """
    )
    pytester.syspathinsert(ROOT)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-q", "--benchmark-min-rounds=5", "--benchmark-calibration-precision=10"
    )
    result.assert_outcomes(passed=2)
    import json

    out = json.loads((pytester.path / "out.json").read_text())
    (precise_median, precise_s, stopped), (long_median, long_s, _) = out["precise"], out["long"]
    assert stopped == "precision"
    assert precise_s < 0.2 < long_s
    assert precise_median == pytest.approx(long_median, rel=0.01)


def test_with_precision_off_the_fixed_rounds_stop_at_max_time_too(pytester):
    """A machine that slows 100x after calibration: with precision off the calibrated rounds (~1000) would
    take 100 s of device time; the cap ends them at max_time (1 s) and the result still says precision off."""
    pytester.makepyfile(
        """
        import json
        from suite.pb_adapter import cap_fixed_rounds_by_time, cap_rounds_by_time
        from suite.timing import SyncTimer, stopping_info
        from tests.fakes import FakeClock

        def test_fake(benchmark):
            clock = FakeClock(tick=1e-9)
            benchmark._timer = SyncTimer(["cpu"], clock=clock)
            benchmark._precision, benchmark._max_time = None, 1.0

            def work():
                clock.now += 0.1 if benchmark.stats is not None else 1e-3  # slow once timed rounds start

            cap_fixed_rounds_by_time(benchmark)
            cap_rounds_by_time(benchmark, clock=lambda: clock.now)
            benchmark(work)
            with open("out.json", "w") as fh:
                json.dump({"rounds": len(benchmark.stats.stats.data),
                           "precision": benchmark.stats.options["precision"],
                           "stopped_on": stopping_info(benchmark.stats)["stopped_on"]}, fh)
        """
    )
    pytester.syspathinsert(ROOT)
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "--benchmark-min-rounds=3")
    result.assert_outcomes(passed=1)
    import json

    out = json.loads((pytester.path / "out.json").read_text())
    assert 3 <= out["rounds"] <= 12, "about 1 s of 0.1 s rounds, not the ~1000 calibrated ones"
    assert out["precision"] is None and out["stopped_on"] == "time"


def test_precision_never_stops_before_min_rounds():
    fixture = _FakeFixture(max_time=100.0, min_rounds=5, precision=0.01)
    assert cap_rounds_by_time(fixture, clock=lambda: 0.0)
    rounds = _Rounds()
    fixture._run_until_precise(lambda _: 1.0, None, rounds, 50)  # identical rounds: precise from round 2
    assert len(rounds) == 5
