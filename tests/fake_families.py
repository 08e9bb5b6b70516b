"""Test-only case families, loaded as a pytest plugin (`-p tests.fake_families`): one that runs out of memory
on its first case, one that sleeps past the time limit, one that is quick, one that stalls while timed. Each
checks its result honestly."""

from __future__ import annotations

import time

import torch

from suite.cases import FAMILIES, Work, make_case

FAMILIES.update({"oom": __name__, "sleepy": __name__, "quick": __name__, "stall": __name__})
NAME = "fake"


def enumerate_cases(config, devices):
    return [make_case("oom", ("cpu",), ["cpu", "huge"], device="cpu", size="huge"),
            make_case("oom", ("cpu",), ["cpu", "small"], device="cpu", size="small"),
            make_case("oom", ("cpu",), ["cpu", "late"], device="cpu", size="late"),
            make_case("sleepy", ("cpu",), ["cpu", "slow"], device="cpu", seconds=30),
            make_case("sleepy", ("cpu",), ["cpu", "fast"], device="cpu", seconds=0),
            *[make_case("quick", ("cpu",), ["cpu", str(i)], device="cpu", index=i) for i in range(40)],
            make_case("stall", ("cpu",), ["cpu", "midway"], device="cpu")]


def _enumerate(family):
    def _cases(config, devices):
        return [c for c in enumerate_cases(config, devices) if c.family == family]
    return _cases


def build(case, config) -> Work:
    p = case.info
    if case.family == "oom" and p["size"] == "huge":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 GiB")
    if case.family == "sleepy" and p["seconds"]:
        time.sleep(p["seconds"])
    x = torch.arange(1024, dtype=torch.float32)
    out = torch.empty_like(x)

    def check():
        out.copy_(x)
        assert torch.equal(out, x)

    calls = [0]

    def fn():
        calls[0] += 1
        if case.family == "oom" and p["size"] == "late" and calls[0] > 3:  # out of memory while timing
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if case.family == "stall":  # slow: its 100 fixed rounds run into the time limit midway
            time.sleep(0.2)
        out.copy_(x)

    pedantic = {"rounds": 100, "iterations": 1, "warmup_rounds": 0} if case.family == "stall" else None
    return Work(fn=fn, check=check, bytes=x.numel() * 4, pedantic=pedantic)


class _Family:
    def __init__(self, family):
        self.NAME = family
        self.enumerate_cases = _enumerate(family)
        self.build = build


def pytest_configure(config):
    import sys
    import types

    for family in ("oom", "sleepy", "quick", "stall"):
        module = types.ModuleType(f"tests.fake_families_{family}")
        module.NAME, module.enumerate_cases, module.build = family, _enumerate(family), build
        sys.modules[module.__name__] = module
        FAMILIES[family] = module.__name__
