"""Telemetry over a benchmark's timed rounds: energy, power, clocks, what held them, the PCIe link under load.

One seam: a `Source` per device reading (NVML for an NVIDIA GPU; Linux powercap/RAPL for a case on the CPU
alone; AMD's, Intel's and Apple's GPUs have none: amdsmi is not read), and a `Sampler` that reads their
counters when the benchmark's timed rounds start and end, and their gauges every SAMPLE_INTERVAL_S on a thread
in between. Its window is pytest-benchmark's call: its calibration and timed rounds, the same work (not the
warm-up or the check). Torch-free to import: the analysis side reads KEYS.

The keys it adds to a benchmark's extra_info, each optional: a figure the platform does not give is absent,
never invented (docs/running.md#telemetry-power-energy-clocks-and-the-link-while-it-ran).
  energy_j         joules over the window from the energy counters (NVML's total energy, RAPL's packages),
                   summed over the case's devices; left out, with the reason in telemetry_note, when the
                   window is shorter than ENERGY_MIN_UPDATES of a counter's update interval
  power_w          mean watts: energy_j / window; without energy_j, the mean of NVML's power readings
  perf_per_w       the family's rate (its read.py RATE) per watt: TFLOP/s/W, GB/s/W, samples/s/W (suite.run)
  sm_clock_mhz, mem_clock_mhz   {"min": MHz, "median": MHz} over the readings
  temp_c_max       the hottest reading, °C
  clocks_limited   {"power", "thermal", "hw_slowdown", "sync_boost"}: the share of the window (0 to 1) each
                   limit held the clocks, from NVML's violation counters (thermal: the driver's slowdown;
                   hw_slowdown: the larger of the hardware thermal slowdown and power brake); the largest over
                   the case's GPUs; a limit NVML does not count is left out
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
CLOCKS_LIMITED = {"power": ("power",), "thermal": ("thermal",),
                  "hw_slowdown": ("hw_thermal", "hw_power_brake"), "sync_boost": ("sync_boost",)}
# Sync boost's violation counter (NVML_PERF_POLICY_SYNC_BOOST), and the same as a field value (nanoseconds).
SYNC_BOOST_POLICY, SYNC_BOOST_FIELD = 2, 76


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
        others = [p for p in procs if p.pid != os.getpid()]
        if procs and len(others) == len(procs):
            # This process has a context on the GPU, yet NVML lists none under its PID: another PID namespace
            # (a container). One of them is this process; which one, and so the others' memory, is unknown.
            return {"count": len(procs) - 1,
                    "note": "other_processes: NVML lists this process under another PID (a container?): "
                            "memory left out"}
        memory = [getattr(p, "usedGpuMemory", None) for p in others]
        if all(isinstance(m, int) for m in memory):
            return {"count": len(others), "memory_bytes": sum(memory)}
        return {"count": len(others)}


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
        raw = self._raw()
        # A counter lower than at the last read wrapped past max_energy_range_uj (once: it is read every
        # SAMPLE_INTERVAL_S, and a package's counter wraps after minutes).
        self.total_uj += sum(now - was + (span if now < was else 0)
                             for now, was, span in zip(raw, self.last, self.ranges))
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

    if not device.startswith("cuda"):
        return None
    uuid = current_platform().properties(torch.device(device)).get("uuid")
    if not uuid or uuid.startswith("MIG-") or not _nvml_up():
        return None
    return nvml.handle(uuid)


def sources_for(devices: list[str]) -> tuple[list[Source], list[str]]:
    """(sources, notes) of a case's devices: NVML for every GPU (none unless NVML knows all of them: a part
    would undercount), RAPL for a case on the CPU alone."""
    gpus = [d for d in devices if d != "cpu"]
    if not gpus:
        zones, note = rapl_zones()
        return ([RaplSource(zones)] if zones else []), ([note] if note else [])
    handles = [_nvml_handle(d) for d in gpus]
    if any(h is None for h in handles):
        return [], []
    return [NvmlSource(h, host_copy="cpu" in devices) for h in handles], []


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
        found: dict = {}
        readings = [g for samples in self.samples for g in samples]
        for key in ("sm_clock_mhz", "mem_clock_mhz"):
            values = [g[key] for g in readings if key in g]
            if values:
                found[key] = {"min": min(values), "median": statistics.median(values)}
        temps = [g["temp_c"] for g in readings if "temp_c" in g]
        if temps:
            found["temp_c_max"] = max(temps)
        linked = [[g for g in samples if "pcie_gen" in g and "pcie_width" in g] for samples in self.samples]
        links = [(max(g["pcie_gen"] for g in gs), max(g["pcie_width"] for g in gs)) for gs in linked if gs]
        if links:
            found["pcie_under_load"] = {"gen": min(g for g, _ in links), "width": min(w for _, w in links)}
        powers = [[g["power_w"] for g in samples if "power_w" in g] for samples in self.samples]
        if powers and all(powers):
            found["power_w"] = sum(statistics.fmean(p) for p in powers)
        return found

    def _processes(self, notes: list[str]) -> dict:
        known = [dict(o) for o in self.others if o is not None]
        if not known:
            return {}
        notes += [o.pop("note") for o in known if "note" in o]
        found = {"count": sum(o["count"] for o in known)}
        if len(known) == len(self.others) and all("memory_bytes" in o for o in known):
            found["memory_bytes"] = sum(o["memory_bytes"] for o in known)
        return {"other_processes": found}


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
    found: dict = {}
    if deltas and all("pcie_replays" in d for d in deltas):
        found["pcie_replays"] = sum(d["pcie_replays"] for d in deltas)
    ecc = {kind: sum(d[f"ecc:{kind}"] for d in deltas) for kind in ("corrected", "uncorrected")
           if deltas and all(f"ecc:{kind}" in d for d in deltas)}
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
