"""conv2d: layer shapes x precisions x memory layouts x (forward | forward+backward) x devices, in TFLOP/s.

FLOP of the forward pass: 2 * N * Cout * Hout * Wout * (Cin / groups) * Kh * Kw (a multiply and an add per
weight per output element; no bias, as in ResNet where batch norm follows each convolution). The backward pass
computes the input gradient and the weight gradient, each the same multiply-adds as the forward, so
forward+backward counts 3x the forward. cuDNN may use Winograd or FFT algorithms that do fewer multiplies: the
suite still counts the direct convolution's FLOP, so a rate can exceed the matmul ceiling.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from suite.cases import Case, SkipCase, Work, make_case
from suite.cases.common import (HOST_WORKSPACE_FACTOR, float64_reference, randn, relative_error, require_host_bytes,
                                skip_if_unsupported, to_host64, torch_dtype)
from suite.cases.matmul.measure import tolerance
from suite.cases.precision import mode_record, require_tf32_math, storage_dtype, unsupported_reason

NAME = "conv"
COMPUTE = True  # keeps compute units busy: a sustained warm-up on accelerators (timing.warmup_seconds)

# forward+backward = forward + input gradient + weight gradient, each the forward's multiply-adds.
BACKWARD_FLOP_FACTOR = 3
# The check recomputes this many samples of the batch in float64 on the CPU: samples are independent in the
# output and the input gradient, so a slice checks the kernels at a fraction of a full float64 convolution.
CHECK_SAMPLES = 2
# Seeds of the inputs, weights and upstream gradient (distinct, so no two are the same tensor).
SEED_INPUT, SEED_WEIGHT, SEED_GRAD = 11, 12, 13


def output_size(size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                padding: tuple[int, int]) -> tuple[int, int]:
    """Hout, Wout of a convolution without dilation: floor((H + 2p - k) / s) + 1."""
    return tuple((size[i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in (0, 1))  # type: ignore[return-value]


def forward_flops(batch: int, in_channels: int, out_channels: int, out_size: tuple[int, int],
                  kernel: tuple[int, int], groups: int = 1) -> int:
    """2 * N * Cout * Hout * Wout * (Cin / groups) * Kh * Kw."""
    return 2 * batch * out_channels * out_size[0] * out_size[1] * (in_channels // groups) * kernel[0] * kernel[1]


def flops(p: dict) -> int:
    """FLOP of one call of the case with parameters `p` (forward, or 3x forward for forward+backward)."""
    fwd = forward_flops(p["batch"], p["in_channels"], p["out_channels"], tuple(p["out_size"]), tuple(p["kernel"]),
                        p["groups"])
    return fwd * (BACKWARD_FLOP_FACTOR if p["step"] == "fwd+bwd" else 1)


def shape_label(shape, batch: int) -> str:
    """The layer's name, or its dimensions, then the batch: 'resnet50-conv2-3x3-b32'."""
    if shape.name:
        base = shape.name
    else:
        (h, w), (kh, kw) = shape.size, shape.kernel
        base = (f"{shape.in_channels}x{h}x{w}-{shape.out_channels}k{kh}x{kw}-s{shape.stride[0]}"
                f"-p{shape.padding[0]}" + (f"-g{shape.groups}" if shape.groups > 1 else ""))
    return f"{base}-b{batch}"


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.conv
    if not section.enabled:
        return []
    cases = []
    for dev in devices:
        s = section.for_device(dev)
        for precision in s.dtypes:
            for layout in s.layouts:
                for step in s.steps:
                    for shape in s.shapes:
                        batch = shape.batch or s.batch
                        cases.append(make_case(
                            NAME, (dev,), [dev, precision, layout, step, shape_label(shape, batch)],
                            device=dev, dtype=storage_dtype(precision), precision=precision, layout=layout,
                            step=step, layer=shape.name, batch=batch, in_channels=shape.in_channels,
                            out_channels=shape.out_channels, size=shape.size, kernel=shape.kernel,
                            stride=shape.stride, padding=shape.padding, groups=shape.groups,
                            out_size=output_size(shape.size, shape.kernel, shape.stride, shape.padding),
                            cudnn_benchmark=s.cudnn_benchmark,
                        ))
    return cases


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else t.contiguous()


def make_operands(p: dict, device: str):
    """Input, weight (scaled by 1/sqrt(fan-in), as initialisers do) and upstream gradient on `device`."""
    dtype = torch_dtype(storage_dtype(p["precision"]))
    (h, w), (kh, kw) = p["size"], p["kernel"]
    cin, cout, groups = p["in_channels"], p["out_channels"], p["groups"]
    x = randn(p["batch"], cin, h, w, dtype=dtype, device=device, seed=SEED_INPUT)
    fan_in = cin // groups * kh * kw
    weight = randn(cout, cin // groups, kh, kw, dtype=torch.float32, device="cpu", seed=SEED_WEIGHT) / math.sqrt(fan_in)
    weight = weight.to(dtype=dtype, device=device)
    hout, wout = p["out_size"]
    grad = randn(p["batch"], cout, hout, wout, dtype=dtype, device=device, seed=SEED_GRAD)
    layout = p["layout"]
    return _layout(x, layout), _layout(weight, layout), _layout(grad, layout)


def host_bytes(p: dict) -> int:
    """Host memory the case takes: on the CPU, the timed call's operands and results (times the shared
    workspace factor); and where the check's full-batch float64 reference runs on the host (forward+backward,
    on every device but CUDA) its tensors and the input unfolded into columns (im2col of the CPU's float64
    convolution)."""
    (h, w), (kh, kw), (hout, wout) = p["size"], p["kernel"], p["out_size"]
    batch, cin, cout = p["batch"], p["in_channels"], p["out_channels"]
    x, wt, y = batch * cin * h * w, cout * (cin // p["groups"]) * kh * kw, batch * cout * hout * wout
    backward = p["step"] == "fwd+bwd"
    need = 0
    if p["device"] == "cpu":
        elements = x + wt + 2 * y + (x + wt if backward else 0)  # input, weight, upstream gradient, output, grads
        need += elements * torch_dtype(storage_dtype(p["precision"])).itemsize * HOST_WORKSPACE_FACTOR
    if backward and not p["device"].startswith("cuda"):
        need += 8 * (x + 2 * wt + 2 * y + batch * cin * kh * kw * hout * wout)
    return need


def build(case: Case, config) -> Work:
    p = case.info
    device, precision = p["device"], p["precision"]
    if reason := unsupported_reason(precision, device):
        raise SkipCase(reason)
    require_host_bytes(host_bytes(p), case.id)
    what = f"{precision} {p['layout']} conv2d {p['step']}"
    try:
        # On MPS moving a float64 tensor to the device is itself what fails: a skip, like the call below.
        x, weight, grad = make_operands(p, device)
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, what, device)
    stride, padding, groups = tuple(p["stride"]), tuple(p["padding"]), p["groups"]

    def conv(inp: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        return F.conv2d(inp, wt, None, stride, padding, 1, groups)

    if p["step"] == "fwd":
        def run() -> object:
            return conv(x, weight)
    else:
        x.requires_grad_(True)
        weight.requires_grad_(True)

        def run() -> object:
            # autograd.grad returns fresh gradients: nothing accumulates into .grad between calls.
            return torch.autograd.grad(conv(x, weight), (x, weight), grad)

    try:
        run()
    except Exception as exc:  # noqa: BLE001 - only 'unsupported' becomes a skip; the rest re-raises
        skip_if_unsupported(exc, what, device)

    return Work(fn=run, check=lambda: verify(case.id, p, conv, x, weight, grad), flops=flops(p),
                extra=mode_record(precision, device, ("conv",)))


def verify(label: str, p: dict, conv, x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor) -> None:
    """Output (and for fwd+bwd both gradients) against float64 convolutions on the CPU; AssertionError if off."""
    tol = tolerance(p["precision"])
    s = min(p["batch"], CHECK_SAMPLES)
    x64 = to_host64(x[:s]).requires_grad_(True)
    w64 = to_host64(weight).requires_grad_(True)
    g64 = to_host64(grad[:s])
    y64 = F.conv2d(x64, w64, None, tuple(p["stride"]), tuple(p["padding"]), 1, p["groups"])
    y = conv(x, weight)

    errors = []  # for tf32: TF32 math must show in one of them (cuDNN picks each pass's algorithm alone)

    def close(what: str, result: torch.Tensor, reference: torch.Tensor) -> None:
        err = relative_error(result, reference)
        assert err <= tol, f"conv {label}: {what} relative error {err:.3g} > {tol:g} against a float64 reference"
        errors.append(err)

    close("output", y[:s], y64.detach())
    if p["step"] == "fwd+bwd":
        gx64, _ = torch.autograd.grad(y64, (x64, w64), g64)
        gx, gw = torch.autograd.grad(y, (x, weight), grad)
        close("input gradient", gx[:s], gx64)
        # The weight gradient sums over the whole batch, so it is checked on the timed call's full batch (with
        # cudnn.benchmark cuDNN picks its algorithm per shape: a smaller batch could test another one), against
        # a float64 reference on a CUDA device itself, where float64 is fast enough for a full batch; elsewhere
        # on the CPU (MPS has no float64, nor have Intel's consumer and integrated GPUs).
        w_ref = float64_reference(weight).requires_grad_(True)
        y_ref = F.conv2d(float64_reference(x), w_ref, None, tuple(p["stride"]), tuple(p["padding"]), 1,
                         p["groups"])
        (gw_ref,) = torch.autograd.grad(y_ref, (w_ref,), float64_reference(grad))
        close("weight gradient", gw, gw_ref.cpu())
    require_tf32_math(p["precision"], max(errors), f"conv {label}")


__all__ = ["NAME", "build", "enumerate_cases", "flops", "forward_flops", "host_bytes", "output_size", "verify"]
