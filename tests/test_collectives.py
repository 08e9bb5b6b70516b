"""Collectives: bus-bandwidth math, cases and ids, checks that fail, start-up timeouts, config refusal, torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import yaml

from suite import distributed
from suite.cases import SkipCase
from suite.cases.collectives import measure as coll
from suite.config import parse_config
from suite.distributed import LaunchEnv, RankTimeout, SlowestRankTimer
from suite.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- busbw / algbw -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75), ("all_reduce", 16, 1.875),
        ("all_gather", 2, 0.5), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
        ("all_to_all", 8, 0.875), ("broadcast", 8, 1.0), ("reduce", 4, 1.0), ("send_recv", 8, 1.0),
    ],
)
def test_bus_factor_matches_nccl_tests(op, n, factor):
    assert coll.bus_factor(op, n) == pytest.approx(factor)


def test_algbw_and_busbw_hand_computed():
    # 1 GB in 0.5 s: algbw 2 GB/s; an 8-rank all_reduce carries 2*7/8 of it on each link: 3.5 GB/s.
    assert coll.algbw(1e9, 0.5) == pytest.approx(2.0)
    assert coll.busbw("all_reduce", 1e9, 0.5, 8) == pytest.approx(3.5)
    # 64 MiB all_gather over 4 ranks in 10 ms: 6.7109 GB/s algbw, x 3/4.
    assert coll.busbw("all_gather", 64 * 2**20, 0.01, 4) == pytest.approx(6.7108864 * 0.75)
    assert coll.busbw("broadcast", 4096, 1e-5, 8) == pytest.approx(0.4096)


def test_element_count_rounds_chunked_ops_to_world_size():
    assert coll.element_count("all_reduce", 4096, 4, 3) == 1024
    assert coll.element_count("all_gather", 4096, 4, 3) == 1023
    assert coll.element_count("all_to_all", 8, 4, 3) == 0  # too small: skipped with a reason


def test_modes():
    assert coll.modes("all_gather", "both") == ["outofplace", "inplace"]
    assert coll.modes("reduce_scatter", True) == ["inplace"]
    assert coll.modes("reduce_scatter", False) == ["outofplace"]
    assert coll.modes("all_reduce", False) == ["inplace"]  # torch has only the in-place all_reduce
    assert coll.modes("all_to_all", True) == ["outofplace"]


# --- config and cases ----------------------------------------------------------------------------------


def test_cases_and_ids_outside_torchrun(monkeypatch):
    monkeypatch.setattr(distributed, "_STATE", None)
    config = parse_config({"cases": {"collectives": {
        "ops": ["all_reduce", "all_gather"], "sizes": ["4KiB", "64MiB"], "backend": "gloo",
        "cpu": {"sizes": ["4KiB"]}}}})
    cases = coll.enumerate_cases(config, ["cpu"])
    assert [c.id for c in cases] == [
        "gloo-all_reduce-float32-4KiB-inplace",
        "gloo-all_gather-float32-4KiB-outofplace",
        "gloo-all_gather-float32-4KiB-inplace",
    ]
    assert cases[0].devices == ("cpu",)
    assert cases[0].info == {"op": "all_reduce", "dtype": "float32", "size": 4096, "in_place": True,
                             "backend": "gloo", "device": "cpu"}
    assert coll.enumerate_cases(parse_config({"cases": {"collectives": {"enabled": False}}}), ["cpu"]) == []


def test_default_sweep_is_4kib_to_256mib():
    sizes = parse_config({}).cases.collectives.sizes
    assert sizes[0] == 4096 and sizes[-1] == 256 * 2**20 and len(sizes) == 17


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"ops": ["all_reduce", "allreduse"]}, "cases.collectives.ops[1]: 'allreduse' is not a collective; allowed:"),
        ({"in_place": "maybe"}, "cases.collectives.in_place: 'maybe' is not an in_place setting; allowed: both"),
        ({"backend": "mpi"}, "cases.collectives.backend: 'mpi' is not a backend; allowed: auto, nccl, gloo, xccl"),
        ({"sizes": ["3XB"]}, "cases.collectives.sizes[0]: '3XB' is not a size"),
        ({"rounds": 0}, "cases.collectives.rounds: 0 is invalid"),
        ({"timeout": 5}, "unknown key 'timeout'"),
    ],
)
def test_config_errors(section, message):
    with pytest.raises(UserError) as info:
        parse_config({"cases": {"collectives": section}}, "x.yaml")
    assert str(info.value).startswith("x.yaml: ") and message in str(info.value)


def test_backend_choice():
    assert distributed.resolve_backend("auto", ["cpu"]) == "gloo"
    assert distributed.resolve_backend("gloo", ["cpu", "cuda:0"]) == "gloo"
    assert distributed.rank_device("gloo", 3) == "cpu"
    assert distributed.rank_device("nccl", 3, gpu_count=8) == "cuda:3"
    assert distributed.rank_device("nccl", 3, gpu_count=1) == "cuda:0"  # one GPU per rank (Slurm --gpus-per-task)
    with pytest.raises(UserError, match="LOCAL_RANK 4 but this node shows 4 GPU"):
        distributed.rank_device("nccl", 4, gpu_count=4)
    # srun --ntasks-per-node=8, one torchrun agent per task: every rank is LOCAL_RANK 0; its place among its
    # host's ranks is its GPU. Agents given disjoint CUDA_VISIBLE_DEVICES (2 each) keep LOCAL_RANK.
    assert distributed.rank_device("nccl", 0, gpu_count=8, position=5) == "cuda:5"
    assert distributed.rank_device("nccl", 1, gpu_count=2, position=3) == "cuda:1"
    env = LaunchEnv.from_environ({"RANK": "13", "WORLD_SIZE": "16", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert env.host_position is None
    assert env.with_hosts(["a"] * 8 + ["b"] * 8).host_position == 5
    assert env.with_hosts(["a", "b"] * 8).host_position == 6  # ranks dealt round-robin over the hosts


def test_xccl_is_taken_only_when_asked_for_and_runs_each_rank_on_its_own_xpu(monkeypatch):
    """auto never picks XCCL (untested here; a hung XCCL collective ignores timeout_s unless
    TORCH_XCCL_BLOCKING_WAIT=1): backend xccl puts rank r on xpu:r, or on xpu:0 where each rank sees one."""
    from suite.devices import use_platform
    from tests.fakes import FakePlatform

    with use_platform(FakePlatform(gpus=4, kind="xpu")):
        assert distributed.resolve_backend("auto", ["xpu:0", "xpu:1"]) == "gloo"
        assert distributed.resolve_backend("xccl", ["xpu:0"]) == "xccl"
        assert distributed.rank_device("xccl", 2) == "xpu:2"
        with pytest.raises(UserError, match="LOCAL_RANK 4 but this node shows 4 GPU"):
            distributed.rank_device("xccl", 4)
    assert distributed.rank_device("xccl", 3, gpu_count=1) == "xpu:0"
    no_xpu = pytest.raises(UserError, match="backend xccl needs a xpu device per rank and this node shows none: "
                                            "set cases.collectives.backend: gloo")
    with use_platform(FakePlatform(gpus=2, kind="cuda")), no_xpu:
        distributed.rank_device("xccl", 0)
    config = parse_config({"cases": {"collectives": {"backend": "xccl"}}}, "x.yaml")
    monkeypatch.setattr(distributed, "_STATE", None)
    assert coll._backend_and_device(config, ["xpu:0"]) == ("xccl", "xpu:0")


def test_xccl_init_binds_the_rank_to_its_xpu_and_refuses_a_torch_without_xccl(monkeypatch):
    from suite.devices import use_platform
    from tests.fakes import FakePlatform

    calls = []
    monkeypatch.setattr(distributed, "_STATE", None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append((backend, sorted(kw))))
    monkeypatch.setattr(torch.xpu, "set_device", lambda device: calls.append(("set_device", str(device))))
    monkeypatch.setattr(dist, "is_xccl_available", lambda: False, raising=False)
    with use_platform(FakePlatform(gpus=2, kind="xpu")):
        with pytest.raises(UserError, match=r"backend xccl: this torch has no XCCL .*set "
                                            "cases.collectives.backend: gloo"):
            distributed.init(_env(0, 0, world=1), "xccl", 5, "digest")
        assert calls == []
        monkeypatch.setattr(dist, "is_xccl_available", lambda: True, raising=False)
        state = distributed.init(_env(0, 0, world=1), "xccl", 5, "digest")
    assert calls == [("set_device", "xpu:0"), ("xccl", ["rank", "store", "timeout", "world_size"])]
    assert state.device == "xpu:0" and state.owns_group
    monkeypatch.setattr(distributed.lockstep, "xccl_version", lambda: "2021.15.0")
    described = state.describe()
    assert described["backend"] == "xccl" and described["xccl_version"] == "2021.15.0"


def test_an_xpu_ranks_float64_reference_is_made_on_the_cpu():
    """Intel's consumer and integrated GPUs have no float64: the sum every rank's check compares with is made
    on the CPU for an XPU rank (on a CUDA or CPU rank, on its device as before)."""
    total = coll._sum_of_ranks(2, 6, torch.bfloat16, "xpu:0")  # no XPU here: made on its device, this raises
    assert total.device.type == "cpu" and total.dtype == torch.float64
    assert torch.equal(total, coll.reduce_values(0, 6, torch.bfloat16, "cpu", 2).double()
                       + coll.reduce_values(1, 6, torch.bfloat16, "cpu", 2).double())
    assert coll._reference_device("cuda:3") == "cuda:3" and coll._reference_device("cpu") == "cpu"


def test_nccls_transport_variables_and_conf_files_are_recorded(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("# tuned for this fabric\nNCCL_ALGO=Ring\n\nNCCL_PROTO=Simple\n")
    env = {"NCCL_CONF_FILE": str(conf), "FI_PROVIDER": "efa", "UCX_TLS": "rc", "HOME": str(tmp_path)}
    assert distributed.launch_environment(env) == {
        "FI_PROVIDER": "efa", "NCCL_CONF_FILE": str(conf), "UCX_TLS": "rc", str(conf): "NCCL_ALGO=Ring; NCCL_PROTO=Simple"}


def test_the_oneccl_variables_are_recorded_with_the_launch():
    env = {"CCL_ALLREDUCE": "ring", "TORCH_XCCL_BLOCKING_WAIT": "1", "NCCL_ALGO": "Ring", "PATH": "/bin"}
    assert distributed.launch_environment(env) == {
        "CCL_ALLREDUCE": "ring", "NCCL_ALGO": "Ring", "TORCH_XCCL_BLOCKING_WAIT": "1"}


NCCL_LOGS = os.path.join(ROOT, "tests", "data", "imported", "nccl-log")


@pytest.mark.parametrize("name, said", [
    # NCCL 2.24 on 8 H100: its version and NVLS multicast (the poster's log, prefixes removed).
    ("issue1584_2.24_h100x8_nvls.txt", {"version": "2.24.3", "nvls": True}),
    # NCCL 2.18: NCCL_ALGO acknowledged, a channels line without collnet, the per-peer count left out.
    ("issue892_2.18_h800_algo_env.txt", {"algo": "Tree,Ring,,CollnetDirect,CollnetChain,NVLS",
                                         "coll_channels": 16, "nvls_channels": 0, "p2p_channels": 16}),
    ("issue1189_h20_2x2_channels.txt", {"coll_channels": 8, "collnet_channels": 0, "nvls_channels": 0,
                                        "p2p_channels": 8}),
    ("ms-swift6107_2nodes_no_nvls.txt", {"nvls": False, "mnnvl": False}),
])
def test_what_nccl_chose_is_read_from_its_published_logs(name, said):
    from suite.cases.collectives.nccl_log import nccl_choices

    with open(os.path.join(NCCL_LOGS, name), encoding="utf-8") as f:
        assert nccl_choices(f.read()) == said
    assert nccl_choices("x:1:2 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n") == {"proto": "Simple"}
    assert nccl_choices("no NCCL here") == {}


def test_launch_env():
    assert LaunchEnv.from_environ({}) is None
    env = LaunchEnv.from_environ({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
                                  "MASTER_ADDR": "node1", "MASTER_PORT": "29400"})
    assert (env.rank, env.world_size, env.local_rank, env.nnodes, env.master_addr) == (5, 16, 1, 2, "node1")


# --- build and check with a fake process group of 2 ranks ----------------------------------------------


class FakeState:
    """Rank 0 of a 2-rank world whose other rank agrees with everything."""

    def __init__(self, world_size: int = 2) -> None:
        self.env = LaunchEnv(0, world_size, 0, world_size, "127.0.0.1", 0, False, "test")
        self.backend, self.device, self.timeout_s = "gloo", "cpu", 5.0
        self.seen: list[str] = []

    def agree(self, what, problem=None):
        self.seen.append(what)
        return {0: problem} if problem else {}


def _case(op, in_place=True, size="4KiB", dtype="float32"):
    config = parse_config({"cases": {"collectives": {"ops": [op], "sizes": [size], "dtypes": [dtype],
                                                     "in_place": in_place, "backend": "gloo", "min_round_s": 0}}})
    (case,) = coll.enumerate_cases(config, ["cpu"])
    return case, config


def test_skip_outside_torchrun_names_the_command(monkeypatch):
    monkeypatch.setattr(distributed, "_STATE", None)
    case, config = _case("all_reduce")
    with pytest.raises(SkipCase, match=r"launch with torchrun --nproc-per-node=N -m pytest benchmarks/test_coll"):
        coll.build(case, config)


def test_world_size_one_skips(monkeypatch):
    monkeypatch.setattr(distributed, "_STATE", FakeState(world_size=1))
    case, config = _case("all_reduce")
    with pytest.raises(SkipCase, match="world size 1"):
        coll.build(case, config)


def _two_rank_sum(t, op=None, **_):
    t.copy_(coll.reduce_values(0, t.numel(), t.dtype, "cpu", 2) + coll.reduce_values(1, t.numel(), t.dtype, "cpu", 2))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_reduce_check_passes_on_the_right_sum_and_reports_rates(monkeypatch, dtype):
    state = FakeState()
    monkeypatch.setattr(distributed, "_STATE", state)
    monkeypatch.setattr(dist, "all_reduce", _two_rank_sum)
    case, config = _case("all_reduce", dtype=dtype)
    work = coll.build(case, config)
    work.check()
    assert state.seen == [f"{case.id} build", f"{case.id} check"]
    assert work.bytes == 4096
    assert work.pedantic == {"rounds": 20, "iterations": 5, "warmup_rounds": 2}
    assert work.extra["world_size"] == 2 and work.extra["ranks_per_node"] == 2
    rates = work.derive(1e-6)
    assert rates["algbw"] == pytest.approx(4.096) and rates["busbw"] == pytest.approx(4.096 * 1.0)


def test_all_reduce_check_fails_when_a_rank_is_missing_from_the_sum(monkeypatch):
    monkeypatch.setattr(distributed, "_STATE", FakeState())
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None, **_: None)  # a broken all_reduce: no-op
    case, config = _case("all_reduce")
    work = coll.build(case, config)
    with pytest.raises(AssertionError, match="wrong result on rank 0: all_reduce .*elements differ"):
        work.check()


def _gather_swapped(out, src, **_):
    n = out.numel() // 2
    out[:n] = coll.rank_values(1, n, out.dtype, "cpu")  # rank order swapped
    out[n:] = coll.rank_values(0, n, out.dtype, "cpu")


def _gather_right(out, src, **_):
    n = out.numel() // 2
    out.copy_(torch.cat([coll.rank_values(0, n, out.dtype, "cpu"), coll.rank_values(1, n, out.dtype, "cpu")]))


@pytest.mark.parametrize("in_place", [True, False])
def test_all_gather_check_catches_misplaced_chunks(monkeypatch, in_place):
    monkeypatch.setattr(distributed, "_STATE", FakeState())
    name = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
    case, config = _case("all_gather", in_place=in_place)
    monkeypatch.setattr(dist, name, _gather_right)
    coll.build(case, config).check()
    monkeypatch.setattr(dist, name, _gather_swapped)
    with pytest.raises(AssertionError, match="elements differ"):
        coll.build(case, config).check()


def test_a_rank_that_cannot_build_makes_every_rank_skip(monkeypatch):
    state = FakeState()
    state.agree = lambda what, problem=None: {1: "could not allocate on cuda:1: out of memory"}
    monkeypatch.setattr(distributed, "_STATE", state)
    case, config = _case("broadcast")
    with pytest.raises(SkipCase, match="rank 1: could not allocate"):
        coll.build(case, config)


def test_inputs_are_never_zero_and_differ_per_rank():
    a, b = coll.rank_values(0, 1000, torch.bfloat16, "cpu"), coll.rank_values(1, 1000, torch.bfloat16, "cpu")
    assert bool((a != 0).all()) and not torch.equal(a, b)


# --- the lockstep timer --------------------------------------------------------------------------------


def test_timer_barriers_then_reports_the_slowest_rank(monkeypatch):
    calls = []
    clock = iter([10.0, 10.1])

    def fake_all_reduce(t, op=None, **_):
        calls.append("max" if op == dist.ReduceOp.MAX else "barrier")
        if op == dist.ReduceOp.MAX:
            assert t.item() == pytest.approx(0.1)  # this rank's own time goes in
            t.fill_(0.5)  # the other rank took 0.5 s

    monkeypatch.setattr(distributed, "_STATE", None)
    monkeypatch.setattr(dist, "all_reduce", fake_all_reduce)
    timer = SlowestRankTimer(clock=lambda: (calls.append("clock"), next(clock))[1])
    start = timer()
    end = timer()
    assert calls == ["barrier", "clock", "clock", "max"]
    assert end - start == pytest.approx(0.5)


# --- start-up: missing ranks, different configs --------------------------------------------------------


def _env(rank, port, world=2):
    return LaunchEnv(rank, world, rank, world, "127.0.0.1", port, False, f"test-{time.monotonic_ns()}")


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_rank_that_never_joins_is_named_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(RankTimeout, match=r"rank\(s\) 1 of 2 did not arrive at start-up .* within 1.5 s"):
        distributed.init(_env(0, 0), "gloo", 1.5, "digest")  # port 0: the store picks a free one
    assert time.monotonic() - start < 1.5 + 2.0
    assert distributed.current() is None


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_missing_rank_0_is_named_within_the_timeout():
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=5), wait_for_workers=False)
    port = server.port
    del server  # nobody listens there now
    start = time.monotonic()
    with pytest.raises(RankTimeout, match=r"rank 1: could not reach the store at 127.0.0.1:\d+ within 2 s \(rank 0"):
        distributed.init(_env(1, port), "gloo", 2.0, "digest")
    assert time.monotonic() - start < 2.0 + 3.0


def _in_threads(fn, world=2):
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=10), wait_for_workers=False)
    stores = [server] + [dist.TCPStore("127.0.0.1", server.port, None, False, timeout=timedelta(seconds=10))
                         for _ in range(world - 1)]
    results: dict = {}

    def run(rank):
        try:
            results[rank] = fn(stores[rank], rank)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_ranks_with_different_configs_are_refused():
    digests = ["a" * 64, "a" * 64, "b" * 64]
    results = _in_threads(lambda store, rank: distributed.meet(store, rank, 3, digests[rank], 10), world=3)
    for rank in range(3):
        assert isinstance(results[rank], UserError), results[rank]
        assert "ranks started with different configs (sha256 rank 2: bbbbbbbbbbbb; rank 0: aaaaaaaaaaaa)" in str(
            results[rank])


def test_same_configs_meet_and_problems_reach_every_rank():
    assert _in_threads(lambda store, rank: distributed.meet(store, rank, 2, "c" * 64, 10)) == {0: None, 1: None}
    results = _in_threads(lambda s, r: distributed.sync(s, "case", r, 2, 10, "no bf16" if r == 1 else None))
    assert results == {0: {1: "no bf16"}, 1: {1: "no bf16"}}


def test_config_digest_is_stable_and_sensitive():
    a = {"cases": {"collectives": {"sizes": [4096]}}, "devices": ["cpu"]}
    assert distributed.config_digest(a) == distributed.config_digest(json.loads(json.dumps(a)))
    assert distributed.config_digest(a) != distributed.config_digest({**a, "devices": ["cpu", "cuda:0"]})


def test_only_rank_0_writes_results(monkeypatch, tmp_path):
    def configure(rank):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        option = SimpleNamespace(benchmark_json=tmp_path / "x.json", benchmark_save="run", benchmark_autosave=True,
                                 verbose=0)
        distributed.pytest_configure(SimpleNamespace(option=option))
        return option

    assert configure(0).benchmark_json == tmp_path / "x.json"
    other = configure(1)
    assert (other.benchmark_json, other.benchmark_save, other.benchmark_autosave) == (None, None, False)
    assert other.verbose < 0


# --- end to end ----------------------------------------------------------------------------------------

TINY = {
    "devices": "cpu",
    "timing": {"warmup_s": 0.0},
    "cases": {"matmul": {"enabled": False}, "collectives": {
        "ops": list(coll.OPS), "sizes": ["4KiB"], "dtypes": ["float32"], "in_place": "both", "backend": "auto",
        "rounds": 3, "iterations": 2, "warmup_rounds": 1, "timeout_s": 60, "min_round_s": 0}},
}


def _only_collectives(config: dict) -> dict:
    """TINY with every other family the foundation knows disabled (they may run under plain pytest)."""
    from suite.cases import FAMILIES

    cases = {name: {"enabled": False} for name in FAMILIES if name != "collectives"}
    return {**config, "cases": {**cases, "collectives": config["cases"]["collectives"]}}


def test_plain_pytest_skips_with_the_torchrun_command(pytester, monkeypatch, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(_only_collectives(TINY)))
    # In-process (torch is imported already; a subprocess would spend seconds importing it again).
    result = pytester.runpytest_inprocess(
        os.path.join(ROOT, "benchmarks", "test_collectives.py"), f"--rootdir={ROOT}", f"--suite-config={cfg}",
        "-p", "no:cacheprovider", "-rs", "-W", "ignore::pytest.PytestAssertRewriteWarning")
    result.assert_outcomes(skipped=9)
    result.stdout.fnmatch_lines(["*SKIPPED*collectives need several ranks: launch with torchrun --nproc-per-node=N*"])


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_two_gloo_ranks_through_torchrun_write_one_json(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    config = _only_collectives(TINY)
    # 2 calls of a 4 KiB Gloo collective take well under 20 ms: every case calibrates more, and every rank
    # picks the same count (a rank that picked another would leave the others waiting: a timeout, no JSON).
    config["cases"]["collectives"]["min_round_s"] = 0.02
    cfg.write_text(yaml.safe_dump(config))
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    cmd = distributed.torchrun_command(2, [os.path.join(ROOT, "benchmarks", "test_collectives.py"),
                                           f"--rootdir={ROOT}", "-p", "no:cacheprovider", "-q",
                                           f"--suite-config={cfg}", f"--benchmark-json={out}"])
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    data = json.loads(out.read_text())
    benches = {b["name"]: b for b in data["benchmarks"]}
    assert len(benches) == 9
    bench = benches["test_collectives[gloo-all_reduce-float32-4KiB-inplace]"]
    info, stats = bench["extra_info"], bench["stats"]
    assert (info["op"], info["dtype"], info["bytes"], info["backend"]) == ("all_reduce", "float32", 4096, "gloo")
    assert (info["world_size"], info["ranks_per_node"]) == (2, 2)
    assert stats["rounds"] == 3 and 2 < stats["iterations"] <= coll.MAX_ITERATIONS
    assert all(b["stats"]["iterations"] == b["extra_info"]["iterations"] > 2 for b in benches.values())
    assert info["algbw"] == pytest.approx(4096 / stats["median"] / 1e9)
    assert info["busbw"] == pytest.approx(info["algbw"] * 2 * (2 - 1) / 2)
    gather = benches["test_collectives[gloo-all_gather-float32-4KiB-outofplace]"]["extra_info"]
    assert gather["busbw"] == pytest.approx(gather["algbw"] * 0.5)
    assert bench["options"]["timer"] == "SlowestRankTimer(cpu)"
    assert data["suite"]["distributed"]["world_size"] == 2


def _bf16_ring_sum(parts):
    """Sums as a ring does: one hop at a time, rounded to the dtype at each."""
    total = parts[0].clone()
    for part in parts[1:]:
        total = total + part  # bf16 + bf16 -> rounded to bf16
    return total


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [2, 8, 16, 20, 21, 32, 42, 63, 64, 85, 128, 200, 255])
def test_reduce_check_catches_a_missing_or_doubled_rank(dtype, n):
    """bf16 sums of 8+ ranks used to hide a whole rank inside the rounding tolerance, and again from 22 ranks
    (three 8-GPU nodes) once the inputs' sums outgrew bf16's exact integers."""
    from suite.cases.collectives.measure import _mismatch, _sum_of_ranks, reduce_tolerance, reduce_values, sums_are_exact

    expected = _sum_of_ranks(n, 64, dtype, "cpu")
    parts = [reduce_values(r, 64, dtype, "cpu", n) for r in range(n)]
    exact, tol = sums_are_exact(dtype, n), reduce_tolerance(dtype, n)
    assert exact
    assert _mismatch(_bf16_ring_sum(parts), expected, exact, tol) is None
    assert _mismatch(_bf16_ring_sum(parts[:-1]), expected, exact, tol) is not None
    assert _mismatch(_bf16_ring_sum(parts + parts[:1]), expected, exact, tol) is not None


def test_reduce_check_says_when_bf16_sums_cannot_be_exact():
    from suite.cases.collectives.measure import reduce_pattern, sums_are_exact

    assert sums_are_exact(torch.bfloat16, 255) and not sums_are_exact(torch.bfloat16, 256)
    assert reduce_pattern(torch.bfloat16, 20) == (11, 1) and reduce_pattern(torch.bfloat16, 21) == (7, 1)
    assert sums_are_exact(torch.float16, 2047) and sums_are_exact(torch.float32, 4096)


def test_a_check_that_raises_on_one_rank_still_reaches_the_agreement(monkeypatch):
    # Out of memory for the float64 reference on this rank alone: the other ranks wait in the same agreement,
    # so it must be reached (and the case fail on every rank), never skipped by an exception.
    state = FakeState()
    monkeypatch.setattr(distributed, "_STATE", state)
    monkeypatch.setattr(dist, "all_reduce", _two_rank_sum)
    monkeypatch.setattr(coll, "_sum_of_ranks", lambda *a: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")))
    case, config = _case("all_reduce")
    work = coll.build(case, config)
    with pytest.raises(AssertionError, match="rank 0: all_reduce .* raised OutOfMemoryError"):
        work.check()
    assert state.seen == [f"{case.id} build", f"{case.id} check"]


def test_device_id_is_passed_only_where_init_process_group_takes_it():
    def new(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None, device_id=None):
        pass

    def old(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None):
        pass

    assert distributed.supports_device_id(new) and not distributed.supports_device_id(old)


def test_a_rank_late_past_the_timeout_is_told_so_and_the_next_agreement_is_in_step():
    """The others gave up on an agreement: the late rank must not pass it as if it had happened (it would then
    be one step out of line for the rest of the run), and the next agreement finds every rank in step."""

    def run(store, rank):
        outcomes = []
        if rank == 1:  # arrives only once rank 0 gave up on the first agreement (0.5 s)
            store.wait(["first/done"], timedelta(seconds=10))
        for key in ("first", "second"):
            try:
                distributed.sync(store, key, rank, 2, 0.5 if key == "first" else 10, what=key)
                outcomes.append("ok")
            except RankTimeout as exc:
                outcomes.append(str(exc))
        return outcomes

    results = _in_threads(run)
    assert results[0][0].startswith("rank(s) 1 of 2 did not arrive at first within 0.5 s")
    assert results[1][0].startswith("rank 1 reached first after the other ranks had stopped waiting for it")
    assert results[0][1] == results[1][1] == "ok"


def test_a_case_one_rank_never_started_does_not_pair_the_later_cases_wrongly():
    """Agreements are keyed by the case, not by how many cases a rank started: a rank that failed before one
    case (rank 0 here never starts "a") still meets the others at "b"."""

    def run(store, rank):
        state = distributed.DistState(_env(rank, 0), "gloo", "cpu", 0.5 if rank == 1 else 10, "d", store=store)
        outcomes = []
        for case_id in (["a", "b"] if rank == 1 else ["b"]):
            state.begin_case(case_id)
            try:
                outcomes.append((case_id, "ready", state.ready({"kind": "skip", "text": f"{rank} skips"}
                                                           if case_id == "b" else None)))
            except RankTimeout:
                outcomes.append((case_id, "timeout"))
            finally:
                state.end_case()
        return outcomes

    results = _in_threads(run)
    assert results[1][0] == ("a", "timeout"), results[1]
    both = {0: {"kind": "skip", "text": "0 skips"}, 1: {"kind": "skip", "text": "1 skips"}}
    assert results[0] == [("b", "ready", both)] and results[1][1] == ("b", "ready", both), results


# --- found by mutating the check: each of these survived every test before ----------------------------------


def test_a_wrong_result_on_a_rank_other_than_the_root_fails(monkeypatch):
    state = FakeState()
    state.env = LaunchEnv(1, 2, 1, 2, "127.0.0.1", 0, False, "test")
    monkeypatch.setattr(distributed, "_STATE", state)
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None, **_: None)  # this rank's sum never arrives
    case, config = _case("all_reduce")
    with pytest.raises(AssertionError, match="elements differ"):
        coll.build(case, config).check()


def test_one_wrong_element_fails_the_check(monkeypatch):
    monkeypatch.setattr(distributed, "_STATE", FakeState())

    def almost(t, op=None, **_):
        _two_rank_sum(t)
        t[7] += 1

    monkeypatch.setattr(dist, "all_reduce", almost)
    case, config = _case("all_reduce")
    with pytest.raises(AssertionError, match="1 of 1024 elements differ"):
        coll.build(case, config).check()


def test_another_ranks_wrong_result_fails_this_rank(monkeypatch):
    class OtherRankWrong(FakeState):
        def agree(self, what, problem=None):
            found = super().agree(what, problem)
            return {**found, 1: "injected"} if what.endswith("check") else found

    monkeypatch.setattr(distributed, "_STATE", OtherRankWrong())
    monkeypatch.setattr(dist, "all_reduce", _two_rank_sum)
    case, config = _case("all_reduce")
    with pytest.raises(AssertionError, match="wrong result on rank 1: injected"):
        coll.build(case, config).check()


def test_the_approximate_check_still_has_a_tolerance():
    from suite.cases.collectives.measure import _mismatch

    expected = torch.full((8,), 100.0, dtype=torch.float64)
    assert _mismatch(expected.to(torch.bfloat16), expected, False, 0.01) is None
    assert _mismatch((expected * 1.05).to(torch.bfloat16), expected, False, 0.01) is not None


def test_calibration_counts_the_same_calls_on_every_rank_whatever_its_clock(monkeypatch):
    # Every rank gets the same slowest time (MAX-reduced), but each added it to its own clock and took it
    # away again: on nodes up 3 hours and 27 days the count came out 100 on one and 101 on the other, and
    # NCCL paired one rank's extra collective with the other's timer reduction.
    from types import SimpleNamespace

    elapsed = 5.00000065e-05  # 5 calls of a ~10 us collective, the slowest rank's, as the MAX gave it

    def counts_with_clock_at(start):
        class Timer:
            def __init__(self):
                self.calls, self.last_elapsed = 0, None

            def __call__(self):
                self.calls += 1
                if self.calls % 2:
                    return start
                self.last_elapsed = elapsed
                return start + elapsed

        monkeypatch.setattr(distributed, "SlowestRankTimer", Timer)
        return coll.calibrated_iterations(lambda: None, SimpleNamespace(iterations=5, min_round_s=0.001))

    assert counts_with_clock_at(12345.678) == counts_with_clock_at(2332800.123456) == 100


def test_the_all_to_all_reference_holds_one_rank_input_at_a_time(monkeypatch):
    # It held n full-size inputs at once (its chunks' views kept them alive): 8 GPUs' worth of a large size.
    import weakref

    count, n, rank = 8 * 1024, 8, 3
    real, full, most = coll.rank_values, [], [0]

    def tracked(r, size, dtype, device):
        values = real(r, size, dtype, device)
        if size == count:
            most[0] = max(most[0], sum(ref() is not None for ref in full))
            full.append(weakref.ref(values))
        return values

    expected = torch.cat([real(r, count, torch.float32, "cpu").narrow(0, rank * 1024, 1024) for r in range(n)])
    monkeypatch.setattr(coll, "rank_values", tracked)
    bufs = coll._buffers("all_to_all", False, count, torch.float32, "cpu", rank, n)
    assert torch.equal(bufs.expected(), expected)
    assert most[0] <= 1  # this rank's own input (the buffer it sends), and no other
