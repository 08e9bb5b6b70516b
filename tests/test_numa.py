"""devices.host_near: a host<->GPU copy's host side on the GPU's NUMA node, as nvbandwidth binds by default.

No machine here has two NUMA nodes: /sys, the thread's CPU affinity and the GPU's node are all faked. What a
real dual-socket node shows (the near path's GB/s against the far one's) is not verified.
"""

from __future__ import annotations

import types

import pytest
import torch

from suite import devices as dev
from suite.config import load_config
from suite.devices import host, kinds, numa, nvml, use_platform
from tests.fakes import FakePlatform
from tests.test_devices import _sys_tree

ALL = set(range(8))
BOTH = "Mems_allowed_list:\t0-1\n"  # /proc/self/status of a process whose memory may come from either node


class NumaPlatform(FakePlatform):
    """Fake GPUs whose NUMA nodes are given (GPU index -> node; absent: the platform does not say)."""

    def __init__(self, gpus: int, nodes: dict[int, int]):
        super().__init__(gpus)
        self.nodes = nodes

    def numa_node(self, device: torch.device) -> int | None:
        return self.nodes.get(device.index) if device.type == "cuda" else None


@pytest.fixture
def affinity(monkeypatch):
    """The thread's CPU affinity, faked: `state["cpus"]` now, `state["calls"]` every set."""
    state = {"cpus": set(ALL), "calls": [], "emptied": 0}

    def set_affinity(pid, cpus):
        assert pid == 0  # this thread, never another process
        state["cpus"] = set(cpus)
        state["calls"].append(set(cpus))

    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: set(state["cpus"]))
    monkeypatch.setattr(host.os, "sched_setaffinity", set_affinity)
    monkeypatch.setattr(host, "_empty_host_cache", lambda: state.__setitem__("emptied", state["emptied"] + 1))
    return state


@pytest.fixture
def two_sockets(tmp_path):
    return _sys_tree(tmp_path, {0: "0-3", 1: "4-7", 2: ""}, {})


def test_binds_this_thread_to_the_gpus_node_and_restores_it(affinity, two_sockets):
    threads = torch.get_num_threads()
    with use_platform(NumaPlatform(2, {0: 0, 1: 1})):
        with dev.host_near("cuda:1", two_sockets, BOTH) as node:
            assert node == 1 and dev.bound_host_node() == 1
            assert affinity["cpus"] == {4, 5, 6, 7}
            assert torch.get_num_threads() == 1  # first writes of pageable buffers come from this thread
            assert affinity["emptied"] == 1  # no pinned block of another node's memory comes back
        assert affinity["cpus"] == ALL and dev.bound_host_node() is None
        assert torch.get_num_threads() == threads
        with pytest.raises(RuntimeError), dev.host_near("cuda:0", two_sockets, BOTH):
            assert affinity["cpus"] == {0, 1, 2, 3}
            raise RuntimeError("a failed case")
        assert affinity["cpus"] == ALL and dev.bound_host_node() is None
        assert torch.get_num_threads() == threads


def test_binds_only_to_the_cpus_the_process_may_use(affinity, two_sockets):
    affinity["cpus"] = {0, 1, 6, 7}  # a cpuset spanning both sockets
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node == 1 and affinity["cpus"] == {6, 7}
    assert affinity["cpus"] == {0, 1, 6, 7}


@pytest.mark.parametrize(("nodes", "allowed", "gpu_nodes", "mems"), [
    ({0: "0-7"}, ALL, {0: 0}, "0"),  # one node: nothing to choose
    ({0: "0-3", 1: "4-7"}, {0, 1, 2, 3}, {0: 1}, "0-1"),  # numactl --cpunodebind=0: the user's far path stands
    ({0: "0-3", 1: "4-7"}, {0, 1, 2, 3}, {0: 0}, "0-1"),  # ... and their near one: nothing to record either
    ({0: "0-3", 1: "4-7"}, ALL, {0: 1}, "0"),  # numactl --membind=0: node 1's memory is not allowed
    ({0: "0-3", 1: "4-7"}, ALL, {}, "0-1"),  # the GPU's node unknown
    ({0: "0-3", 1: "4-7"}, ALL, {0: 3}, "0-1"),  # a node without CPUs (a Grace GPU's memory, CXL)
])
def test_binds_nothing_where_there_is_no_near_node_to_choose(affinity, tmp_path, nodes, allowed, gpu_nodes,
                                                             mems):
    affinity["cpus"] = set(allowed)
    root = _sys_tree(tmp_path, nodes, {})
    status = f"Mems_allowed_list:\t{mems}\n"
    with use_platform(NumaPlatform(1, gpu_nodes)), dev.host_near("cuda:0", root, status) as node:
        assert node is None and dev.bound_host_node() is None
    assert affinity["calls"] == [] and affinity["emptied"] == 0


def test_a_refused_affinity_binds_nothing(affinity, two_sockets, monkeypatch):
    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(host.os, "sched_setaffinity", refuse)
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node is None and dev.bound_host_node() is None


def test_a_gpus_node_comes_from_torchs_pci_address_else_nvml(tmp_path, monkeypatch):
    monkeypatch.setattr(numa, "SYS", _sys_tree(tmp_path, {0: "0-3", 1: "4-7"}, {"0000:9a:00.0": 1}))
    props = {0: types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x9A, pci_device_id=0),
             1: types.SimpleNamespace()}  # an older torch: no PCI address
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props[d.index])
    monkeypatch.setattr(kinds.Cuda, "properties", lambda self, d: {"uuid": f"GPU-{d.index}"})
    asked = []
    monkeypatch.setattr(nvml, "nvml_info", lambda i, uuid: asked.append(uuid) or {"numa_node": 0})
    plat = dev.Platform()
    assert plat.numa_node(torch.device("cuda", 0)) == 1 and asked == []
    assert plat.numa_node(torch.device("cuda", 1)) == 0 and asked == ["GPU-1"]
    assert plat.numa_node(torch.device("cuda", 1)) == 0 and asked == ["GPU-1"]  # asked once per device
    assert plat.numa_node(torch.device("cpu")) is None


def test_a_case_binds_its_host_side_only_between_the_host_and_one_gpu(monkeypatch):
    from suite.cases import buffers

    asked = []
    monkeypatch.setattr(buffers, "host_near", lambda device: asked.append(device) or "bound")
    for devices in (("cpu", "cuda:1"), ("cuda:2", "cpu"), ("cuda:0", "cuda:1"), ("cuda:0",), ("cpu",),
                    ("cpu", "cuda:0", "cuda:1")):
        buffers.host_side(types.SimpleNamespace(devices=devices))
    assert asked == ["cuda:1", "cuda:2"]


@pytest.mark.parametrize(("family", "yaml_text"), [
    ("copy", "  copy:\n    sizes: [4KiB]\n    memory: [pageable]\n"),
    ("placement", "  placement:\n    sizes: [4KiB]\n    ops: [clone]\n"),
    ("habits", "  habits:\n    chunk: 4KiB\n    chunks: 4\n    readers: [item]\n"),
])
def test_a_bound_case_records_its_host_node(tmp_path, monkeypatch, family, yaml_text):
    from suite.cases import SkipCase, buffers, family_module

    path = tmp_path / "c.yaml"
    path.write_text(f"devices: cpu\ncases:\n{yaml_text}", encoding="utf-8")
    config = load_config(path)
    module = family_module(family)
    assert module.host_side is buffers.host_side  # the test file and the GPU check's reference enter it
    built = []
    for case in module.enumerate_cases(config, ["cpu"]):
        try:
            built.append((case, module.build(case, config)))
        except SkipCase:
            continue
    assert built and all("host_numa_node" not in work.extra for _, work in built)
    monkeypatch.setattr(buffers, "bound_host_node", lambda: 1)
    case = built[0][0]
    assert module.build(case, config).extra["host_numa_node"] == 1


@pytest.mark.parametrize("conf", ["pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
                                  "expandable_segments:True,pinned_reserve_segment_size_mb:1024"])
def test_binds_nothing_where_torchs_allocator_places_pinned_pages_itself(affinity, two_sockets, monkeypatch,
                                                                        conf):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node is None
    assert affinity["calls"] == []
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "pinned_use_cuda_host_register:False")
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node == 1


def test_the_context_comes_first_and_the_affinity_is_restored_before_the_threads(affinity, two_sockets,
                                                                                 monkeypatch):
    order = []
    plat = NumaPlatform(2, {1: 1})
    real_sync, real_threads, real_set = plat.synchronize, torch.set_num_threads, host.os.sched_setaffinity
    monkeypatch.setattr(plat, "synchronize", lambda d: order.append(f"context {d}") or real_sync(d))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: order.append(f"threads {n}") or real_threads(n))
    monkeypatch.setattr(host.os, "sched_setaffinity", lambda pid, c: order.append(f"cpus {sorted(c)}")
                        or real_set(pid, c))
    monkeypatch.setattr(host.gc, "collect", lambda: order.append("collect"))
    monkeypatch.setattr(host, "_empty_host_cache", lambda: order.append("empty"))
    threads = torch.get_num_threads()
    with use_platform(plat), dev.host_near("cuda:1", two_sockets, BOTH):
        pass
    # Threads the driver starts with a context keep the mask they were born with: it exists before the bind.
    # Blocks of earlier cases freed by the collector reach the free list before it is emptied.
    assert order == ["context cuda:1", "collect", "cpus [4, 5, 6, 7]", "threads 1", "empty",
                     f"cpus {sorted(ALL)}", f"threads {threads}"]


def test_a_cpuset_that_moved_meanwhile_still_unbinds(affinity, two_sockets, monkeypatch):
    affinity["cpus"] = {0, 1, 6, 7}

    def kernel(pid, cpus):  # as Linux does: the mask cut to the cpuset, EINVAL where nothing is left
        left = set(cpus) & cpuset
        if not left:
            raise OSError(22, "Invalid argument")
        affinity["cpus"] = left

    cpuset = {0, 1, 6, 7}
    monkeypatch.setattr(host.os, "sched_setaffinity", kernel)
    with use_platform(NumaPlatform(1, {0: 0})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node == 0 and affinity["cpus"] == {0, 1}
        cpuset = {2, 3}  # the job's cpuset moved to other CPUs while the case ran: {0, 1, 6, 7} is refused
    assert dev.bound_host_node() is None and affinity["cpus"] == {2, 3}  # not left bound


def test_emptying_the_host_cache_tries_each_name_until_one_works(monkeypatch):
    called = []

    def raising():
        called.append("host")
        raise RuntimeError("Cannot access accelerator device when none is available")

    monkeypatch.setattr(torch._C, "_host_emptyCache", raising, raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_emptyHostCache", lambda: called.append("accelerator"),
                        raising=False)
    host._empty_host_cache()
    assert called == ["host", "accelerator"]


@pytest.mark.parametrize("var", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_either_allocator_variable_defeats_the_binding_and_zero_is_off(affinity, two_sockets, monkeypatch, var):
    # torch 2.9 renamed PYTORCH_CUDA_ALLOC_CONF to PYTORCH_ALLOC_CONF; a reserved segment of 0 MB reserves none.
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv(var, "pinned_use_cuda_host_register:True")
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node is None
    assert affinity["calls"] == []
    monkeypatch.setenv(var, "pinned_reserve_segment_size_mb:0")
    with use_platform(NumaPlatform(1, {0: 1})), dev.host_near("cuda:0", two_sockets, BOTH) as node:
        assert node == 1


@pytest.mark.parametrize(("family", "devices"), [("copy", ("cpu", "cuda:1")), ("placement", ("cuda:1", "cpu")),
                                                  ("habits", ("cpu", "cuda:1"))])
def test_each_benchmark_file_measures_inside_the_host_side_binding(monkeypatch, family, devices):
    import contextlib
    import importlib

    from suite.cases import buffers

    order = []

    @contextlib.contextmanager
    def near(device):
        order.append(f"bind {device}")
        yield 1
        order.append("unbind")

    monkeypatch.setattr(buffers, "host_near", near)
    bench = importlib.import_module(f"benchmarks.test_{family}")
    case = types.SimpleNamespace(devices=devices, family=family, info={"precision": None})
    getattr(bench, f"test_{family}")(case, lambda case: order.append("measure"))
    assert order == ["bind cuda:1", "measure", "unbind"]
