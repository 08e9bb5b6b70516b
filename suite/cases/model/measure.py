"""A model on a device: nn.Linear(3, 1) moved with net.to(device), and MLP / LeNet training steps, in samples/s.

The classic first try is `net = nn.Sequential(nn.Linear(3, 1)); net.to(device); net(x)` with x on the device; a
realistic small network is measured as a whole training step.
FLOP per call, counted per weight layer (nn.Linear 2*B*in*out, nn.Conv2d as in suite/cases/conv/measure.py); a training
step counts the forward, the weight gradients and the input gradients (3x the forward) minus the first layer's
input gradient, which nothing needs. Activations, pooling, the loss and the optimizer are not counted: their
FLOP are few, their memory traffic is not, so tflops understates the work of a small network.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.nn import functional as F

from suite.cases import Case, SkipCase, Work, make_case
from suite.cases.common import (HOST_WORKSPACE_FACTOR, SEED, randn, relative_error, require_host_bytes,
                                skip_if_unsupported, to_host64, torch_dtype)
from suite.cases.conv.measure import forward_flops
from suite.cases.matmul.measure import tolerance
from suite.cases.precision import mode_record, require_tf32_math, storage_dtype, unsupported_reason
from suite.devices import device_id

NAME = "model"
COMPUTE = True  # keeps compute units busy: a sustained warm-up on accelerators (timing.warmup_seconds)

# What each model's timed call is: the classic one-liner is a forward pass, as everyone first tries it; the
# small networks run a whole training step (zero_grad, forward, loss, backward, optimizer step).
STEPS = {"linear": "fwd", "mlp": "train", "lenet": "train"}
# MNIST-shaped inputs (1 x 28 x 28) and 10 classes for the MLP and LeNet, as in the classic course chapters.
IMAGE_SHAPE = (1, 28, 28)
CLASSES = 10
# Hidden widths of the MLP: big enough that its matmuls, not Python, dominate a step on a CPU at batch 64.
MLP_HIDDEN = (1024, 1024)
# Plain SGD with a small step: thousands of timed steps on one fixed batch move the weights only a little, so
# the data stays in range (no overflow in float16, no denormals on the CPU) for the whole measurement.
LEARNING_RATE = 1e-3


def make_net(model: str) -> nn.Sequential:
    """The network, built on the CPU with seeded weights (the same on every device)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        if model == "linear":
            return nn.Sequential(nn.Linear(3, 1))
        if model == "mlp":
            widths = (IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2], *MLP_HIDDEN)
            layers: list[nn.Module] = [nn.Flatten()]
            for a, b in zip(widths, widths[1:]):
                layers += [nn.Linear(a, b), nn.ReLU()]
            return nn.Sequential(*layers, nn.Linear(widths[-1], CLASSES))
        if model == "lenet":
            # LeNet-5 as in Dive into Deep Learning (sigmoid activations, average pooling).
            return nn.Sequential(
                nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.Sigmoid(), nn.AvgPool2d(kernel_size=2, stride=2),
                nn.Conv2d(6, 16, kernel_size=5), nn.Sigmoid(), nn.AvgPool2d(kernel_size=2, stride=2),
                nn.Flatten(),
                nn.Linear(16 * 5 * 5, 120), nn.Sigmoid(), nn.Linear(120, 84), nn.Sigmoid(), nn.Linear(84, CLASSES),
            )
    raise ValueError(f"unknown model {model!r}; known: {', '.join(STEPS)}")


def input_shape(model: str) -> tuple[int, ...]:
    return (3,) if model == "linear" else IMAGE_SHAPE


def layer_flops(net: nn.Module, shape: tuple[int, ...], batch: int) -> list[int]:
    """Forward FLOP of each weight layer (Linear, Conv2d) in call order, found by one CPU pass of one sample."""
    found: list[int] = []

    def hook(module: nn.Module, inputs, output) -> None:
        if isinstance(module, nn.Linear):
            found.append(2 * batch * module.in_features * module.out_features)
        elif isinstance(module, nn.Conv2d):
            found.append(forward_flops(batch, module.in_channels, module.out_channels, tuple(output.shape[-2:]),
                                       module.kernel_size, module.groups))

    _probe(net, shape, lambda m: isinstance(m, (nn.Linear, nn.Conv2d)), hook)
    return found


def activations(net: nn.Module, shape: tuple[int, ...]) -> tuple[int, int]:
    """(all, largest) output elements of the network's layers for one sample, found by one CPU pass."""
    sizes: list[int] = []
    _probe(net, shape, lambda m: not list(m.children()), lambda _m, _i, out: sizes.append(out.numel()))
    return sum(sizes), max(sizes, default=0)


def _probe(net: nn.Module, shape: tuple[int, ...], which, hook) -> None:
    """One pass of one sample through a float32 CPU copy of `net`, `hook` on each module `which` picks."""
    probe = copy.deepcopy(net).to("cpu", torch.float32)
    for m in probe.modules():
        if which(m):
            m.register_forward_hook(hook)
    with torch.no_grad():
        probe(torch.ones(1, *shape))


def host_bytes(p: dict, net: nn.Module) -> int:
    """Host memory the case takes: on the CPU, the batch's input and every layer's output (kept for the backward
    pass), the weights and their gradients (times the shared workspace factor); on every device, the check's
    float64 forward on the host (the input, two layers' outputs at a time, the weights)."""
    model, batch = p["model"], p["batch_size"]
    inputs = math.prod(input_shape(model))
    every, largest = activations(net, input_shape(model))
    weights = sum(t.numel() for t in net.parameters())
    need = 8 * (batch * (inputs + 2 * largest) + weights)
    if p["device"] == "cpu":
        elements = batch * (inputs + every) + 2 * weights
        need += elements * torch_dtype(storage_dtype(p["precision"])).itemsize * HOST_WORKSPACE_FACTOR
    return need


def step_flops(per_layer: list[int], step: str) -> int:
    """A forward: the sum. A training step: 3x the sum, less the first layer's input gradient."""
    total = sum(per_layer)
    return total if step == "fwd" else 3 * total - (per_layer[0] if per_layer else 0)


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.model
    if not section.enabled:
        return []
    return [
        make_case(NAME, (dev,), [dev, precision, model, f"b{batch}"], device=dev, dtype=storage_dtype(precision),
                  precision=precision, model=model, step=STEPS[model], batch_size=batch)
        for dev in devices
        for model in section.for_device(dev).models
        for precision in section.for_device(dev).dtypes
        for batch in section.for_device(dev).batch_sizes
    ]


def build(case: Case, config) -> Work:
    p = case.info
    device, precision, model, batch = p["device"], p["precision"], p["model"], p["batch_size"]
    if reason := unsupported_reason(precision, device):
        raise SkipCase(reason)
    dtype = torch_dtype(storage_dtype(precision))
    cpu_net = make_net(model)
    require_host_bytes(host_bytes(p, cpu_net), case.id)
    try:
        # The classic: build the network anywhere, then move it (parameters and buffers) with net.to(device).
        # Inside the skip: on MPS moving float64 parameters or inputs to the device is what fails.
        net = copy.deepcopy(cpu_net).to(device=device, dtype=dtype)
        x = randn(batch, *input_shape(model), dtype=dtype, device=device, seed=SEED + 1)
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, f"{precision} {model}", device)
    labels = torch.randint(0, CLASSES, (batch,), generator=torch.Generator().manual_seed(SEED + 2)).to(device)

    if p["step"] == "fwd":
        def run() -> object:
            return net(x)
    else:
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)

        def run() -> object:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), labels)
            loss.backward()
            optimizer.step()
            return loss

    try:
        run()  # one step (a training step moves the weights a little: harmless, the check allows for it)
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, f"{precision} {model}", device)

    def check() -> None:
        verify(case.id, net, x, device, dtype, precision, run if p["step"] == "train" else None)

    per_layer = layer_flops(cpu_net, input_shape(model), batch)
    extra = {**mode_record(precision, device), "parameters": sum(t.numel() for t in net.parameters())}
    return Work(fn=run, check=check, flops=step_flops(per_layer, p["step"]), samples=batch, extra=extra)


def verify(label: str, net: nn.Module, x: torch.Tensor, device: str, dtype: torch.dtype, precision: str,
           train_step=None) -> None:
    """Parameters, input and output on `device` in `dtype`; the output against a float64 copy on the CPU; and a
    training step that changes the weights and leaves gradients on the device. AssertionError if not."""
    want = device_id(device)
    for name, tensor in [*net.named_parameters(), *net.named_buffers()]:
        assert device_id(tensor.device) == want, f"model {label}: {name} is on {tensor.device}, not {want}"
        assert tensor.dtype == dtype, f"model {label}: {name} is {tensor.dtype}, not {dtype}"
    with torch.no_grad():
        out = net(x)
        # The network run with float64 CPU copies of its current weights, each moved first and cast on the CPU
        # (to_host64): converting the device network with .to("cpu", torch.float64) may cast on the device,
        # which MPS refuses. Integer buffers (batch norm's counter) keep their dtype, as Module.to does.
        host = {name: to_host64(t) if t.is_floating_point() else t.detach().to("cpu")
                for name, t in [*net.named_parameters(), *net.named_buffers()]}
        reference = torch.func.functional_call(net, host, (to_host64(x),))
    assert device_id(out.device) == want, f"model {label}: the output is on {out.device}, not {want}"
    err = relative_error(out, reference)
    tol = tolerance(precision)
    assert err <= tol, f"model {label}: output relative error {err:.3g} > {tol:g} against a float64 reference"
    require_tf32_math(precision, err, f"model {label}")
    if train_step is None:
        return
    before = [t.detach().clone() for t in net.parameters()]
    loss = train_step()
    assert torch.isfinite(loss).item(), f"model {label}: the training loss is {loss.item()}"
    assert device_id(loss.device) == want, f"model {label}: the loss is on {loss.device}, not {want}"
    changed = [not torch.equal(b, a.detach()) for b, a in zip(before, net.parameters())]
    assert any(changed), f"model {label}: an optimizer step left every parameter unchanged"
    for name, tensor in net.named_parameters():
        assert tensor.grad is not None and device_id(tensor.grad.device) == want, (
            f"model {label}: the gradient of {name} is not on {want}")


__all__ = ["NAME", "activations", "build", "enumerate_cases", "host_bytes", "layer_flops", "make_net", "step_flops",
           "verify"]
