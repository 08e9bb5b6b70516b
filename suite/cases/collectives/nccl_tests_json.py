"""nccl-tests' JSON output (`-J/--output_file`, nccl-tests 2.17.3 and later) read into nccl_tests runs.

The format is nccl-tests' src/util.cu (jsonOutputInit, writeDeviceReport, writeBenchmarkLine*,
writePerIterReport, writeResultFooter), file version 1 to 3: `{"version", "args": [argv...], "nccl_version":
CODE, "config": {"nthreads", "ngpus", "iterations", ..., "devices": [{"rank", "hostname", "device",
"device_hex", "device_info"}]}, "results": [{"size", "count", "type", "redop", "root", "out_of_place": {"time"
or "cpu_time", "alg_bw", "bus_bw", "nwrong"}, "out_of_place_per_iter": {"min_us", "max_us", "avg_us", "p50_us",
"p95_us", "p99_us", "stdev_us", "cv_pct", "times_us"}, "in_place": ..., ...}], "out_of_bounds": {"count"},
"average_bus_bandwidth": ...}`. The collective is the binary's name in `args[0]`. `devices` holds one entry
per process (its first rank): a process driving several GPUs (-g/-t) lists only its first.
"""

from __future__ import annotations

import json
from pathlib import Path

from suite.cases.collectives.nccl_tests import DEFAULT_ITERS, Run, nccl_version, results

# JSON key -> the text output's column name, so both formats reach one reader.
GROUP_KEYS = {"time": "time", "cpu_time": "cputime", "alg_bw": "algbw", "bus_bw": "busbw", "nwrong": "#wrong"}
PER_ITER_KEYS = {"min_us": "i_min", "max_us": "i_max", "p99_us": "i_p99", "cv_pct": "i_cv%", "times_us": "times"}
MODES = (("out_of_place", "outofplace"), ("in_place", "inplace"))


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _group(result: dict, key: str) -> dict | None:
    group = result.get(key)
    if not isinstance(group, dict):
        return None  # null: trace replay's in-place only
    out = {name: _number(group.get(k)) for k, name in GROUP_KEYS.items() if k in group}
    per_iter = result.get(f"{key}_per_iter")
    if isinstance(per_iter, dict):
        out |= {name: per_iter.get(k) if k == "times_us" else _number(per_iter.get(k))
                for k, name in PER_ITER_KEYS.items() if k in per_iter}
    return out


def runs_from_json(text: str) -> tuple[list[Run], str | None]:
    """([one Run], problem)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return [], "nccl-tests JSON that does not parse (cut short?)"
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return [], "nccl-tests JSON without a results list (run stopped before its first size?)"
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    args = [str(a) for a in data.get("args") or []]
    bounds = data.get("out_of_bounds")
    run = Run(hint=" ".join(args[:1]), iters=int(config.get("iterations") or DEFAULT_ITERS),
              finished="end_time" in data, ranks=_ranks(config),
              out_of_bounds=int(bounds.get("count") or 0) if isinstance(bounds, dict) else 0,
              nccl=nccl_version(data["nccl_version"]) if isinstance(data.get("nccl_version"), int) else "")
    _read_rows(data["results"], run)
    return [run], None


def _read_rows(results: list, run: Run) -> None:
    """Each result as the text's row: its fields, then its out-of-place and in-place groups."""
    for result in results:
        if not isinstance(result, dict) or _number(result.get("size")) is None:
            run.bad += 1
            continue
        fields = {k: str(result[k]).strip() for k in ("size", "count", "type", "redop", "root") if k in result}
        groups = [(mode, g) for key, mode in MODES if (g := _group(result, key)) is not None]
        run.rows.append((fields, groups))
    launch = any("cputime" in g for _, groups in run.rows for _, g in groups)
    run.columns = ["size", "count", "type", "redop", "root", "cputime" if launch else "time"]


def _ranks(config: dict) -> dict[int, tuple[str, int, str, str]]:
    """rank -> (host, device, bus, name); a process's GPUs follow its first (common.cu: cudaDev)."""
    per_process = int(config.get("nthreads") or 1) * int(config.get("ngpus") or 1)
    ranks = {}
    for entry in config.get("devices") or []:
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int):
            for i in range(per_process):
                ranks[entry["rank"] + i] = (str(entry.get("hostname") or ""), int(entry.get("device") or 0) + i,
                                            str(entry.get("device_hex") or "") if i == 0 else "",
                                            str(entry.get("device_info") or ""))
    return ranks


def recognises(text: str) -> bool:
    """Only nccl-tests' JSON holds an `nccl_version` beside its `results` (after `env`, which can be long)."""
    return text.lstrip().startswith("{") and '"nccl_version"' in text and '"results"' in text


def parse(path: Path, text: str, warnings: list[str]) -> tuple[dict | None, str | None]:
    """(results data, problem) of nccl-tests' JSON output."""
    runs, problem = runs_from_json(text)
    return (None, problem) if problem else results(path, runs, warnings, {"nccl-tests": "JSON output"})
