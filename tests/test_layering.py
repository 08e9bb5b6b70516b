"""The analysis side never imports torch; the measurement side never imports pandas or matplotlib; neither
imports the tooling (suite.tools)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.cases import FAMILIES

ROOT = Path(__file__).resolve().parent.parent


_IMPORTED: dict[str, set[str]] = {}


def imported_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module`. Every module these tests ask about is
    imported at once, each in its own child (torch's import is ~2 s each, and the machine has cores), once."""
    if module not in _IMPORTED:
        wanted = sorted({module, *ANALYSIS, *MEASUREMENT, *RUNTIME} - set(_IMPORTED))
        code = "import json, sys, importlib; importlib.import_module(sys.argv[1]); print(json.dumps(sorted(sys.modules)))"
        wanted = [m for m in wanted if _exists(m)]
        at_once = 2 * (os.cpu_count() or 1)  # each child holds torch: a few hundred MB
        for start in range(0, len(wanted), at_once):
            children = {m: subprocess.Popen([sys.executable, "-c", code, m], cwd=ROOT, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True) for m in wanted[start:start + at_once]}
            for name, child in children.items():
                out, err = child.communicate(timeout=300)
                assert child.returncode == 0, f"importing {name}: {err}"
                _IMPORTED[name] = set(json.loads(out.strip().splitlines()[-1]))
    return _IMPORTED[module]


def _exists(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).exists() or (ROOT / module.replace(".", "/")).is_dir()


ANALYSIS = ["suite.results", "suite.report", "suite.report.command", "suite.compare", "suite.cli", "suite.config",
            "suite.sections", "suite.cases.copy", "suite.cases.conv.config",
            "suite.health.command", "suite.cases.collectives.nccl_tests", "suite.cases.copy.nvbandwidth"]
MEASUREMENT = ["suite.plugin", "suite.devices", "suite.timing", "suite.cases.matmul.measure",
               "suite.cases.copy.measure", "suite.tools.accuracy"]


@pytest.mark.parametrize("module", ANALYSIS)
def test_analysis_side_does_not_import_torch(module):
    if not _exists(module):
        pytest.skip(f"{module} does not exist yet")
    assert "torch" not in imported_by(module)


@pytest.mark.parametrize("module", MEASUREMENT)
def test_measurement_side_does_not_import_pandas_or_matplotlib(module):
    mods = imported_by(module)
    assert "pandas" not in mods and "matplotlib" not in mods


def test_report_command_does_not_import_torch():
    code = (
        "import sys; from suite.cli import main\n"
        "try:\n    main(['report', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False"


# The runtime: what `pytest benchmarks` and the analysis commands import. The tooling that checks the suite
# itself (suite.tools, the families' checks.py) is never part of it.
RUNTIME = ["suite.plugin", "suite.cli", "suite.report.command", "suite.compare", "suite.health.command",
           "suite.plan", *(f"{package}.measure" for package in FAMILIES.values())]

CHECKS = {f"{package}.checks" for package in FAMILIES.values()}


@pytest.mark.parametrize("module", RUNTIME)
def test_the_runtime_does_not_import_the_tooling(module):
    tooling = sorted(m for m in imported_by(module)
                     if m == "suite.tools" or m.startswith("suite.tools.") or m in CHECKS)
    assert not tooling, f"{module} imports {tooling}"
