"""The contract of suite.pb_adapter: every private name of pytest-benchmark it touches exists, with the shape it
expects, on the installed version, which lies in the range the adapter was checked against."""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest
from pytest_benchmark import hookspec, utils
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.session import BenchmarkSession

from suite import pb_adapter


def _release(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _missing(owner, name: str) -> str:
    return (f"pytest-benchmark {version('pytest-benchmark')}: {owner} has no {name}, which suite/pb_adapter.py "
            "touches; adapt the adapter to this release (and SUPPORTED)")


def test_the_installed_pytest_benchmark_is_in_the_supported_range():
    installed = _release(version("pytest-benchmark"))
    low, high = pb_adapter.SUPPORTED
    assert low <= installed < high, (
        f"pytest-benchmark {version('pytest-benchmark')} is outside suite.pb_adapter.SUPPORTED {low} .. {high}: "
        "check every name tests/test_pb_adapter.py pins, then widen SUPPORTED")


def test_the_fixtures_precision_loop_takes_what_the_suites_loop_takes():
    # An upgrade that changes it falls back to wrapping its loop (normal quantile): this test says so.
    assert hasattr(BenchmarkFixture, "_run_until_precise"), _missing("BenchmarkFixture", "_run_until_precise")
    params = tuple(inspect.signature(BenchmarkFixture._run_until_precise).parameters)
    assert params == ("self", *pb_adapter.PRECISE_LOOP_ARGS), (
        f"BenchmarkFixture._run_until_precise{params}: the suite's loop takes {pb_adapter.PRECISE_LOOP_ARGS}")
    assert hasattr(BenchmarkFixture, "_make_stats"), _missing("BenchmarkFixture", "_make_stats")
    params = tuple(inspect.signature(BenchmarkFixture._make_stats).parameters)
    assert params == ("self", "iterations"), f"BenchmarkFixture._make_stats{params}: expected (self, iterations)"


@pytest.mark.benchmark(max_time=0.001, min_rounds=2, min_time=0.0)
def test_the_fixture_has_the_attributes_the_adapter_reads_and_sets(benchmark):
    for name, kind in (("_max_time", float), ("_min_rounds", int), ("_mode", type(None))):
        assert hasattr(benchmark, name), _missing("the benchmark fixture", name)
        assert isinstance(getattr(benchmark, name), kind), f"benchmark.{name} = {getattr(benchmark, name)!r}"
    for name in ("_precision", "_confidence"):  # None with precision off, else a float
        assert hasattr(benchmark, name), _missing("the benchmark fixture", name)
        assert getattr(benchmark, name) is None or isinstance(getattr(benchmark, name), float)
    benchmark(lambda: None)
    assert benchmark._mode == pb_adapter.TIMED_MODE, f"benchmark._mode = {benchmark._mode!r} after benchmark(...)"
    assert pb_adapter.timed_max_time(benchmark) == 0.001


def test_the_session_has_the_attributes_the_adapter_reads_and_sets(pytestconfig):
    assert hasattr(pytestconfig, "_benchmarksession"), _missing("pytest.Config", "_benchmarksession")
    bs = pb_adapter.session(pytestconfig)
    assert isinstance(bs, BenchmarkSession)
    for name in ("json", "save", "autosave", "benchmarks", "quiet", "disabled", "groups"):
        assert hasattr(bs, name), _missing("BenchmarkSession", name)
    assert isinstance(bs.benchmarks, list) and isinstance(bs.quiet, bool)
    params = tuple(inspect.signature(BenchmarkSession.save_json).parameters)
    assert params == ("self", "output_json"), f"BenchmarkSession.save_json{params}: expected (self, output_json)"


def test_the_json_helpers_and_hooks_the_adapter_calls_exist():
    assert callable(getattr(utils, "safe_dumps", None)), _missing("pytest_benchmark.utils", "safe_dumps")
    assert pb_adapter.dumps({"a": object.__new__(type("X", (), {}))}).startswith('{"a": ')  # unencodable: a string
    for hook in ("pytest_benchmark_generate_machine_info", "pytest_benchmark_update_machine_info",
                 "pytest_benchmark_generate_commit_info", "pytest_benchmark_update_json"):
        assert hasattr(hookspec, hook), _missing("pytest_benchmark.hookspec", hook)
