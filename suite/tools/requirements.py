"""What the suite needs against what this Python has, and which carried wheels an offline node should install.

Torch-free and pydantic-free on purpose: scripts/gpu-check.sh asks it on a bare node before the suite can
import (docs/gpu-check.md). The plugin's own check before a run is suite.requirements.old_pytest_benchmark.

    python -m suite.tools.requirements check        # pyproject's requirements: met, or one line each + the fix
    python -m suite.tools.requirements wheels DIR   # the carried wheels (DIR/*.whl) this Python should install
    python -m suite.tools.requirements carried DIR  # what scripts/prepare-device.sh downloaded is complete
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import sys
import zipfile
from pathlib import Path

from suite.requirements import FIX, FIX_CARRIED, MIN_PYTEST_BENCHMARK, installed
from suite.tools import ROOT

DIST = "gpubench-suite"
# What scripts/prepare-device.sh carries for the offline node (docs/gpu-check.md): pydantic and what it needs,
# which the node lacks, and pytest-benchmark, whose version there is not known and must be MIN_PYTEST_BENCHMARK
# or newer.
CARRIED = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
           "pytest-benchmark")


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them: pytest_benchmark and Pytest.Benchmark are
    pytest-benchmark."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _packaging(module: str):
    """packaging's `module` (version, requirements): pytest brings packaging; a bare Python that has only pip
    (scripts/prepare-device.sh's) has pip's vendored copy."""
    import importlib

    try:
        return importlib.import_module(f"packaging.{module}")
    except ImportError:
        return importlib.import_module(f"pip._vendor.packaging.{module}")


def _version(text: str):
    Version, InvalidVersion = _packaging("version").Version, _packaging("version").InvalidVersion
    try:
        return Version(text)
    except InvalidVersion:
        return None


def requirements(extra: str | None = None) -> list[str]:
    """The suite's requirements as written: pyproject.toml's (a checkout), else the installed distribution's
    metadata. With `extra`, that extra's instead (e.g. "test")."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ImportError:  # Python 3.10: pip's vendored copy of the same parser
            from pip._vendor import tomli as tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        return list(project["optional-dependencies"][extra] if extra else project["dependencies"])
    try:
        written = md.requires(DIST) or []
    except md.PackageNotFoundError:
        return []
    Requirement = _packaging("requirements").Requirement
    reqs = [Requirement(r) for r in written]
    if extra:
        return [str(r).split(";")[0].strip() for r in reqs if r.marker and r.marker.evaluate({"extra": extra})]
    return [str(r) for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


# The module the suite imports from each distribution whose module name is not the distribution's own: another
# distribution may provide it (pytest-benchmark 5.3 pulls in py-cpuinfo2, which provides cpuinfo; an older
# image may have pynvml's own distribution).
MODULES = {"pyyaml": "yaml", "nvidia-ml-py": "pynvml", "py-cpuinfo": "cpuinfo"}
# The requirements a run cannot do without at the version asked. Below pytest-benchmark's floor the run dies at
# its start (MIN_PYTEST_BENCHMARK). Any other package that imports but is older than asked is a warning: an
# offline node cannot install a newer one, and the suite may well work with it.
HARD = frozenset({"pytest-benchmark"})


def _provider(name: str) -> str | None:
    """Where `name`'s module comes from when `name` itself is not installed: 'module (from dist version)', or
    None if the module does not import."""
    import importlib.util

    module = MODULES.get(normalise(name), normalise(name).replace("-", "_"))
    if importlib.util.find_spec(module) is None:
        return None
    dists = md.packages_distributions().get(module, [])
    return f"{module} (from {', '.join(f'{d} {installed(d)}' for d in dists) or 'a folder on sys.path'})"


def problems(reqs: list[str]) -> list[tuple[str, bool]]:
    """(line, fatal) for each requirement this Python does not meet, naming what it has and the fix. Fatal: its
    module does not import, or it is in HARD and older than asked."""
    Requirement = _packaging("requirements").Requirement
    found = []
    for text in reqs:
        req = Requirement(text)
        have = installed(req.name)
        spec = str(req.specifier)
        fix = (FIX_CARRIED if normalise(req.name) in CARRIED else FIX).format(req=f"{req.name}{spec}")
        if have is None:
            provider = _provider(req.name)
            if provider is None:
                found.append((f"{req.name} is not installed; the suite needs {req.name}{spec}: {fix}", True))
            else:
                found.append((f"{req.name} is not installed, but its module {provider} imports; going on", False))
        elif spec and not req.specifier.contains(have.split("+")[0], prereleases=True):
            # A local version (torch 2.11.0+cu130) meets >=2.1 as its public part does.
            hard = normalise(req.name) in HARD
            line = f"{req.name} {have} is installed; the suite needs {req.name}{spec}: {fix}"
            found.append((line if hard else line + " (going on: it may work)", hard))
    return found


def unmet(reqs: list[str]) -> list[str]:
    """One line for each requirement this Python does not meet, fatal or not."""
    return [line for line, _ in problems(reqs)]


# --- carried wheels (scripts/prepare-device.sh, scripts/gpu-check.sh) ----------------------------------------


def wheel_name_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return normalise(name), version


def _exact_pins(path: Path) -> dict[str, str]:
    """The `name==version` requirements in a wheel's metadata (pydantic pins pydantic-core)."""
    with zipfile.ZipFile(path) as z:
        names = [f for f in z.namelist() if f.endswith(".dist-info/METADATA")]
        meta = z.read(names[0]).decode() if names else ""
    pins = {}
    for name, version in re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+) ?\(?==([\w.]+)\)?\s*$", meta, re.MULTILINE):
        pins[normalise(name)] = version
    return pins


def choose_wheels(folder: Path) -> tuple[list[Path], list[str]]:
    """The carried wheels this Python should install, and a line on each: a wheel is installed where this
    Python lacks the package or has an older one (a newer one on the node stays: shadowing it could break
    what the node's own packages need), and so is every carried wheel an installed one pins exactly (pydantic
    and its pydantic-core go together)."""
    wheels = {wheel_name_version(w)[0]: w for w in sorted(folder.glob("*.whl"))}
    chosen: dict[str, str] = {}
    notes: dict[str, str] = {}
    for name, wheel in wheels.items():
        line, wanted = _wanted(name, wheel_name_version(wheel)[1])
        (chosen if wanted else notes)[name] = line
    pins = {name: {p for p, v in _exact_pins(w).items() if p in wheels and wheel_name_version(wheels[p])[1] == v}
            for name, w in wheels.items()}
    _add_pinned(chosen, notes, wheels, pins)
    _drop_uninstallable(chosen, notes, wheels, pins)
    return [wheels[n] for n in chosen], [chosen[n] for n in chosen] + list(notes.values())


def _wanted(name: str, carried: str) -> tuple[str, bool]:
    """(the line on a carried wheel, whether to install it): where this Python lacks it or has it older."""
    have = installed(name)
    if have is None:
        return f"{name} {carried}: not installed here", True
    have_v, carried_v = _version(have.split("+")[0]), _version(carried.split("+")[0])
    if have_v is not None and carried_v is not None and have_v < carried_v:
        return f"{name} {carried}: replaces {have} (older)", True
    return f"{name} {carried}: not needed, {have} is installed", False


def _add_pinned(chosen: dict[str, str], notes: dict[str, str], wheels: dict[str, Path],
                pins: dict[str, set[str]]) -> None:
    """Choose every carried wheel a chosen one pins exactly, and what those pin in turn."""
    pending = list(chosen)
    while pending:
        for pinned in pins[pending.pop()]:
            if pinned not in chosen:
                chosen[pinned] = f"{pinned} {wheel_name_version(wheels[pinned])[1]}: pinned by a carried wheel " \
                                 "that is installed"
                notes.pop(pinned, None)
                pending.append(pinned)


def _drop_uninstallable(chosen: dict[str, str], notes: dict[str, str], wheels: dict[str, Path],
                        pins: dict[str, set[str]]) -> None:
    """A wheel built for another Python or platform cannot be installed here, and neither can what pins it or
    what it pins (pydantic without its pydantic-core breaks at import): the node's own copies stay, and the
    requirements check says whether they are enough."""
    tags = set(_packaging("tags").sys_tags())
    unusable = {n for n in chosen if not tags & set(_packaging("utils").parse_wheel_filename(wheels[n].name)[3])}
    group, grown = set(), set(unusable)
    while grown != group:
        group = grown
        grown = group | {n for n in chosen if pins[n] & group} | {p for n in group for p in pins[n]}
    for name in sorted(group & set(chosen)):
        why = ("built for another Python or platform" if name in unusable
               else "goes with " + ", ".join(sorted(unusable)))
        notes[name] = f"{name} {wheel_name_version(wheels[name])[1]}: not installed, {why} " \
                      f"(scripts/prepare-device.sh with PY_VERSION={sys.version_info[0]}.{sys.version_info[1]})"
        del chosen[name]


def carried_problems(folder: Path) -> list[str]:
    """What is wrong with a folder of carried wheels: two versions of one package (pip would refuse), a
    needed package missing, a pinned version that is not the one carried, pytest-benchmark too old."""
    wheels = sorted(folder.glob("*.whl"))
    seen: dict[str, list[str]] = {}
    for w in wheels:
        name, version = wheel_name_version(w)
        seen.setdefault(name, []).append(version)
    problems = [f"two versions of {n} ({', '.join(v)}) in {folder}: keep one (pip would refuse)"
                for n, v in seen.items() if len(v) > 1]
    missing = [n for n in CARRIED if n not in seen]
    if missing:
        problems.append(f"missing {', '.join(missing)} in {folder}: run scripts/prepare-device.sh")
    for w in wheels:
        for pinned, version in _exact_pins(w).items():
            if pinned in seen and version not in seen[pinned]:
                problems.append(f"{wheel_name_version(w)[0]} pins {pinned} {version}, but "
                                f"{', '.join(seen[pinned])} was downloaded")
    bench = seen.get("pytest-benchmark", [])
    if bench and all((_version(v) or _version("0")) < _version(MIN_PYTEST_BENCHMARK) for v in bench):
        problems.append(f"pytest-benchmark {bench[0]} is older than the suite's {MIN_PYTEST_BENCHMARK}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.tools.requirements", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="are pyproject's requirements met? exit 1 if not")
    check.add_argument("--extra", help="also report this extra's (e.g. test), without failing on them")
    for name, text in (("wheels", "print the carried wheels this Python should install, one a line"),
                       ("carried", "is this folder of carried wheels complete? exit 1 if not")):
        sub.add_parser(name, help=text).add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "check":
        return _check(args.extra)
    if not args.folder.is_dir():
        print(f"requirements: {args.folder} is not a folder of wheels", file=sys.stderr)
        return 2
    try:
        return (_wheels if args.command == "wheels" else _carried)(args.folder)
    except (zipfile.BadZipFile, ValueError) as exc:
        print(f"requirements: a carried wheel in {args.folder} cannot be read ({exc}); run "
              "scripts/prepare-device.sh again", file=sys.stderr)
        return 2


def _check(extra: str | None) -> int:
    """`check`: a line on each unmet requirement (stderr), the summary where none is fatal; 1 if one is."""
    reqs = requirements()
    found = problems(reqs)
    for line, fatal in found:
        print(f"requirements: {line}" if fatal else f"requirements: warning: {line}", file=sys.stderr)
    if extra:
        for line in unmet(requirements(extra)):
            print(f"requirements ({extra}, tests that need it skip or fail): {line}", file=sys.stderr)
    if any(fatal for _, fatal in found):
        return 1
    head = f"{len(reqs) - len(found)} of {len(reqs)} met, the rest usable" if found else f"all {len(reqs)} met"
    print(f"requirements: {head} (" + ", ".join(f"{_name(r)} {installed(_name(r)) or '-'}" for r in reqs) + ")")
    return 0


def _wheels(folder: Path) -> int:
    """`wheels`: a line on each carried wheel (stderr), then the paths to install, one a line."""
    chosen, notes = choose_wheels(folder)
    for line in notes:
        print(f"   {line}", file=sys.stderr)
    for wheel in chosen:
        print(wheel)
    return 0


def _carried(folder: Path) -> int:
    """`carried`: what is wrong with the folder, one line each (stderr); 1 if anything is."""
    wrong = carried_problems(folder)
    for line in wrong:
        print(f"prepare-device: {line}", file=sys.stderr)
    return 1 if wrong else 0


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0]


if __name__ == "__main__":
    sys.exit(main())
