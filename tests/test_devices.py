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


# --- NVML: UUIDs of whole GPUs and MIG instances; the PCIe link, max and current ---------------------------


@pytest.mark.parametrize("raw, name, visible, want", [
    ("1234-abcd", "NVIDIA H200", "", "GPU-1234-abcd"),
    ("GPU-1234-abcd", "NVIDIA H200", "", "GPU-1234-abcd"),
    ("1234-abcd", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "", "MIG-1234-abcd"),
    ("1234-abcd", "NVIDIA A100-SXM4-40GB", "MIG-1234-abcd", "MIG-1234-abcd"),
])
def test_uuid_spelled_as_nvml_wants_it(raw, name, visible, want):
    assert dev.nvml_uuid(raw, name, visible) == want


class FakeNvml:
    """pynvml with one GPU ('GPU-parent') split into a MIG instance ('MIG-child'), the link down-shifted."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self):
        self.asked: list[tuple[str, str]] = []

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "580.159.03"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in ("GPU-parent", "MIG-child"):
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        assert handle == "MIG-child"
        return "GPU-parent"

    def nvmlDeviceGetUUID(self, handle):
        return handle.encode()

    def _link(self, name, handle, value):
        self.asked.append((name, handle))
        if handle != "GPU-parent":
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")  # a MIG handle has no link of its own
        return value

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._link("gen", h, 1)  # idle: power-saving down-shift

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._link("gen_max", h, 5)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._link("width", h, 16)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._link("width_max", h, 16)

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return self._link("clock", h, 1980)

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._link("power", h, 700000)

    def nvmlDeviceGetTemperature(self, h, kind):
        return self._link("temp", h, 30)


@pytest.mark.parametrize("uuid", ["GPU-parent", "MIG-child"])
def test_nvml_reads_the_link_of_the_gpu_and_labels_current_and_max(uuid, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    info = dev._nvml_info(0, uuid)
    assert info["pcie_gen_current"] == 1 and info["pcie_gen_max"] == 5, info
    assert "pcie_gen" not in info, "an unlabelled generation reads as the link's capability"
    assert info["power_limit_w"] == 700.0 and info["driver_version"] == "580.159.03"
    if uuid.startswith("MIG-"):
        assert info["mig"] is True and info["mig_parent_uuid"] == "GPU-parent"
