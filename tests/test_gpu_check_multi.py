"""The GPU check's multi-GPU and host-bound rows (suite/tools/gpu_check.py and the families' checks.py), on the
fake multi-GPU platform: what they run, what they judge, and the reference that times several streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from suite.cases.collectives import checks as collectives_checks
from suite.cases.copy import checks as copy_checks
from suite.cases.matmul import checks as matmul_checks
from suite.cases.model import checks as model_checks
from suite.devices import use_platform
from suite.tools import gpu_check, paired
from suite.tools.checkrow import CheckContext
from tests.fakes import FakePlatform


def _ctx(tmp_path, gpus: int, dry_run: bool = False) -> CheckContext:
    return CheckContext(device="cpu" if dry_run else "cuda:0", dry_run=dry_run, workdir=tmp_path, gpus=gpus)


def test_a_span_is_timed_on_every_stream_and_the_slowest_counts(monkeypatch):
    # Two GPUs' streams: each call keeps the first busy 1 ms and the second 3 ms; the host sees neither.
    class Stream:
        def __init__(self, device, per_call_ms):
            self.device, self.per_call_ms, self.clock_ms = device, per_call_ms, 0.0

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self, stream):
            self.stream, self.at_ms = stream, stream.clock_ms

        def elapsed_time(self, end):
            assert end.stream is self.stream, "an event pair on one stream (one device's clock)"
            return end.at_ms - self.at_ms

    streams = [Stream("cuda:0", 1.0), Stream("cuda:1", 3.0)]
    synced = []

    def call():
        for stream in streams:
            stream.clock_ms += stream.per_call_ms

    monkeypatch.setattr("torch.cuda.Event", Event)
    monkeypatch.setattr("suite.devices.synchronize", lambda *devices: synced.append(devices))
    assert paired.span_seconds(call, streams, seconds=0.0) == pytest.approx(3e-3)
    assert synced and all(devices == ("cuda:0", "cuda:1") for devices in synced), "both GPUs drained"
    assert len(synced) == 2 * paired.MIN_SPANS


def test_with_two_gpus_the_copy_step_times_the_peer_pair_both_ways_against_events_on_both(tmp_path, monkeypatch):
    taken = {}

    def timing_truth(family, config, tests, titles, reference):
        taken.update(config=config, titles=titles, reference=reference)
        return [], {}

    for gpus, peer in ((1, False), (2, True), (8, True)):
        ctx = _ctx(tmp_path, gpus)
        monkeypatch.setattr(ctx, "timing_truth", timing_truth)
        copy_checks.gpu_checks(ctx)
        titled = {t for t in taken["titles"].values() if t.startswith("copy peer")}
        assert len(titled) == (2 if peer else 0)
        if peer:
            with use_platform(FakePlatform(gpus=gpus)):
                ids = ctx.case_ids("copy", ctx.write_config(taken["config"]))
            assert set(taken["titles"]) <= set(ids), "every titled case is a case of the config"
            assert {"cuda:0->cuda:1-device-256MiB", "cuda:0<->cuda:1-device-non_blocking-256MiB"} <= set(
                taken["titles"])
    # Peer copies are timed on both GPUs' streams, the host<->GPU copies by events on the GPU as before.
    monkeypatch.setattr(copy_checks, "peer_seconds", lambda *a: "both GPUs")
    monkeypatch.setattr(copy_checks, "event_seconds", lambda *a: "one GPU")
    reference = taken["reference"]
    assert reference("copy", None, {"extra_info": {"path": "peer"}}) == "both GPUs"
    assert reference("copy", None, {"extra_info": {"path": "h2d"}}) == "one GPU"


def test_the_dry_run_enumerates_the_peer_rows_on_a_fake_node(tmp_path, monkeypatch):
    ctx = _ctx(tmp_path, 0, dry_run=True)
    rows = copy_checks._dry_peer_rows(ctx, {"sizes": ["1MiB"], "memory": ["pinned"], "directions": ["uni", "bi"]},
                                      copy_checks._peer_titles("256MiB"))
    assert [r.ok for r in rows] == [None, None] and all("enumerated" in r.note for r in rows)
    wrong = copy_checks._dry_peer_rows(ctx, {"sizes": ["1MiB"], "directions": ["uni", "bi"]},
                                       {"cuda:0->cuda:1-pinned-256MiB": "a title naming no case"})
    assert wrong[0].ok is False, "a title that names no case fails on the CPU, not on the GPU"


@pytest.mark.parametrize("gpus, backend, ranks", [(1, "gloo", 2), (2, "nccl", 2), (8, "nccl", 8), (10, "nccl", 8)])
def test_the_collectives_step_starts_min_8_nccl_ranks_paired_with_a_plain_loop(tmp_path, monkeypatch, gpus, backend,
                                                                               ranks):
    commands = []

    def run_command(cmd, timeout):
        commands.append(cmd)
        return 0, f"started nccl cuda:0 {float(1 << 20)}"

    monkeypatch.setattr(collectives_checks, "run_command", run_command)
    rows = collectives_checks.gpu_checks(_ctx(tmp_path, gpus))
    torchrun = commands[1]
    assert f"--nproc-per-node={ranks}" in torchrun and torchrun[-3:-1] == ["-m", collectives_checks.__name__]
    spec = json.loads(torchrun[-1])
    assert spec["backend"] == backend and spec["alternations"] == (gpu_check.ROUNDS if backend == "nccl" else 1)
    config = yaml.safe_load(Path(spec["config"]).read_text())
    devices = [f"cuda:{i}" for i in range(ranks)] if backend == "nccl" else "cpu"
    assert config["devices"] == devices and config["cases"]["collectives"]["backend"] == backend
    # The fake torchrun wrote nothing: the row says so and fails.
    assert rows[-1].name == f"collectives: {backend} x{ranks} via torchrun" and rows[-1].ok is False


def test_the_plain_loop_pairs_are_judged_for_nccl_and_shown_for_gloo(tmp_path, monkeypatch):
    def run_command(cmd, timeout):
        if "torch.distributed.run" in cmd:
            spec = json.loads(cmd[-1])
            pair = {"family": "collectives", "title": spec["title"], "unit": "GB/s", "reference": "plain dist loop",
                    "target": {"kind": "within", "value": 0.15}, "suite": 100.0, "ref": 104.0}
            Path(spec["out"]).write_text(json.dumps([pair] * 3))
        return 0, f"{float(1 << 20)}"

    monkeypatch.setattr(collectives_checks, "run_command", run_command)
    for gpus, ok in ((2, True), (1, None)):
        row = collectives_checks.gpu_checks(_ctx(tmp_path, gpus))[1]
        assert row.name.endswith("all_reduce " + ("64MiB" if gpus > 1 else "1MiB") + " busbw vs a plain loop")
        assert row.ok is ok and row.pairs == pytest.approx([100 / 104] * 3)


def _all_gpus(tflops: float, per_device: float) -> dict:
    return {"extra_info": {"device": "all-gpus", "precision": "bfloat16", "m": 1024, "n": 1024, "k": 1024,
                           "gpu_count": 2, "tflops": tflops, "slowest_device": "cuda:1",
                           "per_device_tflops": {"cuda:0": per_device, "cuda:1": per_device}}}


def test_the_all_gpus_aggregate_is_judged_against_the_sum_of_its_per_device_rates(tmp_path):
    ctx = _ctx(tmp_path, 2)
    concurrent, serial = matmul_checks.quick_checks(ctx, [_all_gpus(190.0, 100.0), _all_gpus(105.0, 100.0)])
    assert concurrent.ok is True and concurrent.reference == 200.0
    assert serial.ok is False, "one thread issuing for every GPU reads about one GPU's rate"
    assert matmul_checks.quick_checks(_ctx(tmp_path, 1), []) == [], "one GPU: the 'not checked' row says it"
    (missing,) = matmul_checks.quick_checks(ctx, [])
    assert missing.ok is False
    (dry,) = matmul_checks.quick_checks(_ctx(tmp_path, 0, dry_run=True), [])
    assert dry.ok is None and "all-gpus-bfloat16-1024x1024x1024" in dry.note


def test_lenet_and_the_mlp_at_batch_256_must_say_host_bound(tmp_path):
    def model(name, bound, device="cuda:0"):
        return {"extra_info": {"device": device, "model": name, "batch_size": 256, "bound": bound,
                               "host_share": 0.98}}

    rows = model_checks.quick_checks(_ctx(tmp_path, 1), [model("lenet", "host"), model("mlp", "device"),
                                                         model("mlp", "host", device="cpu")])
    assert [(r.name, r.ok) for r in rows] == [("model lenet b256 (quick config): bound", True),
                                              ("model mlp b256 (quick config): bound", False)]
    assert rows[0].suite == 0.98
    dry = model_checks.quick_checks(_ctx(tmp_path, 0, dry_run=True), [model("lenet", None, device="cpu")])
    assert [r.ok for r in dry] == [None, None], "the CPU records no bound: shown, not judged"


def test_the_large_matmul_must_say_device_bound(tmp_path, monkeypatch):
    from suite.tools.checkrow import bound_row

    ctx = _ctx(tmp_path, 1)
    assert bound_row(ctx, "m", {"extra_info": {"bound": "device", "host_share": 0.1}}, "device").ok is True
    assert bound_row(ctx, "m", {"extra_info": {"bound": "host", "host_share": 0.9}}, "device").ok is False
    assert bound_row(ctx, "m", {"extra_info": {}}, "device").ok is False, "a GPU result always records it"


@pytest.mark.parametrize("gpus, says", [
    (1, ["needs two GPUs"]),
    (2, ["peer copies below 256MiB"]),
    (8, ["54 ordered pairs", "cuda:1-cuda:7's own cases", "all 8 at once"]),
    (10, ["NCCL with 10 ranks"]),
])
def test_what_the_check_did_not_run_is_one_row_on_every_node(gpus, says):
    (row,) = gpu_check.not_checked_rows(gpus)
    assert row.ok is None and all(s in row.note for s in says), row.note


def test_the_multi_gpu_rows_are_in_the_estimate_of_a_node_of_two_and_more():
    one, two = (sum(gpu_check.step_estimate(s, n) for s in ("copy", "collectives")) for n in (1, 2))
    assert two - one == pytest.approx(copy_checks.MULTI_GPU_S + collectives_checks.MULTI_GPU_S) and two > one
