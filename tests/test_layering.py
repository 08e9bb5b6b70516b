"""The analysis side never imports torch; the measurement side never imports pandas or matplotlib; neither
imports the tooling (suite.tools)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.cases import FAMILIES

ROOT = Path(__file__).resolve().parent.parent


def imported_by(module: str) -> set[str]:
    code = f"import json, sys, importlib; importlib.import_module({module!r}); print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


ANALYSIS = ["suite.results", "suite.report", "suite.report.command", "suite.compare", "suite.cli", "suite.config",
            "suite.sections", "suite.cases.copy", "suite.cases.conv.config",
            "suite.health.command", "suite.cases.collectives.nccl_tests", "suite.cases.copy.nvbandwidth"]
MEASUREMENT = ["suite.plugin", "suite.devices", "suite.timing", "suite.cases.matmul.measure",
               "suite.cases.copy.measure", "suite.tools.accuracy"]


@pytest.mark.parametrize("module", ANALYSIS)
def test_analysis_side_does_not_import_torch(module):
    if not (ROOT / (module.replace(".", "/") + ".py")).exists() and not (ROOT / module.replace(".", "/")).is_dir():
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
