"""Precision modes: TF32 switches set for a case and restored after it (pass, fail or skip); skip reasons."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from suite.cases import SkipCase, make_case
from suite.cases.matmul.measure import build as build_matmul, enumerate_cases as matmul_cases
from suite.cases.precision import mode_for, mode_record, precision_mode, tf32_state, unsupported_reason
from suite.config import parse_config
from suite.devices import use_platform
from suite.errors import UserError
from tests.conftest import ROOT
from tests.fakes import FakePlatform


def _thin_test(family: str):
    """The real benchmarks/test_<family>.py function, as pytest runs it."""
    spec = importlib.util.spec_from_file_location(f"bench_{family}", ROOT / "benchmarks" / f"test_{family}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"test_{family}")


def _case(family: str, precision: str, device: str = "cuda:0", **extra):
    dtype = "float32" if precision == "tf32" else precision
    return make_case(family, (device,), [device, precision], device=device, dtype=dtype, precision=precision,
                     **extra)


@pytest.fixture
def clean_switches():
    before = (tf32_state(), torch.backends.cudnn.benchmark)
    yield before
    assert (tf32_state(), torch.backends.cudnn.benchmark) == before, "a test leaked a precision switch"


@pytest.mark.parametrize("family", ["matmul", "conv", "model", "ceiling"])
@pytest.mark.parametrize("outcome", [None, AssertionError("wrong result"), SkipCase("no bf16 here"),
                                     pytest.skip.Exception("skipped")])
def test_switches_set_during_case_and_restored_after(family, outcome, clean_switches):
    test_fn = _thin_test(family)
    case = _case(family, "tf32", cudnn_benchmark=True)
    seen = {}

    def measure(c):
        seen.update(tf32_state(), benchmark=torch.backends.cudnn.benchmark)
        if outcome is not None:
            raise outcome

    if outcome is None:
        test_fn(case, measure)
    else:
        with pytest.raises(type(outcome)):
            test_fn(case, measure)
    assert seen == {"matmul_tf32": True, "conv_tf32": True, "benchmark": True}


def test_float32_switches_tf32_off_even_where_the_default_allows_it(clean_switches):
    with precision_mode("tf32"):
        assert tf32_state() == {"matmul_tf32": True, "conv_tf32": True}
        with precision_mode("float32", cudnn_benchmark=False):
            assert tf32_state() == {"matmul_tf32": False, "conv_tf32": False}
            assert torch.backends.cudnn.benchmark is False
            assert mode_record("float32", "cuda:0") == {"precision": "float32", "allow_tf32": False}
        assert tf32_state() == {"matmul_tf32": True, "conv_tf32": True}
        assert mode_record("tf32", "cuda:1") == {"precision": "tf32", "allow_tf32": True}
        # The CPU has no TF32, whatever the switch says.
        assert mode_record("tf32", "cpu") == {"precision": "tf32", "allow_tf32": False}
    assert mode_record("bfloat16", "cuda:0") == {"precision": "bfloat16"}


def test_the_record_reads_the_switch_of_the_library_the_case_uses(clean_switches):
    if not hasattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision"):
        pytest.skip("torch < 2.9 has no per-backend fp32_precision")
    with precision_mode("float32"):
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        assert mode_record("float32", "cuda:0", ("matmul",))["allow_tf32"] is False
        assert mode_record("float32", "cuda:0", ("conv",))["allow_tf32"] is True


def test_other_precisions_leave_the_switches_alone(clean_switches):
    before = tf32_state()
    with precision_mode("bfloat16"):
        assert tf32_state() == before
    with mode_for(None):
        assert tf32_state() == before


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_tf32_skips_off_cuda_with_the_reason(device):
    reason = unsupported_reason("tf32", device)
    assert reason and "CUDA tensor-core mode" in reason and device in reason
    assert unsupported_reason("float32", device) is None


def test_tf32_on_xpu_skips_without_claiming_xpu_has_no_tf32():
    # XPU has TF32 through oneDNN; the suite does not measure it yet, and says so instead of "IEEE always".
    reason = unsupported_reason("tf32", "xpu:0")
    assert "not measured by this suite yet" in reason and "xpu:0" in reason
    assert "always run in IEEE" not in reason
    assert unsupported_reason("float32", "xpu:0") is None


def test_tf32_skips_on_a_pre_ampere_gpu():
    class OldGpu(FakePlatform):
        def properties(self, device):
            return dict(super().properties(device), name="Tesla V100-SXM2-16GB", capability="7.0")

    with use_platform(OldGpu(gpus=1)):
        reason = unsupported_reason("tf32", "cuda:0")
    assert "compute capability >= 8.0" in reason and "7.0" in reason
    with use_platform(FakePlatform(gpus=1)):  # capability 9.0
        assert unsupported_reason("tf32", "cuda:0") is None


def test_tf32_matmul_case_on_the_cpu_is_a_skip_with_the_reason():
    case = _case("matmul", "tf32", device="cpu", m=8, n=8, k=8)
    with pytest.raises(SkipCase, match="on cpu float32 matmuls and convolutions always run in IEEE"):
        build_matmul(case, None)


def test_unsupported_dtype_becomes_a_skip_naming_dtype_and_device(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')

    monkeypatch.setattr(torch, "matmul", refuse)
    case = _case("matmul", "float16", device="cpu", m=8, n=8, k=8)
    with pytest.raises(SkipCase, match=r"float16 matmul is not supported on cpu: .*not implemented for 'Half'"):
        build_matmul(case, None)


def test_matmul_ids_keep_plain_float32_and_add_tf32():
    config = parse_config({"cases": {"matmul": {"dtypes": ["fp32", "tf32", "bf16"], "shapes": ["1024x1024x1024"]}}})
    ids = [c.id for c in matmul_cases(config, ["cpu"])]
    assert ids == ["cpu-float32-1024x1024x1024", "cpu-tf32-1024x1024x1024", "cpu-bfloat16-1024x1024x1024"]
    tf32 = matmul_cases(config, ["cpu"])[1].info
    assert (tf32["dtype"], tf32["precision"]) == ("float32", "tf32")


def test_float64_where_asked_runs_and_records_its_precision():
    case = _case("matmul", "float64", device="cpu", m=16, n=8, k=4)
    work = build_matmul(case, None)
    work.check()
    assert work.extra == {"precision": "float64"}


def test_bad_precision_names_the_allowed_ones():
    with pytest.raises(UserError, match=r"x.yaml: cases.conv.dtypes\[0\]: 'tf16' is not a dtype; allowed: "
                                        r"bfloat16, float16, float32, float64, tf32"):
        parse_config({"cases": {"conv": {"dtypes": ["tf16"]}}}, "x.yaml")


@pytest.mark.gpu
def test_tf32_changes_a_cuda_matmul(clean_switches):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    a = torch.randn(1024, 1024, device="cuda")
    exact = (a.double() @ a.double())
    with precision_mode("float32"):
        strict = (a @ a - exact).norm() / exact.norm()
    with precision_mode("tf32"):
        loose = (a @ a - exact).norm() / exact.norm()
    if torch.cuda.get_device_capability() >= (8, 0):
        from suite.cases.precision import TF32_MIN_ERROR

        assert loose > 10 * strict, (float(loose), float(strict))
        # The threshold that tells a tf32 case's TF32 math from IEEE (require_tf32_math) lies between them.
        assert loose > TF32_MIN_ERROR > strict, (float(loose), float(strict))


# --- the new fp32_precision API (torch >= 2.9) and the legacy flags ------------------------------------------

new_api = pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
                             reason="torch < 2.9 has only the legacy TF32 flags")


def test_an_operator_set_to_none_inherits_its_backend_then_the_generic_setting():
    from suite.cases.precision import effective_precision

    assert effective_precision("ieee", "tf32", "tf32") == "ieee"
    assert effective_precision("none", "tf32", "ieee") == "tf32"
    assert effective_precision("none", "none", "tf32") == "tf32"
    assert effective_precision("none", "none", "none") == "ieee"


_SWITCHES = ("torch.backends.fp32_precision", "torch.backends.cudnn.fp32_precision",
             "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.conv.fp32_precision")


def _read_all() -> tuple:
    return tuple(eval(name, {"torch": torch}) for name in _SWITCHES)


@new_api
@pytest.mark.parametrize("start", [
    {},  # torch's defaults: matmul "none" (inherit), conv "tf32"
    {"torch.backends.cuda.matmul.fp32_precision": "tf32", "torch.backends.cudnn.conv.fp32_precision": "none"},
    {"torch.backends.cudnn.fp32_precision": "tf32"},  # the cuda-wide level a user may have set
])
@pytest.mark.parametrize("precision", ["tf32", "float32"])
def test_every_switch_is_restored_exactly_and_legacy_reads_work_after(start, precision, monkeypatch):
    from suite.cases.precision import precision_mode, tf32_state

    before = _read_all()
    try:
        for name, value in start.items():
            target, attr = name.rsplit(".", 1)
            setattr(eval(target, {"torch": torch}), attr, value)
        saved = _read_all()
        with precision_mode(precision):
            inside = tf32_state()
        assert _read_all() == saved, "precision_mode did not restore every fp32_precision switch exactly"
        assert inside == {"matmul_tf32": precision == "tf32", "conv_tf32": precision == "tf32"}
        if not start:
            # Torch's own consistency check of new vs legacy state passes again, as it did before the case.
            torch.get_float32_matmul_precision()
            assert isinstance(torch.backends.cuda.matmul.allow_tf32, bool)
            assert isinstance(torch.backends.cudnn.allow_tf32, bool)
    finally:
        for name, value in zip(_SWITCHES, before):
            target, attr = name.rsplit(".", 1)
            setattr(eval(target, {"torch": torch}), attr, value)


@new_api
def test_the_record_follows_inheritance_from_the_cuda_level():
    from suite.cases.precision import tf32_state

    old = (torch.backends.cudnn.fp32_precision, torch.backends.cuda.matmul.fp32_precision)
    try:
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.cudnn.fp32_precision = "tf32"
        assert tf32_state()["matmul_tf32"] is True
    finally:
        torch.backends.cudnn.fp32_precision, torch.backends.cuda.matmul.fp32_precision = old


def test_habits_run_ieee_float32_whatever_the_process_set(clean_switches):
    """A process with TF32 on (a user's default, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE) must not turn the habits'
    float32 matmuls into TF32: the overlap habit's ratio would change with it."""
    case = cases_of_habits()
    seen = {}
    with precision_mode("tf32"):
        _thin_test("habits")(case, lambda c: seen.update(tf32_state()))
        assert tf32_state() == {"matmul_tf32": True, "conv_tf32": True}
    assert seen == {"matmul_tf32": False, "conv_tf32": False}


def cases_of_habits():
    from suite.cases.habits import measure as habits
    from suite.config import parse_config

    config = parse_config({"cases": {"habits": {"habits": ["overlap"]}}}, "test.yaml")
    return habits.enumerate_cases(config, ["cpu"])[0]


# --- a tf32 case must have run TF32 math ----------------------------------------------------------------------

def _tf32_round(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32's 10 mantissa bits (to nearest), as tensor cores read float32 inputs."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


def test_a_tf32_matmul_whose_result_is_ieee_exact_is_a_skip_saying_the_switch_did_not_take(monkeypatch):
    """A library that ignores the TF32 switch (or a kernel without tensor cores for the shape) computes IEEE
    float32: its time would be published as tf32's. The check tells the two apart by the error against float64
    (~3e-4 for TF32 math, ~1e-7 for IEEE) and skips the case instead."""
    from suite.cases.matmul import measure as mm
    from suite.cases.precision import TF32_MIN_ERROR

    a, b = torch.randn(64, 512), torch.randn(512, 256)
    out = torch.empty(64, 256)
    mm._check(a, b, out, "float32", "ieee")  # IEEE float32 passes as float32 ...
    with pytest.raises(SkipCase, match=r"matmul t: tf32 was asked for but the result has IEEE float32 accuracy "
                                       r"\(relative error .* against float64, where TF32 math gives ~3e-4\): TF32 "
                                       r"math did not run \(the library ignored the switch"):
        mm._check(a, b, out, "tf32", "t")  # ... and is refused as tf32
    real_matmul = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda x, y, out: real_matmul(_tf32_round(x), _tf32_round(y), out=out))
    mm._check(a, b, out, "tf32", "t")  # TF32 math: passes
    ieee = float((a.double() @ b.double() - real_matmul(a, b).double()).norm() / (a.double() @ b.double()).norm())
    tf32 = float((a.double() @ b.double() - out.double()).norm() / (a.double() @ b.double()).norm())
    assert ieee * 20 < TF32_MIN_ERROR < tf32 / 10, (ieee, tf32)  # the threshold sits far from both


def test_a_tf32_convolution_whose_output_is_ieee_exact_is_a_skip():
    import torch.nn.functional as F

    from suite.cases.conv.measure import verify

    p = {"precision": "tf32", "batch": 2, "stride": (1, 1), "padding": (1, 1), "groups": 1, "step": "fwd"}
    x, w, g = torch.randn(2, 16, 8, 8), torch.randn(16, 16, 3, 3), torch.randn(2, 16, 8, 8)
    x.requires_grad_(True)  # as build does for fwd+bwd
    w.requires_grad_(True)

    def ieee(inp, wt):
        return F.conv2d(inp, wt, None, (1, 1), (1, 1), 1, 1)

    def tensor_cores(inp, wt):  # inputs read at TF32 precision; gradients flow through the rounding
        def read(t):
            return t + (_tf32_round(t.detach()) - t.detach())

        return F.conv2d(read(inp), read(wt), None, (1, 1), (1, 1), 1, 1)

    for step in ("fwd", "fwd+bwd"):  # fwd+bwd: TF32 in any of the three passes is enough
        with pytest.raises(SkipCase, match="conv c: tf32 was asked for but the result has IEEE float32"):
            verify("c", {**p, "step": step}, ieee, x, w, g)
        verify("c", {**p, "step": step}, tensor_cores, x, w, g)
        verify("c", {**p, "step": step, "precision": "float32"}, ieee, x, w, g)


# --- FP8 and INT8 (torch._scaled_mm, torch._int_mm): what torch and the device offer, and the check ---------

from suite.cases.matmul import formats  # noqa: E402
from suite.cases.matmul.measure import build_matmul as matmul_work  # noqa: E402
from suite.cases.precision import low_precision_dtype  # noqa: E402

LOW = ["float8_e4m3fn", "float8_e5m2", "int8"]


@pytest.mark.parametrize("precision, missing", [("float8_e4m3fn", "_scaled_mm"), ("float8_e5m2", "float8_e5m2"),
                                                ("int8", "_int_mm")])
def test_a_torch_without_the_op_or_format_skips_with_the_reason(monkeypatch, precision, missing):
    monkeypatch.delattr(torch, missing)
    reason = unsupported_reason(precision, "cpu")
    assert f"torch.{missing}" in reason and torch.__version__ in reason
    with pytest.raises(SkipCase, match=f"torch.{missing}"):
        matmul_work("x", "cpu", precision, 32, 32, 32)


def test_fp8_needs_capability_8_9_and_int8_does_not():
    class Ampere(FakePlatform):
        def properties(self, device):
            return dict(super().properties(device), name="NVIDIA A100-SXM4-80GB", capability="8.0")

    with use_platform(Ampere(gpus=1)):
        reason = unsupported_reason("float8_e4m3fn", "cuda:0")
        assert "compute capability >= 8.9" in reason and "8.0" in reason and "A100" in reason
        assert unsupported_reason("int8", "cuda:0") is None
    with use_platform(FakePlatform(gpus=1)):  # capability 9.0
        assert unsupported_reason("float8_e5m2", "cuda:0") is None
    assert "untested" in unsupported_reason("float8_e4m3fn", "mps")


def test_rocm_mi300_runs_the_fnuz_formats_and_older_gpus_skip(monkeypatch):
    class Rocm(FakePlatform):
        arch = "gfx942"

        def properties(self, device):
            return dict(super().properties(device), name="AMD Instinct MI300X", gcn_arch=self.arch)

    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    with use_platform(Rocm(gpus=1)):
        assert unsupported_reason("float8_e4m3fn", "cuda:0") is None
        assert low_precision_dtype("float8_e4m3fn", "cuda:0") == torch.float8_e4m3fnuz
        assert low_precision_dtype("float8_e5m2", "cuda:0") == torch.float8_e5m2fnuz
        Rocm.arch = "gfx90a"
        assert "MI300 or later" in unsupported_reason("float8_e5m2", "cuda:0")
    assert low_precision_dtype("float8_e4m3fn", "cpu") == torch.float8_e4m3fn


def test_cuda_shape_limits_are_a_skip_with_the_reason():
    assert "multiples of 16" in formats.shape_reason("float8_e4m3fn", "cuda:0", 64, 64, 40)
    assert "m > 16" in formats.shape_reason("int8", "cuda:0", 8, 64, 64)
    assert formats.shape_reason("int8", "cuda:0", 32, 64, 64) is None
    assert formats.shape_reason("float8_e4m3fn", "cpu", 3, 5, 7) is None


@pytest.mark.parametrize("precision", LOW)
def test_low_precision_matmul_runs_and_is_checked_on_the_cpu(precision):
    work = matmul_work("x", "cpu", precision, 48, 32, 64)
    work.fn()
    work.check()
    assert work.flops == 2 * 48 * 32 * 64
    assert work.extra == {"precision": precision, **({"unit": "TOPS"} if precision == "int8" else {})}


def test_inputs_use_the_formats_range():
    a = torch.randn(64, 64)
    q = formats._to_int8(a)
    assert q.abs().max() == formats.INT8_MAX and q.unique().numel() > 50
    seen = {}
    real = torch._scaled_mm

    def spy(aq, bq, **kwargs):
        seen["amax"] = aq.float().abs().max().item()
        return real(aq, bq, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "_scaled_mm", spy)
        matmul_work("x", "cpu", "float8_e4m3fn", 32, 32, 32)
    assert seen["amax"] == torch.finfo(torch.float8_e4m3fn).max


@pytest.mark.parametrize("precision, op", [("float8_e4m3fn", "_scaled_mm"), ("float8_e5m2", "_scaled_mm"),
                                           ("int8", "_int_mm")])
def test_a_wrong_low_precision_result_fails_the_check(monkeypatch, precision, op):
    work = matmul_work("x", "cpu", precision, 32, 32, 32)
    real = getattr(torch, op)
    # Off by 5% (FP8: beyond its tolerance) or by one integer (INT8: its products are exact).
    wrong = (lambda *a, **k: real(*a, **k) * 1.05) if op == "_scaled_mm" else (lambda *a, **k: real(*a, **k) + 1)
    monkeypatch.setattr(torch, op, wrong)
    with pytest.raises(AssertionError, match="dequantized inputs"):
        work.check()


def test_an_older_torchs_scaled_mm_result_with_its_amax_is_read(monkeypatch):
    work = matmul_work("x", "cpu", "float8_e4m3fn", 32, 32, 32)
    real = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: (real(*a, **k), torch.tensor(1.0)))
    work.check()


def test_tolerance_grows_with_k_and_int8_is_exact():
    assert formats.tolerance("float8_e4m3fn", 16384) > formats.tolerance("float8_e4m3fn", 64) > 2 * 2**-8
    assert formats.tolerance("float8_e4m3fn", 16384) < 0.05  # a wrong kernel is off by ~1
    assert formats.tolerance("int8", 65536) == 0.0


def test_only_matmul_and_ceiling_take_the_low_precisions():
    config = parse_config({"cases": {"matmul": {"dtypes": ["fp8", "e5m2", "int8", "fp64"]},
                                     "ceiling": {"dtypes": ["float8_e4m3fn"]}}})
    assert config.cases.matmul.dtypes == ["float8_e4m3fn", "float8_e5m2", "int8", "float64"]
    assert config.cases.ceiling.dtypes == ["float8_e4m3fn"]
    with pytest.raises(UserError, match="is not a dtype"):
        parse_config({"cases": {"conv": {"dtypes": ["float8_e4m3fn"]}}})


# --- row-wise FP8 scales -------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["float8_e4m3fn", "float8_e5m2"])
def test_row_wise_fp8_runs_with_a_scale_per_row_and_column_and_is_checked(monkeypatch, precision):
    seen = {}
    real = torch._scaled_mm

    def spy(aq, bq, scale_a, scale_b, **kwargs):
        top = torch.finfo(aq.dtype).max
        seen.update(a=tuple(scale_a.shape), b=tuple(scale_b.shape),
                    full_range=bool((aq.float().abs().amax(dim=1) == top).all()
                                    and (bq.float().abs().amax(dim=0) == top).all()))
        return real(aq, bq, scale_a=scale_a, scale_b=scale_b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    work = matmul_work("x", "cpu", precision, 48, 32, 64, "row")
    work.check()
    # Each row of a and column of b reaches the format's largest value: each uses the whole range.
    assert seen == {"a": (48, 1), "b": (1, 32), "full_range": True}
    # A wrong result fails the check.
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: real(*a, **k) * 1.05)
    with pytest.raises(AssertionError, match="dequantized inputs"):
        work.check()


def test_row_wise_scales_are_a_parameter_of_fp8_cases_only_and_per_tensor_ids_are_unchanged():
    config = parse_config({"devices": ["cpu"], "cases": {"matmul": {
        "dtypes": ["float32", "float8_e4m3fn"], "shapes": ["32x32x32"], "scaling": ["tensor", "row"]}}})
    cases = {c.id: c.info for c in matmul_cases(config, ["cpu"])}
    assert set(cases) == {"cpu-float32-32x32x32", "cpu-float8_e4m3fn-32x32x32", "cpu-float8_e4m3fn-row-32x32x32"}
    assert cases["cpu-float8_e4m3fn-row-32x32x32"]["scaling"] == "row"
    assert "scaling" not in cases["cpu-float8_e4m3fn-32x32x32"]
    assert parse_config({}).cases.matmul.scaling == ["tensor"]
    with pytest.raises(UserError, match="scaling"):
        parse_config({"cases": {"matmul": {"scaling": ["block"]}}})


def test_row_wise_fp8_needs_hopper_and_per_tensor_does_not():
    class Ada(FakePlatform):
        def properties(self, device):
            return dict(super().properties(device), name="NVIDIA L40S", capability="8.9")

    with use_platform(Ada(gpus=1)):
        reason = formats.scaling_reason("row", "cuda:0")
        assert "compute capability >= 9.0" in reason and "8.9" in reason and "L40S" in reason
        assert formats.scaling_reason("tensor", "cuda:0") is None
        with pytest.raises(SkipCase, match="row-wise FP8 scales"):
            matmul_work("x", "cuda:0", "float8_e4m3fn", 64, 64, 64, "row")
    with use_platform(FakePlatform(gpus=1)):  # capability 9.0
        assert formats.scaling_reason("row", "cuda:0") is None
    assert formats.scaling_reason("row", "cpu") is None


# --- block-scaled MXFP8 and NVFP4 (torch.nn.functional.scaled_mm): quantization, layout, check, skips ---------
# The GPU call cannot run here (torch's CPU scaled_mm refuses block-wise scales): a reference scaled_mm, written
# from the formats' definitions and cuBLAS's scale layout independently of formats.py, stands in for it.

F = torch.nn.functional
BLOCK = ["mxfp8", "nvfp4"]
# e2m1 (OCP MX spec): 1 sign bit (8), 2 exponent bits (bias 1), 1 mantissa bit; codes 0-7 are these magnitudes.
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _e2m1(codes: torch.Tensor) -> torch.Tensor:
    return E2M1[(codes & 7).long()] * (1 - 2 * (codes >> 3).float())


def _unswizzle(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """cuBLAS's block-scale layout back to rows x cols: row r, block c of a 128 x 4 tile at (r%32)*16+(r//32)*4+c."""
    tiles_c = -(-cols // 4)
    r, c = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
    at = ((r // 128) * tiles_c + c // 4) * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    return flat[at]


def _fp4_values(x: torch.Tensor, swap: bool = False) -> torch.Tensor:
    """float4_e2m1fn_x2 rows (k/2 bytes) -> rows x k float32, the even element in the low nibble (as torch's
    own tests pack it: torch.testing._internal.common_quantized.pack_uint4)."""
    raw = x.contiguous().view(torch.uint8)
    low, high = raw & 15, raw >> 4
    pair = (high, low) if swap else (low, high)
    return _e2m1(torch.stack(pair, dim=-1).flatten(-2))


def _reference_scaled_mm(a, b, scale_a, recipe_a, scale_b, recipe_b, swizzle_a=None, swizzle_b=None,
                         output_dtype=torch.bfloat16, swizzled=True, swap=False):
    def dequantize(x, scales, recipe, swap=False):  # x: rows x k (k/2 bytes for FP4)
        values = _fp4_values(x, swap) if x.dtype == torch.float4_e2m1fn_x2 else x.float()
        block = 32 if recipe[0] == F.ScalingType.BlockWise1x32 else 16
        rows, k = values.shape
        flat = scales[0].float()
        s = _unswizzle(flat, rows, k // block) if swizzled else flat[:rows * k // block].view(rows, -1)
        out = values * s.repeat_interleave(block, dim=1)
        return out * scales[1] if len(scales) > 1 else out

    assert swizzle_a == swizzle_b and swizzle_a[0] == F.SwizzleType.SWIZZLE_32_4_4
    # `swap` reads a's nibbles the other way round: in both operands it would leave the product as it is (it
    # swaps k's elements pairwise in both), so the order itself is pinned by a known byte.
    return (dequantize(a, scale_a, recipe_a, swap) @ dequantize(b.t(), scale_b, recipe_b).t()).to(output_dtype)


@pytest.fixture
def block_on_cpu(monkeypatch):
    """Block-scaled matmuls on the CPU through the reference scaled_mm; returns a setter for its variants."""
    monkeypatch.setattr("suite.cases.matmul.measure.unsupported_reason", lambda *args: None)
    monkeypatch.setattr(F, "scaled_mm", _reference_scaled_mm)
    return lambda **kw: monkeypatch.setattr(F, "scaled_mm", lambda *a, **k: _reference_scaled_mm(*a, **k, **kw))


def test_mxfp8_scales_are_powers_of_two_rounded_up_so_each_block_uses_e4m3s_range():
    a = torch.randn(40, 96) * torch.logspace(-3, 3, 40)[:, None]  # rows of very different magnitude
    q, scales, glob, values = formats._block_quantize(a, "mxfp8")
    assert q.dtype == torch.float8_e4m3fn and scales.dtype == torch.float8_e8m0fnu and glob == 1.0
    s = _unswizzle(scales.float(), 40, 3)
    assert torch.equal(s, torch.exp2(torch.log2(s).round()))  # e8m0: powers of two
    top = q.float().abs().view(40, 3, 32).amax(dim=2)
    assert (top <= 448).all() and (top >= 224).all()  # the largest lands within a factor 2 of 448, never over
    assert torch.equal(values.float(), (q.float().view(40, 3, 32) * s[..., None]).view(40, 96))
    assert (values.float() - a).norm() / a.norm() < 2**-4


def test_nvfp4_packs_two_e2m1_per_byte_as_torch_does_and_each_block_reaches_6():
    a = torch.randn(24, 64)
    q, scales, glob, values = formats._block_quantize(a, "nvfp4")
    assert q.dtype == torch.float4_e2m1fn_x2 and q.shape == (24, 32) and scales.dtype == torch.float8_e4m3fn
    assert glob == pytest.approx(a.abs().max().item() / (6 * 448))
    s = _unswizzle(scales.float(), 24, 4)
    decoded = _fp4_values(q)
    assert torch.equal(decoded * s.repeat_interleave(16, dim=1), values.float())
    assert (decoded.abs().view(24, 4, 16).amax(dim=2) == 6).all()
    assert s.max() == 448  # the global scale puts the largest block scale on e4m3's largest
    assert (values.float() * glob - a).norm() / a.norm() < 0.15  # e2m1: 1 mantissa bit
    # Each element is the nearest e2m1 value of the scaled input (ties, which random data misses, aside).
    scaled = a / (s.repeat_interleave(16, dim=1) * glob)
    nearest = (scaled[..., None] - torch.cat([E2M1, -E2M1])).abs().min(dim=-1).values
    assert torch.allclose((decoded - scaled).abs(), nearest)
    # A known byte: k's even element 0.5 (code 1) in the low nibble, its odd one -6 (code 15) in the high one.
    one = torch.tensor([[0.5, -6.0] + [0.0] * 14])
    assert formats._block_quantize(one, "nvfp4")[0].view(torch.uint8)[0, 0] == 0xF1


@pytest.mark.parametrize("rows, cols", [(128, 4), (200, 6), (5, 1), (300, 9)])
def test_scales_are_swizzled_as_cublas_wants_and_unswizzle_back(rows, cols):
    scales = torch.rand(rows, cols) + 0.5
    flat = formats.swizzled(scales)
    assert flat.numel() == -(-rows // 128) * 128 * -(-cols // 4) * 4  # padded to whole 128 x 4 tiles
    assert torch.equal(_unswizzle(flat, rows, cols), scales)
    assert (flat == 1).sum() == flat.numel() - scales.numel()  # the padding is ones


def test_a_known_small_swizzle():
    # One 128 x 4 tile: rows 0, 32, 64, 96 share a 16-byte line, 4 scales each; then rows 1, 33, 65, 97; ...
    flat = formats.swizzled(torch.arange(128 * 4, dtype=torch.float32).view(128, 4))
    assert flat[:8].tolist() == [0, 1, 2, 3, 128, 129, 130, 131]
    assert flat[16:20].tolist() == [4, 5, 6, 7]  # row 1
    assert flat[12:16].tolist() == [384, 385, 386, 387]  # row 96


@pytest.mark.parametrize("precision", BLOCK)
def test_block_scaled_matmul_runs_end_to_end_and_a_wrong_scale_layout_or_packing_fails(block_on_cpu, precision):
    work = matmul_work("x", "cpu", precision, 48, 64, 96)
    work.fn()
    work.check()
    assert work.flops == 2 * 48 * 64 * 96 and work.extra == {"precision": precision}
    wrong = [{"swizzled": False}] + ([{"swap": True}] if precision == "nvfp4" else [])
    for variant in wrong:
        block_on_cpu(**variant)
        with pytest.raises(AssertionError, match="dequantized inputs"):
            work.check()


def test_block_scaled_tolerance_is_fp8s_grows_with_k_and_catches_a_wrong_result(block_on_cpu, monkeypatch):
    for precision in BLOCK:
        assert formats.tolerance(precision, 4096) == formats.tolerance("float8_e4m3fn", 4096)
    assert formats.tolerance("nvfp4", 16384) > formats.tolerance("nvfp4", 64)
    work = matmul_work("x", "cpu", "nvfp4", 32, 32, 64)
    monkeypatch.setattr(F, "scaled_mm", lambda *a, **k: _reference_scaled_mm(*a, **k) * 1.05)
    with pytest.raises(AssertionError, match="dequantized inputs"):
        work.check()


def test_block_scaled_skips_with_the_reason_off_blackwell_and_on_an_older_torch(monkeypatch):
    for precision in BLOCK:
        assert "compute capability >= 10.0" in unsupported_reason(precision, "cpu")
        with pytest.raises(SkipCase, match="Blackwell"):
            matmul_work("x", "cpu", precision, 64, 64, 64)
        assert "cuda:0" in formats.shape_reason(precision, "cuda:0", 64, 64, 48)
    with use_platform(FakePlatform(gpus=1)):  # capability 9.0
        reason = unsupported_reason("nvfp4", "cuda:0")
        assert "9.0" in reason and ">= 10.0" in reason

    class Blackwell(FakePlatform):
        def properties(self, device):
            return dict(super().properties(device), name="NVIDIA B200", capability="10.0")

    with use_platform(Blackwell(gpus=1)):
        assert unsupported_reason("mxfp8", "cuda:0") is None
        monkeypatch.delattr(torch, "float4_e2m1fn_x2")
        assert "torch.float4_e2m1fn_x2" in unsupported_reason("nvfp4", "cuda:0")
        assert unsupported_reason("mxfp8", "cuda:0") is None
        monkeypatch.delattr(F, "scaled_mm")
        assert "torch.nn.functional.scaled_mm" in unsupported_reason("mxfp8", "cuda:0")
        assert torch.__version__ in unsupported_reason("mxfp8", "cuda:0")


def test_block_scaled_are_dtypes_with_their_own_ids_and_b200_peaks():
    config = parse_config({"devices": ["cpu"], "cases": {"matmul": {
        "dtypes": ["MXFP8", "nvfp4"], "shapes": ["64x64x64"], "scaling": ["tensor", "row"]}}})
    assert [c.id for c in matmul_cases(config, ["cpu"])] == ["cpu-mxfp8-64x64x64", "cpu-nvfp4-64x64x64"]
    from suite.cases import datasheet

    assert datasheet.lookup("NVIDIA B200", "nvfp4").tflops == 9000.0
    assert datasheet.lookup("NVIDIA B200", "mxfp8").tflops == datasheet.lookup("NVIDIA B200", "float8_e4m3fn").tflops
    assert datasheet.lookup("NVIDIA H100 80GB HBM3", "nvfp4") is None
