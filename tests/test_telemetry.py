"""suite.telemetry: what a benchmark's extra_info says of energy, power, clocks, limits and the PCIe link,
from fake sources (counters, readings, limits), a fake pynvml and fake powercap files; never raised or
invented."""

from __future__ import annotations

import os
import sys
import time
import types
from types import SimpleNamespace

import pytest
from pynvml import NVML_ERROR_NOT_SUPPORTED, NVMLError

from suite import telemetry
from suite.devices import use_platform
from suite.run import run_case
from suite.table import MEASURED_KEYS
from suite.telemetry import NvmlSource, RaplSource, Sampler, Source, over, rapl_zones, sources_for
from tests.fakes import FakeClock, FakePlatform
from tests.test_run_case import CONFIG, FakeBenchmark, family  # noqa: F401 - `family`: a fixture


class FakeSource(Source):
    """A GPU whose counters are `start` at start() and `end` at stop(); every reading is `gauges`."""

    def __init__(self, start: dict, end: dict, gauges: dict, processes: dict | None = None,
                 update_s: float = telemetry.NVML_ENERGY_UPDATE_S) -> None:
        self.reads, self.gauge_values, self.others = [start, end], gauges, processes
        self.energy_update_s = update_s

    def counters(self) -> dict:
        return dict(self.reads.pop(0))

    def gauges(self) -> dict:
        return dict(self.gauge_values)

    def processes(self) -> dict | None:
        return self.others


class BrokenSource(Source):
    def counters(self):
        raise RuntimeError("NVML: GPU is lost")

    gauges = processes = counters


def sample(sources, window: float, notes=()) -> dict:
    """What a Sampler over `sources` gives for a window of `window` seconds (fake clock)."""
    clock = FakeClock()
    sampler = Sampler(sources, list(notes), clock=clock, interval=0.001).start()
    clock.now += window
    return sampler.stop()


BUSY = {"power_w": 600.0, "sm_clock_mhz": 1755, "mem_clock_mhz": 2619, "temp_c": 71, "pcie_gen": 5,
        "pcie_width": 16}
START = {"energy_j": 1000.0, "held:power": 10.0, "held:thermal": 3.0, "held:hw_thermal": 0.0,
         "held:hw_power_brake": 1.0, "held:sync_boost": 0.0, "pcie_replays": 4, "ecc:corrected": 1,
         "ecc:uncorrected": 0}
END = {**START, "energy_j": 2300.0, "held:power": 11.5, "held:hw_thermal": 0.4, "held:hw_power_brake": 1.2,
       "pcie_replays": 6, "ecc:corrected": 13}


def test_a_gpu_records_every_key_over_the_timed_rounds():
    info = sample([FakeSource(START, END, BUSY, {"count": 1, "memory_bytes": 30 * 2**30})], window=2.0)
    assert info["energy_j"] == pytest.approx(1300.0) and info["power_w"] == pytest.approx(650.0)
    assert info["sm_clock_mhz"] == {"min": 1755, "median": 1755} and info["mem_clock_mhz"]["min"] == 2619
    assert info["temp_c_max"] == 71 and info["pcie_under_load"] == {"gen": 5, "width": 16}
    assert info["clocks_limited"] == pytest.approx({"power": 0.75, "thermal": 0.0, "hw_slowdown": 0.2,
                                                    "sync_boost": 0.0})
    assert info["pcie_replays"] == 2 and info["ecc_errors"] == {"corrected": 12, "uncorrected": 0}
    assert info["other_processes"] == {"count": 1, "memory_bytes": 30 * 2**30}
    assert "telemetry_note" not in info
    assert set(info) <= set(telemetry.KEYS)


def test_energy_is_left_out_over_a_window_shorter_than_its_counters_updates_allow():
    info = sample([FakeSource(START, END, BUSY)], window=0.25)
    assert "energy_j" not in info and "10 updates" in info["telemetry_note"]
    assert info["power_w"] == 600.0, "the mean of the power readings, where the energy is left out"
    # RAPL's counter moves every millisecond: a quarter second is plenty.
    cpu = sample([FakeSource({"energy_j": 5.0}, {"energy_j": 20.0}, {}, update_s=0.001)], window=0.25)
    assert cpu["energy_j"] == 15.0 and cpu["power_w"] == 60.0


def test_absent_readings_stay_absent_and_a_failing_source_raises_nothing():
    info = sample([FakeSource({"energy_j": 1.0}, {}, {"sm_clock_mhz": 1000})], window=2.0)
    assert info == {"sm_clock_mhz": {"min": 1000, "median": 1000}}
    assert sample([BrokenSource()], window=2.0) == {}
    note = "energy_j: not readable"
    assert sample([], window=2.0, notes=[note]) == {"telemetry_note": note}


def test_several_gpus_sum_energy_and_take_the_worst_of_clocks_limits_and_links():
    slow = {**BUSY, "sm_clock_mhz": 1200, "pcie_width": 8, "temp_c": 89}
    held = {**END, "held:thermal": 3.8}
    info = sample([FakeSource(START, END, BUSY), FakeSource(START, held, slow)], window=2.0)
    assert info["energy_j"] == pytest.approx(2600.0)
    assert info["sm_clock_mhz"]["min"] == 1200 and info["temp_c_max"] == 89
    assert info["pcie_under_load"] == {"gen": 5, "width": 8}
    assert info["clocks_limited"]["thermal"] == pytest.approx(0.4)
    # Energy from one GPU of two would undercount: none.
    assert "energy_j" not in sample([FakeSource(START, END, BUSY), FakeSource({}, {}, BUSY)], window=2.0)


def test_the_thread_reads_while_the_block_runs_and_stops_with_it():
    source = FakeSource(START, END, BUSY)
    sampler = Sampler([source], interval=0.001).start()
    deadline = time.monotonic() + 10
    while len(sampler.samples[0]) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    sampler.stop()
    assert len(sampler.samples[0]) >= 3 and not sampler._thread.is_alive()


def _zone(root, name: str, energy: int, span: int = 1000, label: str = "package-0"):
    zone = root / name
    zone.mkdir()
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{span}\n")
    return zone


def test_rapl_counts_across_a_wraparound(tmp_path):
    zone = _zone(tmp_path, "intel-rapl:0", 900)
    _zone(tmp_path, "intel-rapl:0:0", 5, label="core")  # inside the package: not counted twice
    _zone(tmp_path, "intel-rapl:1", 5, label="psys")  # the whole platform: not the CPU's
    zones, note = rapl_zones(tmp_path)
    assert zones == [zone] and note == ""
    source = RaplSource(zones)
    before = source.counters()["energy_j"]
    (zone / "energy_uj").write_text("950\n")
    source.gauges()
    (zone / "energy_uj").write_text("100\n")  # wrapped past 1000 uJ
    assert source.counters()["energy_j"] - before == pytest.approx(200e-6)


def test_rapl_unreadable_is_a_note_not_a_figure(tmp_path):
    zone = _zone(tmp_path, "intel-rapl:0", 900)
    (zone / "energy_uj").unlink()
    assert rapl_zones(tmp_path)[0] == [] and "not readable" in rapl_zones(tmp_path)[1]
    assert rapl_zones(tmp_path / "none") == ([], "")


class FakeNvml(types.ModuleType):
    """pynvml for one busy GPU; the calls in `unsupported` raise NotSupported."""

    NVML_FEATURE_ENABLED, NVML_VOLATILE_ECC, NVML_TEMPERATURE_GPU = 1, 0, 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, unsupported=(), ecc: int = 1, processes=()) -> None:
        super().__init__("pynvml")
        self.unsupported, self.ecc, self.procs = set(unsupported), ecc, list(processes)
        self.energy_mj = 10_000

    def _call(self, name, value):
        if name in self.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # pynvml makes it an NVMLError_NotSupported
        return value

    def nvmlDeviceGetEccMode(self, h):
        return self._call("nvmlDeviceGetEccMode", (self.ecc, self.ecc))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy_mj += 1_300_000
        return self._call("nvmlDeviceGetTotalEnergyConsumption", self.energy_mj)

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._call("nvmlDeviceGetPcieReplayCounter", 7)

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return self._call("nvmlDeviceGetTotalEccErrors", 0)

    def nvmlDeviceGetViolationStatus(self, h, policy):
        held = SimpleNamespace(violationTime=int(2e9) * (policy + 1))  # ns
        return self._call("nvmlDeviceGetViolationStatus", held)

    def nvmlDeviceGetFieldValues(self, h, fields):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._call("nvmlDeviceGetPowerUsage", 650_000)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._call("nvmlDeviceGetClockInfo", 1980 if kind == self.NVML_CLOCK_SM else 2619)

    def nvmlDeviceGetTemperature(self, h, kind):
        return self._call("nvmlDeviceGetTemperature", 64)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._call("nvmlDeviceGetCurrPcieLinkGeneration", 5)

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._call("nvmlDeviceGetCurrPcieLinkWidth", 16)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._call("nvmlDeviceGetComputeRunningProcesses", self.procs)


def test_nvml_source_reads_counters_readings_and_other_processes(monkeypatch):
    own = SimpleNamespace(pid=os.getpid(), usedGpuMemory=2**30)
    other = SimpleNamespace(pid=1, usedGpuMemory=2**34)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(processes=[own, other]))
    source = NvmlSource("h", host_copy=True)
    assert source.processes() == {"count": 1, "memory_bytes": 2**34}
    counters = source.counters()
    assert counters["held:power"] == 2.0 and counters["held:sync_boost"] == 6.0
    assert counters["ecc:corrected"] == 0
    assert source.gauges() == {"power_w": 650.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temp_c": 64,
                               "pcie_gen": 5, "pcie_width": 16}
    assert "pcie_gen" not in NvmlSource("h", host_copy=False).gauges(), "the link is read under a copy only"
    info = sample([source], window=2.0)
    assert info["energy_j"] == 1300.0 and info["power_w"] == 650.0 and info["ecc_errors"] == {
        "corrected": 0, "uncorrected": 0}


def test_a_call_nvml_does_not_support_leaves_its_key_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(
        unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo",
                     "nvmlDeviceGetViolationStatus", "nvmlDeviceGetComputeRunningProcesses"}, ecc=0))
    info = sample([NvmlSource("h", host_copy=False)], window=2.0)
    assert {"energy_j", "sm_clock_mhz", "clocks_limited", "ecc_errors", "other_processes"}.isdisjoint(info)
    assert info["power_w"] == 650.0 and info["pcie_replays"] == 0 and info["temp_c_max"] == 64


def test_in_a_container_this_process_is_not_counted_as_another(monkeypatch):
    procs = [SimpleNamespace(pid=4242, usedGpuMemory=2**30), SimpleNamespace(pid=4243, usedGpuMemory=2**34)]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(processes=procs))
    info = sample([NvmlSource("h", host_copy=False)], window=2.0)
    assert info["other_processes"] == {"count": 1} and "another PID" in info["telemetry_note"]


def test_without_nvml_a_gpu_has_no_source_and_nothing_is_recorded():
    with use_platform(FakePlatform(gpus=1)):  # its GPU has no UUID: NVML cannot be asked
        assert sources_for(["cuda:0"]) == ([], [])
        with over(["cpu", "cuda:0"]) as found:
            pass
    assert found == {}


def test_a_failing_source_lookup_fails_no_benchmark(monkeypatch):
    def broken(devices):
        raise OSError("powercap went away")

    monkeypatch.setattr(telemetry, "sources_for", broken)
    with over(["cpu"]) as found:
        pass
    assert found == {}


def test_run_case_records_telemetry_and_the_rate_per_watt(family, monkeypatch):
    monkeypatch.setattr(telemetry, "sources_for", lambda devices: ([FakeSource(START, END, BUSY)], []))
    bench = FakeBenchmark(family.events)
    stats = SimpleNamespace(median=1e-3, data=[1e-3] * 5)
    bench.stats = SimpleNamespace(stats=stats, iterations=3, options={})
    info = run_case(family.case, bench, CONFIG)
    assert info["power_w"] == 600.0 and info["perf_per_w"] == pytest.approx(info["tflops"] / 600.0)
    assert bench.extra_info["clocks_limited"]["power"] > 0
    off = run_case(family.case, FakeBenchmark(family.events), CONFIG, telemetry=False)
    assert not set(telemetry.KEYS) & set(off)


def test_telemetry_is_a_measurement_never_part_of_a_benchmarks_identity():
    # Otherwise a run with telemetry would match no benchmark of a run without it in `compare`.
    assert set(telemetry.KEYS) <= MEASURED_KEYS


def test_the_module_imports_without_torch():
    import subprocess

    code = "import sys, suite.telemetry; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def _check_run(**extra) -> dict:
    """A results file of the GPU check's runs: one bf16 result on cuda:0 and one host->GPU copy."""
    gpu = {"id": "cuda:0", "power_limit_w": 700.0, "pcie_gen_max": 5, "pcie_width_max": 16}
    bf16 = {"case": "x", "device": "cuda:0", "dtype": "bfloat16", "tflops": 700.0, "power_w": 680.0,
            "energy_j": 1360.0, "perf_per_w": 700 / 680, "clocks_limited": {"power": 0.9}, "clocks_held": 0.95,
            "clocks_held_power": 0.95, **extra}
    copy = {"case": "y", "src": "cpu", "dst": "cuda:0", "pcie_under_load": {"gen": 5, "width": 16}}
    return {"machine_info": {"devices": [gpu]}, "benchmarks": [{"extra_info": bf16}, {"extra_info": copy}]}


def test_the_gpu_checks_telemetry_rows_judge_power_limits_and_the_link():
    from suite.tools.gpu_check import telemetry_rows

    power, share, link = telemetry_rows([_check_run()], idle_w=90.0)
    assert power.ok and share.ok and link.ok, (power, share, link)
    assert (power.suite, power.reference, link.suite, link.reference) == (680.0, 700.0, 5, 5)
    slow = _check_run()
    slow["benchmarks"][1]["extra_info"]["pcie_under_load"] = {"gen": 5, "width": 8}
    assert telemetry_rows([slow], idle_w=90.0)[2].ok is False and "x8 under load" in telemetry_rows(
        [slow], idle_w=90.0)[2].note
    assert telemetry_rows([_check_run(power_w=60.0)], idle_w=90.0)[0].ok is False, "below idle"
    assert telemetry_rows([_check_run(clocks_limited={"power": 0.1})], idle_w=90.0)[1].ok is False


def test_without_telemetry_the_gpu_checks_rows_are_not_judged():
    from suite.tools.gpu_check import telemetry_rows

    rows = telemetry_rows([{"benchmarks": [{"extra_info": {"case": "x", "device": "cpu"}}]}], idle_w=None)
    assert len(rows) == 3 and all(r.ok is None and r.note.startswith("not judged") for r in rows)


class AmdSmiLibraryException(Exception):
    """amdsmi's error for a call the GPU or driver does not support."""


class FakeAmdSmi(types.ModuleType):
    """amdsmi (ROCm 6.2+ shapes; `old` gives the earlier ones) for one busy MI300X; the calls in `failing`
    raise. Tests move `energy`, `replays`, `ecc` and `metrics` (the residency counters) between reads."""

    AmdSmiClkType = SimpleNamespace(GFX=0, MEM=5)
    AmdSmiTemperatureType = SimpleNamespace(EDGE=0, HOTSPOT=1)
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)

    def __init__(self, failing=(), old: bool = False, processes=()) -> None:
        super().__init__("amdsmi")
        self.failing, self.old, self.procs = set(failing), old, list(processes)
        self.energy, self.replays, self.ecc, self.bdfs = 1000, 4, 1, []
        self.metrics = {"accumulation_counter": 1000, "ppt_residency_acc": 0, "socket_thm_residency_acc": 0,
                        "prochot_residency_acc": 0, "vr_thm_residency_acc": "N/A",
                        "hbm_thm_residency_acc": 2**64 - 1}

    def __getattribute__(self, name):
        if name.startswith("amdsmi_") and name in object.__getattribute__(self, "failing"):
            def fail(*args):
                raise AmdSmiLibraryException(f"{name}: AMDSMI_STATUS_NOT_SUPPORTED")
            return fail
        return object.__getattribute__(self, name)

    def amdsmi_init(self):
        pass

    def amdsmi_get_processor_handle_from_bdf(self, bdf):
        self.bdfs.append(bdf)
        return f"amd:{bdf}"

    def amdsmi_get_energy_count(self, h):
        return {"power" if self.old else "energy_accumulator": self.energy, "counter_resolution": 1000.0,
                "timestamp": 0}  # 1 mJ a count

    def amdsmi_get_gpu_metrics_info(self, h):
        return dict(self.metrics)

    def amdsmi_get_power_info(self, h):
        return {"current_socket_power": "N/A" if self.old else 650, "average_socket_power": 650,
                "power_limit": 750}

    def amdsmi_get_clock_info(self, h, kind):
        return {"cur_clk" if self.old else "clk": 2100 if kind == self.AmdSmiClkType.GFX else 1300}

    def amdsmi_get_temp_metric(self, h, sensor, metric):
        if sensor == self.AmdSmiTemperatureType.EDGE:
            raise AmdSmiLibraryException("MI300X has no edge sensor")
        return 71

    def amdsmi_get_pcie_info(self, h):
        return {"pcie_static": {"max_pcie_width": 16},
                "pcie_metric": {"pcie_speed": 32000, "pcie_width": 16, "pcie_replay_count": self.replays}}

    def amdsmi_get_gpu_total_ecc_count(self, h):
        return {"correctable_count": self.ecc, "uncorrectable_count": 0, "deferred_count": 0}

    def amdsmi_get_gpu_process_list(self, h):
        return list(range(len(self.procs))) if self.old else self.procs

    def amdsmi_get_gpu_process_info(self, h, p):
        return self.procs[p]


def _amd_run(fake: FakeAmdSmi, window: float, host_copy: bool = True, wrap: bool = False) -> dict:
    """What an AmdSmiSource over `fake` gives for a window of `window` seconds (fake clock), the counters
    moved between its start and its end."""
    clock = FakeClock()
    fake.energy = 2**32 - 300_000 if wrap else 1000
    sampler = Sampler([telemetry.AmdSmiSource("amd:0", host_copy, clock=clock)], clock=clock,
                      interval=0.001).start()
    clock.now += window
    fake.energy = (fake.energy + 650_000 * window) % 2**32  # 650 W: 650,000 counts of 1 mJ a second
    fake.replays, fake.ecc = fake.replays + 2, fake.ecc + 12
    fake.metrics.update(accumulation_counter=3000, ppt_residency_acc=1500, prochot_residency_acc=400)
    return sampler.stop()


def _own_and_other():
    return [{"name": "python", "pid": os.getpid(), "mem": 2**30, "memory_usage": {"vram_mem": 2**30}},
            {"name": "train", "pid": 1, "mem": 2**34, "memory_usage": {"vram_mem": 2**34}}]


def test_amdsmi_source_records_every_key(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi(processes=_own_and_other()))
    info = _amd_run(sys.modules["amdsmi"], window=2.0)
    assert info["energy_j"] == pytest.approx(1300.0) and info["power_w"] == pytest.approx(650.0)
    assert info["sm_clock_mhz"] == {"min": 2100, "median": 2100} and info["mem_clock_mhz"]["min"] == 1300
    assert info["temp_c_max"] == 71, "the hotspot, where the edge sensor is missing"
    assert info["pcie_under_load"] == {"gen": 5, "width": 16}
    # PPT 1500 of 2000 ticks, PROCHOT 400; VR "N/A" and HBM all-ones are not counted.
    assert info["clocks_limited"] == pytest.approx({"power": 0.75, "thermal": 0.0, "hw_slowdown": 0.2})
    assert info["pcie_replays"] == 2 and info["ecc_errors"] == {"corrected": 12, "uncorrected": 0}
    assert info["other_processes"] == {"count": 1, "memory_bytes": 2**34}
    assert "telemetry_note" not in info and set(info) <= set(telemetry.KEYS)
    assert "pcie_under_load" not in _amd_run(sys.modules["amdsmi"], 2.0, host_copy=False)


def test_amdsmi_before_rocm_6_2_gives_the_same_keys(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi(old=True, processes=_own_and_other()))
    info = _amd_run(sys.modules["amdsmi"], window=2.0)
    assert info["energy_j"] == pytest.approx(1300.0) and info["sm_clock_mhz"]["min"] == 2100
    assert info["other_processes"] == {"count": 1, "memory_bytes": 2**34}


def test_amdsmi_energy_counts_across_a_wraparound_and_not_over_a_short_window(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi())
    assert _amd_run(sys.modules["amdsmi"], window=2.0, wrap=True)["energy_j"] == pytest.approx(1300.0)
    short = _amd_run(sys.modules["amdsmi"], window=0.25)
    assert "energy_j" not in short and "10 updates" in short["telemetry_note"]
    assert short["power_w"] == 650.0, "the mean of the power readings, where the energy is left out"


def test_an_amdsmi_call_that_fails_leaves_only_its_key_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi(failing={
        "amdsmi_get_energy_count", "amdsmi_get_clock_info", "amdsmi_get_gpu_metrics_info",
        "amdsmi_get_gpu_total_ecc_count", "amdsmi_get_gpu_process_list"}))
    info = _amd_run(sys.modules["amdsmi"], window=2.0)
    assert {"energy_j", "sm_clock_mhz", "mem_clock_mhz", "clocks_limited", "ecc_errors",
            "other_processes"}.isdisjoint(info)
    assert info["power_w"] == 650.0 and info["pcie_replays"] == 2 and info["temp_c_max"] == 71
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi(failing={"amdsmi_get_power_info"}))
    assert "power_w" not in _amd_run(sys.modules["amdsmi"], window=0.25)


class PciPlatform(FakePlatform):
    """FakePlatform whose GPUs have a UUID and a PCI address, as torch gives them."""

    def properties(self, device):
        return {**super().properties(device), "uuid": f"GPU-{device.index}",
                "pci_bus_id": f"0000:c{device.index}:00.0"}


@pytest.fixture
def rocm(monkeypatch):
    """A ROCm build of torch (torch.version.hip set); amdsmi's init is tried afresh."""
    import torch

    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    telemetry._amdsmi_down.cache_clear()
    yield
    telemetry._amdsmi_down.cache_clear()


def test_without_amdsmi_an_amd_gpu_records_only_why(rocm, monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # `import amdsmi` raises ImportError
    with use_platform(PciPlatform(gpus=1, kind="rocm")):
        sources, notes = sources_for(["cuda:0"])
        with over(["cpu", "cuda:0"]) as found:
            pass
    assert sources == [] and "amdsmi is not usable (ModuleNotFoundError)" in notes[0]
    assert found == {"telemetry_note": notes[0]}


def test_an_amd_gpu_is_read_through_amdsmi_by_its_pci_address_never_nvml(rocm, monkeypatch):
    fake = FakeAmdSmi()
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setattr(telemetry, "_nvml_handle", lambda device: pytest.fail("NVML asked of an AMD GPU"))
    with use_platform(PciPlatform(gpus=2, kind="rocm")):
        sources, notes = sources_for(["cpu", "cuda:1"])
    assert [type(s) for s in sources] == [telemetry.AmdSmiSource] and notes == []
    assert fake.bdfs == ["0000:c1:00.0"] and sources[0].handle == "amd:0000:c1:00.0" and sources[0].host_copy


def test_an_nvidia_gpu_is_never_read_through_amdsmi(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    fake = FakeAmdSmi()
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    monkeypatch.setattr(telemetry, "_nvml_handle", lambda device: f"nvml:{device}")
    with use_platform(PciPlatform(gpus=1)):
        sources, _ = sources_for(["cuda:0"])
    assert [type(s) for s in sources] == [NvmlSource] and fake.bdfs == []
