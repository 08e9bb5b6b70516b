"""What one run of the GPU check showed, kept as it came: its files under tests/data/real/ and a section of
docs/evidence.md written from them, so no figure there is typed by hand (docs/gpu-check.md).

    python -m suite.tools.evidence keep OUTDIR [--name h200]   # after scripts/gpu-check.sh OUTDIR on the GPU node
    python -m suite.tools.evidence show [--name h200]          # the evidence section the kept files give
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

from suite.cases import FAMILIES, family_part
from suite.errors import UserError
from suite.tools import ROOT

REAL = ROOT / "tests" / "data" / "real"
# The page the sections are written to; the README links it and quotes its headline figures.
PAGE = ROOT / "docs" / "evidence.md"
# OUTDIR's file -> the kept file's name ({name}: the node, e.g. h200). results.json and quick.json are
# pytest-benchmark files (report and compare load them); check.json is the check's table and the node's facts.
KEPT = {"results.json": "{name}_check.json", "quick.json": "{name}_quick.json",
        "check.json": "{name}_gpu_check.json"}
START = "<!-- evidence:{name} start (python -m suite.tools.evidence keep writes this section; do not edit) -->"
END = "<!-- evidence:{name} end -->"
NOT_YET = """\
**Status:** the suite has not yet run on a real GPU. Its CUDA paths (pinned and non_blocking copies, side
streams, TF32 switches, NVML, NCCL) are tested with a fake multi-GPU machine and on the CPU; the first GPU run
will use `scripts/gpu-check.sh` ([docs/gpu-check.md](docs/gpu-check.md)). One GPU cannot check peer copies,
all-GPUs-at-once or NCCL with two or more ranks; they stay covered by the fake multi-GPU tests."""
ONE_GPU = ("One GPU cannot check peer copies, all-GPUs-at-once or NCCL with two or more ranks; they stay "
           "covered by\nthe fake multi-GPU tests.")
def kept_paths(name: str, real: Path = REAL) -> dict[str, Path]:
    return {source: real / pattern.format(name=name) for source, pattern in KEPT.items()}


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found; run scripts/gpu-check.sh OUTDIR on the GPU node first") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not readable JSON ({exc}); keep the files of a run that finished") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object; keep the files scripts/gpu-check.sh wrote")
    return data


def keep(out: Path, name: str = "h200", allow_dry_run: bool = False, real: Path = REAL,
         page: Path | None = PAGE) -> list[Path]:
    """Copy a check's files from OUTDIR under `real` byte for byte, after checking that report and compare
    load them, and rewrite the page's section from them. Returns the kept files."""
    sources = _one_run(out, allow_dry_run)
    if page is not None:
        _require_markers(page, name)
    real.mkdir(parents=True, exist_ok=True)
    kept = []
    for source, target in kept_paths(name, real).items():
        if source in sources:
            shutil.copyfile(out / source, target)
            kept.append(target)
        else:  # a kept file from an earlier run would mix two runs
            target.unlink(missing_ok=True)
    if page is not None:
        write_section(page, name, section(name, real))
    return kept


def _one_run(out: Path, allow_dry_run: bool) -> list[str]:
    """OUTDIR's files to keep; a UserError unless they are one GPU run's (a dry run's where allowed) that
    report and compare load."""
    from suite.results import load_results

    check = _read(out / "check.json")
    if check.get("dry_run") and not allow_dry_run:
        raise UserError(f"{out}: a dry run (no GPU); keep the files of scripts/gpu-check.sh without --dry-run")
    sources = [source for source in KEPT if (out / source).is_file()]
    if "results.json" not in sources:
        raise UserError(f"{out}: no results.json; the check measured nothing to keep (see its gpu-check.log)")
    for source in sources:
        if source != "check.json" and load_results([out / source]).table.empty:
            raise UserError(f"{out / source}: holds no results that report and compare can read")
    # Files of one run only: results of steps this check did not run were left by an earlier one.
    ran = {s.get("name") for s in check.get("steps", []) if s.get("ran", True)}
    results_steps = {r.get("step") for r in _read(out / "results.json").get("suite", {}).get("gpu_check", {})
                     .get("runs", [])}
    foreign = sorted(str(s) for s in results_steps - ran) + (
        ["quick config"] if "quick.json" in sources and "quick config" not in ran else [])
    if foreign:
        raise UserError(f"{out}: results of steps this check did not run ({', '.join(foreign)}) are left from an "
                        "earlier run; rerun scripts/gpu-check.sh into an empty OUTDIR")
    return sources


# --- the evidence section ---------------------------------------------------------------------------------


def _benchmarks(path: Path) -> list[dict]:
    return list(_read(path).get("benchmarks") or []) if path.is_file() else []


def fmt(value: float | None) -> str:
    """4 significant digits below 1000, whole numbers grouped above: 0.1905, 57.3, 10,789."""
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _device_filter(benchmarks: list[dict]):
    """Figures of the accelerator; of the CPU only where nothing else was measured (a dry run)."""
    def devices(info):
        return {str(info.get(k)) for k in ("device", "src", "dst") if info.get(k) is not None}

    gpu = any(d != "cpu" for b in benchmarks for d in devices(b["extra_info"]))
    return (lambda info: any(d != "cpu" for d in devices(info))) if gpu else (lambda info: True)


def against(info: dict, ceiling: bool = True) -> str:
    """What a compute figure is set against: % of the datasheet and (`ceiling`) of the measured ceiling."""
    parts = []
    if info.get("pct_of_datasheet") is not None:
        parts.append(f"{info['pct_of_datasheet']:.0f}% of the datasheet's {fmt(info['datasheet_tflops'])}")
    if ceiling and info.get("pct_of_ceiling") is not None:
        parts.append(f"{info['pct_of_ceiling']:.0f}% of the measured ceiling")
    return "; ".join(parts)


def best_per_precision(results: list[tuple[dict, dict]], metric: str) -> dict[str, dict]:
    """Of compute results on one device, the one with the largest `metric` per precision."""
    best: dict[str, dict] = {}
    for i, _ in results:
        if i.get("tflops") is None or i.get("gpus"):
            continue
        key = i.get("precision") or i.get("dtype")
        if key not in best or i[metric] > best[key][metric]:
            best[key] = i
    return best


def _figures(benchmarks: list[dict]) -> list[tuple[str, str, str]]:
    """(what, figure, against) rows: each family's headline figures (its checks module's `headline`), in the
    registry's order."""
    keep = _device_filter(benchmarks)
    by_family: dict[str, list[tuple[dict, dict]]] = {}
    for b in benchmarks:
        if keep(b["extra_info"]):
            by_family.setdefault(b["extra_info"].get("case"), []).append((b["extra_info"], b["stats"]))
    rows: list[tuple[str, str, str]] = []
    for name in FAMILIES:
        headline = getattr(family_part(name, "checks"), "headline", None)
        if headline is not None and by_family.get(name):
            rows += headline(by_family[name])
    return rows


def section(name: str = "h200", real: Path = REAL) -> str:
    """The evidence section the kept files of `name` give, or the not-yet-run status where there are none."""
    paths = kept_paths(name, real)
    if not paths["check.json"].is_file():
        return NOT_YET
    check = _read(paths["check.json"])
    results = _read(paths["results.json"]) if paths["results.json"].is_file() else {}
    benchmarks = _benchmarks(paths["results.json"])
    seen = {(b["group"], b["param"]) for b in benchmarks}
    benchmarks += [b for b in _benchmarks(paths["quick.json"]) if (b["group"], b["param"]) not in seen]
    machine = results.get("machine_info") or check.get("facts", {}).get("machine_info") or {}
    lines = [_measured_on(check, machine, paths), ""]
    lines += _table(("measured", "figure", "against"), ("---",) * 3,
                    [tuple(map(_cell, row)) for row in _figures(benchmarks)])
    lines += _table(("check", "suite", "reference", "unit", "ratio", "verdict", "note"),
                    ("---", "---:", "---:", "---", "---:", "---", "---"),
                    [_check_row(r) for r in check.get("rows") or []])
    lines.append(ONE_GPU)
    return "\n".join(lines)


def _table(header: tuple[str, ...], align: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A markdown table and the blank line after it; nothing where there are no rows."""
    if not rows:
        return []
    return [_md_row(header), _md_row(align), *map(_md_row, rows), ""]


def _md_row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"


def _check_row(r: dict) -> tuple[str, ...]:
    ratio = f"{r['ratio']:.3f}" if isinstance(r.get("ratio"), (int, float)) else "–"
    return (_cell(r["name"]), fmt(r.get("suite")), fmt(r.get("reference")), _cell(r.get("unit", "")), ratio,
            _cell(r.get("verdict", "")), _cell(r.get("note", "")))


def _measured_on(check: dict, machine: dict, paths: dict[str, Path]) -> str:
    """The section's first paragraph: the GPU and its software, when and how the check ended, its files."""
    gpu = next((d for d in machine.get("devices", []) if d.get("kind") not in (None, "cpu")), None)
    software = machine.get("software", {})
    what = "a dry run on the CPU (no GPU)" if check.get("dry_run") else (
        f"one {gpu['name']}" if gpu else "a machine with no GPU")
    node = f" ({', '.join(_gpu_facts(gpu))})" if gpu else ""  # _gpu_facts names the memory at least
    stack = ", ".join(f"{k} {software[k]}" for k in ("torch", "cuda", "cudnn", "nccl", "python")
                      if software.get(k))
    files = ", ".join(f"[`{p.relative_to(ROOT)}`]({os.path.relpath(p, PAGE.parent)})" if p.is_relative_to(ROOT)
                      else p.name for p in paths.values() if p.is_file())
    took = f", {check['seconds']:.0f} s" if isinstance(check.get("seconds"), (int, float)) else ""
    return (f"**Measured on {what}**{node}; {stack}. "
            f"`scripts/gpu-check.sh`, {str(check.get('started', ''))[:10]}{took}: {_ended(check)}. "
            f"The files, as the check wrote them: {files}.")


def _gpu_facts(gpu: dict) -> list[str]:
    """The GPU's memory, driver, power limit, PCIe and NVLinks, as far as the inventory knows them."""
    node = [f"{gpu.get('memory_bytes', 0) / 2**30:.0f} GiB"]
    for key, template in (("driver_version", "driver {}"), ("power_limit_w", "{:.0f} W limit"),
                          ("pcie_gen_max", "PCIe gen {}")):
        if gpu.get(key) is not None:
            node.append(template.format(gpu[key]))
    if isinstance(gpu.get("nvlinks_active"), int) and gpu["nvlinks_active"]:
        switch = " into NVSwitches" if gpu.get("nvlinks_to_switch") == gpu["nvlinks_active"] else ""
        node.append(f"{gpu['nvlinks_active']} NVLinks active{switch} (NVML)")
    return node


def _ended(check: dict) -> str:
    code = check.get("exit_code")
    ended = {0: "every check that ran passed", 1: "a check failed", None: "cut short by the hard stop"}.get(
        code, f"exit {code}")
    if check.get("only"):
        ended += f" (a rerun of only: {', '.join(check['only'])})"
    return ended


def _markers(name: str) -> tuple[str, str]:
    return START.format(name=name), END.format(name=name)


def read_section(page: Path, name: str = "h200") -> str | None:
    """The page's section for `name` as it stands, or None where it has no markers."""
    start, end = _markers(name)
    found = re.search(re.escape(start) + r"\n(.*?)\n?" + re.escape(end), page.read_text(encoding="utf-8"),
                      re.DOTALL)
    return found.group(1) if found else None


def section_names(page: Path = PAGE) -> list[str]:
    """The names of the evidence sections the page has markers for, in order (h200 first where it is)."""
    pattern = re.escape(START).replace(re.escape("{name}"), r"([\w.-]+)")
    return re.findall(pattern, page.read_text(encoding="utf-8"))


def _require_markers(page: Path, name: str) -> None:
    if read_section(page, name) is None:
        start, end = _markers(name)
        raise UserError(f"{page}: no '{start}' ... '{end}' markers; put them where the section goes")


def write_section(page: Path, name: str, text: str) -> None:
    _require_markers(page, name)
    start, end = _markers(name)
    current = page.read_text(encoding="utf-8")
    pattern = re.escape(start) + r"\n.*?\n?" + re.escape(end)
    page.write_text(re.sub(pattern, lambda _: f"{start}\n{text}\n{end}", current, count=1, flags=re.DOTALL),
                      encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.tools.evidence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    keep_p = sub.add_parser("keep", help="copy a GPU check's files under tests/data/real/ and rewrite the "
                                         "evidence page's section from them")
    keep_p.add_argument("outdir", type=Path, help="the OUTDIR scripts/gpu-check.sh wrote")
    keep_p.add_argument("--allow-dry-run", action="store_true", help="keep a dry run's files (tests only)")
    show_p = sub.add_parser("show", help="print the evidence section the kept files give")
    for p in (keep_p, show_p):
        p.add_argument("--name", default="h200", help="the node's name in the kept files (default h200)")
    args = parser.parse_args(argv)
    try:
        if args.command == "keep":
            for path in keep(args.outdir, args.name, args.allow_dry_run):
                print(f"kept {path.relative_to(ROOT)}")
            print(f"{PAGE.relative_to(ROOT)}: the {args.name} section rewritten from them")
        else:
            print(section(args.name))
    except UserError as exc:
        print(f"evidence: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
