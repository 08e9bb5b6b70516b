"""Shared test helpers: run `pytest benchmarks` end to end on a small config and read its JSON."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

# In-process pytester runs put sys.modules back afterwards, and numpy's and torch's C extensions cannot be
# loaded twice in one process (torch: a segfault once `pytest tests/test_stopping.py` ran alone): imported
# here, before any such run, they are never dropped.
import numpy  # noqa: F401
import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]


def has_accelerator() -> bool:
    return torch.cuda.is_available() or (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available())


# On a real GPU, torch and cuDNN emit harmless warnings (a cuDNN plan falling back, a TF32 note: UserWarning;
# a newer torch than this was written for: FutureWarning, DeprecationWarning); under pyproject's
# filterwarnings = "error" they would fail the gpu tests, so there every warning is shown, not raised.
GPU_TEST_WARNINGS = "default::Warning"


# A test that runs pytest on the benchmarks (in a child, or in process) pays torch's start-up and a real
# timing run each time: it belongs to the slow tier (`pytest -m slow`, which .ci/run runs after the fast one).
END_TO_END_FIXTURES = frozenset({"run_benchmarks", "pytester"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers set here
def pytest_collection_modifyitems(config, items):
    for item in items:
        if END_TO_END_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.filterwarnings(GPU_TEST_WARNINGS))
    if any(item.get_closest_marker("gpu") for item in items) and not has_accelerator():
        skip = pytest.mark.skip(reason="needs a real accelerator (CUDA or MPS); torch sees none here")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.hookimpl(trylast=True)  # after every plugin of this worker has read it
def pytest_configure(config):
    # pytest-benchmark switches itself off in any process that sees PYTEST_XDIST_WORKER, which an xdist worker
    # (.ci/run's `-n 2`) sets for itself: the `pytest benchmarks` runs its tests start (children, torchrun ranks,
    # in process) would inherit it and time nothing. xdist itself reads its workerinput, never the variable.
    os.environ.pop("PYTEST_XDIST_WORKER", None)


@pytest.fixture
def run_benchmarks(pytester, tmp_path):
    """run_benchmarks(config_dict, *extra_args, tests="benchmarks") -> (RunResult, json dict or None)."""

    def _run(config: dict, *args: str, tests: str = "benchmarks", timeout: float = 240):
        cfg = tmp_path / "suite.yaml"
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        out = tmp_path / "results.json"
        result = pytester.runpytest_subprocess(
            str(ROOT / tests), f"--rootdir={ROOT}", f"--suite-config={cfg}", f"--benchmark-json={out}",
            "-p", "no:cacheprovider", "-rs", *args, timeout=timeout,
        )
        data = json.loads(out.read_text()) if out.exists() else None
        return result, data

    return _run


@pytest.fixture(scope="session")
def _shared_runs() -> dict:
    return {}


@pytest.fixture
def shared_run(run_benchmarks, _shared_runs):
    """run_benchmarks for tests that only read a run: each distinct (config, arguments) runs once a session and
    every test that asks gets its (RunResult, JSON). A test that changes the environment uses run_benchmarks."""

    def _run(config: dict, *args: str, **kwargs):
        key = json.dumps([config, args, kwargs], sort_keys=True)
        if key not in _shared_runs:
            _shared_runs[key] = run_benchmarks(config, *args, **kwargs)
        result, data = _shared_runs[key]
        return result, copy.deepcopy(data)

    return _run
