"""What the GPU check writes under OUTDIR: table.txt, check.json (its steps, rows and the node's facts), and
results.json, every suite run of the check merged into one pytest-benchmark file."""

from __future__ import annotations

import copy
import json
import platform
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from suite.tools.checkrow import CheckRow

# Schema of check.json; raise it when a key changes meaning.
CHECK_SCHEMA = 2
# The merged results file under OUTDIR (tests/data/real/h200_check.json once committed).
RESULTS_NAME = "results.json"


@dataclass
class Step:
    name: str
    seconds: float
    ok: bool
    note: str = ""
    ran: bool = True
    estimate_s: float | None = None


# Added to extra_info when the JSON is written (suite.cases.ceiling.annotate) from that run's own
# ceilings: the merged file recomputes them from all of the check's runs.
ANNOTATION_KEYS = ("ceiling_tflops", "pct_of_ceiling", "datasheet_tflops", "pct_of_datasheet",
                   "datasheet_gpu")


def merge_results(runs: list[tuple[str, dict, dict]]) -> dict | None:
    """One pytest-benchmark JSON from the check's suite runs [(step, config as written, results JSON)]: one
    benchmark per case (its fullname), the run whose median is the median of that case's runs (the check's
    alternations; the lower one of an even count), annotated anew against the ceilings of all the runs."""
    from suite.cases.ceiling import annotate  # the plugin's annotation of every results file

    runs = [(step, config, data) for step, config, data in runs if isinstance(data.get("benchmarks"), list)]
    if not runs:
        return None
    seen: dict[str, list[dict]] = {}
    for _, _, data in runs:
        for bench in data["benchmarks"]:
            seen.setdefault(str(bench.get("fullname") or bench.get("name")), []).append(bench)
    benchmarks = []
    for group in seen.values():
        ordered = sorted(group, key=lambda b: b["stats"]["median"])
        bench = copy.deepcopy(ordered[(len(ordered) - 1) // 2])
        for key in ANNOTATION_KEYS:
            bench.get("extra_info", {}).pop(key, None)
        benchmarks.append(bench)
    first, last = runs[0][2], runs[-1][2]
    block = dict(last.get("suite") or {})
    block.pop("config", None)  # each run had its own; they are listed under gpu_check.runs
    devices = list(dict.fromkeys(d for _, _, data in runs
                                 for d in (data.get("suite") or {}).get("devices", [])))
    block.update(config_path=f"suite.gpu_check ({len(runs)} runs merged)", devices=devices, gpu_check={
        "rule": "one benchmark per case: the run whose median is the median of the check's runs of it",
        "runs": [{"step": step, "config": config, "benchmarks": len(data["benchmarks"])}
                 for step, config, data in runs]})
    merged = {"machine_info": last.get("machine_info", {}), "commit_info": first.get("commit_info", {}),
              "benchmarks": benchmarks, "datetime": first.get("datetime"), "version": first.get("version"),
              "suite": block}
    annotate(merged)
    return merged


def facts() -> dict:
    """What the node has: Python, torch and CUDA, the inventory (driver, PCIe, NVML), and which of the suite's
    needs import (a bare node lacks pydantic; the wheels scripts/prepare-device.sh carried provide it)."""
    import importlib.util

    from suite.devices import inventory
    from suite.requirements import installed

    # module -> the distribution that provides it (its version is the one this Python imports: a carried
    # wheel in front of the node's own)
    modules = {"torch": "torch", "pydantic": "pydantic", "pydantic_core": "pydantic-core",
               "jsonschema": "jsonschema", "pytest": "pytest", "pytest_benchmark": "pytest-benchmark",
               "pytest_timeout": "pytest-timeout", "pandas": "pandas", "matplotlib": "matplotlib",
               "jinja2": "jinja2", "yaml": "pyyaml", "pynvml": "nvidia-ml-py", "cpuinfo": "py-cpuinfo",
               "hypothesis": "hypothesis", "pyarrow": "pyarrow"}
    found = {}
    for name in modules:
        spec = importlib.util.find_spec(name)
        found[name] = spec.origin if spec is not None else None
    return {"python": platform.python_version(), "executable": sys.executable,
            "platform": platform.platform(), "machine": platform.machine(),
            "modules": found, "versions": {dist: installed(dist) for dist in modules.values()},
            "machine_info": inventory().as_machine_info()}


def summary(steps: list[Step], rows: list[CheckRow]) -> str:
    verdicts = Counter(r.verdict for r in rows)
    passed, failed, shown = verdicts["PASS"], verdicts["FAIL"], verdicts["n/a"]
    broken = [s.name for s in steps if s.ran and not s.ok]
    skipped = [s.name for s in steps if not s.ran]
    text = f"{len(rows)} rows: {passed} PASS, {failed} FAIL, {shown} not judged"
    if skipped:
        text += f", {len(skipped)} NOT RUN"
    text += "; " + ("all checks that ran passed" if not failed and not broken
                    else f"{failed + len(broken)} failure(s)")
    if skipped:
        text += (f"\nNOT RUN (out of time, not a failure): {', '.join(skipped)}; raise GPU_CHECK_BUDGET_S "
                 f"(scripts/gpu-check.sh) or --budget-s to run them")
    return text


def format_table(steps: list[Step], rows: list[CheckRow]) -> str:
    lines = ["steps (seconds, estimate):"]
    for s in steps:
        state = "ok  " if s.ok and s.ran else ("--  " if not s.ran else "FAIL")
        estimate = f"~{s.estimate_s:3.0f}" if s.estimate_s is not None else "    "
        lines.append(f"  {s.seconds:6.1f} {estimate}  {state}  {s.name}{': ' + s.note if s.note else ''}")
    lines.append("")
    lines.append(f"{'check':<58} {'suite':>11} {'reference':>11} {'unit':<9} {'ratio':>6}  verdict  note")
    for row in rows:
        def fmt(v):
            return f"{v:11.4g}" if isinstance(v, (int, float)) else f"{'-':>11}"

        ratio = f"{row.ratio:6.3f}" if row.ratio is not None else f"{'-':>6}"
        lines.append(f"{row.name:<58} {fmt(row.suite)} {fmt(row.reference)} {row.unit:<9} {ratio}  "
                     f"{row.verdict:<7}  {row.note}")
    lines.append("")
    lines.append(summary(steps, rows))
    return "\n".join(lines)


def write_files(out: Path, info: dict, steps: list[Step], rows: list[CheckRow], code: int | None) -> str:
    table = format_table(steps, rows)
    (out / "table.txt").write_text(table + "\n", encoding="utf-8")
    data = {"schema_version": CHECK_SCHEMA, **info, "exit_code": code, "steps": [asdict(s) for s in steps],
            "rows": [r.as_dict() for r in rows]}
    (out / "check.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    return table
