"""Write the hand-shaped results fixtures in tests/data/ (run: python tests/data/make_fixtures.py).

`synthetic_results()` is also used by scripts/bench_report.py to fabricate many machines.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
KiB, MiB = 2**10, 2**20
COPY_SIZES = (4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB)
MATMUL_SHAPES = ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192))
PLACEMENT_OPS = ("to_same", "to_other", "clone", "copy_", "empty_like_copy", "to_copy")


def _stats(median: float, rng: random.Random, noise: float = 0.02) -> dict:
    iqr = median * noise * (0.5 + rng.random())
    return {
        "min": median * 0.97,
        "max": median * 1.3,
        "mean": median * 1.01,
        "stddev": iqr * 0.8,
        "rounds": rng.randint(20, 200),
        "median": median,
        "iqr": iqr,
        "q1": median - iqr / 2,
        "q3": median + iqr / 2,
        "iqr_outliers": 1,
        "stddev_outliers": 2,
        "outliers": "2;1",
        "ld15iqr": median * 0.98,
        "hd15iqr": median * 1.05,
        "ops": 1 / median,
        "total": median * 100,
        "iterations": 10,
    }


def _bench(name: str, test: str, extra: dict, median: float, rng: random.Random) -> dict:
    param = name[name.index("[") + 1 : -1]
    return {
        "group": None,
        "name": name,
        "fullname": f"benchmarks/{test}.py::{name}",
        "params": {"case": param},
        "param": param,
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "SyncTimer",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 0.0005,
            "warmup": 100000,
        },
        "stats": _stats(median, rng),
    }


def _machine_info(host: str, gpu: str | None, n_gpus: int, cpu: str) -> dict:
    devices = [
        {"id": "cpu", "kind": "cpu", "name": cpu, "memory_bytes": 512 * 10**9, "cores": 32, "threads": 64}
    ]
    for i in range(n_gpus if gpu else 0):
        devices.append(
            {
                "id": f"cuda:{i}",
                "kind": "cuda",
                "name": gpu,
                "memory_bytes": 150754820096,
                "capability": "9.0",
                "multiprocessors": 132,
                "driver_version": "570.86",
            }
        )
    peers = {f"cuda:{i}": {f"cuda:{j}": True for j in range(n_gpus) if j != i} for i in range(n_gpus)}
    return {
        "node": host,
        "processor": "x86_64",
        "machine": "x86_64",
        "python_version": "3.11.7",
        "python_implementation": "CPython",
        "release": "6.8.0",
        "system": "Linux",
        "cpu": {"brand_raw": cpu, "count": 64},
        "devices": devices,
        "peer_access": peers,
        "software": {
            "torch": "2.13.0",
            "cuda": "12.8" if gpu else None,
            "cudnn": "91000" if gpu else None,
            "nccl": "2.27.3" if n_gpus > 1 else None,
            "python": "3.11.7",
            "suite": "0.1.0",
        },
    }


def synthetic_results(
    host: str,
    gpu: str | None = "NVIDIA H200",
    n_gpus: int = 2,
    speed: float = 1.0,
    seed: int = 0,
    limit: int | None = None,
    cpu: str = "AMD EPYC 9654 96-Core Processor",
    schema_version: int = 1,
) -> dict:
    """A plausible results file for one machine, every family represented; `speed` scales all rates."""
    rng = random.Random(seed)
    gpus = [f"cuda:{i}" for i in range(n_gpus if gpu else 0)]
    devices = ["cpu", *gpus]
    out: list[dict] = []

    def jitter() -> float:
        return speed * (0.95 + 0.1 * rng.random())

    for dev in devices:
        for dtype, peak in (("float32", 50.0), ("bfloat16", 750.0)):
            for m, n, k in MATMUL_SHAPES:
                flops = 2 * m * n * k
                rate = (peak if dev != "cpu" else 1.5) * min(1.0, m / 6000) * jitter()
                extra = {
                    "case": "matmul",
                    "device": dev,
                    "dtype": dtype,
                    "m": m,
                    "n": n,
                    "k": k,
                    "flops": flops,
                    "tflops": rate,
                }
                out.append(
                    _bench(
                        f"test_matmul[{dev}-{dtype}-{m}x{n}x{k}]",
                        "test_matmul",
                        extra,
                        flops / rate / 1e12,
                        rng,
                    )
                )
    pairs = [("cpu", g) for g in gpus] + [(g, "cpu") for g in gpus]
    pairs += [(a, b) for a in gpus for b in gpus]
    for src, dst in pairs:
        for memory in ("pinned", "pageable") if "cpu" in (src, dst) else ("device",):
            for size in COPY_SIZES:
                peak = 55.0 if "cpu" in (src, dst) else (2000.0 if src == dst else 390.0)
                peak *= 0.5 if memory == "pageable" else 1.0
                rate = peak * size / (size + 2 * MiB) * jitter()
                extra = {
                    "case": "copy",
                    "src": src,
                    "dst": dst,
                    "bytes": size,
                    "gbps": rate,
                    "memory": memory,
                    "non_blocking": memory == "pinned",
                    "direction": "uni",
                }
                if src == dst:
                    extra.update(traffic_bytes=2 * size, traffic_gbps=2 * rate)
                out.append(
                    _bench(
                        f"test_copy[{src}->{dst}-{memory}-{size // KiB}KiB]",
                        "test_copy",
                        extra,
                        size / rate / 1e9,
                        rng,
                    )
                )
    place_dev = gpus[0] if gpus else "cpu"
    for op in PLACEMENT_OPS:
        for size in (MiB, 64 * MiB):
            if op == "to_same":
                median, rate = 2e-6 / speed, None
            else:
                rate = (1500.0 if gpus else 20.0) * jitter()
                median = size / rate / 1e9
            extra = {"case": "placement", "op": op, "device": place_dev, "bytes": size, "gbps": rate}
            out.append(
                _bench(
                    f"test_placement[{place_dev}-{op}-{size // MiB}MiB]", "test_placement", extra, median, rng
                )
            )
    for habit, factor in (("small_vs_batched", 40.0), ("sync_per_step", 3.0), ("overlap", 1.6)):
        for variant in ("slow", "fast"):
            base = 1e-3 / speed
            extra = {"case": "habits", "habit": habit, "variant": variant, "pair": habit, "device": place_dev}
            out.append(
                _bench(
                    f"test_habits[{place_dev}-{habit}-{variant}]",
                    "test_habits",
                    extra,
                    base * (factor if variant == "slow" else 1.0),
                    rng,
                )
            )
    if len(gpus) > 1:
        for op, factor in (
            ("all_reduce", 2 * (len(gpus) - 1) / len(gpus)),
            ("all_gather", (len(gpus) - 1) / len(gpus)),
        ):
            for size in COPY_SIZES[1:]:
                algbw = 300.0 * size / (size + 4 * MiB) * jitter()
                extra = {
                    "case": "collectives",
                    "op": op,
                    "bytes": size,
                    "dtype": "float32",
                    "algbw": algbw,
                    "busbw": algbw * factor,
                    "world_size": len(gpus),
                    "backend": "nccl",
                    "ranks_per_node": len(gpus),
                }
                out.append(
                    _bench(
                        f"test_collectives[{op}-{size // KiB}KiB]",
                        "test_collectives",
                        extra,
                        size / algbw / 1e9,
                        rng,
                    )
                )
    for dev in devices:
        rate = (3000.0 if dev != "cpu" else 90.0) * jitter()
        extra = {"case": "model", "model": "resnet50", "device": dev, "batch_size": 64, "samples_per_s": rate}
        out.append(_bench(f"test_model[{dev}-resnet50-64]", "test_model", extra, 64 / rate, rng))
    # A family the report has no dedicated chart for, to exercise the fallback.
    for dev in devices:
        extra = {"case": "latency", "device": dev, "op": "empty_kernel"}
        out.append(_bench(f"test_latency[{dev}-empty_kernel]", "test_latency", extra, 5e-6 / speed, rng))
    if limit is not None:
        out = out[:limit]
    if schema_version == 0:
        for b in out:
            for key in ("tflops", "gbps", "traffic_gbps"):
                b["extra_info"].pop(key, None)
        suite = {"version": "0.0.9", "schema": 0}
    else:
        suite = {
            "version": "9.0.0" if schema_version > 1 else "0.1.0",
            "schema_version": schema_version,
            "config_path": "configs/default.yaml",
            "config": {"devices": "all"},
        }
    return {
        "machine_info": _machine_info(host, gpu, len(gpus), cpu),
        "commit_info": {"id": "0123abcd", "dirty": False, "project": "gpubench", "branch": "main"},
        "benchmarks": out,
        "datetime": "2026-11-29T18:00:00.000000+00:00",
        "version": "5.3.1",
        "suite": suite,
    }


def foreign_results() -> dict:
    """A plain pytest-benchmark file from another project: no suite block, no devices, no extra_info of ours."""
    rng = random.Random(7)
    benches = []
    for name, median in (("test_parse[small]", 2e-5), ("test_parse[large]", 3e-3), ("test_render", 0.012)):
        b = _bench(name if "[" in name else name + "[x]", "test_foo", {}, median, rng)
        b.update(name=name, fullname=f"tests/test_foo.py::{name}", params=None, param=None)
        benches.append(b)
    return {
        "machine_info": {
            "node": "laptop-7",
            "processor": "arm",
            "machine": "arm64",
            "python_version": "3.12.1",
            "cpu": {"brand_raw": "Apple M3"},
        },
        "commit_info": {"id": "feedbeef", "dirty": True},
        "benchmarks": benches,
        "datetime": "2025-01-02T03:04:05",
        "version": "5.1.0",
    }


def write_all() -> None:
    def dump(name: str, data: object) -> None:
        (HERE / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    dump("h200x2.json", synthetic_results("gpu-box-3", n_gpus=2, speed=1.0, seed=1))
    dump(
        "a100x2.json",
        synthetic_results("gpu-box-1", gpu="NVIDIA A100-SXM4-80GB", n_gpus=2, speed=0.5, seed=2),
    )
    dump("cpu_only.json", synthetic_results("laptop-1", gpu=None, seed=3, cpu="Intel Core i7-1185G7"))
    dump("schema0.json", synthetic_results("old-box", n_gpus=1, seed=4, limit=40, schema_version=0))
    dump("newer_schema.json", synthetic_results("future-box", n_gpus=1, seed=5, limit=5, schema_version=99))
    dump(
        "xss.json",
        synthetic_results(
            "<script>alert(1)</script>", n_gpus=1, seed=6, limit=60, cpu="<img src=x onerror=alert(2)>"
        ),
    )
    dump("foreign.json", foreign_results())
    dump("not_object.json", [1, 2, 3])
    dump("no_benchmarks.json", {"machine_info": {"node": "x"}, "version": "5.3.1"})
    (HERE / "empty.json").write_text("", encoding="utf-8")
    full = json.dumps(synthetic_results("cut-box", n_gpus=1, seed=8, limit=10))
    (HERE / "truncated.json").write_text(full[: len(full) // 2], encoding="utf-8")
    # A run killed mid-write: header line, complete benchmark lines, then half a line.
    run = synthetic_results("crash-box", n_gpus=1, seed=9, limit=12)
    header = {"partial": True, **{k: v for k, v in run.items() if k != "benchmarks"}}
    lines = [json.dumps(header)] + [json.dumps(b) for b in run["benchmarks"]]
    lines[-1] = lines[-1][: len(lines[-1]) // 3]
    (HERE / "partial" / "crash.partial.jsonl").parent.mkdir(exist_ok=True)
    (HERE / "partial" / "crash.partial.jsonl").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    write_all()
