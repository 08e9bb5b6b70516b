"""Precision modes of the compute cases: float32 (IEEE), TF32, bfloat16, float16, float64; set per case, restored.
FP8, INT8 and the block-scaled MXFP8 and NVFP4 (matmuls only) and whether the installed torch and the device
have them.

A case's `precision` is its dtype, except `tf32`: float32 storage with TensorFloat-32 tensor-core math allowed
in cuBLAS and cuDNN. Plain `float32` means IEEE float32 everywhere: TF32 is switched off explicitly (cuDNN
convolutions allow TF32 by default, cuBLAS matmuls do not), so a float32 number never silently means TF32.
The switches are process-global, so `mode_for(case)` sets them around one whole case (build, check, warm-up,
timing) and restores them on the way out, whether the case passed, failed or skipped. oneDNN (mkldnn: the
CPU's and Intel XPU's matmuls and convolutions) has switches of its own (TF32 on XPU, bf16 on the CPU):
float32 sets them to IEEE as well.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from suite import devices as dev
from suite.cases import Case, SkipCase

# The tensor-core formats run through torch's scaled and integer matmuls (torch._scaled_mm, torch._int_mm), not
# torch.matmul: the OCP FP8 formats and INT8.
FP8 = ("float8_e4m3fn", "float8_e5m2")
INT8 = "int8"
# The block-scaled formats (OCP MX, NVIDIA's NVFP4), through torch.nn.functional.scaled_mm: the data's dtype, its
# scales' dtype, and the elements along k that share a scale. Blackwell's tensor cores have them (compute
# capability 10.0).
BLOCK_SCALED = {"mxfp8": ("float8_e4m3fn", "float8_e8m0fnu", 32), "nvfp4": ("float4_e2m1fn_x2", "float8_e4m3fn", 16)}
BLOCK_MIN_CAPABILITY = (10, 0)
PRECISIONS = ("float32", "tf32", "bfloat16", "float16", "float64", *FP8, INT8, *BLOCK_SCALED)
# FP8 tensor cores arrived with Ada and Hopper (compute capability 8.9).
FP8_MIN_CAPABILITY = (8, 9)
# MI300 (gfx94x) runs FP8 in the fnuz variants (no infinities, one NaN, exponent bias one higher); gfx95x and
# NVIDIA the OCP ones. Untested on a ROCm GPU here.
FNUZ = {"float8_e4m3fn": "float8_e4m3fnuz", "float8_e5m2": "float8_e5m2fnuz"}
# The torch function each of these precisions needs, which older releases lack (torch._scaled_mm: 2.1; its
# one-element fp32 scales and single-tensor result: 2.5; torch._int_mm: 2.1).
LOW_PRECISION_OP = {**{name: "_scaled_mm" for name in FP8}, INT8: "_int_mm"}
# TF32 tensor cores arrived with Ampere (compute capability 8.0); older GPUs run float32 in IEEE only.
TF32_MIN_CAPABILITY = (8, 0)
# TF32 keeps 10 of float32's 23 mantissa bits: on the suite's normal data a TF32 matmul or convolution is off
# float64 by ~3e-4 (inputs rounded to nearest) to ~8e-4 (truncated), relative, whatever the size; IEEE float32
# by ~1e-7 to 1e-6 (simulated on the CPU at 64x128x128 to 256x16384x1024). A tf32 case closer than this ran
# IEEE float32 math: TF32 math did not run (a library that ignores the switch, kernels without tensor cores
# for that shape), and its time would be float32's under a tf32 label.
TF32_MIN_ERROR = 2e-5


def require_tf32_math(precision: str, error: float, what: str) -> None:
    """For a tf32 case: SkipCase when its result, `error` (relative, against float64) off, is as exact as IEEE
    float32, so TF32 math did not run (TF32_MIN_ERROR); any other precision passes."""
    if precision == "tf32" and error < TF32_MIN_ERROR:
        raise SkipCase(f"{what}: tf32 was asked for but the result has IEEE float32 accuracy (relative error "
                       f"{error:.2g} against float64, where TF32 math gives ~3e-4): TF32 math did not run (the library "
                       "ignored the switch, or chose kernels without tensor cores), so its time would be float32's; "
                       "see the float32 case")


def storage_dtype(precision: str) -> str:
    """The tensor dtype a precision mode stores its data in (tf32 computes on float32 tensors)."""
    return "float32" if precision == "tf32" else precision


def _rocm_arch(device: str) -> str | None:
    """The gfx arch of a ROCm GPU ('gfx942'), '' where it is not said; None on a CUDA build or another device."""
    if not getattr(torch.version, "hip", None) or not device.startswith("cuda"):
        return None
    return str(dev.current_platform().properties(torch.device(device)).get("gcn_arch") or "")


def low_precision_dtype(precision: str, device: str) -> torch.dtype:
    """The torch dtype of a FP8 or INT8 precision's data on `device` (the fnuz FP8 variants on MI300)."""
    if precision in FNUZ and (_rocm_arch(device) or "").startswith("gfx94"):
        return getattr(torch, FNUZ[precision])
    return getattr(torch, precision)


def _low_precision_reason(precision: str, device: str) -> str | None:
    op = LOW_PRECISION_OP[precision]
    missing = [name for name in (op, precision) if not hasattr(torch, name)]
    if missing:
        return (f"{precision} matmuls need torch.{' and torch.'.join(missing)}, which torch {torch.__version__} "
                "does not have")
    kind = device.split(":")[0]
    if kind == "cpu":
        return None
    if kind != "cuda":
        return f"{precision} matmuls run on CUDA and ROCm GPUs and the CPU here; torch.{op} on {device} is untested"
    if dev.missing_reason(device) is not None or precision == INT8:
        return None
    arch = _rocm_arch(device)
    if arch is not None:
        if not arch.startswith(("gfx94", "gfx95")):
            return (f"{precision} on ROCm needs FP8 matrix cores (gfx94x/gfx95x: MI300 or later); {device} is "
                    f"{arch or '?'}")
        if arch.startswith("gfx94") and not hasattr(torch, FNUZ[precision]):
            return f"{precision} on {arch} runs as torch.{FNUZ[precision]}, which torch {torch.__version__} lacks"
        return None
    return short_of(device, FP8_MIN_CAPABILITY, f"{precision} needs FP8 tensor cores:", "Ada, Hopper")


def _block_reason(precision: str, device: str) -> str | None:
    data, scale, block = BLOCK_SCALED[precision]
    fn = torch.nn.functional
    wanted = [(torch, "torch", (data, scale)), (fn, "torch.nn.functional", ("scaled_mm",)),
              (getattr(fn, "ScalingType", None), "ScalingType", (f"BlockWise1x{block}", "TensorWise")),
              (getattr(fn, "SwizzleType", None), "SwizzleType", ("SWIZZLE_32_4_4", "NO_SWIZZLE"))]
    missing = [f"{where}.{name}" for obj, where, names in wanted for name in names if not hasattr(obj, name)]
    if missing:
        return f"{precision} matmuls need {', '.join(missing)}, which torch {torch.__version__} does not have"
    need = "block-scaled tensor cores: CUDA compute capability >= 10.0 (Blackwell or newer)"
    if not device.startswith("cuda") or getattr(torch.version, "hip", None):
        # torch's CPU scaled_mm refuses block-wise scales; MI355's MX formats are untested here.
        return f"{precision} matmuls need {need}; {device} has none that this suite runs"
    if dev.missing_reason(device) is not None:
        return None
    return short_of(device, BLOCK_MIN_CAPABILITY, f"{precision} matmuls need block-scaled tensor cores: CUDA",
                    "Blackwell")


def short_of(device: str, minimum: tuple[int, int], need: str, generations: str,
             props: dict | None = None) -> str | None:
    """'`need` compute capability >= 9.0 (`generations` or newer); cuda:0 (NAME) is 8.9' where the device's
    capability is below `minimum`; None where it is not, or the device does not say."""
    props = dev.current_platform().properties(torch.device(device)) if props is None else props
    capability = str(props.get("capability") or "")
    valid = capability.count(".") == 1 and capability.replace(".", "").isdigit()
    if not valid or tuple(map(int, capability.split("."))) >= minimum:
        return None
    return (f"{need} compute capability >= {minimum[0]}.{minimum[1]} ({generations} or newer); {device} "
            f"({props.get('name', '?')}) is {capability}")


def unsupported_reason(precision: str, device: str) -> str | None:
    """Why `precision` cannot run on `device`, where the suite knows in advance (for FP8, INT8, MXFP8, NVFP4: what the
    installed torch offers, and the device's FP8 or block-scaled tensor cores); None otherwise."""
    if precision in BLOCK_SCALED:
        return _block_reason(precision, device)
    if precision in LOW_PRECISION_OP:
        return _low_precision_reason(precision, device)
    if precision != "tf32":
        return None
    kind = device.split(":")[0]
    if kind == "xpu":
        # XPU has TF32 through oneDNN, but no XPU has checked that the suite's switches reach it: a figure
        # labelled tf32 that was IEEE float32 would be worse than none. Its float32 case forces IEEE.
        return (f"tf32 on {device} is not measured by this suite yet (oneDNN's TF32 on XPU is untested "
                "here); see the float32 case, which runs IEEE float32")
    if kind != "cuda":
        return (f"tf32 is a CUDA tensor-core mode (Ampere or newer); on {device} float32 matmuls and convolutions "
                "always run in IEEE float32: see the float32 case")
    if dev.missing_reason(device) is not None:
        return None
    plat = dev.current_platform()
    props = plat.properties(torch.device(device))
    if getattr(torch.version, "hip", None):
        # ROCm reports gfx versions, not CUDA capabilities. Only gfx94x/gfx95x (MI300 on) have xf32:
        # elsewhere hipBLASLt fails the case, or (older ROCm) ignores the switch and IEEE float32 would be
        # labelled tf32.
        supported = plat.tf32_supported(torch.device(device))
        if supported:
            return None
        arch = props.get("gcn_arch") or props.get("name", "?")
        if supported is None:
            return (f"tf32 on ROCm: torch {torch.__version__} cannot tell whether {device} ({arch}) has xf32 "
                    "(no torch.cuda.is_tf32_supported); see the float32 case")
        return (f"tf32 on ROCm needs xf32 math (gfx94x/gfx95x: MI300 or later); torch says {device} ({arch}) "
                "has none: see the float32 case")
    return short_of(device, TF32_MIN_CAPABILITY, "tf32 needs", "Ampere", props)


# --- the process-global switches -------------------------------------------------------------------------
# torch >= 2.9 has `fp32_precision` per backend and operator. Reading a legacy flag (`allow_tf32`,
# `get_float32_matmul_precision()`) while the new and legacy states disagree raises a RuntimeError there, and
# the legacy setters warn; so the suite uses only the new API where it exists (the legacy flags only on older
# torch), reads only the new getters, and restores exactly the values it found, "none" (inherit) included:
# after a case the legacy getters agree with the new state again, as before it. Inside a float32 or tf32
# case, a legacy getter may raise (torch's own consistency check); nothing in a case reads one.
# An operator's "none" inherits its backend's "all" setting, and that the generic one (torch's
# Context::float32Precision); "none" at every level means IEEE.
_INHERIT = "none"


def _new_api() -> bool:
    return all(hasattr(switch, "fp32_precision")
               for switch in (torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)))


def effective_precision(op: str, backend_all: str, generic: str) -> str:
    """The precision an operator runs with: its own setting, else its backend's, else the generic one."""
    for value in (op, backend_all, generic):
        if value != _INHERIT:
            return value
    return "ieee"


_ONEDNN_OPS = ("matmul", "conv")


def _onednn_ops() -> tuple | None:
    """oneDNN's matmul and conv switches, where torch has the fp32_precision API for them (torch >= 2.9);
    None before, where the suite leaves oneDNN as it found it."""
    mkldnn = getattr(torch.backends, "mkldnn", None)
    ops = tuple(getattr(mkldnn, name, None) for name in _ONEDNN_OPS)
    if not _new_api() or any(op is None or not hasattr(op, "fp32_precision") for op in ops):
        return None
    return ops


def _save() -> tuple:
    onednn = tuple(op.fp32_precision for op in _onednn_ops() or ())
    if _new_api():
        return ("new", torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision,
                torch.backends.cudnn.benchmark, onednn)
    return ("legacy", torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark, onednn)


def _restore(saved: tuple) -> None:
    api, matmul, conv, benchmark, onednn = saved
    if api == "new":
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = conv
    else:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = conv
    torch.backends.cudnn.benchmark = benchmark
    for op, value in zip(_onednn_ops() or (), onednn):
        op.fp32_precision = value


def _set_tf32(allowed: bool) -> None:
    if _new_api():
        value = "tf32" if allowed else "ieee"
        torch.backends.cuda.matmul.fp32_precision = value
        torch.backends.cudnn.conv.fp32_precision = value
    else:
        torch.set_float32_matmul_precision("high" if allowed else "highest")
        torch.backends.cudnn.allow_tf32 = allowed
    # oneDNN IEEE in both modes: a process's TF32 (XPU) or bf16 (CPU) must not reach a float32 figure, and the
    # suite does not measure tf32 through oneDNN (unsupported_reason skips it), so nothing needs it on.
    for op in _onednn_ops() or ():
        op.fp32_precision = "ieee"


def tf32_state() -> dict:
    """The switches as they are now: whether cuBLAS matmuls and cuDNN convolutions may use TF32."""
    if _new_api():
        # torch.backends.cudnn.fp32_precision is the ("cuda", "all") level, parent of cuBLAS and cuDNN alike.
        parents = (torch.backends.cudnn.fp32_precision, torch.backends.fp32_precision)
        matmul = effective_precision(torch.backends.cuda.matmul.fp32_precision, *parents)
        conv = effective_precision(torch.backends.cudnn.conv.fp32_precision, *parents)
        return {"matmul_tf32": matmul == "tf32", "conv_tf32": conv == "tf32"}
    return {"matmul_tf32": torch.get_float32_matmul_precision() != "highest",
            "conv_tf32": bool(torch.backends.cudnn.allow_tf32)}


def onednn_state() -> dict | None:
    """The precision oneDNN's float32 matmuls and convolutions run with now ('ieee', 'tf32', 'bf16'); None
    where torch has no fp32_precision API for them."""
    ops = _onednn_ops()
    if ops is None:
        return None
    # torch.backends.mkldnn.fp32_precision reads the ("mkldnn", "all") level, parent of both operators.
    parents = (torch.backends.mkldnn.fp32_precision, torch.backends.fp32_precision)
    return {name: effective_precision(op.fp32_precision, *parents) for name, op in zip(_ONEDNN_OPS, ops)}


@contextlib.contextmanager
def precision_mode(precision: str, cudnn_benchmark: bool | None = None) -> Iterator[None]:
    """Set the TF32 switches for `precision` (and cudnn.benchmark if given); restore all of them on exit."""
    saved = _save()
    try:
        if storage_dtype(precision) == "float32":
            _set_tf32(precision == "tf32")
        if cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
        yield
    finally:
        _restore(saved)


def mode_for(case: Case | None):
    """The precision mode of one case, from its parameters (`precision`, `cudnn_benchmark`)."""
    if case is None:
        return contextlib.nullcontext()
    info = case.info
    return precision_mode(info.get("precision", info.get("dtype", "float32")), info.get("cudnn_benchmark"))


def mode_record(precision: str, device: str, uses: tuple[str, ...] = ("matmul", "conv")) -> dict:
    """extra_info keys that say how the case ran: the precision and, for float32 data, whether TF32 was in
    effect: the switch of the library the case `uses` (matmul, conv) on that device: cuBLAS and cuDNN on a
    CUDA device, oneDNN on an XPU."""
    record: dict = {"precision": precision}
    if storage_dtype(precision) == "float32":
        kind = device.split(":")[0]
        if kind == "cuda":
            state = tf32_state()
            switched = any(state[f"{lib}_tf32"] for lib in uses)
        elif kind == "xpu":
            onednn = onednn_state() or {}
            switched = any(onednn.get(lib) == "tf32" for lib in uses)
        else:
            switched = False  # the CPU and MPS have no TF32 math, whatever a switch says
        record["allow_tf32"] = switched
    return record

