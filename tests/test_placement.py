"""`.to` against copies: enumeration, to_same identity (no copy, no bandwidth), checks that catch wrong copies."""

from __future__ import annotations

import pytest
import torch

from suite.cases import SkipCase
from suite.cases.placement import measure as placement
from suite.config import parse_config
from suite.devices import memory, use_platform
from suite.errors import UserError
from tests.fakes import FakePlatform

ALL_OPS = ["to_same", "to_other", "clone", "copy_", "empty_like_copy", "to_copy"]


def config(**section):
    return parse_config({"cases": {"placement": {"sizes": ["64KiB"], **section}}}, "test.yaml")


def cpu_case(op: str, size: str = "64KiB", devices=("cpu",)):
    cases = placement.enumerate_cases(config(sizes=[size]), list(devices))
    return next(c for c in cases if c.info["op"] == op and c.info["device"] == "cpu")


def test_enumeration_ids_and_other_device():
    with use_platform(FakePlatform(gpus=2)):
        cases = placement.enumerate_cases(config(), ["cpu", "cuda:0", "cuda:1"])
    ids = [c.id for c in cases]
    assert len(cases) == 3 * len(ALL_OPS) and len(set(ids)) == len(ids)
    assert "cpu-to_same-64KiB" in ids and "cuda:1-empty_like_copy-64KiB" in ids
    other = {c.info["device"]: (c.info["dst"], c.devices) for c in cases if c.info["op"] == "to_other"}
    assert other == {
        "cpu": ("cuda:0", ("cpu", "cuda:0")),
        "cuda:0": ("cpu", ("cuda:0", "cpu")),
        "cuda:1": ("cpu", ("cuda:1", "cpu")),
    }
    assert {c.info["copies"] for c in cases if c.info["op"] == "to_same"} == {False}
    assert {c.info["copies"] for c in cases if c.info["op"] != "to_same"} == {True}


def test_to_other_without_a_second_device_is_skipped_with_reason():
    case = cpu_case("to_other")
    assert case.info["dst"] is None and case.devices == ("cpu",)
    with pytest.raises(SkipCase, match="to_other on cpu needs a second device; the run selects only cpu"):
        placement.build(case, config())


def test_to_same_returns_the_tensor_itself_and_moves_nothing():
    work = placement.build(cpu_case("to_same"), config())
    work.check()
    x = work.fn.args[0]
    assert work.fn() is x
    assert work.bytes is None and work.traffic_bytes is None  # no gbps: nothing is copied


def test_to_same_check_fails_if_it_copies():
    work = placement.build(cpu_case("to_same"), config())
    real = work.fn
    work.fn = lambda: real().clone()
    with pytest.raises(AssertionError, match="returned a new tensor"):
        work.check()


@pytest.mark.parametrize("op", ["clone", "copy_", "empty_like_copy", "to_copy"])
def test_copies_are_checked_and_counted(op):
    work = placement.build(cpu_case(op), config())
    work.check()
    assert (work.bytes, work.traffic_bytes) == (65536, 2 * 65536)


@pytest.mark.parametrize("op", ["clone", "copy_", "empty_like_copy", "to_copy"])
def test_check_fails_on_one_wrong_byte(op):
    work = placement.build(cpu_case(op), config())
    real = work.fn

    def corrupt():
        out = real()
        out[1234] ^= 0x40
        return out

    work.fn = corrupt
    with pytest.raises(
        AssertionError, match=r"1 of 65536 bytes differ from the source \(first at byte 1234\)"
    ):
        work.check()


def test_copy_into_check_fails_when_nothing_is_copied():
    work = placement.build(cpu_case("copy_"), config())
    dst = work.fn.args[0]
    work.fn = lambda: dst  # returns the preallocated destination without copying into it
    with pytest.raises(AssertionError, match="65536 of 65536 bytes differ"):
        work.check()


@pytest.mark.parametrize("size", ["64KiB", "64MiB"])
def test_allocating_check_fails_when_memory_is_returned_uncopied(size):
    work = placement.build(cpu_case("clone", size), config(sizes=[size]))
    x = work.fn.args[0]
    for _ in range(3):  # leave freed blocks holding the source's bytes behind, as earlier calls would
        x.clone()
    work.fn = lambda: torch.empty_like(x)
    with pytest.raises(AssertionError, match="bytes differ from the source"):
        work.check()


def test_shared_memory_is_not_a_copy():
    work = placement.build(cpu_case("clone"), config())
    x = work.fn.args[0]
    work.fn = lambda: x.view(-1)
    with pytest.raises(AssertionError, match="shares the source's memory"):
        work.check()


def test_cpu_override_and_config_errors():
    cfg = parse_config(
        {"cases": {"placement": {"sizes": ["64MiB"], "cpu": {"sizes": ["4KiB"], "ops": ["clone"]}}}}
    )
    with use_platform(FakePlatform(gpus=1)):
        cases = placement.enumerate_cases(cfg, ["cpu", "cuda:0"])
    assert [c.id for c in cases if c.info["device"] == "cpu"] == ["cpu-clone-4KiB"]
    assert len([c for c in cases if c.info["device"] == "cuda:0"]) == len(ALL_OPS)
    with pytest.raises(
        UserError, match=r"cases.placement.ops\[1\]: 'clon' is not a placement op; allowed: to_same"
    ):
        parse_config({"cases": {"placement": {"ops": ["clone", "clon"]}}}, "x.yaml")
    with pytest.raises(UserError, match=r"cases.placement.sizes: \[\] is invalid"):
        parse_config({"cases": {"placement": {"sizes": []}}}, "x.yaml")


@pytest.mark.gpu
def test_gpu_to_same_and_copies():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cases = placement.enumerate_cases(config(), ["cpu", "cuda:0"])
    for case in cases:
        work = placement.build(case, config())
        work.check()
        if case.info["op"] == "to_same":
            assert work.fn() is work.fn.args[0]


@pytest.mark.gpu
def test_gpu_allocating_check_fails_when_memory_is_returned_uncopied():
    # CUDA's caching allocator hands back freed blocks untouched: without the check's zeroed block, an op that
    # returned an earlier clone's memory uncopied would pass.
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = next(c for c in placement.enumerate_cases(config(), ["cuda:0"]) if c.info["op"] == "clone")
    work = placement.build(case, config())
    x = work.fn.args[0]
    for _ in range(3):
        x.clone()
    work.fn = lambda: torch.empty_like(x)
    with pytest.raises(AssertionError, match="bytes differ from the source"):
        work.check()


def test_host_memory_counts_the_host_side_and_a_shortfall_is_a_skip(monkeypatch):
    with use_platform(FakePlatform(gpus=1)):
        cases = placement.enumerate_cases(config(sizes=["1MiB"]), ["cpu", "cuda:0"])
    need = {c.id: placement.host_bytes(c) for c in cases}
    assert need["cpu-to_same-1MiB"] == need["cpu-to_other-1MiB"] == need["cuda:0-to_other-1MiB"] == 2**20
    assert need["cpu-clone-1MiB"] == 2 * 2**20 and need["cuda:0-clone-1MiB"] == 0
    host = memory.HostMemory(free=2**30, total=2**30, source="MemAvailable")
    monkeypatch.setattr(memory, "host_memory_free", lambda: host)
    with pytest.raises(SkipCase, match=r"out of host memory for cpu-clone-4GiB \(needs 8.0 GiB; the host has 1.0 GiB"):
        placement.build(cpu_case("clone", "4GiB"), config())
