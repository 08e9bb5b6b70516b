"""What a run needs before it starts: the pytest-benchmark floor, no -O, no xdist (the rest of the requirements
check and the carried wheels are tooling: suite.tools.requirements)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import sys

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


def refusal(config) -> str | None:
    """Why this run cannot measure anything trustworthy, or None (the plugin's check before a run starts)."""
    # An older pytest-benchmark dies at the run's start with a traceback that names no version.
    if old := old_pytest_benchmark():
        return old
    if sys.flags.optimize:  # every case checks its result with assert, which -O strips: unchecked figures
        return ("python -O (or PYTHONOPTIMIZE) strips the result checks every benchmark makes (assert "
                "statements): run without it")
    if parallel := xdist_reason(config):
        return parallel
    if not config.pluginmanager.hasplugin("benchmark"):
        return ("pytest-benchmark is not loaded (-p no:benchmark, or not installed): it times every case; run "
                f"without -p no:benchmark (pip install 'pytest-benchmark>={MIN_PYTEST_BENCHMARK}')")
    return None


def xdist_reason(config) -> str | None:
    """Why the run cannot go on under pytest-xdist, or None: its workers would time benchmarks side by side on
    the same devices, and pytest-benchmark turns its timing off under xdist anyway (the run would pass, timing
    nothing). Each worker would also find the results file locked by its controller."""
    option = getattr(config, "option", None)
    workers = getattr(option, "numprocesses", None)
    dist = getattr(option, "dist", "no")  # --dist load --tx 2*popen starts workers without -n
    # Not PYTEST_XDIST_WORKER: a run started from a test that runs under xdist inherits it.
    if not workers and dist in (None, "no") and not hasattr(config, "workerinput"):
        return None
    return ("pytest-xdist (-n, --dist) runs tests in parallel processes: benchmarks there would share the "
            "devices, and pytest-benchmark turns timing off under xdist; run without -n or --dist (or with -n 0)")
