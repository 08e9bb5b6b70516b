"""SYNTHETIC fleets for the health tests: a real CPU run (tests/data/real/) copied onto fake GPUs and scaled.

Nothing here was measured on a GPU. Each fake device is a copy of the real CPU run's benchmarks with
`cpu` renamed to `cuda:i`, every rate multiplied (and every time divided) by a seeded factor: ordinary
noise (±3%) and, where asked, a degradation (0.8 = 20% slower).
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

REAL = Path(__file__).parent / "data" / "real" / "cpu_default_run.json"
GPU_NAME = "Synthetic GPU (scaled CPU run)"
RATE_KEYS = ("tflops", "gbps", "traffic_gbps", "samples_per_s", "algbw", "busbw")
TIME_KEYS = ("min", "max", "mean", "median", "q1", "q3", "iqr", "stddev", "ld15iqr", "hd15iqr")
NOISE = 0.03  # the ordinary run-to-run noise an undegraded fleet must not be flagged for


def _rename(value, device: str):
    if isinstance(value, str):
        return value.replace("cpu", device)
    return value


def _scaled(bench: dict, device: str, factor: float) -> dict:
    out = copy.deepcopy(bench)
    extra = out["extra_info"]
    for key in ("device", "src", "dst"):
        if key in extra:
            extra[key] = _rename(extra[key], device)
    out["name"] = out["name"].replace("cpu", device)
    out["fullname"] = out["fullname"].replace("cpu", device)
    for key in RATE_KEYS:
        if isinstance(extra.get(key), (int, float)):
            extra[key] *= factor
    for key in TIME_KEYS:
        if isinstance(out["stats"].get(key), (int, float)):
            out["stats"][key] /= factor
    return out


def machine(
    host: str,
    n_gpus: int = 4,
    seed: int = 0,
    slow: float = 1.0,
    slow_device: int | None = None,
    noise: float = NOISE,
    driver: str = "550.54.15",
    when: str = "2026-11-29T18:00:00+00:00",
    uuid: str | None = None,
) -> dict:
    """One SYNTHETIC results file: `slow` scales the whole machine, or only cuda:`slow_device` if given;
    `uuid` (8 hex digits) gives its GPUs NVML-style UUIDs (GPU-<uuid>-...-<i>)."""
    real = json.loads(REAL.read_text(encoding="utf-8"))
    rng = random.Random(f"{host}-{seed}")
    benches = []
    for i in range(n_gpus):
        device = f"cuda:{i}"
        for bench in real["benchmarks"]:
            factor = 1.0 + rng.uniform(-noise, noise)
            if slow_device is None or slow_device == i:
                factor *= slow
            benches.append(_scaled(bench, device, factor))
    info = copy.deepcopy(real["machine_info"])
    info["node"] = host
    info["devices"] = info["devices"][:1] + [
        {
            "id": f"cuda:{i}",
            "kind": "cuda",
            "name": GPU_NAME,
            "memory_bytes": 80 * 10**9,
            "driver_version": driver,
            **({"uuid": f"GPU-{uuid}-0000-4000-8000-{i:012x}"} if uuid else {}),
        }
        for i in range(n_gpus)
    ]
    return {**real, "machine_info": info, "benchmarks": benches, "datetime": when}


def write(folder: Path, name: str, data: dict) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
