"""Device enumeration, specs, skips and the inventory, on a fake multi-GPU machine."""

from __future__ import annotations

import pytest
import torch

from suite import devices as dev
from suite.devices import use_platform
from tests.fakes import FakePlatform


@pytest.mark.parametrize("gpus", [0, 1, 2, 4])
def test_try_gpu_and_try_all_gpus(gpus):
    with use_platform(FakePlatform(gpus=gpus)):
        assert dev.try_gpu() == (torch.device("cuda:0") if gpus else torch.device("cpu"))
        assert dev.try_gpu(3) == (torch.device("cuda:3") if gpus >= 4 else torch.device("cpu"))
        expected = [torch.device(f"cuda:{i}") for i in range(gpus)] or [torch.device("cpu")]
        assert dev.try_all_gpus() == expected
        assert [dev.device_id(d) for d in dev.available_devices()] == ["cpu"] + [f"cuda:{i}" for i in range(gpus)]


def test_resolve_spec():
    with use_platform(FakePlatform(gpus=2)):
        assert dev.resolve_spec("all") == ["cpu", "cuda:0", "cuda:1"]
        assert dev.resolve_spec("gpus") == ["cuda:0", "cuda:1"]
        assert dev.resolve_spec("cpu,cuda:1") == ["cpu", "cuda:1"]
        assert dev.resolve_spec(["cuda", "cuda:0", "CPU"]) == ["cuda:0", "cpu"], "deduplicated, canonical"
        # A device the machine lacks stays in the list: the run shows it as a skip with the reason.
        assert dev.resolve_spec("cuda:7") == ["cuda:7"]
    with use_platform(FakePlatform(gpus=0)):
        assert dev.resolve_spec("gpus") == ["cpu"], "like try_all_gpus, fall back to the CPU"


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cpu:1", ""])
def test_bad_spec_is_a_one_line_user_error(bad):
    with pytest.raises(Exception) as info:
        dev.check_spec(bad)
    assert type(info.value).__name__ == "UserError"
    assert "\n" not in str(info.value) and "expected" in str(info.value)


def test_missing_reason_names_what_the_machine_has():
    with use_platform(FakePlatform(gpus=2)):
        assert dev.missing_reason("cpu") is None
        assert dev.missing_reason("cuda:1") is None
        assert dev.missing_reason("cuda:2") == "cuda:2 is not available on this machine (it has: cpu, cuda:0, cuda:1)"
    with use_platform(FakePlatform(gpus=0)):
        assert "it has the CPU only" in dev.missing_reason("cuda:0")


def test_peer_matrix_and_inventory():
    with use_platform(FakePlatform(gpus=3, peer={(0, 1), (1, 0)})):
        matrix = dev.peer_matrix()
        assert matrix == {
            "cuda:0": {"cuda:1": True, "cuda:2": False},
            "cuda:1": {"cuda:0": True, "cuda:2": False},
            "cuda:2": {"cuda:0": False, "cuda:1": False},
        }
        inv = dev.inventory()
    ids = [d["id"] for d in inv.devices]
    assert ids == ["cpu", "cuda:0", "cuda:1", "cuda:2"]
    cpu = inv.devices[0]
    assert cpu["kind"] == "cpu" and cpu["memory_bytes"] > 0 and cpu["threads"] >= cpu["cores"] >= 1
    gpu = inv.devices[1]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["capability"] == "9.0" and gpu["multiprocessors"] == 132
    assert gpu["peer_access"] == {"cuda:1": True, "cuda:2": False}
    assert inv.software["nccl"] == "2.27.3" and inv.software["suite"]


def test_synchronize_goes_through_the_seam():
    fake = FakePlatform(gpus=2)
    with use_platform(fake):
        dev.synchronize("cuda:1", torch.device("cpu"))
    assert fake.synchronized == ["cuda:1", "cpu"]


def test_real_inventory_on_this_machine():
    inv = dev.inventory()
    assert inv.devices[0]["id"] == "cpu"
    assert inv.software["torch"] == torch.__version__


def test_devices_command(capsys):
    from suite.cli import main

    with use_platform(FakePlatform(gpus=2, peer=False)):
        assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "try_all_gpus()  -> [device(type='cuda', index=0), device(type='cuda', index=1)]" in out
    assert "NVIDIA H100 80GB HBM3" in out and "peer access" in out


@pytest.mark.gpu
def test_real_accelerator_inventory_and_sync():
    gpus = dev.accelerators()
    assert gpus, "a gpu test runs only where torch sees an accelerator"
    inv = dev.inventory()
    assert inv.devices[1]["memory_bytes"] > 0 and inv.devices[1]["name"]
    x = torch.ones(1024, device=gpus[0])
    (x * 2).sum()
    dev.synchronize(gpus[0])
