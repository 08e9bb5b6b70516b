"""Which devices: try_gpu/try_all_gpus, the suite's device ids, device specs ('all', 'gpus', 'cuda:1')."""

from __future__ import annotations

import re

import torch

from suite.devices.platform import current_platform
from suite.errors import UserError

ACCELERATOR_KINDS = ("cuda", "xpu", "mps")
_DEVICE_RE = re.compile(r"^(cpu|cuda|xpu|mps)(?::(\d+))?$")
# Spec words for every accelerator (or the CPU where there is none, as try_all_gpus).
_GPU_WORDS = ("gpus", "gpu", "accelerators")
SPEC_HELP = "'all', 'cpu', 'gpus', a device such as 'cuda:1', or a list of these"


def try_gpu(i: int = 0) -> torch.device:
    """The i-th GPU if it exists, else the CPU."""
    if current_platform().count("cuda") >= i + 1:
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def try_all_gpus() -> list[torch.device]:
    """Every GPU, or [cpu] if there is none."""
    n = current_platform().count("cuda")
    return [torch.device(f"cuda:{i}") for i in range(n)] or [torch.device("cpu")]


def accelerators() -> list[torch.device]:
    """Every accelerator torch can see (CUDA, XPU, MPS), in that order."""
    plat = current_platform()
    found: list[torch.device] = []
    for kind in ACCELERATOR_KINDS:
        n = plat.count(kind)
        if kind == "mps":
            found += [torch.device("mps")] * min(n, 1)
        else:
            found += [torch.device(kind, i) for i in range(n)]
    return found


def available_devices() -> list[torch.device]:
    """The CPU plus every accelerator torch can see."""
    return [torch.device("cpu"), *accelerators()]


def present_devices() -> list[str]:
    """The device ids this machine has: cpu and every accelerator torch can see."""
    return [device_id(d) for d in available_devices()]


def device_id(device: torch.device | str) -> str:
    """The suite's name for a device: 'cpu', 'cuda:0', 'mps' (torch's own spelling, index always shown)."""
    dev = torch.device(device)
    if dev.type in ("cpu", "mps"):
        return dev.type
    return f"{dev.type}:{dev.index if dev.index is not None else 0}"


def normalize_device_name(name: str) -> str:
    """Validate one device name and give its canonical spelling (`cuda` -> `cuda:0`); ValueError if not."""
    text = str(name).strip().lower()
    match = _DEVICE_RE.match(text)
    if not match:
        raise ValueError(f"{name!r} is not a device; expected {SPEC_HELP}")
    kind, index = match.groups()
    if kind in ("cpu", "mps"):
        if index not in (None, "0"):
            raise ValueError(f"{name!r} is not a device ({kind} has no index); expected {SPEC_HELP}")
        return kind
    return f"{kind}:{index or 0}"


def _items(spec) -> list[str]:
    return spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]


def resolve_spec(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    """Expand a device spec into device ids, keeping named devices the machine lacks (they become skips).

    'all' -> the CPU and every accelerator; 'gpus' -> every accelerator, or the CPU if there is none (as
    try_all_gpus); 'cpu', 'cuda:1', or a comma-separated string / list of these.
    """
    out: list[str] = []
    for raw in _items(spec):
        item = raw.strip().lower()
        if not item:
            continue
        if item == "all":
            names = present_devices()
        elif item in _GPU_WORDS:
            names = [device_id(d) for d in accelerators()] or ["cpu"]
        else:
            names = [normalize_device_name(item)]
        out += [n for n in names if n not in out]
    if not out:
        raise ValueError(f"empty device list; expected {SPEC_HELP}")
    return out


def check_spec(spec, option: str = "--suite-devices") -> list[str]:
    """resolve_spec for user input: a bad spec, `gpus` without an accelerator, or a list none of whose
    devices exist here becomes a one-line UserError (some missing: they stay, each becomes a skip)."""
    try:
        devices = resolve_spec(spec)
    except ValueError as exc:
        raise UserError(f"{option}: {exc}") from None
    text = spec if isinstance(spec, str) else ",".join(_items(spec))
    if any(i.strip().lower() in _GPU_WORDS for i in _items(spec)) and not accelerators():
        # try_all_gpus falls back to the CPU; a run asked for GPUs must not quietly measure the CPU instead.
        raise UserError(f"{option} {text}: no GPU visible to torch; use {option} cpu or all")
    missing = missing_devices(devices)
    if len(missing) == len(devices):
        raise UserError(f"{option} {text}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on "
                        f"this machine (it has: {', '.join(present_devices())}); pick from those, or all")
    return devices


def missing_reason(name: str) -> str | None:
    """None if the device exists here, else why not (for a skip)."""
    present = present_devices()
    if name in present:
        return None
    if len(present) > 1:
        return f"{name} is not available on this machine (it has: {', '.join(present)})"
    return (f"{name} is not available on this machine (it has the CPU only; torch {torch.__version__} "
            "sees no accelerator)")


def missing_devices(devices: list[str]) -> list[str]:
    """The devices of a resolved spec that this machine lacks (each of their cases will be a skip)."""
    return [d for d in devices if missing_reason(d)]
