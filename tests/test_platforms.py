"""The accelerators other than NVIDIA's, each faked on the CPU: ROCm (torch.version.hip, "cuda" devices),
Intel XPU and Apple MPS. What the suite records about them, and which precisions it measures on them."""

from __future__ import annotations

import contextlib
import json
import subprocess
from types import SimpleNamespace

import pytest
import torch

from suite import devices as dev
from suite.cases.precision import mode_record, precision_mode, unsupported_reason
from suite.devices import Platform, machine, use_platform
from suite.report.tables import machine_views
from suite.results import load_results
from tests.conftest import ROOT
from tests.fakes import FakePlatform

ROCM = "6.4.43482"


@pytest.fixture
def rocm(monkeypatch):
    """A ROCm build of torch: torch.version.hip set, torch.version.cuda None."""
    monkeypatch.setattr(torch.version, "hip", ROCM)
    monkeypatch.setattr(torch.version, "cuda", None)


# --- 1. tf32 on ROCm: only where torch says the GPU has xf32 ------------------------------------------------


class MixedRocm(FakePlatform):
    """cuda:0 an MI300X (gfx942, xf32), cuda:1 an MI250X (gfx90a, none)."""

    def __init__(self):
        super().__init__(gpus=2, kind="rocm")

    def properties(self, device):
        if device.index == 1:
            return dict(super().properties(device), name="AMD Instinct MI250X",
                        gcn_arch="gfx90a:sramecc+:xnack-")
        return super().properties(device)


@pytest.fixture
def current_device(monkeypatch):
    """torch.cuda.device and torch.cuda.is_tf32_supported faked: the latter answers for the current device
    (as torch's does), True on gfx94x. Returns the devices it was asked about."""
    state = {"current": 0, "asked": []}

    @contextlib.contextmanager
    def device(index):
        before, state["current"] = state["current"], index
        try:
            yield
        finally:
            state["current"] = before

    def is_tf32_supported():
        state["asked"].append(state["current"])
        return state["current"] == 0

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "is_tf32_supported", is_tf32_supported, raising=False)
    return state


def test_tf32_on_rocm_runs_only_where_torch_says_the_gpu_has_it(rocm, current_device):
    with use_platform(MixedRocm()):
        assert unsupported_reason("tf32", "cuda:0") is None
        reason = unsupported_reason("tf32", "cuda:1")
        assert unsupported_reason("float32", "cuda:1") is None
    # Asked about each device in turn, with that device current, and the current device put back after.
    assert current_device["asked"] == [0, 1] and current_device["current"] == 0
    assert "MI300 or later" in reason and "cuda:1" in reason and "gfx90a" in reason


def test_tf32_on_rocm_skips_where_this_torch_cannot_tell(rocm, monkeypatch):
    monkeypatch.delattr(torch.cuda, "is_tf32_supported", raising=False)
    with use_platform(FakePlatform(gpus=1, kind="rocm")):
        reason = unsupported_reason("tf32", "cuda:0")
    assert "cannot tell" in reason and "gfx942" in reason


def test_the_real_platform_asks_torch_about_the_device_in_question(current_device):
    assert Platform().tf32_supported(torch.device("cuda:1")) is False
    assert Platform().tf32_supported(torch.device("cuda:0")) is True
    assert current_device["asked"] == [1, 0] and current_device["current"] == 0


# --- 2. XPU: tf32 not measured (and the reason says so); float32 is IEEE in oneDNN too ----------------------

_ONEDNN = ("matmul", "conv")


def _onednn_ops():
    ops = [getattr(getattr(torch.backends, "mkldnn", None), name, None) for name in _ONEDNN]
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision") or any(
            op is None or not hasattr(op, "fp32_precision") for op in ops):
        pytest.skip("torch < 2.9 has no oneDNN fp32_precision switches")
    return ops


@pytest.fixture
def onednn():
    """oneDNN's matmul and conv switches; whatever a test sets on them is put back after it."""
    ops = _onednn_ops()
    before = [op.fp32_precision for op in ops]
    yield ops
    for op, value in zip(ops, before):
        op.fp32_precision = value


@pytest.mark.parametrize("precision", ["float32", "tf32"])
def test_float32_data_runs_ieee_in_onednn_whatever_the_process_set(onednn, precision):
    """A process with oneDNN's TF32 (XPU) or bf16 (CPU) on must not turn a float32 figure into either."""
    matmul, conv = onednn
    matmul.fp32_precision, conv.fp32_precision = "tf32", "bf16"
    with precision_mode(precision):
        assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
        assert mode_record(precision, "xpu:0")["allow_tf32"] is False
    assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "bf16"), "restored exactly"
    with precision_mode("bfloat16"):  # no float32 data: oneDNN's float32 switches are left as they were
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "bf16")


def test_the_xpu_record_reads_onednns_switch_of_the_library_the_case_uses(onednn):
    matmul, _ = onednn
    with precision_mode("float32"):
        matmul.fp32_precision = "tf32"
        assert mode_record("float32", "xpu:0", ("matmul",)) == {"precision": "float32", "allow_tf32": True}
        assert mode_record("float32", "xpu:0", ("conv",))["allow_tf32"] is False
        # The CPU has no TF32 math, whatever oneDNN's switch says.
        assert mode_record("float32", "cpu", ("matmul",))["allow_tf32"] is False


# --- 3. ROCm's software and gfx arch, recorded and shown under their own names ------------------------------


def _dnn_and_collectives(monkeypatch, dnn: int, collectives: tuple):
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: dnn)
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: collectives)


def test_rocm_software_is_recorded_as_miopen_and_rccl(rocm, monkeypatch):
    _dnn_and_collectives(monkeypatch, 30400, (2, 22, 3))
    software = Platform().software()
    assert software["hip"] == ROCM and software["cuda"] is None
    assert (software["miopen"], software["rccl"]) == ("30400", "2.22.3")
    assert software["cudnn"] is None and software["nccl"] is None, "not mistaken for cuDNN's and NCCL's"


def test_rocm_without_miopen_records_none_not_the_word(rocm, monkeypatch):
    _dnn_and_collectives(monkeypatch, 30400, (2, 22, 3))
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    assert Platform().software()["miopen"] is None


def test_cuda_software_keeps_its_keys(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    _dnn_and_collectives(monkeypatch, 91002, (2, 27, 3))
    software = Platform().software()
    assert (software["cudnn"], software["nccl"]) == ("91002", "2.27.3")
    assert software["miopen"] is None and software["rccl"] is None


def _props(**extra):
    return SimpleNamespace(name="AMD Instinct MI250X", total_memory=64 * 2**30, major=9, minor=0,
                           multi_processor_count=110, **extra)


def test_a_rocm_gpu_records_its_gfx_arch_and_a_cuda_gpu_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: _props(gcnArchName="gfx90a:sramecc+:xnack-"))
    monkeypatch.setattr(torch.version, "hip", ROCM)
    info = Platform().properties(torch.device("cuda:0"))
    assert info["gcn_arch"] == "gfx90a:sramecc+:xnack-" and info["capability"] == "9.0"
    monkeypatch.setattr(torch.version, "hip", None)
    assert "gcn_arch" not in Platform().properties(torch.device("cuda:0"))


def test_the_report_shows_rocm_software_and_old_files_still_load(tmp_path):
    data = json.loads((ROOT / "tests" / "data" / "h200x2.json").read_text(encoding="utf-8"))
    rocm_file = tmp_path / "rocm.json"
    data["machine_info"]["software"] = {"torch": "2.13.0", "cuda": None, "hip": ROCM, "cudnn": None,
                                        "miopen": "30400", "nccl": None, "rccl": "2.22.3", "python": "3.11.9"}
    rocm_file.write_text(json.dumps(data), encoding="utf-8")
    old_file = tmp_path / "old-rocm.json"  # written before miopen and rccl had their own keys
    data["machine_info"]["software"] = {"torch": "2.12.0", "cuda": None, "hip": ROCM, "cudnn": "30300",
                                        "nccl": "2.21.5", "python": "3.11.9"}
    old_file.write_text(json.dumps(data), encoding="utf-8")
    loaded = load_results([rocm_file, old_file], labels={str(rocm_file): "new", str(old_file): "old"})
    views = {v.label: dict(v.software) for v in machine_views(loaded.machines)}
    assert views["new"] == {"torch": "2.13.0", "hip": ROCM, "miopen": "30400", "rccl": "2.22.3",
                            "python": "3.11.9"}
    assert views["old"] == {"torch": "2.12.0", "hip": ROCM, "cudnn": "30300", "nccl": "2.21.5",
                            "python": "3.11.9"}


# --- 4. An Apple GPU is named after its chip ----------------------------------------------------------------


@pytest.fixture
def mac(monkeypatch):
    """macOS as the platform sees it; returns the sysctl calls made, answered by `mac["answer"]`."""
    state = {"calls": [], "answer": "Apple M3 Max\n"}

    def run(cmd, **kwargs):
        state["calls"].append(cmd)
        if isinstance(state["answer"], Exception):
            raise state["answer"]
        return subprocess.CompletedProcess(cmd, 0, stdout=state["answer"], stderr="")

    monkeypatch.setattr("platform.system", lambda: "Darwin")
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 36 * 2**30, raising=False)
    return state


def test_an_apple_gpu_is_named_after_its_chip_asked_once(mac):
    plat = Platform()
    assert plat.properties(torch.device("mps")) == {"name": "Apple M3 Max (MPS)", "memory_bytes": 36 * 2**30}
    plat.properties(torch.device("mps"))
    assert mac["calls"] == [["sysctl", "-n", "machdep.cpu.brand_string"]]
    # An M1 is another model: the fleet check, which groups GPUs by name, must not mix them.
    mac["answer"] = "Apple M1\n"
    assert Platform().properties(torch.device("mps"))["name"] == "Apple M1 (MPS)"


@pytest.mark.parametrize("answer", [subprocess.TimeoutExpired("sysctl", 2), FileNotFoundError("sysctl"),
                                    subprocess.CalledProcessError(1, "sysctl"), "", "Intel(R) Core(TM) i9\n"])
def test_an_apple_gpu_whose_chip_macos_does_not_tell_keeps_the_old_name(mac, answer):
    plat = Platform()
    assert plat.properties(torch.device("mps"))["name"] == "Apple M3 Max (MPS)"
    mac["answer"] = answer
    assert Platform().properties(torch.device("mps"))["name"] == "Apple MPS"
    assert plat.properties(torch.device("mps"))["name"] == "Apple M3 Max (MPS)", "asked once per platform"


def test_off_macos_sysctl_is_not_asked(mac, monkeypatch):
    assert Platform().properties(torch.device("mps"))["name"] == "Apple M3 Max (MPS)"
    monkeypatch.setattr("platform.system", lambda: "Linux")
    assert Platform().properties(torch.device("mps"))["name"] == "Apple MPS"
    assert len(mac["calls"]) == 1, "only on macOS"


# --- 5. XPU peer access -------------------------------------------------------------------------------------


def test_xpu_peer_access_asks_torch_where_it_can(monkeypatch):
    monkeypatch.setattr(torch.xpu, "can_device_access_peer", lambda a, b: (a, b) == (0, 1), raising=False)
    plat = Platform()
    xpu0, xpu1 = torch.device("xpu:0"), torch.device("xpu:1")
    assert plat.can_access_peer(xpu0, xpu1) is True
    assert plat.can_access_peer(xpu1, xpu0) is False
    assert plat.can_access_peer(xpu0, xpu0) is False
    monkeypatch.delattr(torch.xpu, "can_device_access_peer", raising=False)
    assert plat.can_access_peer(xpu0, xpu1) is False, "a torch that cannot tell: staged, as before"

    def driver_error(a, b):
        raise RuntimeError("Level Zero: ZE_RESULT_ERROR_UNINITIALIZED")

    monkeypatch.setattr(torch.xpu, "can_device_access_peer", driver_error, raising=False)
    assert plat.can_access_peer(xpu0, xpu1) is False, "a driver that cannot answer: staged, no traceback"


def test_xpu_peer_matrix_reaches_the_inventory():
    with use_platform(FakePlatform(gpus=2, kind="xpu", peer={(0, 1)})):
        assert machine.peer_matrix() == {"xpu:0": {"xpu:1": True}, "xpu:1": {"xpu:0": False}}
        inv = dev.inventory()
    xpu = {d["id"]: d for d in inv.devices if d["kind"] == "xpu"}
    assert xpu["xpu:0"]["peer_access"] == {"xpu:1": True}
    assert xpu["xpu:0"]["name"] == "Intel(R) Data Center GPU Max 1550"


# --- 6. The fake platform's kinds ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind, ids", [("cuda", ["cuda:0", "cuda:1"]), ("rocm", ["cuda:0", "cuda:1"]),
                                       ("xpu", ["xpu:0", "xpu:1"]), ("mps", ["mps"])])
def test_the_fake_platform_fakes_each_kind(kind, ids):
    with use_platform(FakePlatform(gpus=2, kind=kind)):
        assert [dev.device_id(d) for d in dev.accelerators()] == ids
        inv = dev.inventory()
    assert [d["id"] for d in inv.devices] == ["cpu", *ids]
    assert ("hip" in inv.software) == (kind == "rocm")
