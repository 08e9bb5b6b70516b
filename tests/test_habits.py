"""Transfer habits: slow/fast pairs of equal work, skip reasons on the CPU, checks that catch wrong results."""

from __future__ import annotations

import pytest
import torch

from suite.cases import SkipCase
from suite.cases.habits import measure as habits
from suite.config import parse_config
from suite.devices import memory, use_platform
from suite.errors import UserError
from tests.fakes import FakePlatform


class PinnedFakePlatform(FakePlatform):
    def supports_pinned_memory(self) -> bool:
        return True


def config(**section):
    base = {"chunk": "4KiB", "chunks": 8, "steps": 5, "step_matmul": 16, "readers": ["item", "print"]}
    return parse_config({"cases": {"habits": {**base, **section}}}, "test.yaml")


def cases_of(devices, **section):
    with use_platform(FakePlatform(gpus=sum(d.startswith("cuda") for d in devices))):
        return habits.enumerate_cases(config(**section), list(devices))


def test_every_habit_is_a_slow_fast_pair_of_equal_work():
    cases = cases_of(["cpu", "cuda:0"])
    pairs: dict[str, list] = {}
    for case in cases:
        pairs.setdefault(case.info["pair"], []).append(case)
    assert set(pairs) == {
        "small_vs_batched:cpu->cpu",
        "small_vs_batched:cpu->cuda:0",
        "sync_per_step:cpu:item",
        "sync_per_step:cpu:print",
        "sync_per_step:cuda:0:item",
        "sync_per_step:cuda:0:print",
        "overlap:cpu",
        "overlap:cuda:0",
    }
    for pair, (slow, fast) in pairs.items():
        assert (slow.info["role"], fast.info["role"]) == ("slow", "fast"), pair
        assert (slow.info["variant"], fast.info["variant"]) == habits.VARIANTS[slow.info["habit"]]
        same = {k: v for k, v in slow.info.items() if k not in ("variant", "role")}
        assert same == {k: v for k, v in fast.info.items() if k not in ("variant", "role")}, pair
        assert slow.devices == fast.devices
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    assert "cpu->cuda:0-small_vs_batched-many_small-8x4KiB" in ids
    assert "cpu->cuda:0-small_vs_batched-one_batched-1x32KiB" in ids
    assert "cuda:0-sync_per_step-print-every_step-5steps" in ids
    gpu_small = next(c for c in cases if c.info["pair"] == "small_vs_batched:cpu->cuda:0")
    assert gpu_small.devices == ("cpu", "cuda:0") and gpu_small.info["memory"] == "pinned"


def test_cpu_skips_say_why_and_keep_what_means_something():
    cases = cases_of(["cpu"])
    with use_platform(FakePlatform(gpus=0)):
        reasons = {c.info["habit"]: habits.skip_reason(c) for c in cases}
    assert reasons["small_vs_batched"] is None
    assert "the CPU runs torch ops synchronously" in reasons["sync_per_step"]
    assert "overlap needs an accelerator" in reasons["overlap"]
    overlap = next(c for c in cases if c.info["habit"] == "overlap")
    with pytest.raises(SkipCase, match="overlap needs an accelerator"):
        habits.build(overlap, config())


def test_pinned_and_streams_skips_on_accelerators():
    cases = cases_of(["cpu", "cuda:0"])
    small = next(c for c in cases if c.info["pair"] == "small_vs_batched:cpu->cuda:0")
    overlap = next(c for c in cases if c.info["pair"] == "overlap:cuda:0")
    with use_platform(FakePlatform(gpus=1)):
        assert "pinned host memory needs a CUDA or XPU device" in habits.skip_reason(small)
        assert "pinned host memory" in habits.skip_reason(overlap)
    with use_platform(PinnedFakePlatform(gpus=1)):
        assert habits.skip_reason(small) is None and habits.skip_reason(overlap) is None
    with use_platform(FakePlatform(gpus=0)):
        mps = habits.enumerate_cases(config(memory="pageable"), ["mps"])
        reasons = {c.info["habit"]: habits.skip_reason(c) for c in mps}
    assert reasons["overlap"] == "overlap uses CUDA streams; mps is not a CUDA device"
    assert reasons["small_vs_batched"] is None and reasons["sync_per_step"] is None


@pytest.mark.parametrize("variant", ["many_small", "one_batched"])
def test_small_vs_batched_on_cpu_copies_everything(variant, monkeypatch):
    case = next(c for c in cases_of(["cpu"]) if c.info.get("variant") == variant)
    work = habits.build(case, config())
    assert work.bytes == 8 * 4096
    work.check()
    real_copy, calls = torch.Tensor.copy_, []

    def drop_first_copy(self, src, non_blocking=False):
        calls.append(1)
        return self if len(calls) == 1 else real_copy(self, src, non_blocking=non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", drop_first_copy)
    with pytest.raises(
        AssertionError, match=r"4096 of 32768 bytes differ" if variant == "many_small" else "32768 of"
    ):
        work.check()


@pytest.mark.parametrize("variant", ["every_step", "once"])
def test_sync_per_step_reads_as_named_and_checks_its_result(variant, monkeypatch):
    case = next(
        c for c in cases_of(["cpu"]) if c.info.get("variant") == variant and c.info.get("reader") == "item"
    )
    # On the CPU the case is skipped; the loop itself runs anywhere, so its logic is tested here.
    work = habits._sync_per_step(case)
    assert work.flops == 5 * 2 * 16**3
    work.check()
    reads = []
    real_read = habits._read
    monkeypatch.setattr(
        habits, "_read", lambda reader, value: reads.append(reader) or real_read(reader, value)
    )
    work.fn()
    assert reads == ["item"] * (6 if variant == "every_step" else 1)
    work.fn = lambda: None  # a loop that computed nothing leaves the total at zero
    with pytest.raises(AssertionError, match="loss sum 0 vs float64"):
        work.check()


def test_print_reader_formats_the_tensor_without_output(capsys):
    assert habits._read("print", torch.tensor(1.5)) == 0.0
    assert habits._read("numpy", torch.tensor(2.5)) == 2.5
    assert habits._read("float", torch.tensor(3.5)) == 3.5
    assert capsys.readouterr().out == ""


def test_config_errors_and_cpu_override():
    with pytest.raises(
        UserError, match=r"cases.habits.habits\[0\]: 'sync' is not a habit; allowed: small_vs_batched"
    ):
        parse_config({"cases": {"habits": {"habits": ["sync"]}}}, "x.yaml")
    with pytest.raises(UserError, match=r"cases.habits.readers\[0\]: 'log' is not a scalar reader"):
        parse_config({"cases": {"habits": {"readers": ["log"]}}}, "x.yaml")
    with pytest.raises(UserError, match=r"cases.habits.chunk: '64kb/s' is not a size"):
        parse_config({"cases": {"habits": {"chunk": "64kb/s"}}}, "x.yaml")
    with pytest.raises(UserError, match=r"cases.habits.chunks: 0 is invalid"):
        parse_config({"cases": {"habits": {"chunks": 0}}}, "x.yaml")
    cfg = parse_config(
        {"cases": {"habits": {"chunk": "64KiB", "cpu": {"chunk": "4KiB", "habits": ["small_vs_batched"]}}}}
    )
    with use_platform(FakePlatform(gpus=1)):
        cases = habits.enumerate_cases(cfg, ["cpu", "cuda:0"])
    assert {c.info["chunk"] for c in cases if c.info["device"] == "cpu"} == {4096}
    assert {c.info["habit"] for c in cases if c.info["device"] == "cpu"} == {"small_vs_batched"}
    assert {
        c.info.get("chunk")
        for c in cases
        if c.info["habit"] == "small_vs_batched" and c.info["device"] != "cpu"
    } == {65536}


@pytest.mark.gpu
def test_gpu_habits_build_and_check():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cfg = config(overlap_bytes="16MiB", overlap_matmul=512)
    for case in habits.enumerate_cases(cfg, ["cuda:0"]):
        work = habits.build(case, cfg)
        work.check()
        assert work.bytes is None or work.bytes > 0


def test_a_host_copy_habit_reports_its_memory_traffic():
    case = next(c for c in cases_of(["cpu"]) if c.info.get("habit") == "small_vs_batched")
    work = habits.build(case, config())
    assert work.traffic_bytes == 2 * work.bytes  # read and written


@pytest.mark.parametrize("variant", ["overlapped", "serialised"])
def test_the_overlap_check_catches_a_wrong_copy_and_a_wrong_matmul(monkeypatch, variant):
    # overlap runs only on CUDA, so the CPU tests never built it: a check that skipped the copy or the matmul
    # passed every test. Here the CPU stands in for the GPU (streams and pinned memory are stand-ins).
    import contextlib
    from types import SimpleNamespace

    real_buffer = habits.buffer
    monkeypatch.setattr(habits, "buffer", lambda device, n, pinned=False, data=False: real_buffer(
        device, n, False, data))
    monkeypatch.setattr(habits, "on_streams", lambda streams: contextlib.nullcontext())
    monkeypatch.setattr(habits.torch.cuda, "Stream", lambda device: object(), raising=False)
    monkeypatch.setattr(habits.torch.cuda, "current_stream",
                        lambda device: SimpleNamespace(wait_stream=lambda stream: None), raising=False)
    case = next(c for c in cases_of(["cpu"], overlap_bytes="4KiB", overlap_matmul=32)
                if c.info["habit"] == "overlap" and c.info["variant"] == variant)
    work = habits._overlap(case)
    work.check()
    real_copy, real_mm = torch.Tensor.copy_, torch.mm
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src, non_blocking=False: self)
    with pytest.raises(AssertionError, match="bytes differ from the source"):
        work.check()
    monkeypatch.setattr(torch.Tensor, "copy_", real_copy)
    monkeypatch.setattr(habits.torch, "mm", lambda a, b, out: out.copy_(real_mm(a, b) * 1.5))
    with pytest.raises(AssertionError, match="matmul relative error"):
        work.check()


def test_host_memory_counts_buffers_and_host_float64_and_a_shortfall_is_a_skip(monkeypatch):
    need = {c.id: habits.host_bytes(c) for c in cases_of(["cpu", "cuda:0"], chunk="1MiB", chunks=4)}
    assert need["cpu->cpu-small_vs_batched-one_batched-1x4MiB"] == 8 * 2**20
    assert need["cpu->cuda:0-small_vs_batched-many_small-4x1MiB"] == 4 * 2**20
    assert need["cuda:0-sync_per_step-item-every_step-5steps"] == 0  # float64 on the GPU itself
    host = memory.HostMemory(free=2**30, total=2**30, source="MemAvailable")
    monkeypatch.setattr(memory, "host_memory_free", lambda: host)
    (case, _) = cases_of(["cpu"], chunk="1GiB", chunks=4, habits=["small_vs_batched"])
    with pytest.raises(SkipCase, match=r"out of host memory for cpu->cpu-small_vs_batched-many_small-4x1GiB \(needs 8.0 GiB"):
        habits.build(case, config())
