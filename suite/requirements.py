"""The pytest-benchmark floor: the plugin's check before a run starts (the rest of the requirements check and
the carried wheels are tooling: suite.tools.requirements)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util

# pytest-benchmark 5.3.0 brought precision stopping (--benchmark-precision), which the suite's timing uses,
# and 5.3.1 is the first release that works under pytest 9.2. Under an older one the run dies at its start
# with a traceback that names no version (5.2 opens --benchmark-json itself, and the partial file's start gets
# a file object where it expects a path). Equal to pyproject's pin (tests/test_requirements.py checks).
MIN_PYTEST_BENCHMARK = "5.3.1"
FIX = "pip install '{req}'"
# What an offline node cannot pip install is carried for it (suite.tools.requirements.CARRIED).
FIX_CARRIED = FIX + " (on an offline node: scripts/prepare-device.sh carries it, docs/gpu-check.md)"


def installed(name: str) -> str | None:
    """The version of `name` that this Python imports: the first on sys.path (PYTHONPATH's carried copy
    before the system's), or None."""
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def old_pytest_benchmark() -> str | None:
    """The one-line reason the installed pytest-benchmark cannot run the suite, or None (the plugin's check
    before a run: an older one would crash at the run's start, its traceback naming no version)."""
    from packaging.version import Version  # pytest brings packaging

    need = f"pytest-benchmark>={MIN_PYTEST_BENCHMARK}"
    have = installed("pytest-benchmark")
    if have is None:
        # A source checkout on sys.path has no distribution metadata: not a reason to refuse.
        if importlib.util.find_spec("pytest_benchmark") is not None:
            return None
        return f"pytest-benchmark is not installed; the suite needs {need}: {FIX_CARRIED.format(req=need)}"
    # A local version (5.3.1+local) meets the floor as its public part does.
    if Version(have.split("+")[0]) >= Version(MIN_PYTEST_BENCHMARK):
        return None
    return f"pytest-benchmark {have} is installed; the suite needs {need}: {FIX_CARRIED.format(req=need)}"
