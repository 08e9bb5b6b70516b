"""suite/tools/requirements.py: the suite's requirements against what a Python has, and which carried wheels an
offline node installs (scripts/gpu-check.sh); suite/requirements.py: the plugin refuses an older
pytest-benchmark in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest
import yaml

from suite import requirements as runtime
from suite.tools import requirements
from tests.conftest import ROOT


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _have(monkeypatch, **versions):
    """This Python 'has' these distributions (name with _ for -), at these versions; None: not installed."""
    table = {k.replace("_", "-"): v for k, v in versions.items()}
    real = runtime.installed
    for module in (runtime, requirements):
        monkeypatch.setattr(module, "installed",
                            lambda name: table[requirements.normalise(name)] if requirements.normalise(name) in table
                            else real(name))


def test_the_pytest_benchmark_floor_is_pyprojects_and_prepare_devices():
    assert f"pytest-benchmark>={runtime.MIN_PYTEST_BENCHMARK}" in _pyproject()["dependencies"]
    script = (ROOT / "scripts" / "prepare-device.sh").read_text()
    assert f"pytest-benchmark=={runtime.MIN_PYTEST_BENCHMARK}" in script
    assert requirements.DIST == _pyproject()["name"]


def test_ci_tests_at_pyprojects_floors():
    # .ci/floor.txt pins the lowest versions pyproject allows, for CI's floor stage: each floor's leading
    # parts (2.9 of pydantic>=2.9; the major of pandas>=2), so a floor raised or lowered in one file alone fails.
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = {}
    for line in (ROOT / ".ci" / "floor.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[requirements.normalise(name)] = Version(version)
    project = _pyproject()
    for text in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        req = Requirement(text)
        name = requirements.normalise(req.name)
        if name == "torch":  # CI's CPU wheel is 2.13: the floor stage cannot reach 2.1
            continue
        (spec,) = [s for s in req.specifier if s.operator == ">="]
        floor = Version(spec.version)
        parts = floor.release[:2] if len(floor.release) > 1 else floor.release[:1]
        assert name in pins, f"{name}: in pyproject, not pinned in .ci/floor.txt"
        assert pins[name] >= floor and pins[name].release[:len(parts)] == parts, (
            f"{name}: .ci/floor.txt pins {pins[name]}, pyproject's floor is {floor}")
    assert "floor.txt" in (ROOT / ".ci" / "run").read_text()


def test_this_python_meets_the_requirements_and_the_test_extra():
    assert requirements.requirements() == _pyproject()["dependencies"]
    assert requirements.unmet(requirements.requirements()) == []
    assert requirements.unmet(requirements.requirements("test")) == []


def test_unmet_requirements_name_what_is_installed_and_the_fix(monkeypatch):
    _have(monkeypatch, pytest_benchmark="5.2.3", pydantic=None, torch="2.11.0+cu130", pandas="3.1.1")
    monkeypatch.setattr(requirements, "_provider", lambda name: None)  # nothing else provides pydantic
    lines = requirements.unmet(["pytest-benchmark>=5.3.1", "pydantic>=2.5", "torch>=2.1", "pandas>=2"])
    carried = " (on an offline node: scripts/prepare-device.sh carries it, docs/gpu-check.md)"
    assert lines == [
        ("pytest-benchmark 5.2.3 is installed; the suite needs pytest-benchmark>=5.3.1: pip install "
         f"'pytest-benchmark>=5.3.1'{carried}"),
        f"pydantic is not installed; the suite needs pydantic>=2.5: pip install 'pydantic>=2.5'{carried}",
    ], "a local version (+cu130) meets a floor as its public part does"
    _have(monkeypatch, jsonschema=None)
    (line,) = requirements.unmet(["jsonschema>=4"])
    assert line.endswith("pip install 'jsonschema>=4'"), "not carried: no pointer to prepare-device"


def test_the_plugin_refuses_an_older_pytest_benchmark_in_one_line(pytester, monkeypatch, tmp_path):
    _have(monkeypatch, pytest_benchmark="5.2.3")
    cfg = tmp_path / "suite.yaml"
    cfg.write_text(yaml.safe_dump({"devices": "cpu"}))
    out = tmp_path / "results.json"
    result = pytester.runpytest_inprocess(str(ROOT / "benchmarks" / "test_matmul.py"), f"--rootdir={ROOT}",
                                          f"--suite-config={cfg}", f"--benchmark-json={out}",
                                          "-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestAssertRewriteWarning")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in result.stderr.str().splitlines() if ln.strip()]
    assert line == f"ERROR: {runtime.old_pytest_benchmark()}"
    assert "pytest-benchmark 5.2.3 is installed" in line and "Traceback" not in result.stdout.str()
    assert not out.exists() and not (tmp_path / "results.partial.jsonl").exists()


def _wheel(folder, name: str, version: str, pins: dict[str, str] | None = None):
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {p}=={v}\n" for p, v in (pins or {}).items())
    meta += "Requires-Dist: typing-extensions>=4.14.1\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def _carried(folder):
    folder.mkdir()
    return {
        "pydantic": _wheel(folder, "pydantic", "2.14.4", {"pydantic-core": "2.50.5"}),
        "pydantic-core": _wheel(folder, "pydantic-core", "2.50.5"),
        "annotated-types": _wheel(folder, "annotated-types", "0.8.0"),
        "typing-inspection": _wheel(folder, "typing-inspection", "0.4.5"),
        "typing-extensions": _wheel(folder, "typing-extensions", "4.16.0"),
        "pytest-benchmark": _wheel(folder, "pytest-benchmark", "5.3.1"),
    }


def test_a_carried_wheel_is_installed_only_where_the_node_lacks_it_or_has_it_older(monkeypatch, tmp_path):
    wheels = _carried(tmp_path / "whl")
    # The H200 node as described: no pydantic; pytest-benchmark older; its typing-extensions newer; a
    # pydantic-core newer than pydantic's pin (left by something else) must not split the pair.
    _have(monkeypatch, pydantic=None, pydantic_core="2.60.0", annotated_types=None, typing_inspection="0.4.5",
          typing_extensions="4.17.0", pytest_benchmark="5.2.3")
    chosen, notes = requirements.choose_wheels(tmp_path / "whl")
    assert sorted(p.name for p in chosen) == sorted(wheels[n].name for n in (
        "pydantic", "pydantic-core", "annotated-types", "pytest-benchmark"))
    assert "pytest-benchmark 5.3.1: replaces 5.2.3 (older)" in notes
    assert "pydantic-core 2.50.5: pinned by a carried wheel that is installed" in notes
    assert "typing-extensions 4.16.0: not needed, 4.17.0 is installed" in notes
    # A node that has everything at these versions or newer installs nothing.
    _have(monkeypatch, pydantic="2.14.4", pydantic_core="2.50.5", annotated_types="0.8.0",
          typing_inspection="0.4.5", typing_extensions="4.16.0", pytest_benchmark="5.3.1")
    assert requirements.choose_wheels(tmp_path / "whl")[0] == []


def test_prepare_devices_check_names_what_is_wrong_with_the_carried_wheels(tmp_path):
    folder = tmp_path / "whl"
    wheels = _carried(folder)
    assert requirements.carried_problems(folder) == []
    wheels["pytest-benchmark"].unlink()
    _wheel(folder, "pytest-benchmark", "5.2.3")
    _wheel(folder, "pydantic-core", "2.50.4")
    wheels["annotated-types"].unlink()
    problems = requirements.carried_problems(folder)
    assert problems == [
        f"two versions of pydantic-core (2.50.4, 2.50.5) in {folder}: keep one (pip would refuse)",
        f"missing annotated-types in {folder}: run scripts/prepare-device.sh",
        "pytest-benchmark 5.2.3 is older than the suite's 5.3.1",
    ]
    wheels["pydantic-core"].unlink()
    assert "pydantic pins pydantic-core 2.50.5, but 2.50.4 was downloaded" in requirements.carried_problems(folder)


def test_the_command_line_check_and_a_corrupt_wheel_are_one_line_each(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "suite.tools.requirements", *args], cwd=ROOT, text=True,
                              capture_output=True, timeout=60, check=False)

    ok = run("check", "--extra", "test")
    assert ok.returncode == 0 and re.match(r"requirements: all \d+ met \(torch ", ok.stdout), ok.stderr
    folder = tmp_path / "whl"
    folder.mkdir()
    (folder / "not_installed_here-1.0-py3-none-any.whl").write_text("not a zip")
    for command in ("wheels", "carried"):
        bad = run(command, str(folder))
        (line,) = bad.stderr.splitlines()
        assert bad.returncode == 2 and "cannot be read" in line and "prepare-device.sh" in line
    missing = run("wheels", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "is not a folder of wheels" in missing.stderr


def test_a_wheel_for_another_python_is_left_out_with_what_it_pins(monkeypatch, tmp_path):
    folder = tmp_path / "whl"
    _carried(folder)
    wheels = {p.name: p for p in folder.iterdir()}
    core = wheels["pydantic_core-2.50.5-py3-none-any.whl"]
    core.rename(folder / "pydantic_core-2.50.5-cp27-cp27m-win32.whl")  # no Python here can install it
    _have(monkeypatch, pydantic=None, pydantic_core=None, annotated_types=None, typing_inspection=None,
          typing_extensions=None, pytest_benchmark="5.2.3")
    chosen, notes = requirements.choose_wheels(folder)
    assert sorted(requirements.wheel_name_version(p)[0] for p in chosen) == [
        "annotated-types", "pytest-benchmark", "typing-extensions", "typing-inspection"]
    assert any(n.startswith("pydantic-core 2.50.5: not installed, built for another Python") for n in notes)
    assert any(n.startswith("pydantic 2.14.4: not installed, goes with pydantic-core") for n in notes)
    assert all("PY_VERSION=" in n for n in notes if "not installed," in n)


def test_what_imports_or_is_only_older_is_a_warning_and_only_what_cannot_run_stops(monkeypatch):
    # py-cpuinfo absent but its module `cpuinfo` imports (pytest-benchmark 5.3 brings py-cpuinfo2); an older
    # pytest-timeout imports too; a package whose module is nowhere, or pytest-benchmark below its floor, stops.
    _have(monkeypatch, py_cpuinfo=None, pytest_timeout="2.2.0", pytest_benchmark="5.2.3")
    found = requirements.problems(["py-cpuinfo>=9", "pytest-timeout>=2.3", "pytest-benchmark>=5.3.1",
                                   "no-such-package-here>=1"])
    assert [fatal for _, fatal in found] == [False, False, True, True]
    assert found[0][0].startswith("py-cpuinfo is not installed, but its module cpuinfo (from ")
    assert found[1][0].endswith("(going on: it may work)")


def test_a_carried_local_version_equal_to_the_nodes_is_not_installed(monkeypatch, tmp_path):
    folder = tmp_path / "whl"
    folder.mkdir()
    _wheel(folder, "probe-pkg", "2.11.0+cu130")
    _have(monkeypatch, probe_pkg="2.11.0+cu130")
    chosen, notes = requirements.choose_wheels(folder)
    assert chosen == [] and notes == ["probe-pkg 2.11.0+cu130: not needed, 2.11.0+cu130 is installed"]


def test_the_plugin_goes_on_where_pytest_benchmarks_module_imports_without_its_metadata(monkeypatch):
    # A source checkout of pytest-benchmark on sys.path has no distribution metadata: not a reason to refuse.
    _have(monkeypatch, pytest_benchmark=None)
    assert runtime.old_pytest_benchmark() is None
    _have(monkeypatch, pytest_benchmark="5.2.3")
    assert runtime.old_pytest_benchmark().startswith("pytest-benchmark 5.2.3 is installed")
