"""Device enumeration, specs, skips and the inventory, on a fake multi-GPU machine."""

from __future__ import annotations

import time

import pytest
import torch

from suite import devices as dev
from suite.devices import machine, memory, numa, nvml, use_platform
from suite.limits import CLOCK_LIMITS
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
        matrix = machine.peer_matrix()
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
    assert nvml.nvml_uuid(raw, name, visible) == want


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

    def nvmlDeviceGetSerial(self, h):
        return self._link("serial", h, b"1652123456789")


@pytest.mark.parametrize("uuid", ["GPU-parent", "MIG-child"])
def test_nvml_reads_the_link_of_the_gpu_and_labels_current_and_max(uuid, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    info = nvml.nvml_info(0, uuid)
    assert info["pcie_gen_current"] == 1 and info["pcie_gen_max"] == 5, info
    assert "pcie_gen" not in info, "an unlabelled generation reads as the link's capability"
    assert info["power_limit_w"] == 700.0 and info["driver_version"] == "580.159.03"
    assert info["serial"] == "1652123456789"  # the board's, a MIG instance's too: findings name it
    if uuid.startswith("MIG-"):
        assert info["mig"] is True and info["mig_parent_uuid"] == "GPU-parent"


# --- NVML: what joins each pair of GPUs, as nvidia-smi topo -m names it -------------------------------------


class NvmlError(Exception):
    """pynvml's NVMLError: the NVML return code in `value`."""

    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class TopologyNvml:
    """pynvml for a node of GPUs 'GPU-0'..: GPU i at PCI bus 0x10+i. `links[i]`: the far end of each of its
    active NVLinks, another GPU's index or 'switch'; `p2p`: the pairs NVML's NVLink P2P status calls OK (None:
    the query fails, as on an old driver); `level(i, j)`: their closest common PCIe ancestor."""

    NVML_FEATURE_ENABLED, NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_SWITCH = 1, 0, 2
    NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK, NVML_P2P_STATUS_NOT_SUPPORTED = 2, 0, 5
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, n, links=None, p2p=None, level=lambda i, j: 50, fails_init=False):
        self.n, self.links, self.p2p, self.level, self.fails_init = n, links or {}, p2p, level, fails_init
        self.shut = False

    def nvmlInit(self):
        if self.fails_init:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        i = int(uuid.removeprefix("GPU-"))
        if i >= self.n:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return i

    @staticmethod
    def _pci(bus):
        from types import SimpleNamespace

        return SimpleNamespace(domain=0, bus=bus, device=0, busId=f"00000000:{bus:02X}:00.0".encode())

    def nvmlDeviceGetPciInfo(self, h):
        return self._pci(0x10 + h)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h not in self.links:
            raise NvmlError(3)  # NVML_ERROR_NOT_SUPPORTED: a PCIe-only GPU
        if link >= len(self.links[h]) + 1:
            raise NvmlError(2)  # NVML_ERROR_INVALID_ARGUMENT: past its last link
        return 0 if link == len(self.links[h]) else 1  # one more link, inactive

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        far = self.links[h][link]
        return self._pci(0xE0 + link % 4 if far == "switch" else 0x10 + far)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2 if self.links[h][link] == "switch" else 0

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        if self.p2p is None:
            raise RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")
        return 0 if (a, b) in self.p2p else 5

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.level(a, b)


def _uuids(n):
    return tuple(f"GPU-{i}" for i in range(n))


def test_nvswitch_node_every_pair_is_nv18():
    every = {(i, j) for i in range(8) for j in range(8) if i != j}
    fake = TopologyNvml(8, links={i: ["switch"] * 18 for i in range(8)}, p2p=every)
    links = nvml.nvml_links(_uuids(8), fake)
    assert set(links) == every and set(links.values()) == {"NV18"} and fake.shut


def test_pcie_node_with_nvlink_bridges_names_each_pair():
    # 0<->1 and 2<->3 bridged with 4 NVLinks each; 0,1 share a PCIe switch with nothing else; 0-1 / 2-3 sit on
    # two sockets; one socket's GPUs share a host bridge.
    bridges = {0: [1] * 4, 1: [0] * 4, 2: [3] * 4, 3: [2] * 4}
    level = {frozenset({0, 1}): 10, frozenset({2, 3}): 30}
    fake = TopologyNvml(4, links=bridges, p2p={(0, 1), (1, 0), (2, 3), (3, 2)},
                        level=lambda i, j: level.get(frozenset({i, j}), 50))
    links = nvml.nvml_links(_uuids(4), fake)
    assert links[(0, 1)] == links[(1, 0)] == links[(2, 3)] == links[(3, 2)] == "NV4"
    assert links[(0, 2)] == links[(3, 1)] == "SYS"


@pytest.mark.parametrize("level, name", [(0, "PIX"), (10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"),
                                         (50, "SYS"), (60, None)])
def test_pcie_levels_are_named_as_nvidia_smi_names_them(level, name):
    links = nvml.nvml_links(_uuids(2), TopologyNvml(2, level=lambda i, j: level))
    assert links.get((0, 1)) == name and links.get((1, 0)) == name


def test_switch_links_without_nvlink_p2p_are_the_pcie_path():
    # Both GPUs wired to NVSwitches, but NVML says NVLink P2P does not work between them (fabric not up).
    fake = TopologyNvml(2, links={0: ["switch"] * 18, 1: ["switch"] * 18}, p2p=set(), level=lambda i, j: 40)
    assert nvml.nvml_links(_uuids(2), fake) == {(0, 1): "NODE", (1, 0): "NODE"}
    # An old driver that cannot answer the P2P query: the switch links count.
    fake = TopologyNvml(2, links={0: ["switch"] * 12, 1: ["switch"] * 12}, p2p=None)
    assert nvml.nvml_links(_uuids(2), fake) == {(0, 1): "NV12", (1, 0): "NV12"}


@pytest.mark.parametrize("uuids, fake", [
    (("GPU-0",), TopologyNvml(1)),  # one GPU: no pairs
    (("GPU-0", None), TopologyNvml(2)),  # a GPU without a UUID cannot be found in NVML
    (("GPU-0", "MIG-1"), TopologyNvml(2)),  # MIG instances have no peer copies
    (("GPU-0", "GPU-1"), TopologyNvml(2, fails_init=True)),  # no driver
    (("GPU-0", "GPU-7"), TopologyNvml(2)),  # NVML does not know the UUID
])
def test_nvml_links_tell_nothing_rather_than_guess(uuids, fake):
    assert nvml.nvml_links(uuids, fake) == {}


def test_links_reach_the_inventory_and_the_devices_command(capsys):
    fake = FakePlatform(gpus=3, peer={(0, 1), (1, 0)}, links={(0, 1): "NV4", (1, 0): "NV4", (0, 2): "SYS",
                                                             (2, 0): "SYS", (1, 2): "SYS", (2, 1): "SYS"})
    with use_platform(fake):
        info = dev.inventory().as_machine_info()
        assert info["links"]["cuda:0"] == {"cuda:1": "NV4", "cuda:2": "SYS"}
        assert next(d for d in info["devices"] if d["id"] == "cuda:2")["links"] == {"cuda:0": "SYS",
                                                                                    "cuda:1": "SYS"}
        from suite.cli import main

        assert main(["devices"]) == 0
    out = capsys.readouterr().out
    matrix = out.split("peer access and link (row to column):")[1].splitlines()
    row = next(line for line in matrix if line.startswith("cuda:0"))
    assert row.split() == ["cuda:0", "-", "yes", "NV4", "no", "SYS"]
    assert "NV#    a bonded set of # NVLinks" in out and "SYS    PCIe and the interconnect" in out
    assert "PIX" not in out  # only the names that appear are explained
    with use_platform(FakePlatform(gpus=2)):  # no NVML: the peer-access matrix alone, as before
        assert dev.inventory().as_machine_info()["links"] == {}


@pytest.mark.parametrize("links, active, to_switch", [
    ({3: ["switch"] * 18}, 18, 18),  # an HGX GPU: every link into the NVSwitches
    ({3: ["switch"] * 17}, 17, 17),  # ... with one link down
    ({3: [2] * 4}, 4, 0),  # an NVLink bridge to GPU 2
    ({}, 0, 0),  # a PCIe-only GPU
])
def test_inventory_counts_a_gpus_active_nvlinks(links, active, to_switch, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", TopologyNvml(4, links=links))
    info = nvml.nvml_info(3, "GPU-3")
    assert (info["nvlinks_active"], info["nvlinks_to_switch"]) == (active, to_switch)


def test_nvlinks_nvml_cannot_read_are_not_called_zero(monkeypatch):
    import sys

    fake = TopologyNvml(2)

    def unknown(h, link):
        raise NvmlError(999)  # NVML_ERROR_UNKNOWN, or a call this nvidia-ml-py lacks

    fake.nvmlDeviceGetNvLinkState = unknown
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert "nvlinks_active" not in nvml.nvml_info(1, "GPU-1")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # no NVLink calls at all
    assert "nvlinks_active" not in nvml.nvml_info(0, "GPU-parent")


def test_the_real_platform_asks_nvml_by_uuid_in_torchs_order(monkeypatch):
    # torch's cuda:0..2 are NVML's GPUs 2, 1, 0 (CUDA_VISIBLE_DEVICES=2,1,0). NVML's 0 and 1 reach the
    # NVSwitches with 18 and 12 links (NV12: the lower), its 2 is a PCIe card across the sockets.
    import sys
    from types import SimpleNamespace

    fake = TopologyNvml(3, links={0: ["switch"] * 18, 1: ["switch"] * 12}, p2p={(0, 1), (1, 0)})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(
        name="NVIDIA H100", total_memory=2**30, major=9, minor=0, multi_processor_count=132,
        uuid=str(2 - torch.device(d).index)))
    plat = dev.Platform()
    cuda = [torch.device("cuda", i) for i in range(3)]
    assert plat.link(cuda[1], cuda[2]) == plat.link(cuda[2], cuda[1]) == "NV12"
    assert plat.link(cuda[0], cuda[1]) == plat.link(cuda[2], cuda[0]) == "SYS"
    assert plat.link(cuda[0], cuda[0]) is None and plat.link(cuda[0], torch.device("cpu")) is None
    fake.nvmlDeviceGetTopologyCommonAncestor = None  # read once: NVML is not asked again
    assert plat.link(cuda[0], cuda[1]) == "SYS"


def test_an_unreadable_nvlink_is_skipped_not_the_end_of_the_count(monkeypatch):
    fake = TopologyNvml(2, links={0: [1] * 4, 1: [0] * 4}, p2p={(0, 1), (1, 0)})
    state = fake.nvmlDeviceGetNvLinkState

    def flaky(h, link):
        if link == 1:
            raise NvmlError(999)  # NVML_ERROR_UNKNOWN on one link
        return state(h, link)

    fake.nvmlDeviceGetNvLinkState = flaky
    assert nvml.nvml_links(_uuids(2), fake) == {(0, 1): "NV3", (1, 0): "NV3"}


def test_clock_watch_reports_the_largest_share_a_limit_held_a_gpu(monkeypatch):
    fake = FakePlatform(gpus=2)
    fake.held = {0: {"power": 100.0, "thermal": 5.0}, 1: {"power": 50.0, "thermal": 7.0}}
    now = [10.0]
    with use_platform(fake):
        watch = dev.ClockWatch(["cuda:0", "cuda:1"], clock=lambda: now[0])
        now[0] += 2.0  # a 2 s run: cuda:1 held 1.2 s by power and 0.1 s by thermal, cuda:0 0.5 s by power
        fake.held = {0: {"power": 100.5, "thermal": 5.0}, 1: {"power": 51.2, "thermal": 7.1}}
        assert watch.stop() == {"clocks_held": pytest.approx(0.6), "clocks_held_power": pytest.approx(0.6),
                                "clocks_held_thermal": pytest.approx(0.05), "clocks_window_s": 2.0}
        watch = dev.ClockWatch(["cuda:0"], clock=lambda: now[0])
        now[0] += 1.0  # nothing held: measured, and zero
        assert watch.stop() == {"clocks_held": 0.0, "clocks_window_s": 1.0}
        watch = dev.ClockWatch(["cpu"], clock=lambda: now[0])
        assert watch.stop() == {}  # NVML says nothing about the CPU: nothing recorded
        watch = dev.ClockWatch(["cuda:0"], clock=lambda: now[0])
        fake.held = {}  # NVML stopped answering: no figure rather than a wrong one
        assert watch.stop() == {}


def test_clock_limits_read_nvmls_violation_counters(monkeypatch):
    import sys
    from types import SimpleNamespace

    fake = TopologyNvml(1)
    fake.nvmlDeviceGetViolationStatus = lambda h, policy: SimpleNamespace(violationTime=(policy + 1) * 10**9)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(
        name="NVIDIA H200", total_memory=2**30, major=9, minor=0, multi_processor_count=132, uuid="0"))
    plat = dev.Platform()
    assert plat.clock_limits(torch.device("cuda", 0)) == {"power": 1.0, "thermal": 2.0, "board_limit": 4.0,
                                                          "reliability": 6.0}
    assert plat.clock_limits(torch.device("cpu")) is None

    def some(h, policy):
        if policy == 5:
            raise NvmlError(3)  # NOT_SUPPORTED: this GPU does not report reliability limits
        return SimpleNamespace(violationTime=0)

    fake.nvmlDeviceGetViolationStatus = some
    assert plat.clock_limits(torch.device("cuda", 0)) == {"power": 0.0, "thermal": 0.0, "board_limit": 0.0}
    del fake.nvmlDeviceGetViolationStatus  # an nvidia-ml-py without the call
    assert plat.clock_limits(torch.device("cuda", 0)) is None

    # Field values: the hardware slowdowns, and the policies where the deprecated call is gone. A field the
    # driver does not answer (NOT_SUPPORTED, 3) is left out; values are nanoseconds.
    asked = []

    def field_values(h, ids):
        asked.append(list(ids))
        answers = {74: 3 * 10**9, 75: 0, 77: 0, 79: None, 270: 2 * 10**9, 271: 5 * 10**8}
        return [SimpleNamespace(valueType=3, nvmlReturn=3 if answers[i] is None else 0,
                                value=SimpleNamespace(ullVal=answers[i] or 0)) for i in ids]

    fake.nvmlDeviceGetFieldValues = field_values
    assert plat.clock_limits(torch.device("cuda", 0)) == {"power": 3.0, "thermal": 0.0, "board_limit": 0.0,
                                                          "hw_thermal": 2.0, "hw_power_brake": 0.5}
    fake.nvmlDeviceGetViolationStatus = some  # the call answers its policies: only the slowdowns are fields
    assert plat.clock_limits(torch.device("cuda", 0)) == {"power": 0.0, "thermal": 0.0, "board_limit": 0.0,
                                                          "hw_thermal": 2.0, "hw_power_brake": 0.5}
    assert asked[-1] == [79, 270, 271], "reliability, which the call did not answer, and the slowdowns"


def test_clock_watch_records_a_hardware_power_brake(monkeypatch):
    fake = FakePlatform(gpus=1)
    fake.held = {0: {"power": 0.0, "hw_power_brake": 10.0}}
    now = [0.0]
    with use_platform(fake):
        watch = dev.ClockWatch(["cuda:0"], clock=lambda: now[0])
        now[0] += 2.0
        fake.held = {0: {"power": 0.2, "hw_power_brake": 11.0}}
        assert watch.stop() == {"clocks_held": pytest.approx(0.5), "clocks_held_power": pytest.approx(0.1),
                                "clocks_held_hw_power_brake": pytest.approx(0.5), "clocks_window_s": 2.0}


@pytest.mark.gpu
def test_real_nvml_counts_links_and_clock_limits():
    # On a CUDA GPU whose NVML answers: the readers work on the real library, not only on the fakes.
    pytest.importorskip("pynvml")
    gpu = next((g for g in dev.accelerators() if g.type == "cuda"), None)
    if gpu is None:
        pytest.skip("no CUDA GPU")
    plat = dev.Platform()
    if "MIG" in torch.cuda.get_device_name(gpu):
        pytest.skip("a MIG instance has no clock-limit counters of its own")
    before = plat.clock_limits(gpu)
    if not before:
        # A node may deny the counters (a virtualised or cloud GPU): the suite then records nothing, as
        # designed, and this says so. A call that is gone (deprecated in CUDA 13) is the suite's to fix.
        import pynvml

        handle = plat.kinds["cuda"]._handle(gpu.index or 0)
        assert handle is not None, "NVML gave no handle for a whole GPU (by its UUID)"
        try:
            pynvml.nvmlDeviceGetViolationStatus(handle, CLOCK_LIMITS["power"])
        except pynvml.NVMLError as exc:
            denied = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION)
            if exc.value in denied:
                pytest.skip(f"this node's NVML denies the clock-limit counters ({exc}); none are recorded")
            raise AssertionError(
                f"nvmlDeviceGetViolationStatus failed: {exc}; if the call is gone (deprecated "
                "in CUDA 13), read the counters another way (suite/limits.py)"
            ) from exc
        raise AssertionError("NVML answers the power counter, yet Platform.clock_limits recorded nothing")
    from suite.limits import LIMITS

    assert set(before) <= set(LIMITS)
    started = time.monotonic()
    x = torch.randn(4096, 4096, device=gpu)
    for _ in range(20):
        x = x @ x / 64
    dev.synchronize(gpu)
    after = plat.clock_limits(gpu) or {}
    elapsed = time.monotonic() - started
    assert all(after.get(k, -1) >= before[k] >= 0 for k in before), (before, after)  # counters only grow
    # Read as nanoseconds, no counter grows faster than the wall clock (one read 1000x too large would); the
    # second is for a driver that updates its counters in steps.
    assert all(after[k] - before[k] <= elapsed + 1.0 for k in before), (before, after, elapsed)
    # The field values answer in the same unit as the (deprecated) call, where the driver has both.
    import pynvml

    fields = nvml.nvml_field_seconds(pynvml, plat.kinds["cuda"]._handle(gpu.index or 0), {"power": 74})
    if "power" in fields and "power" in after:
        assert abs(fields["power"] - after["power"]) <= 1.0 + 0.01 * after["power"], (fields, after)
    entry = next(d for d in dev.inventory().devices if d["id"] == dev.device_id(gpu))
    if "nvlinks_active" in entry:
        assert entry["nvlinks_to_switch"] <= entry["nvlinks_active"] <= 36


def _sys_tree(root, nodes: dict[int, str], gpus: dict[str, int]):
    """A /sys with NUMA nodes (node -> cpulist) and PCI devices (sysfs address -> numa_node)."""
    for n, cpulist in nodes.items():
        (root / f"devices/system/node/node{n}").mkdir(parents=True)
        (root / f"devices/system/node/node{n}/cpulist").write_text(cpulist + "\n")
    for address, node in gpus.items():
        (root / f"bus/pci/devices/{address}").mkdir(parents=True)
        (root / f"bus/pci/devices/{address}/numa_node").write_text(f"{node}\n")
    return root


def test_numa_nodes_of_the_process_and_of_a_gpu(tmp_path):
    # Two sockets, and node 2: memory without CPUs (a Grace GPU's, CXL), which is no node to run on.
    root = _sys_tree(tmp_path, {0: "0-15,32-47", 1: "16-31,48-63", 2: ""},
                     {"0000:18:00.0": 0, "0000:9a:00.0": 1, "0000:00:04.0": -1, "10000:01:00.0": 1,
                      "0000:01:00.0": 0})
    status = "Name:\tpython\nCpus_allowed_list:\t0-63\nMems_allowed_list:\t0-1\n"
    assert numa.numa_of_process(root, cpus={0, 1, 2}, status=status) == {
        "numa_nodes": 2, "numa_nodes_used": [0], "numa_mems_allowed": [0, 1]}
    assert numa.numa_of_process(root, cpus={3, 40, 50}, status="")["numa_nodes_used"] == [0, 1]
    assert numa.numa_node_of_pci((0, 0x9A, 0), root) == 1  # sysfs names: lower-case hex
    assert numa.numa_node_of_pci((0, 0x18, 0), root) == 0
    assert numa.numa_node_of_pci((0x10000, 1, 0), root) == 1  # a VMD domain past 0xffff is not 0000:01:00.0
    assert numa.numa_node_of_pci((0, 0, 4), root) is None  # -1: the platform does not say
    assert numa.numa_node_of_pci((0, 0x77, 0), root) is None and numa.numa_node_of_pci(None, root) is None
    assert numa.numa_of_process(tmp_path / "nothing") == {}
    assert "numa_nodes_used" in numa.numa_of_process() or numa.numa_of_process() == {}  # this machine, real


def test_inventory_records_each_gpus_numa_node_from_nvml(tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(numa, "SYS", _sys_tree(tmp_path, {0: "0-3", 1: "4-7"}, {"0000:13:00.0": 1}))
    monkeypatch.setitem(sys.modules, "pynvml", TopologyNvml(4))
    assert nvml.nvml_info(3, "GPU-3")["numa_node"] == 1  # TopologyNvml puts GPU 3 at bus 0x13
    assert "numa_node" not in nvml.nvml_info(2, "GPU-2")  # /sys does not know its bus


def test_a_cuda_device_records_its_pci_address(monkeypatch):
    from types import SimpleNamespace

    from suite.devices import kinds

    props = SimpleNamespace(name="NVIDIA H200", total_memory=2**30, major=9, minor=0, multi_processor_count=132,
                            pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    assert kinds.Cuda().properties(torch.device("cuda", 0))["pci_bus_id"] == "0000:3b:00.0"
    props.pci_bus_id = None  # a torch or platform without the address: none is invented
    assert "pci_bus_id" not in kinds.Cuda().properties(torch.device("cuda", 0))


# --- host memory ------------------------------------------------------------------------------------------------

GIB = 2**30


def fake_host(tmp_path, monkeypatch, available_gib: float, total_gib: float, cgroup: str = "0::/\n",
              files: dict[str, str] | None = None) -> None:
    """Point suite.devices.memory at a fake /proc/meminfo, /proc/self/cgroup and cgroup mount under tmp_path;
    `files` are written relative to the mount."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {int(total_gib * GIB / 1024)} kB\nMemFree:          1024 kB\n"
                       f"MemAvailable:   {int(available_gib * GIB / 1024)} kB\n")
    proc_cgroup = tmp_path / "cgroup"
    proc_cgroup.write_text(cgroup)
    root = tmp_path / "sys-fs-cgroup"
    root.mkdir()
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    monkeypatch.setattr(memory, "PROC_CGROUP", proc_cgroup)
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)


def test_host_memory_is_memavailable_without_a_cgroup_limit(tmp_path, monkeypatch):
    fake_host(tmp_path, monkeypatch, 20, 24, files={"memory.max": "max\n", "memory.current": "123\n"})
    host = memory.host_memory_free()
    assert (host.free, host.total, host.source) == (20 * GIB, 24 * GIB, "MemAvailable")


def test_margin_and_what_a_case_may_take():
    small = memory.HostMemory(free=3 * GIB, total=8 * GIB, source="MemAvailable")
    assert small.margin == memory.HOST_MEMORY_MARGIN_BYTES == GIB  # 5% of 8 GiB is less than 1 GiB
    assert small.usable == 2 * GIB
    big = memory.HostMemory(free=900 * GIB, total=1000 * GIB, source="MemAvailable")
    assert big.margin == 50 * GIB and big.usable == 850 * GIB
    assert memory.HostMemory(free=GIB // 2, total=8 * GIB, source="x").usable == 0


def test_cgroup_v2_limits_of_the_process_and_its_ancestors_bound_it(tmp_path, monkeypatch):
    job = "user.slice/job.scope"
    fake_host(tmp_path, monkeypatch, 20, 24, cgroup="0::/user.slice/job.scope\n", files={
        f"{job}/memory.max": f"{8 * GIB}\n", f"{job}/memory.current": f"{5 * GIB}\n",
        f"{job}/memory.stat": f"anon {4 * GIB}\ninactive_file {GIB}\n",  # the kernel reclaims it first
        "user.slice/memory.max": f"{16 * GIB}\n", "user.slice/memory.current": f"{6 * GIB}\n",
    })
    host = memory.host_memory_free()
    assert (host.free, host.total) == (4 * GIB, 8 * GIB)
    assert "cgroup v2 memory.max" in host.source and host.source.endswith("job.scope")


def test_cgroup_v1_limit_bounds_it_and_its_no_limit_value_does_not(tmp_path, monkeypatch):
    lines = "4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/\n"
    fake_host(tmp_path, monkeypatch, 20, 24, cgroup=lines, files={
        "memory/docker/abc/memory.limit_in_bytes": f"{16 * GIB}\n",
        "memory/docker/abc/memory.usage_in_bytes": f"{14 * GIB}\n",
        "memory/docker/abc/memory.stat": f"hierarchical_memory_limit {12 * GIB}\ntotal_inactive_file {GIB}\n",
    })
    host = memory.host_memory_free()
    assert (host.free, host.total) == (0, 12 * GIB) and host.usable == 0  # usage past the limit
    assert "cgroup v1" in host.source
    unlimited = "memory/docker/abc/memory.stat"
    (memory.CGROUP_ROOT / unlimited).write_text("hierarchical_memory_limit 9223372036854771712\n")
    (memory.CGROUP_ROOT / "memory/docker/abc/memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory.host_memory_free().source == "MemAvailable"


def test_in_a_container_the_cgroup_mount_is_the_containers_own(tmp_path, monkeypatch):
    # /proc names the host's path, which does not exist under the container's mount
    fake_host(tmp_path, monkeypatch, 20, 24, cgroup="0::/kubepods/pod1/ctr\n",
              files={"memory.max": f"{4 * GIB}\n", "memory.current": f"{GIB}\n"})
    assert memory.host_memory_free().free == 3 * GIB


def test_a_shortfall_names_the_size_asked_for_and_what_is_free(tmp_path, monkeypatch):
    fake_host(tmp_path, monkeypatch, 10, 24)
    assert memory.host_shortfall(8 * GIB, "x") is None  # 10 GiB free less a 1.2 GiB margin
    reason = memory.host_shortfall(64 * GIB, "cpu->cpu-pageable-64GiB")
    assert reason == (
        "out of host memory for cpu->cpu-pageable-64GiB (needs 64.0 GiB; the host has 10.0 GiB free of 24.0 GiB "
        "(MemAvailable; 1.2 GiB of it kept spare)): use smaller sizes for this host"
    )


def test_without_proc_the_check_says_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "absent")
    assert memory.host_memory_free() is None
    assert memory.host_shortfall(2**60, "x") is None
