"""Portability to accelerators without float64 (Apple MPS, Intel's consumer XPUs), tested on the CPU.

`MPSLike` is a CPU tensor that treats float64 as an MPS tensor does: any cast to float64 or op giving float64
raises MPS's TypeError, except on a plain tensor that was first moved to the CPU on its own (`.to("cpu")`,
`.cpu()`). Each family's tensor factory is patched to hand out such tensors, so a result check that builds its
float64 reference on the device side fails here as it would on a Mac. `OnMPS` also reports its device as
`mps:0`, as tensors on MPS do.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from suite.cases import SkipCase, common, make_case
from suite.cases.ceiling import measure as ceiling
from suite.cases.conv import measure as conv
from suite.cases.habits import measure as habits
from suite.cases.matmul import measure as matmul
from suite.cases.model import measure as model
from suite.cases.placement import measure as placement
from suite.cases.precision import mode_for
from suite.config import parse_config
from suite.devices import use_platform
from tests.fakes import FakePlatform

# What torch says on MPS when a tensor is cast to float64 there.
MPS_FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
               "Please use float32 instead.")


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _host_move(args, kwargs) -> bool:
    """Whether a Tensor.to call only moves to the CPU: a device named, no dtype."""
    targets = [*args[1:], *kwargs.values()]
    devices = [torch.device(t) for t in targets if isinstance(t, (str, torch.device))]
    dtypes = [t for t in targets if isinstance(t, torch.dtype)]
    return bool(devices) and all(d.type == "cpu" for d in devices) and not dtypes


class MPSLike(torch.Tensor):
    """A CPU tensor that refuses float64 the way an MPS tensor does (see the module's docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and _host_move(args, kwargs)):
            # A copy to the host: a plain CPU tensor from here on, float64 allowed.
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).as_subclass(torch.Tensor)
        ret = super().__torch_function__(func, types, args, kwargs)
        if any(t.dtype == torch.float64 for t in _tensors(ret)):
            raise TypeError(MPS_FLOAT64)
        return ret

    def __deepcopy__(self, memo):
        # A copy on the same (pretend) device, as deepcopy of a device tensor makes: same type, same flags
        # (nn.Parameter marks a subclass instance with `_is_param`).
        with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
            new = self.clone().as_subclass(type(self))
        new.requires_grad_(self.requires_grad)
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        memo[id(self)] = new
        return new


def mps_like(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(MPSLike)


def patch_randn(monkeypatch, module) -> list[torch.Tensor]:
    """Make `module`'s randn hand out MPSLike tensors; the list returned collects them."""
    made: list[torch.Tensor] = []
    real = common.randn

    def randn(*shape, **kw):
        made.append(mps_like(real(*shape, **kw)))
        return made[-1]

    monkeypatch.setattr(module, "randn", randn)
    return made


# --- float64 references are made on the CPU ---------------------------------------------------------------


def test_relative_error_moves_to_the_host_before_casting():
    t = mps_like(torch.arange(6, dtype=torch.float32))
    # The fake refuses what MPS refuses: a cast to float64 before the move, or any float64 op on the device.
    for cast in (lambda: t.to("cpu", torch.float64), lambda: t.double(), lambda: t.to(torch.float64),
                 lambda: torch.add(t, torch.ones(6, dtype=torch.float64))):
        with pytest.raises(TypeError, match="Cannot convert a MPS Tensor to float64"):
            cast()
    assert common.relative_error(t, torch.arange(6, dtype=torch.float64)) == 0.0
    host = common.to_host64(t)
    assert type(host) is torch.Tensor and host.dtype == torch.float64 and host.device == torch.device("cpu")


@pytest.mark.parametrize("family", [matmul, ceiling])
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_matmul_check_passes_with_mps_like_inputs(family, precision, monkeypatch):
    made = patch_randn(monkeypatch, matmul)  # the ceiling builds its cases with matmul's build_matmul
    config = parse_config({"cases": {family.NAME: {"dtypes": [precision], "shapes": ["24x16x8"]}}})
    (case,) = [c for c in family.enumerate_cases(config, ["cpu"]) if c.info["device"] == "cpu"]
    with mode_for(case):
        work = family.build(case, config)
        work.check()
    assert len(made) == 2  # both operands were MPS-like


@pytest.mark.parametrize("step", ["fwd", "fwd+bwd"])
def test_conv_check_passes_with_mps_like_inputs(step, monkeypatch):
    made = patch_randn(monkeypatch, conv)
    shape = {"name": "small", "in_channels": 4, "out_channels": 6, "size": 9, "kernel": 3, "stride": 2,
             "padding": 1}
    config = parse_config({"cases": {"conv": {"shapes": [shape], "batch": 3, "steps": [step],
                                              "dtypes": ["float32"], "layouts": ["channels_last"]}}})
    (case,) = conv.enumerate_cases(config, ["cpu"])
    with mode_for(case):
        work = conv.build(case, config)
        work.check()
    assert len(made) == 3  # input, weight and upstream gradient


def _mps_like_net(real_make_net):
    """make_net whose parameters are MPSLike: what net.to("mps") leaves in the network."""

    def make(name: str) -> nn.Sequential:
        net = real_make_net(name)
        for module in net.modules():
            for key, param in list(module._parameters.items()):
                module._parameters[key] = nn.Parameter(mps_like(param.detach()))
        return net
    return make


@pytest.mark.parametrize("name", ["linear", "lenet"])
def test_model_check_passes_with_mps_like_weights_and_inputs(name, monkeypatch):
    patch_randn(monkeypatch, model)
    monkeypatch.setattr(model, "make_net", _mps_like_net(model.make_net))
    checked = []
    real_verify = model.verify
    monkeypatch.setattr(model, "verify", lambda label, net, x, *rest: checked.append((net, x))
                        or real_verify(label, net, x, *rest))
    case = make_case("model", ("cpu",), ["cpu", "float32", name, "b4"], device="cpu", dtype="float32",
                     precision="float32", model=name, step=model.STEPS[name], batch_size=4)
    with mode_for(case):
        work = model.build(case, None)
        work.check()
    ((net, x),) = checked  # the network moved with net.to(device) and its input were MPS-like
    assert isinstance(x, MPSLike) and all(isinstance(t, MPSLike) for t in net.parameters())


def test_sync_per_step_reference_is_computed_on_the_cpu(monkeypatch):
    made = patch_randn(monkeypatch, habits)
    config = parse_config({"cases": {"habits": {"habits": ["sync_per_step"], "steps": 3, "step_matmul": 16,
                                                "readers": ["item"]}}})
    case = next(c for c in habits.enumerate_cases(config, ["cpu"]) if c.info["variant"] == "once")
    # On the CPU the case is skipped (SYNC_ON_CPU); its loop and check run anywhere.
    work = habits._sync_per_step(case)
    work.check()
    assert len(made) == 2


# --- an unsupported dtype is a skip, whatever fails first: making the inputs or the call ------------------


def test_skip_pattern_knows_mps_and_xpu_texts():
    texts = [
        ("Cannot convert a MPS Tensor to float64 dtype", TypeError),
        (MPS_FLOAT64, TypeError),
        ("MPS device doesn't support float64", RuntimeError),
        ("linalg.svd is not supported on MPS", NotImplementedError),
        ("MPS BFloat16 is only supported on MacOS 14 or newer", RuntimeError),
        ("Required aspect fp64 is not supported on the device", RuntimeError),
    ]
    for text, kind in texts:
        with pytest.raises(SkipCase) as skip:
            common.skip_if_unsupported(kind(text), "float64 matmul", "mps")
        assert str(skip.value) == f"float64 matmul is not supported on mps: {text}"
    with pytest.raises(ValueError, match="only supported on"):  # the kind of error still matters
        common.skip_if_unsupported(ValueError("only supported on MacOS 14"), "x", "mps")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        common.skip_if_unsupported(RuntimeError("shape mismatch"), "x", "mps")


def _refusing_randn(*shape, **kw):
    raise TypeError(MPS_FLOAT64)


def test_float64_matmul_inputs_that_cannot_be_made_skip(monkeypatch):
    monkeypatch.setattr(matmul, "randn", _refusing_randn)
    config = parse_config({"cases": {"matmul": {"dtypes": ["float64"], "shapes": ["8x8x8"]}}})
    (case,) = [c for c in matmul.enumerate_cases(config, ["cpu"]) if c.info["device"] == "cpu"]
    # The skip docs/families.md promises: "float64 matmul is not supported on mps: ..."
    with pytest.raises(SkipCase, match=r"^float64 matmul is not supported on cpu: Cannot convert a MPS"):
        matmul.build(case, config)


def test_conv_operands_that_cannot_be_made_skip(monkeypatch):
    monkeypatch.setattr(conv, "randn", _refusing_randn)
    shape = {"name": "small", "in_channels": 2, "out_channels": 2, "size": 5, "kernel": 3, "padding": 1}
    config = parse_config({"cases": {"conv": {"shapes": [shape], "batch": 1, "steps": ["fwd"],
                                              "dtypes": ["float64"], "layouts": ["nchw"]}}})
    (case,) = conv.enumerate_cases(config, ["cpu"])
    with pytest.raises(SkipCase, match=r"^float64 nchw conv2d fwd is not supported on cpu: Cannot convert"):
        conv.build(case, config)


def test_model_inputs_that_cannot_be_made_skip(monkeypatch):
    monkeypatch.setattr(model, "randn", _refusing_randn)
    case = make_case("model", ("cpu",), ["cpu", "float64", "linear", "b2"], device="cpu", dtype="float64",
                     precision="float64", model="linear", step="fwd", batch_size=2)
    with pytest.raises(SkipCase, match=r"^float64 linear is not supported on cpu: Cannot convert"):
        model.build(case, None)


# --- placement compares devices, not torch.device spellings -----------------------------------------------


def test_same_device_ignores_an_index_left_out():
    assert placement.same_device(torch.device("mps", 0), torch.device("mps"))
    assert placement.same_device(torch.device("cuda", 0), torch.device("cuda"))
    assert placement.same_device(torch.device("xpu"), "xpu:0")
    assert placement.same_device(torch.device("cpu"), "cpu")
    assert not placement.same_device(torch.device("cuda", 1), torch.device("cuda"))
    assert not placement.same_device(torch.device("mps", 0), torch.device("cpu"))
    assert not placement.same_device("cuda:0", "xpu:0")


class OnMPS(MPSLike):
    """An MPSLike tensor that says it lives on mps:0, as every tensor on MPS does; moves to MPS stay here."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is torch.Tensor.device:  # the `device` property's getter
            return torch.device("mps", 0)
        if func is torch.Tensor.to and any(_is_mps(a) for a in (*args[1:], *kwargs.values())):
            # The data stays on the CPU here: a move to "mps" or "mps:0" is a move to where it is (x itself,
            # unless asked to copy).
            args = tuple(torch.device("cpu") if _is_mps(a) else a for a in args)
            kwargs = {k: torch.device("cpu") if _is_mps(v) else v for k, v in kwargs.items()}
            with torch._C.DisableTorchFunctionSubclass():
                ret = func(*args, **kwargs)
            return ret if ret is args[0] else ret.as_subclass(cls)
        return super().__torch_function__(func, types, args, kwargs)


def _is_mps(value) -> bool:
    return isinstance(value, (str, torch.device)) and torch.device(value).type == "mps"


def test_placement_on_mps_checks_and_counts_a_same_device_copy(monkeypatch):
    real = placement.buffer
    monkeypatch.setattr(placement, "buffer",
                        lambda dev, n, *a, **kw: real("cpu", n, *a, **kw).as_subclass(OnMPS))
    config = parse_config({"cases": {"placement": {"sizes": ["64KiB"], "ops": ["to_same", "copy_"]}}})
    cases = {c.info["op"]: c for c in placement.enumerate_cases(config, ["mps"])}
    with use_platform(FakePlatform()):  # synchronize("mps") would ask torch.mps
        work = placement.build(cases["copy_"], config)
        assert work.fn().device == torch.device("mps", 0) != torch.device("mps")
        work.check()  # the result is on mps:0, the case's device "mps": one device
        assert work.traffic_bytes == 2 * 64 * 1024  # a copy within MPS reports its read + write traffic
        same = placement.build(cases["to_same"], config)
        same.check()
