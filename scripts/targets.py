"""Print the simplicity targets of the code base (issue 24): size, complexity, layering and the test tiers' time.

    python scripts/targets.py            # size, complexity, family names in shared modules, imports of the plugin
    python scripts/targets.py --tests    # and time the README's test command (fast tier) and the slow tier

Complexity needs radon (`pip install radon`); without it those two lines say so.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "suite"
TOOLS = SUITE / "tools"
MAX_RUNTIME_LINES = 12_000
MAX_MODULE_LINES = 600
MAX_AVERAGE_CC = 4.5
MAX_FUNCTIONS_CC_21 = 10
MAX_FAST_TIER_S = 5 * 60
# A family's own modules that check the suite rather than run it (the GPU check's and accuracy's rows).
FAMILY_TOOLING = "checks.py"


# String constants in shared modules that equal a family's name but are not that family: (module, name) -> why.
NOT_A_FAMILY = {
    ("suite/cases/precision.py", "matmul"): "torch's operator switch (torch.backends.cuda.matmul, oneDNN matmul)",
    ("suite/cases/precision.py", "conv"): "torch's operator switch (torch.backends.cudnn.conv, oneDNN conv)",
    ("suite/health/checks.py", "model"): "a device's GPU model (its name), the column health groups by",
    ("suite/health/peers.py", "model"): "a device's GPU model (its name), the column stragglers group by",
    ("suite/health/expect.py", "model"): "the GPU model an expected figure is for (expectations.yaml's key)",
    ("suite/tools/gpu_check.py", "matmul"): "the out-of-memory and SIGKILL steps run matmul cases as their vehicle",
    ("suite/tools/h200_probe.py", "model"): "a one-off probe of the model family's host-bound batches",
}


def family_names() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from suite.cases import FAMILIES

    return list(FAMILIES)


def is_tooling(path: Path) -> bool:
    # A family's checks.py only: suite/health/checks.py is runtime.
    return TOOLS in path.parents or (path.name == FAMILY_TOOLING and path.parent.parent == SUITE / "cases")


def runtime_modules() -> list[Path]:
    return sorted(p for p in SUITE.rglob("*.py") if not is_tooling(p))


def shared_modules() -> list[Path]:
    """Every module outside a family's own package: these must reach families through the registry only."""
    families = set(family_names())
    cases = SUITE / "cases"
    return sorted(p for p in SUITE.rglob("*.py")
                  if not (p.parent.parent == cases and p.parent.name in families) and p != cases / "__init__.py")


def family_mentions(path: Path, families: list[str] | None = None) -> list[str]:
    """`file:line: 'copy'` for each string constant that is a family's name (or its test function's): the
    way a shared module branches on a family. Prose that mentions a family inside a longer message is not
    family logic and is not counted."""
    names = set(families or family_names())
    wanted = names | {f"test_{name}" for name in names}
    module = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{module}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted
            and (module, node.value) not in NOT_A_FAMILY]


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def complexity() -> tuple[float, list[str]] | None:
    try:
        from radon.complexity import cc_visit
    except ImportError:
        return None
    blocks = []
    for path in sorted(SUITE.rglob("*.py")):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            blocks.append((block.complexity, f"{path.relative_to(ROOT)}:{block.lineno} {block.name}"))
            blocks += [(c.complexity, f"{path.relative_to(ROOT)}:{c.lineno} {c.name}")
                       for c in getattr(block, "closures", [])]
    average = sum(c for c, _ in blocks) / len(blocks)
    return average, [name for c, name in sorted(blocks, reverse=True) if c >= 21]


def plugin_imports_tooling() -> list[str]:
    code = "import json, sys, suite.plugin; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return [m for m in json.loads(out.stdout) if m.startswith("suite.tools") or m.endswith(".checks")]


def timed(args: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    tail = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
    return time.perf_counter() - start, tail


def row(name: str, value: str, target: str, ok: bool) -> None:
    print(f"{'PASS' if ok else 'MISS'}  {name:<44} {value:<22} target {target}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also time the fast and the slow test tier")
    args = parser.parse_args(argv)

    runtime = runtime_modules()
    total = sum(lines(p) for p in runtime)
    biggest = max(runtime, key=lines)
    row("suite/ runtime lines (tooling excluded)", f"{total:,}", f"<= {MAX_RUNTIME_LINES:,}", total <= MAX_RUNTIME_LINES)
    row("largest runtime module", f"{biggest.relative_to(ROOT)} {lines(biggest)}", f"<= {MAX_MODULE_LINES}",
        lines(biggest) <= MAX_MODULE_LINES)
    over = [f"{p.relative_to(ROOT)} ({lines(p)})" for p in SUITE.rglob("*.py") if lines(p) > MAX_MODULE_LINES]
    if over:
        print("      modules over the limit:", ", ".join(sorted(over)))
    cc = complexity()
    if cc is None:
        print("n/a   radon is not installed: pip install radon")
    else:
        average, heavy = cc
        row("radon average CC (suite/, tooling included)", f"{average:.2f}", f"<= {MAX_AVERAGE_CC}",
            average <= MAX_AVERAGE_CC)
        row("functions at CC >= 21", str(len(heavy)), f"<= {MAX_FUNCTIONS_CC_21}", len(heavy) <= MAX_FUNCTIONS_CC_21)
        for name in heavy:
            print("     ", name)
    mentions = [m for p in shared_modules() for m in family_mentions(p)]
    row("family names in shared modules", str(len(mentions)), "0", not mentions)
    for mention in mentions:
        print("     ", mention)
    tooling = plugin_imports_tooling()
    row("tooling modules imported by suite.plugin", str(len(tooling)), "0", not tooling)
    if args.tests:
        fast_s, fast = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
        row("README's test command (fast tier)", f"{fast_s:.0f} s", f"<= {MAX_FAST_TIER_S} s",
            fast_s <= MAX_FAST_TIER_S)
        print("     ", fast)
        slow_s, slow = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow"])
        print(f"info  slow tier                                    {slow_s:.0f} s")
        print("     ", slow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
