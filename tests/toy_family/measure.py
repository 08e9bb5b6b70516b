"""Toy family: `x.fill_(value)` per device and size, bytes written per call, checked against the value."""

from __future__ import annotations

import torch

from suite.cases import Case, SkipCase, Work, make_case
from suite.units import format_size

NAME = "toy"


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.toy
    if not section.enabled:
        return []
    return [make_case(NAME, (device,), [device, format_size(size)], device=device, size=size)
            for device in devices for size in section.for_device(device).sizes]


def build(case: Case, config) -> Work:
    p = case.info
    value = config.cases.toy.value
    if value == 0:
        raise SkipCase("value 0 cannot be told apart from a fresh zeroed buffer; pick another value")
    x = torch.zeros(p["size"] // 4, dtype=torch.float32, device=p["device"])

    def check() -> None:
        x.zero_()
        x.fill_(value)
        assert bool((x == value).all()), f"fill_ left {int((x != value).sum())} elements unset"

    return Work(fn=lambda: x.fill_(value), check=check, bytes=x.numel() * 4)
