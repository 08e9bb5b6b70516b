"""The model on a device: everything on the intended device, FLOP counts by hand, checks that fail, samples/s."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suite.cases import SkipCase, make_case
from suite.cases.model import measure as model
from suite.cases.precision import mode_for
from suite.config import parse_config
from suite.devices import memory
from suite.errors import UserError


def _case(name: str, batch: int = 4, precision: str = "float32", device: str = "cpu"):
    return make_case("model", (device,), [device, precision, name, f"b{batch}"], device=device,
                     dtype="float32" if precision == "tf32" else precision, precision=precision, model=name,
                     step=model.STEPS[name], batch_size=batch)


def test_flops_by_hand():
    assert model.step_flops(model.layer_flops(model.make_net("linear"), (3,), 5), "fwd") == 2 * 5 * 3 * 1
    mlp = model.layer_flops(model.make_net("mlp"), model.IMAGE_SHAPE, 2)
    assert mlp == [2 * 2 * 784 * 1024, 2 * 2 * 1024 * 1024, 2 * 2 * 1024 * 10]
    # training: forward + weight gradients + input gradients, less the first layer's input gradient
    assert model.step_flops(mlp, "train") == 3 * 7_446_528 - 3_211_264 == 19_128_320
    lenet = model.layer_flops(model.make_net("lenet"), model.IMAGE_SHAPE, 1)
    # conv1 1->6 k5 28x28 out; conv2 6->16 k5 10x10 out; then 400->120->84->10
    assert lenet == [2 * 6 * 28 * 28 * 25, 2 * 16 * 10 * 10 * 6 * 25, 2 * 400 * 120, 2 * 120 * 84, 2 * 84 * 10]
    assert sum(lenet) == 833_040


def test_ids_and_cpu_overrides():
    config = parse_config({"cases": {"model": {"models": ["linear", "lenet"], "dtypes": ["bfloat16"],
                                               "batch_sizes": [256], "cpu": {"dtypes": ["float32"],
                                                                             "batch_sizes": [8, 16]}}}})
    ids = [c.id for c in model.enumerate_cases(config, ["cpu", "cuda:0"])]
    assert ids == ["cpu-float32-linear-b8", "cpu-float32-linear-b16", "cpu-float32-lenet-b8", "cpu-float32-lenet-b16",
                   "cuda:0-bfloat16-linear-b256", "cuda:0-bfloat16-lenet-b256"]
    with pytest.raises(UserError, match=r"cases.model.models\[0\]: 'resnet' is not a model; allowed: lenet, linear, mlp"):
        parse_config({"cases": {"model": {"models": ["resnet"]}}}, "m.yaml")


@pytest.mark.parametrize("name", ["linear", "mlp", "lenet"])
def test_everything_lives_on_the_device(name):
    case = _case(name)
    with mode_for(case):
        work = model.build(case, None)
        work.check()  # parameters, buffers, output, loss and gradients on the device; output vs float64
        out = work.fn()
    assert out.device == torch.device("cpu")
    assert work.samples == 4 and work.extra["parameters"] > 0


def test_bfloat16_model_checks_against_float64():
    case = _case("mlp", precision="bfloat16")
    with mode_for(case):
        work = model.build(case, None)
        work.check()
    assert work.extra == {"precision": "bfloat16", "parameters": 1_863_690}


def test_a_parameter_left_behind_fails_the_check():
    net = model.make_net("mlp")
    net[-1].to("meta")  # as if one layer had not been moved with the rest
    with pytest.raises(AssertionError, match=r"model m: 5.weight is on meta, not cpu"):
        model.verify("m", net, torch.ones(2, 1, 28, 28), "cpu", torch.float32, "float32")


def test_a_wrong_output_fails_the_check():
    class Doubles(nn.Module):
        def forward(self, x):  # wrong only in the dtype under test, right in the float64 reference
            return x * (1 if x.dtype == torch.float64 else 2)

    net = nn.Sequential(nn.Linear(3, 1), Doubles())
    with pytest.raises(AssertionError, match="model m: output relative error 1 > 0.0001"):
        model.verify("m", net, torch.randn(4, 3), "cpu", torch.float32, "float32")


def test_a_step_that_trains_nothing_fails_the_check():
    net = model.make_net("linear")
    with pytest.raises(AssertionError, match="an optimizer step left every parameter unchanged"):
        model.verify("m", net, torch.randn(4, 3), "cpu", torch.float32, "float32", lambda: torch.tensor(1.0))


def test_end_to_end_samples_per_s(run_benchmarks):
    config = {"devices": ["cpu", "cuda:1"], "timing": {"warmup_s": 0.0, "max_time": 0.05, "min_rounds": 2},
              "cases": {"model": {"models": ["linear", "lenet"], "batch_sizes": [8]}}}
    result, data = run_benchmarks(config, tests="benchmarks/test_model.py")
    result.assert_outcomes(passed=2, skipped=2)
    by_model = {b["extra_info"]["model"]: b for b in data["benchmarks"]}
    for name, step in (("linear", "fwd"), ("lenet", "train")):
        bench = by_model[name]
        info = bench["extra_info"]
        assert (info["device"], info["batch_size"], info["step"], info["samples"]) == ("cpu", 8, step, 8)
        assert info["samples_per_s"] == pytest.approx(8 / bench["stats"]["median"])
    assert by_model["lenet"]["extra_info"]["flops"] == 3 * 8 * 833_040 - 8 * 2 * 6 * 28 * 28 * 25


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["linear", "mlp", "lenet"])
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_everything_lives_on_the_gpu(name, precision):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = _case(name, batch=64, precision=precision, device="cuda:0")
    with mode_for(case):
        work = model.build(case, None)
        work.check()
        assert work.fn().device == torch.device("cuda:0")


def test_a_stray_dtype_or_a_lost_gradient_fails_the_check():
    # Found by mutation: dropping either assert passed every test.
    net = model.make_net("mlp")
    net[1].register_buffer("stray", torch.zeros(1, dtype=torch.float64))
    with pytest.raises(AssertionError, match="stray is torch.float64, not torch.float32"):
        model.verify("m", net, torch.ones(2, 1, 28, 28), "cpu", torch.float32, "float32")
    net = model.make_net("mlp")
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    x = torch.ones(2, 1, 28, 28)

    def step():
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        net.zero_grad(set_to_none=True)  # the gradients are gone when the check looks
        return loss

    with pytest.raises(AssertionError, match="the gradient of"):
        model.verify("m", net, x, "cpu", torch.float32, "float32", step)


def test_a_tf32_model_whose_output_is_ieee_exact_is_a_skip():
    """No layer ran TF32 math (a library ignoring the switch): the step's time would be float32's, so the
    tf32 case is skipped with the reason, and the same output passes as float32."""
    from suite.cases import SkipCase

    net = model.make_net("lenet")
    x = torch.randn(2, 1, 28, 28)
    model.verify("m", net, x, "cpu", torch.float32, "float32")
    with pytest.raises(SkipCase, match="model m: tf32 was asked for but the result has IEEE float32 accuracy"):
        model.verify("m", net, x, "cpu", torch.float32, "tf32")


def test_host_memory_estimate_and_a_shortfall_is_a_skip(monkeypatch):
    assert model.activations(model.make_net("mlp"), model.IMAGE_SHAPE) == (784 + 4 * 1024 + 10, 1024)
    linear = model.make_net("linear")
    # on a GPU only the check's float64 forward on the host: input, two layers' outputs, 4 weights
    assert model.host_bytes(_case("linear", 1000, device="cuda:0").info, linear) == 8 * (1000 * (3 + 2) + 4)
    host = memory.HostMemory(free=2**30, total=2**30, source="MemAvailable")
    monkeypatch.setattr(memory, "host_memory_free", lambda: host)
    with pytest.raises(SkipCase, match=r"out of host memory for cpu-float32-mlp-b1000000 \(needs \d+\.\d GiB"):
        model.build(_case("mlp", 1_000_000), None)
