"""`.to` against copies: x.to(same device) is free (no copy); to another device, clone, copy_ and friends copy."""

from __future__ import annotations

import functools

import torch

from suite.cases import Case, OwnFn, SkipCase, Work, make_case
from suite.cases.buffers import buffer, host_extra, host_side, verify_copy
from suite.cases.common import require_host_bytes
from suite.devices import device_id, synchronize
from suite.units import format_size

NAME = "placement"

# What each op is, in the field's words (the report's legend).
OPS = {
    "to_same": "x.to(x.device): returns x itself, no copy",
    "to_other": "x.to(other device): a copy across devices",
    "clone": "x.clone(): allocate and copy",
    "copy_": "dst.copy_(x) into a preallocated tensor",
    "empty_like_copy": "torch.empty_like(x).copy_(x)",
    "to_copy": "x.to(x.device, copy=True): allocate and copy",
}
# Ops that allocate their result: the check first frees a zeroed block of the same size so the allocator hands
# that block back, and an op that returned memory without copying into it shows as a wrong result.
ALLOCATING = ("to_other", "clone", "empty_like_copy", "to_copy")


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """Whether `a` and `b` name one device. torch.device objects compare their index as given, so a tensor on
    `mps:0` is not on torch.device("mps") for `==`; the suite's device ids (index 0 where none is given, no
    index for the CPU and MPS) compare the devices themselves."""
    return device_id(a) == device_id(b)


def other_device(device: str, devices: list[str]) -> str | None:
    """Where `to_other` sends a tensor: the CPU for an accelerator, the first selected accelerator for the CPU."""
    if device != "cpu":
        return "cpu"
    return next((d for d in devices if d != "cpu"), None)


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.placement
    if not section.enabled:
        return []
    cases = []
    for dev in devices:
        s = section.for_device(dev)
        for size in dict.fromkeys(s.sizes):
            for op in dict.fromkeys(s.ops):
                other = other_device(dev, devices) if op == "to_other" else None
                to = {"dst": other} if op == "to_other" else {}
                cases.append(make_case(NAME, (dev, other) if other else (dev,), [dev, op, format_size(size)],
                                       device=dev, op=op, size=size, copies=op != "to_same", **to))
    return cases


def skip_reason(case: Case) -> str | None:
    """Why this case cannot run with the selected devices (asks no device; the plan uses it too), or None."""
    p = case.info
    if p["op"] == "to_other" and p.get("dst") is None:
        return f"to_other on {p['device']} needs a second device; the run selects only {p['device']}"
    return None


def host_bytes(case: Case) -> int:
    """Host memory the case takes: the source where it is on the CPU, and the result where that is (to_same's
    result is the source itself)."""
    p = case.info
    target = p.get("dst") or p["device"]
    return p["size"] * ((p["device"] == "cpu") + (p["op"] != "to_same" and target == "cpu"))


def build(case: Case, config) -> Work:
    p = case.info
    dev, op, n = p["device"], p["op"], p["size"]
    if reason := skip_reason(case):
        raise SkipCase(reason)
    require_host_bytes(host_bytes(case), case.id)
    x = buffer(dev, n, data=True)
    target = torch.device(p.get("dst") or dev)
    dst = torch.empty_like(x) if op == "copy_" else None
    # functools.partial keeps a Python frame out of the timed call: to_same is a sub-microsecond op.
    fn = {"to_same": functools.partial(torch.Tensor.to, x, target),
          "to_other": functools.partial(torch.Tensor.to, x, target),
          "clone": functools.partial(torch.Tensor.clone, x),
          "copy_": functools.partial(torch.Tensor.copy_, dst, x),
          "empty_like_copy": lambda: torch.empty_like(x).copy_(x),
          "to_copy": functools.partial(torch.Tensor.to, x, target, copy=True)}[op]
    what = f"placement {case.id} ({OPS[op]})"
    own = OwnFn()

    def check() -> None:
        if op == "to_same":
            assert own() is x, f"{what}: returned a new tensor; .to() of a tensor already on {dev} must return it"
            return
        if op == "copy_":
            dst.fill_(0)
        elif op in ALLOCATING:
            torch.zeros(n, dtype=torch.uint8, device=target)  # freed at once: the next block handed out
        synchronize(*case.devices)
        out = own()
        synchronize(*case.devices)
        assert isinstance(out, torch.Tensor), f"{what}: returned {type(out).__name__}, not a tensor"
        assert same_device(out.device, target), f"{what}: result is on {out.device}, expected {target}"
        if same_device(target, x.device):
            assert out.data_ptr() != x.data_ptr(), f"{what}: result shares the source's memory; nothing was copied"
        verify_copy(out, x, what)

    copies = op != "to_same"  # to_same moves nothing: no bandwidth to report
    return own.bind(Work(fn=fn, check=check, bytes=n if copies else None, extra=host_extra(),
                         traffic_bytes=2 * n if copies and same_device(target, x.device) else None))


__all__ = ["NAME", "OPS", "build", "enumerate_cases", "host_bytes", "host_side", "other_device", "same_device", "skip_reason"]
