"""Telemetry over a benchmark's timed rounds: energy, power, clocks, what held them, the PCIe link under load.

One seam: a `Source` per device reading (NVML for an NVIDIA GPU; amdsmi for an AMD GPU on ROCm; Linux
powercap/RAPL for a case on the CPU alone; Intel's and Apple's GPUs have none), and a `Sampler` that reads
their counters when the benchmark's timed rounds start and end, and their gauges every SAMPLE_INTERVAL_S on a
thread in between. Its window is pytest-benchmark's call: its calibration and timed rounds, the same work
(not the warm-up or the check). Torch-free to import: the analysis side reads KEYS.

The keys it adds to a benchmark's extra_info, each optional: a figure the platform does not give is absent,
never invented (docs/running.md#telemetry-power-energy-clocks-and-the-link-while-it-ran).
  energy_j         joules over the window from the energy counters (NVML's total energy, amdsmi's energy
                   accumulator, RAPL's packages),
                   summed over the case's devices; left out, with the reason in telemetry_note, when the
                   window is shorter than ENERGY_MIN_UPDATES of a counter's update interval
  power_w          mean watts: energy_j / window; without energy_j, the mean of the GPUs' power readings
  perf_per_w       the family's rate (its read.py RATE) per watt: TFLOP/s/W, GB/s/W, samples/s/W (suite.run)
  sm_clock_mhz, mem_clock_mhz   {"min": MHz, "median": MHz} over the readings
  temp_c_max       the hottest reading, °C
  clocks_limited   {"power", "thermal", "hw_slowdown", "sync_boost"}: the share of the window (0 to 1) each
                   limit held the clocks, from NVML's violation counters (thermal: the driver's slowdown;
                   hw_slowdown: the larger of the hardware thermal slowdown and power brake); the largest over
                   the case's GPUs; a limit NVML does not count is left out. On AMD, from the firmware's
                   residency counters: power (PPT), thermal (socket and HBM), hw_slowdown (PROCHOT, VR)
  pcie_under_load  {"gen", "width"}: the highest the link reached while a case between host and GPU ran (a
                   link trained down never reaches its max; an idle one drops to save power, so it is read
                   under load); the lowest of them over the case's GPUs
  pcie_replays     PCIe replays during the window (counter delta)
  ecc_errors       {"corrected", "uncorrected"}: volatile ECC error counts during the window, where ECC is on
  other_processes  {"count", "memory_bytes"}: other processes with a context on the case's GPUs at the start
  telemetry_note   why a figure a source has was left out
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

KEYS = ("energy_j", "power_w", "perf_per_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c_max", "clocks_limited",
        "pcie_under_load", "pcie_replays", "ecc_errors", "other_processes", "telemetry_note")
# ~40 readings a second: enough for a min and a median over max_time's 0.25 s, and a few NVML calls (each
# releases the GIL) a reading, far below a percent of one core.
SAMPLE_INTERVAL_S = 0.025
# How often the energy counters move: NVML's about as often as its power readings (~10 Hz on A100/H100; Yang
# et al., "Part-time power measurements", 2023); RAPL's every ~1 ms. An energy difference is off by up to one
# update, so it is kept only over ENERGY_MIN_UPDATES of them (within ~10%).
NVML_ENERGY_UPDATE_S = 0.1
RAPL_ENERGY_UPDATE_S = 0.001
ENERGY_MIN_UPDATES = 10
POWERCAP = Path("/sys/class/powercap")
# clocks_limited's names -> the NVML counters (suite.limits' names, and sync boost) each takes the largest of.
# The AMD names are amdsmi's residency counters (AMD_RESIDENCY).
CLOCKS_LIMITED = {"power": ("power",), "thermal": ("thermal", "hbm_thermal"),
                  "hw_slowdown": ("hw_thermal", "hw_power_brake", "prochot", "vr_thermal"),
                  "sync_boost": ("sync_boost",)}
# Sync boost's violation counter (NVML_PERF_POLICY_SYNC_BOOST), and the same as a field value (nanoseconds).
SYNC_BOOST_POLICY, SYNC_BOOST_FIELD = 2, 76
# amdsmi_get_gpu_metrics_info's residency counters (ticks of its accumulation_counter a limit held) -> the
# names CLOCKS_LIMITED reads.
AMD_RESIDENCY = {"ppt_residency_acc": "power", "socket_thm_residency_acc": "thermal",
                 "hbm_thm_residency_acc": "hbm_thermal", "prochot_residency_acc": "prochot",
                 "vr_thm_residency_acc": "vr_thermal"}
# PCIe transfer rate (MT/s, as amdsmi gives it) -> generation.
PCIE_GEN_OF_MTS = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


def _read(queries: dict[str, Callable]) -> dict:
    """key -> the answer of each query; one that raises (NVMLError_NotSupported, a file gone) is left out."""
    found = {}
    for key, query in queries.items():
        with contextlib.suppress(Exception):
            value = query()
            if value is not None:
                found[key] = value
    return found


class Source:
    """What one device tells the Sampler; every key is optional (a reading that fails is left out)."""

    energy_update_s = NVML_ENERGY_UPDATE_S

    def counters(self) -> dict[str, float]:
        """Cumulative counts: energy_j, held:<limit> (seconds), pcie_replays, ecc:<corrected|uncorrected>."""
        return {}

    def gauges(self) -> dict[str, float]:
        """One reading: power_w, sm_clock_mhz, mem_clock_mhz, temp_c, pcie_gen, pcie_width."""
        return {}

    def processes(self) -> dict | None:
        """Other processes on the device now: {"count", "memory_bytes"} (and a "note"); None: not known."""
        return None


class NvmlSource(Source):
    """One NVIDIA GPU through nvidia-ml-py (NVML initialised); the PCIe link only for a case between host and
    GPU (`host_copy`)."""

    def __init__(self, handle, host_copy: bool) -> None:
        import pynvml

        self.handle, self.host_copy = handle, host_copy
        mode = _read({"ecc": lambda: pynvml.nvmlDeviceGetEccMode(handle)[0]})
        self.ecc = mode.get("ecc") == pynvml.NVML_FEATURE_ENABLED

    def counters(self) -> dict[str, float]:
        import pynvml

        from suite.devices import nvml
        from suite.limits import CLOCK_LIMITS, POLICY_FIELDS

        h = self.handle
        held = nvml.held_seconds(h, {**CLOCK_LIMITS, "sync_boost": SYNC_BOOST_POLICY},
                                 {**POLICY_FIELDS, "sync_boost": SYNC_BOOST_FIELD}) or {}
        found = {f"held:{name}": seconds for name, seconds in held.items()}
        queries = {"energy_j": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,  # mJ
                   "pcie_replays": lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h)}
        if self.ecc:
            for kind, error_type in (("corrected", 0), ("uncorrected", 1)):  # NVML_MEMORY_ERROR_TYPE_*
                queries[f"ecc:{kind}"] = functools.partial(pynvml.nvmlDeviceGetTotalEccErrors, h, error_type,
                                                           pynvml.NVML_VOLATILE_ECC)
        return {**found, **_read(queries)}

    def gauges(self) -> dict[str, float]:
        import pynvml

        h = self.handle
        queries = {"power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,  # mW
                   "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                   "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                   "temp_c": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)}
        if self.host_copy:
            queries["pcie_gen"] = lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
            queries["pcie_width"] = lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
        return _read(queries)

    def processes(self) -> dict | None:
        import pynvml

        procs = _read({"all": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle)}).get("all")
        if procs is None:
            return None
        return _other_processes([(p.pid, getattr(p, "usedGpuMemory", None)) for p in procs], "NVML")


def _other_processes(procs: list[tuple[int, int | None]], library: str) -> dict:
    """Source.processes() from (pid, memory bytes or None) of every process with a context on the GPU."""
    others = [(pid, memory) for pid, memory in procs if pid != os.getpid()]
    if procs and len(others) == len(procs):
        # This process has a context on the GPU, yet none is listed under its PID: another PID namespace
        # (a container). One of them is this process; which one, and so the others' memory, is unknown.
        return {"count": len(procs) - 1,
                "note": f"other_processes: {library} lists this process under another PID (a container?): "
                        "memory left out"}
    if all(isinstance(memory, int) for _, memory in others):
        return {"count": len(others), "memory_bytes": sum(memory for _, memory in others)}
    return {"count": len(others)}


def _number(value):
    """A figure amdsmi gave, or None for its "N/A" and the all-ones values that mean unsupported."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value not in (
            0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF):
        return value
    return None


def _wrapped(now: int, was: int, span: int) -> int:
    """How far a counter of range `span` moved from `was` to `now`, once past its end where it is lower (it
    is read every SAMPLE_INTERVAL_S, far more often than it wraps)."""
    return now - was + (span if now < was else 0)


class AmdSmiSource(Source):
    """One AMD GPU through amdsmi (initialised); the PCIe link only for a case between host and GPU.

    Its energy accumulator is updated from the firmware's metrics table, so NVML's update rule is kept."""

    def __init__(self, handle, host_copy: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.handle, self.host_copy, self.clock = handle, host_copy, clock
        self.energy: tuple[int, int] | None = None  # (last raw count, counts since the first read)
        self.residency: tuple[float, dict] | None = None  # (time, counters) at the first read

    def _energy_j(self) -> float:
        import amdsmi

        read = amdsmi.amdsmi_get_energy_count(self.handle)
        raw = read.get("energy_accumulator", read.get("power"))  # "power": its older name
        if self.energy is None:
            self.energy = raw, 0
        was, total = self.energy
        # A 32-bit accumulator (older firmware) wraps after ~66 kJ at 15.3 µJ a count, ~90 s at 750 W.
        self.energy = raw, total + _wrapped(raw, was, 2**32 if was < 2**32 else 2**64)
        return self.energy[1] * read["counter_resolution"] / 1e6  # µJ a count

    def _held(self) -> dict[str, float]:
        """held:<limit> seconds since the first read: the share of the accumulation counter's ticks each limit
        held, times the time passed. (amdsmi_get_violation_status gives shares too, but sleeps 100 ms a call:
        not inside a timed window.)"""
        import amdsmi

        metrics = amdsmi.amdsmi_get_gpu_metrics_info(self.handle)
        now = self.clock(), {k: metrics[k] for k in ("accumulation_counter", *AMD_RESIDENCY)
                                 if _number(metrics.get(k)) is not None}
        if self.residency is None:
            self.residency = now
            return {f"held:{AMD_RESIDENCY[k]}": 0.0 for k in now[1] if k in AMD_RESIDENCY}
        (then, first), (at, counts) = self.residency, now
        ticks = counts.get("accumulation_counter", 0) - first.get("accumulation_counter", 0)
        if ticks <= 0:  # no update of the table since the first read: nothing known
            return {}
        return {f"held:{AMD_RESIDENCY[k]}": (counts[k] - first[k]) / ticks * (at - then)
                for k in AMD_RESIDENCY if k in counts and k in first}

    def counters(self) -> dict[str, float]:
        import amdsmi

        h = self.handle
        found = _safe(self._held) or {}
        queries = {"energy_j": self._energy_j,
                   "pcie_replays": lambda: _number(amdsmi.amdsmi_get_pcie_info(h)["pcie_metric"]
                                                   ["pcie_replay_count"])}
        for kind, field in (("corrected", "correctable_count"), ("uncorrected", "uncorrectable_count")):
            queries[f"ecc:{kind}"] = lambda f=field: _number(amdsmi.amdsmi_get_gpu_total_ecc_count(h)[f])
        return {**found, **_read(queries)}

    def gauges(self) -> dict[str, float]:
        import amdsmi

        h = self.handle

        def power():  # MI300 and later give the current socket power; older GPUs an average
            info = amdsmi.amdsmi_get_power_info(h)
            watts = [_number(info.get(k)) for k in ("current_socket_power", "average_socket_power")]
            return next((w for w in watts if w), None)

        def clock(kind):
            info = amdsmi.amdsmi_get_clock_info(h, kind)
            return _number(info.get("clk", info.get("cur_clk")))  # "cur_clk" before ROCm 6.2

        def temp():  # the hotter of the edge and the hotspot (MI300 has no edge sensor)
            sensors = [_safe(lambda s=s: _number(amdsmi.amdsmi_get_temp_metric(
                h, s, amdsmi.AmdSmiTemperatureMetric.CURRENT)))
                for s in (amdsmi.AmdSmiTemperatureType.EDGE, amdsmi.AmdSmiTemperatureType.HOTSPOT)]
            return max((t for t in sensors if t is not None), default=None)

        queries = {"power_w": power, "sm_clock_mhz": lambda: clock(amdsmi.AmdSmiClkType.GFX),
                   "mem_clock_mhz": lambda: clock(amdsmi.AmdSmiClkType.MEM), "temp_c": temp,
                   "energy": self._energy_j}  # at every reading, so that no two wraps fall between two reads
        if self.host_copy:
            link = _safe(lambda: amdsmi.amdsmi_get_pcie_info(h)["pcie_metric"]) or {}
            queries["pcie_gen"] = lambda: PCIE_GEN_OF_MTS.get(_number(link["pcie_speed"]))
            queries["pcie_width"] = lambda: _number(link["pcie_width"]) or None
        found = _read(queries)
        found.pop("energy", None)
        return found

    def processes(self) -> dict | None:
        import amdsmi

        def info(p):  # a dict from ROCm 6.2; before, a handle to ask about
            p = p if isinstance(p, dict) else amdsmi.amdsmi_get_gpu_process_info(self.handle, p)
            return p["pid"], _number(p.get("memory_usage", {}).get("vram_mem", p.get("mem")))

        procs = _safe(lambda: [info(p) for p in amdsmi.amdsmi_get_gpu_process_list(self.handle)])
        return None if procs is None else _other_processes(procs, "amdsmi")


class RaplSource(Source):
    """The CPU packages' energy counters (Linux powercap intel-rapl zones, which AMD's CPUs fill too): cores,
    caches and uncore, not DRAM."""

    energy_update_s = RAPL_ENERGY_UPDATE_S

    def __init__(self, zones: list[Path]) -> None:
        self.zones = zones
        self.ranges = [int((zone / "max_energy_range_uj").read_text()) for zone in zones]
        self.last = self._raw()
        self.total_uj = 0

    def _raw(self) -> list[int]:
        return [int((zone / "energy_uj").read_text()) for zone in self.zones]

    def counters(self) -> dict[str, float]:
        raw = self._raw()  # a package's counter wraps past max_energy_range_uj after minutes
        self.total_uj += sum(_wrapped(now, was, span) for now, was, span in zip(raw, self.last, self.ranges))
        self.last = raw
        return {"energy_j": self.total_uj / 1e6}

    def gauges(self) -> dict[str, float]:
        self.counters()  # at every reading, so that no two wraps fall between two reads
        return {}


def rapl_zones(root: Path = POWERCAP) -> tuple[list[Path], str]:
    """The CPU package zones under `root`, and a note where they exist but this user cannot read them all."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        with contextlib.suppress(OSError):
            if zone.name.count(":") == 1 and (zone / "name").read_text().startswith("package"):
                zones.append(zone)
    readable = _read({str(z): lambda z=z: int((z / "energy_uj").read_text()) for z in zones})
    if len(readable) < len(zones):  # a part of the packages would undercount
        return [], f"energy_j: {root}'s RAPL counters are not readable by (root only since Linux 5.10)"
    return zones, ""


@functools.cache
def _nvml_up() -> bool:
    from suite.devices import nvml

    return nvml.init()  # once per process, kept up (its init is counted)


def _nvml_handle(device: str):
    """The NVML handle of a CUDA device, by its UUID; None where NVML cannot tell (no driver, ROCm, MIG)."""
    import torch

    from suite.devices import current_platform, nvml

    uuid = current_platform().properties(torch.device(device)).get("uuid")
    if not uuid or uuid.startswith("MIG-") or not _nvml_up():
        return None
    return nvml.handle(uuid)


@functools.cache
def _amdsmi_down() -> str:
    """Why amdsmi cannot be read; "" where it is initialised (once per process, kept up)."""
    try:
        import amdsmi

        amdsmi.amdsmi_init()
    except Exception as error:  # not installed, or its library or driver did not load
        return f"telemetry: amdsmi is not usable ({type(error).__name__}): nothing of the AMD GPUs is read"
    return ""


def _amdsmi_handle(device: str):
    """The amdsmi handle of a ROCm GPU, by its PCI address; None where amdsmi cannot tell."""
    import torch

    from suite.devices import current_platform

    address = current_platform().properties(torch.device(device)).get("pci_bus_id")
    if not address or _amdsmi_down():
        return None
    import amdsmi

    return _safe(lambda: amdsmi.amdsmi_get_processor_handle_from_bdf(address))


def sources_for(devices: list[str]) -> tuple[list[Source], list[str]]:
    """(sources, notes) of a case's devices: NVML for every NVIDIA GPU, amdsmi for every AMD one (none unless
    the library knows all of them: a part would undercount), RAPL for a case on the CPU alone."""
    import torch

    gpus = [d for d in devices if d != "cpu"]
    if not gpus:
        zones, note = rapl_zones()
        return ([RaplSource(zones)] if zones else []), ([note] if note else [])
    if not all(d.startswith("cuda") for d in gpus):
        return [], []
    rocm = bool(getattr(torch.version, "hip", None))  # torch calls AMD's GPUs "cuda" too
    handle_of, source, unusable = ((_amdsmi_handle, AmdSmiSource, _amdsmi_down) if rocm
                                   else (_nvml_handle, NvmlSource, lambda: ""))
    handles = [handle_of(d) for d in gpus]
    if None in handles:
        return [], [unusable()] if unusable() else []
    return [source(h, host_copy="cpu" in devices) for h in handles], []


class Sampler:
    """Reads `sources` over a window: their counters at start() and stop(), their gauges at start() and every
    `interval` seconds on a thread until stop(), which returns the extra_info keys (KEYS)."""

    def __init__(self, sources: list[Source], notes: list[str] = (),
                 clock: Callable[[], float] = time.monotonic, interval: float = SAMPLE_INTERVAL_S) -> None:
        self.sources, self.notes, self.clock, self.interval = list(sources), list(notes), clock, interval
        self.samples: list[list[dict]] = [[] for _ in self.sources]
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self.others = [_safe(s.processes) for s in self.sources]
        self.before = [_safe(s.counters) or {} for s in self.sources]
        self.started = self.clock()
        self._sample()
        if self.sources:
            self._thread = threading.Thread(target=self._run, name="suite-telemetry", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._halt.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        for source, samples in zip(self.sources, self.samples):
            samples.append(_safe(source.gauges) or {})

    def stop(self) -> dict:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
        after = [_safe(s.counters) or {} for s in self.sources]
        window = self.clock() - self.started
        deltas = [{k: a[k] - b[k] for k in a.keys() & b.keys()} for b, a in zip(self.before, after)]
        notes = list(self.notes)
        found = {**self._energy(deltas, window, notes), **self._gauges(), **_limited(deltas, window),
                 **_counted(deltas), **self._processes(notes)}
        found.update(_power(found, window))
        if notes:
            found["telemetry_note"] = "; ".join(notes)
        return found

    def _energy(self, deltas: list[dict], window: float, notes: list[str]) -> dict:
        energies = [d.get("energy_j") for d in deltas]
        if not deltas or any(e is None or e < 0 for e in energies):
            return {}
        need = ENERGY_MIN_UPDATES * max(s.energy_update_s for s in self.sources)
        if window < need:
            notes.append(f"energy_j: the window lasted {window:.3g} s, under the {need:g} s "
                         f"({ENERGY_MIN_UPDATES} updates of its energy counter) it needs")
            return {}
        return {"energy_j": sum(energies)}

    def _gauges(self) -> dict:
        """Clocks, hottest reading, PCIe link, and the mean power readings (summed over the sources)."""
        readings = [g for samples in self.samples for g in samples]
        return {**_clocks(readings), **_link(self.samples), **_mean_power(self.samples)}

    def _processes(self, notes: list[str]) -> dict:
        known = [dict(o) for o in self.others if o is not None]
        if not known:
            return {}
        notes += [o.pop("note") for o in known if "note" in o]
        found = {"count": sum(o["count"] for o in known)}
        if len(known) == len(self.others) and all("memory_bytes" in o for o in known):
            found["memory_bytes"] = sum(o["memory_bytes"] for o in known)
        return {"other_processes": found}


def _clocks(readings: list[dict]) -> dict:
    found: dict = {}
    for key in ("sm_clock_mhz", "mem_clock_mhz"):
        values = [g[key] for g in readings if key in g]
        if values:
            found[key] = {"min": min(values), "median": statistics.median(values)}
    temps = [g["temp_c"] for g in readings if "temp_c" in g]
    return {**found, "temp_c_max": max(temps)} if temps else found


def _link(samples: list[list[dict]]) -> dict:
    """The narrowest link of the sources, each at the widest it ran while sampled (under load)."""
    linked = [[g for g in gs if {"pcie_gen", "pcie_width"} <= g.keys()] for gs in samples]
    links = [(max(g["pcie_gen"] for g in gs), max(g["pcie_width"] for g in gs)) for gs in linked if gs]
    if not links:
        return {}
    gens, widths = zip(*links)
    return {"pcie_under_load": {"gen": min(gens), "width": min(widths)}}


def _mean_power(samples: list[list[dict]]) -> dict:
    powers = [[g["power_w"] for g in gs if "power_w" in g] for gs in samples]
    return {"power_w": sum(statistics.fmean(p) for p in powers)} if powers and all(powers) else {}


def _safe(read: Callable):
    """A source's answer, or None where it raised: telemetry never fails a benchmark."""
    with contextlib.suppress(Exception):
        return read()
    return None


def _power(found: dict, window: float) -> dict:
    """power_w from the energy where it was kept (the counters' mean is exact; readings are samples)."""
    return {"power_w": found["energy_j"] / window} if "energy_j" in found and window > 0 else {}


def _limited(deltas: list[dict], window: float) -> dict:
    shares: dict[str, float] = {}
    for delta in deltas:
        for name, counters in CLOCKS_LIMITED.items():
            held = [delta[f"held:{c}"] for c in counters if f"held:{c}" in delta]
            if held and window > 0:
                shares[name] = max(shares.get(name, 0.0), min(1.0, max(0.0, max(held) / window)))
    return {"clocks_limited": shares} if shares else {}


def _counted(deltas: list[dict]) -> dict:
    """pcie_replays and ecc_errors: the sum over the sources, where every source counted them."""
    if not deltas:
        return {}
    found: dict = {}
    if all("pcie_replays" in d for d in deltas):
        found["pcie_replays"] = sum(d["pcie_replays"] for d in deltas)
    ecc = {kind: sum(d[f"ecc:{kind}"] for d in deltas) for kind in ("corrected", "uncorrected")
           if all(f"ecc:{kind}" in d for d in deltas)}
    if ecc:
        found["ecc_errors"] = ecc
    return found


@contextlib.contextmanager
def over(devices: list[str], on: bool = True) -> Iterator[dict]:
    """Telemetry of `devices` over the block: the dict it yields gets the keys when the block ends without an
    error; nothing is read where `on` is False."""
    found: dict = {}
    if not on:
        yield found
        return
    sampler = Sampler(*(_safe(lambda: sources_for(devices)) or ([], []))).start()
    try:
        yield found
    finally:
        summary = sampler.stop()
    found.update(summary)
