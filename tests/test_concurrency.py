"""Work meant for several devices reaches them at once: the all-GPUs matmul and copies both ways at once, on
fake GPUs that real threads issue to, each launch costing its thread host time (suite.cases.issuers)."""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import torch

from suite.cases import issuers, make_case
from suite.cases.copy import measure as copy_case
from suite.cases.matmul import measure as matmul
from suite.table import MEASURED_KEYS
from suite.config import parse_config
from suite.devices import use_platform
from suite.timing import SyncTimer
from tests.fakes import FakePlatform

# Host time of one launch (a matmul, a copy) and of entering one stream context: the H200 took 35.8 us for a
# 4 KiB copy both ways, each direction entering one stream context and launching one copy.
LAUNCH_S = 10e-6
STREAM_CONTEXT_S = 10e-6
# Host time of handing a batch to a thread (a pool's submit and the thread waking up).
HANDOFF_S = 20e-6
# bf16 1024^3 on an H200: 11 us a call.
MATMUL_S = 11e-6
# pytest-benchmark's rounds on an accelerator last at least this long (suite.timing.ACCELERATOR_MIN_ROUND_S).
MIN_ROUND_S = 0.005


class ThreadedGpus:
    """Fake GPUs that real threads issue to, in modelled time. Each thread has its own host clock; a launch
    costs the launching thread LAUNCH_S; a queue (a GPU, or one copy direction's engine) runs its work in launch
    order, each piece from when it was launched and the queue is free; synchronising a device moves the
    thread's clock to when every queue of that device is done. Handing a task to a pool costs the submitting
    thread HANDOFF_S; the task starts no earlier than that, and whoever waits for it goes on no earlier than it
    ended (`pool`)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.done: dict[str, float] = defaultdict(float)
        self.queue_devices: dict[str, tuple[str, ...]] = {}
        self.launchers: dict[str, set] = defaultdict(set)  # queue -> (thread, its current device) that launched

    def now(self) -> float:
        return getattr(self.local, "now", 0.0)

    def wait_until(self, t: float) -> None:
        self.local.now = max(self.now(), t)

    def host(self, seconds: float) -> None:
        self.local.now = self.now() + seconds

    def launch(self, queue: str, devices: tuple[str, ...], work_s: float) -> None:
        captured = getattr(self.local, "captured", None)
        if captured is not None:  # inside a graph's capture: recorded, not launched
            captured.append((queue, devices, work_s))
            return
        self.host(LAUNCH_S)
        self._queue(queue, devices, work_s)

    def _queue(self, queue: str, devices: tuple[str, ...], work_s: float) -> None:
        with self.lock:
            self.done[queue] = max(self.done[queue], self.now()) + work_s
            self.queue_devices[queue] = devices
            self.launchers[queue].add((threading.get_ident(), getattr(self.local, "device", None)))

    def graph(self, fails: bool = False) -> tuple[type, object]:
        """(CUDAGraph, graph): torch.cuda's pair on these GPUs. Work launched inside `graph(g)` is recorded in
        `g`; `g.replay()` costs its thread one launch and queues all of it, each piece on its own queue (so a
        direction's copies run back to back on its engine, the directions at once). With `fails`, the capture
        raises as a driver that refuses it does."""
        gpus = self

        class Graph:
            def __init__(self) -> None:
                self.work: list[tuple] = []

            def replay(self) -> None:
                gpus.host(LAUNCH_S)
                for piece in self.work:
                    gpus._queue(*piece)

        @contextlib.contextmanager
        def graph(g: Graph, stream=None):
            gpus.local.captured = g.work
            try:
                if fails:
                    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
                yield
            finally:
                gpus.local.captured = None

        return Graph, graph

    def synchronize(self, *devices) -> None:
        names = {str(d) for d in devices}
        with self.lock:
            ends = [t for q, t in self.done.items() if names & set(self.queue_devices[q])]
        self.wait_until(max(ends, default=0.0))

    def use_device(self, device: str) -> None:
        self.local.device = device

    def event(self, enable_timing: bool = False) -> "FakeEvent":
        return FakeEvent(self)

    def pool(self) -> type:
        gpus = self

        class Joined(Future):
            end = 0.0

            def result(self, timeout=None):
                value = super().result(timeout)
                gpus.wait_until(self.end)
                return value

        class ModelledPool(ThreadPoolExecutor):
            def submit(self, fn, *args, **kwargs):
                gpus.host(HANDOFF_S)
                start, joined = gpus.now(), Joined()

                def task():
                    gpus.wait_until(start)
                    try:
                        value = fn(*args, **kwargs)
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                        joined.end = gpus.now()
                        joined.set_exception(exc)
                    else:
                        joined.end = gpus.now()
                        joined.set_result(value)

                super().submit(task)
                return joined

        return ModelledPool


class FakeEvent:
    """A CUDA event on the recording thread's current device: done when the work queued before it is."""

    def __init__(self, gpus: ThreadedGpus) -> None:
        self.gpus = gpus
        self.t = math.nan

    def record(self) -> None:
        self.t = max(self.gpus.now(), self.gpus.done[self.gpus.local.device])

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


class ThreadedPlatform(FakePlatform):
    def __init__(self, gpus: ThreadedGpus, count: int) -> None:
        super().__init__(gpus=count)
        self.model = gpus

    def synchronize(self, device) -> None:
        self.model.synchronize(device)

    def supports_pinned_memory(self) -> bool:
        return True


@pytest.fixture
def gpus(monkeypatch) -> ThreadedGpus:
    model = ThreadedGpus()
    # The new code's seams; the code before threads (e8ae1c3) has none of them, and then they change nothing.
    monkeypatch.setattr(issuers, "ThreadPoolExecutor", model.pool(), raising=False)
    monkeypatch.setattr(issuers, "use_device", model.use_device, raising=False)
    monkeypatch.setattr(torch.cuda, "Event", model.event, raising=False)
    return model


def seconds_per_call(fn, timer: SyncTimer, rounds: int = 5) -> float:
    """pytest-benchmark's median: rounds of `sync; fn() x iterations; sync`, each at least MIN_ROUND_S."""
    fn()
    start = timer()
    fn()
    iterations = max(1, math.ceil(MIN_ROUND_S / (timer() - start)))
    times = []
    for _ in range(rounds):
        start = timer()
        for _ in range(iterations):
            fn()
        times.append((timer() - start) / iterations)
    return statistics.median(times)


# --- the all-GPUs matmul ---------------------------------------------------------------------------------------


def test_the_all_gpus_aggregate_reaches_the_sum_of_the_gpus_rates_at_a_small_shape(gpus, monkeypatch):
    # One thread issuing eight GPUs' 11 us matmuls at 10 us a launch kept each GPU busy 11 of every 80 us
    # (an aggregate ~1/7 of the sum); a thread per GPU keeps every GPU busy.
    names = [f"cuda:{i}" for i in range(8)]
    monkeypatch.setattr(matmul, "product", lambda dev, precision, m, n, k, what="matmul": (
        (lambda: gpus.launch(dev, (dev,), MATMUL_S)), (lambda label: None)))
    case = make_case("matmul", tuple(names), [matmul.ALL_GPUS, "bfloat16", "1024x1024x1024"],
                     device=matmul.ALL_GPUS, gpus=tuple(names), dtype="bfloat16", precision="bfloat16",
                     m=1024, n=1024, k=1024)
    with use_platform(ThreadedPlatform(gpus, 8)):
        work = matmul.build(case, None)
        median = seconds_per_call(work.fn, SyncTimer(names, clock=gpus.now, synchronize=gpus.synchronize))
        aggregate = work.flops / median / 1e12
        one_gpu = matmul.flops(1024, 1024, 1024) / MATMUL_S / 1e12
        assert aggregate >= 0.9 * 8 * one_gpu
        # Each GPU's calls come from one thread of its own, whose current device it is.
        assert all(gpus.launchers[d] and {dev for _, dev in gpus.launchers[d]} == {d} for d in names)
        assert len({t for d in names for t, _ in gpus.launchers[d]}) == 8
        # The per-device rates (events around each thread's batches, all GPUs loaded) sum to what the GPUs
        # can do, and the aggregate is checked against that sum.
        info = work.derive(median)
    assert sum(info["per_device_tflops"].values()) == pytest.approx(8 * one_gpu, rel=0.01)
    assert aggregate >= 0.9 * sum(info["per_device_tflops"].values())
    # A timed call holds `calls` matmuls per GPU; as a parameter it keeps compare from pairing this result's
    # time with an older run's, whose timed call held one.
    assert work.extra["calls"] == matmul.calls_per_batch(matmul.flops(1024, 1024, 1024)) > 1
    assert "calls" not in MEASURED_KEYS
    # How a copy batch was launched is not what it moved (its bytes are): results with and without it pair.
    assert "issue" in MEASURED_KEYS


def test_a_gpu_slower_than_its_peers_shows_in_the_per_device_rates(gpus, monkeypatch):
    names = ["cuda:0", "cuda:1", "cuda:2"]
    work_s = {"cuda:0": MATMUL_S, "cuda:1": 2 * MATMUL_S, "cuda:2": MATMUL_S}
    monkeypatch.setattr(matmul, "product", lambda dev, precision, m, n, k, what="matmul": (
        (lambda: gpus.launch(dev, (dev,), work_s[dev])), (lambda label: None)))
    case = make_case("matmul", tuple(names), [matmul.ALL_GPUS, "bfloat16", "1024x1024x1024"],
                     device=matmul.ALL_GPUS, gpus=tuple(names), dtype="bfloat16", precision="bfloat16",
                     m=1024, n=1024, k=1024)
    with use_platform(ThreadedPlatform(gpus, 3)):
        info = matmul.build(case, None).derive(1.0)
    rates = info["per_device_tflops"]
    assert info["slowest_device"] == "cuda:1" and rates["cuda:1"] == pytest.approx(rates["cuda:0"] / 2, rel=0.01)


# --- copies both ways at once ----------------------------------------------------------------------------------

# Each direction of a link: its rate and the fixed cost of one copy on it. Host<->GPU over PCIe Gen5 x16;
# GPU<->GPU over NVLink (an H100's ~350 GB/s a direction).
LINKS = {"h2d": (55e9, 2e-6), "peer": (350e9, 2e-6)}
SIZES = [4 * 4**i * 2**10 for i in range(6)]  # 4 KiB ... 4 MiB


def copy_seconds(path: str, size: int) -> float:
    rate, latency = LINKS[path]
    return latency + size / rate


class FakeStream:
    def __init__(self, device: str) -> None:
        self.device = device

    def wait_stream(self, other: "FakeStream") -> None:
        pass  # the fake's queues order a direction's copies; a graph's fork and join add nothing to time


def fake_copy_machine(gpus: ThreadedGpus, monkeypatch, path: str, capture_fails: bool = False) -> None:
    """Copies on the fake link: tiny CPU buffers stand for each device's, and a copy queues `copy_seconds`
    on its direction's engine; entering a stream context costs its thread STREAM_CONTEXT_S. CUDA graphs are
    gpus.graph's (whose capture raises with `capture_fails`)."""
    made: dict[int, tuple[str, int]] = {}

    def buffer(device, n, pinned=False, data=False):
        t = torch.zeros(1, dtype=torch.uint8)
        made[id(t)] = (device, n)
        return t

    real_copy = torch.Tensor.copy_

    def copy_(self, src, non_blocking=False):
        if id(self) not in made:
            return real_copy(self, src, non_blocking=non_blocking)
        (dst, n), (source, _) = made[id(self)], made[id(src)]
        gpus.launch(f"{source}->{dst}", (source, dst), copy_seconds(path, n))
        return self

    @contextlib.contextmanager
    def on_streams(streams):
        gpus.host(STREAM_CONTEXT_S * len(streams))
        yield

    monkeypatch.setattr(copy_case, "buffer", buffer)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(copy_case, "on_streams", on_streams)
    monkeypatch.setattr(copy_case, "copy_engine_count", lambda device: 2)
    monkeypatch.setattr(copy_case, "synchronize", gpus.synchronize)
    monkeypatch.setattr(copy_case, "tie_to_streams", lambda tensors, streams: None)
    monkeypatch.setattr(copy_case.torch.cuda, "Stream", FakeStream, raising=False)
    graph_class, graph = gpus.graph(fails=capture_fails)
    monkeypatch.setattr(copy_case.torch.cuda, "CUDAGraph", graph_class, raising=False)
    monkeypatch.setattr(copy_case.torch.cuda, "graph", graph, raising=False)


def copy_gbps(gpus: ThreadedGpus, path: str, size: int, direction: str = "bi") -> tuple[float, dict]:
    """(GB/s, extra_info) of the fake's `path` copy of `size` bytes, both ways at once or one way."""
    src, dst = ("cpu", "cuda:0") if path == "h2d" else ("cuda:0", "cuda:1")
    config = parse_config({"cases": {"copy": {"sizes": ["4KiB"]}}}, "test.yaml")
    with use_platform(ThreadedPlatform(gpus, 2)):
        case = copy_case._case(src, dst, size, "pinned" if path == "h2d" else "device", True, direction)
        work = copy_case.build(case, config)
        median = seconds_per_call(work.fn, SyncTimer([d for d in case.devices if d != "cpu"], clock=gpus.now,
                                                     synchronize=gpus.synchronize))
    return work.bytes / median / 1e9, work.extra


@pytest.mark.parametrize("path", ["h2d", "peer"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{s >> 10}KiB" for s in SIZES])
def test_copies_both_ways_at_once_reach_the_link(gpus, monkeypatch, path, size):
    # One graph replay (one launch) holds a batch of copies in each direction, both running at once: within
    # 10% of the link at every size. A launch per copy held a 4 KiB pair to the launch rate (here 0.8 of the
    # link's 4 GB/s; 35.8 us on an H200), and NVLink's 4 MiB pair (14 us of link time) to 60 us.
    fake_copy_machine(gpus, monkeypatch, path)
    link = 2 * size / copy_seconds(path, size) / 1e9
    measured, extra = copy_gbps(gpus, path, size)
    assert 0.9 * link <= measured <= 1.0001 * link
    assert extra["issue"] == "graph"


@pytest.mark.parametrize("size", SIZES, ids=[f"{s >> 10}KiB" for s in SIZES])
def test_small_copies_one_way_between_gpus_reach_the_link(gpus, monkeypatch, size):
    fake_copy_machine(gpus, monkeypatch, "peer")
    link = size / copy_seconds("peer", size) / 1e9
    measured, extra = copy_gbps(gpus, "peer", size, "uni")
    assert 0.9 * link <= measured <= 1.0001 * link
    assert extra["issue"] == "graph"


@pytest.mark.parametrize("path", ["h2d", "peer"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{s >> 10}KiB" for s in SIZES])
def test_where_capture_fails_copies_both_ways_are_issued_by_a_thread_per_direction(gpus, monkeypatch, path,
                                                                                  size):
    # Both directions at once can go no faster than the link, nor than one launch per copy in each direction
    # (each direction's thread); the result says the batch was issued copy by copy.
    fake_copy_machine(gpus, monkeypatch, path, capture_fails=True)
    link = 2 * size / copy_seconds(path, size) / 1e9
    launches = 2 * size / LAUNCH_S / 1e9
    measured, extra = copy_gbps(gpus, path, size)
    assert 0.9 * min(link, launches) <= measured <= 1.0001 * link
    if copy_seconds(path, size) >= LAUNCH_S:  # the link, not the host, sets the pace: within 10% of the link
        assert measured >= 0.9 * link
    assert extra["issue"] == "calls"


# --- the issuing threads ---------------------------------------------------------------------------------------


def test_each_thread_runs_its_setup_once_and_its_batches_on_one_thread():
    seen: dict[str, set] = defaultdict(set)
    setups: list[str] = []
    names = ["a", "b", "c"]
    issue = issuers.Issuers([lambda n=n: seen[n].add(threading.get_ident()) or n for n in names],
                            [lambda n=n: setups.append(n) for n in names])
    assert [issue() for _ in range(3)][-1] == names
    assert sorted(setups) == names
    assert all(len(seen[n]) == 1 for n in names) and len(set.union(*seen.values())) == 3
    assert threading.get_ident() not in set.union(*seen.values())


def test_an_error_in_one_thread_is_raised_after_every_thread_has_returned():
    finished = threading.Event()

    def fails():
        raise RuntimeError("launch failed")

    def slow():
        finished.wait(0.2)
        finished.set()

    with pytest.raises(RuntimeError, match="launch failed"):
        issuers.Issuers([fails, slow])()
    assert finished.is_set()


def test_use_device_sets_nothing_where_the_backend_is_absent():
    issuers.use_device("cuda:3")  # this torch has no CUDA: nothing to set, no error
    issuers.use_device("cpu")
