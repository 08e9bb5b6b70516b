"""suite.health.causes: each finding names its cause from recorded evidence; GPUs flagged in several runs.

Every fleet here is SYNTHETIC: a real CPU run (tests/data/real/) copied onto eight fake GPUs by tests/fleet.py,
with telemetry (suite.telemetry's keys) and an inventory written by hand. Nothing here was measured on a GPU.
"""

from __future__ import annotations

import json

from suite.cli import main
from suite.health.causes import CAUSE, CONTRIBUTES, causes, with_causes
from tests import fleet

COMPUTE = ("matmul", "conv", "ceiling", "model")  # the families a power cap or heat slows
HEALTHY = {"clocks_limited": {"power": 0.3, "thermal": 0.0, "hw_slowdown": 0.0, "sync_boost": 0.0},
           "sm_clock_mhz": {"min": 1900, "median": 1980}, "temp_c_max": 70}


def _scale(bench: dict, factor: float) -> None:
    extra = bench["extra_info"]
    for key in fleet.RATE_KEYS:
        if isinstance(extra.get(key), (int, float)):
            extra[key] *= factor
    for key in fleet.TIME_KEYS:
        if isinstance(bench["stats"].get(key), (int, float)):
            bench["stats"][key] /= factor


def eight_gpus(host: str = "box", uuid: str = "5a1c0000", when: str = "2026-11-29T18:00:00+00:00") -> dict:
    """SYNTHETIC: the real CPU run on 8 fake GPUs (±3% noise), its copies made host->GPU copies; cuda:1's link
    at x8 under load, cuda:3 capped at 600 W, cuda:5's host buffer on the far NUMA node, cuda:6 hot."""
    data = fleet.machine(host, n_gpus=8, uuid=uuid, when=when)
    for bench in data["benchmarks"]:
        extra = bench["extra_info"]
        gpu = int((extra.get("device") or extra.get("dst")).split(":")[1])
        extra.update(json.loads(json.dumps(HEALTHY)))
        if extra["case"] == "copy":  # cuda:i -> cuda:i becomes cpu -> cuda:i: the host link
            extra["src"] = "cpu"
            bench["name"] = bench["name"].replace(f"cuda:{gpu}->", "cpu->")
            bench["fullname"] = bench["fullname"].replace(f"cuda:{gpu}->", "cpu->")
            extra["pcie_under_load"] = {"gen": 5, "width": 8 if gpu == 1 else 16}
            extra["host_numa_node"] = 1 if gpu == 5 else 0
            if gpu in (1, 5):
                _scale(bench, 0.5)
        elif extra["case"] in COMPUTE and gpu == 3:
            extra["clocks_limited"]["power"] = 0.97
            _scale(bench, 0.7)
        elif extra["case"] in COMPUTE and gpu == 6:
            extra["clocks_limited"]["thermal"], extra["temp_c_max"] = 0.4, 89
            _scale(bench, 0.7)
    for d in data["machine_info"]["devices"][1:]:
        d.update(power_limit_w=600.0 if d["id"] == "cuda:3" else 700.0, pcie_gen_max=5, pcie_width_max=16,
                 numa_node=0, pci_bus_id=f"0000:{int(d['id'][5:]) + 0x18:02x}:00.0")
    return data


def health(capsys, *paths) -> tuple[int, dict]:
    code = main(["health", *map(str, paths), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def by_device(result: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for f in result["nodes"][0]["findings"]:
        found.setdefault(f["device"], []).append(f)
    return found


def test_a_synthetic_fleet_names_each_slow_gpus_cause_and_spares_the_healthy(tmp_path, capsys):
    code, result = health(capsys, fleet.write(tmp_path, "box", eight_gpus()))
    assert code == 1
    found = by_device(result)
    assert set(found) == {"cuda:1", "cuda:3", "cuda:5", "cuda:6"}  # ±3% noise on the others: no finding
    says = {"cuda:1": "its link ran at Gen5 x8 under load (max x16)",
            "cuda:3": "power limit 600 W (peers 700 W), clocks power-limited 97% of the time",
            "cuda:5": "host buffer on NUMA node 1, GPU on node 0",
            "cuda:6": "thermal slowdown 40% of the time, 89 °C"}
    for device, text in says.items():
        for f in found[device]:
            assert f["causes"] == [{"grade": CAUSE, "text": text}], f
            assert f["text"].endswith(f": {text}") and "peers" in f["text"]
            assert f["uuid"].startswith("GPU-5a1c0000") and f["benchmark"] and f["run"]
    assert result["repeat_offenders"] == []  # one run: nobody repeats


def test_a_text_finding_reads_figure_peers_then_cause(tmp_path, capsys):
    main(["health", str(fleet.write(tmp_path, "box", eight_gpus()))])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "cuda:1 (PCI" in x)
    assert "peers" in line and line.endswith("its link ran at Gen5 x8 under load (max x16)"), line


def test_no_evidence_no_cause(tmp_path, capsys):
    # The same slow GPUs with no telemetry and no inventory: flagged as before, with no cause guessed.
    data = eight_gpus()
    for bench in data["benchmarks"]:
        for key in (*HEALTHY, "pcie_under_load", "host_numa_node"):
            bench["extra_info"].pop(key, None)
    for d in data["machine_info"]["devices"]:
        for key in ("power_limit_w", "numa_node"):
            d.pop(key, None)
    code, result = health(capsys, fleet.write(tmp_path, "box", data))
    found = by_device(result)
    assert code == 1 and set(found) == {"cuda:1", "cuda:3", "cuda:5", "cuda:6"}
    assert all(f["causes"] == [] and ":" not in f["text"].split("peers")[1] for fs in found.values() for f in fs)


def row(**extra) -> dict:
    return {"route_": "compute", **extra}


def test_causes_are_graded_and_each_comes_from_its_evidence():
    peers = [row(clocks_limited={"power": 0.3, "thermal": 0.0}, sm_clock_mhz={"median": 1980})] * 3
    device = {"power_limit_w": 700.0}
    same = [{"power_limit_w": 700.0}] * 3
    # Held by the power limit far longer than its peers under the same limit: may contribute, not the cause.
    found = causes(row(clocks_limited={"power": 0.9}), peers, device, same)
    assert found == [{"grade": CONTRIBUTES, "text": "clocks power-limited 90% of the time (peers 30%)"}]
    # Thermal slowdown no longer than its peers': named, but not as the cause.
    hot = [row(clocks_limited={"thermal": 0.35})] * 3
    assert causes(row(clocks_limited={"thermal": 0.4}), hot, device, same)[0]["grade"] == CONTRIBUTES
    # Clocks lower than its peers' with no limit recorded: the clock itself is the cause shown.
    found = causes(row(sm_clock_mhz={"median": 1410}), peers, device, same)
    assert found == [{"grade": CAUSE, "text": "SM clock median 1410 MHz (peers 1980 MHz)"}]
    # Another process and ECC errors: recorded, may contribute; stored as the table's JSON text too.
    found = causes(row(other_processes=json.dumps({"count": 1, "memory_bytes": 30 * 2**30}),
                       ecc_errors={"corrected": 12, "uncorrected": 0}), peers, device, same)
    assert [c["text"] for c in found] == ["another process held 30 GiB", "ECC errors rose by 12 during the run"]
    assert with_causes("cuda:2 x", found) == ("cuda:2 x (may contribute: another process held 30 GiB; ECC errors "
                                              "rose by 12 during the run)")
    # A link below its max is named only for a host copy; PCIe replays beside it.
    link = {"pcie_gen_max": 5, "pcie_width_max": 16}
    slow_link = {"pcie_under_load": {"gen": 4, "width": 16}, "pcie_replays": 40}
    assert causes(row(**slow_link), [], link, []) == []
    found = causes({"route_": "h2d", **slow_link}, [], link, [])
    assert [c["text"] for c in found] == ["its link ran at Gen4 x16 under load (max Gen5)",
                                          "PCIe replays rose by 40 during the run"]


def test_a_gpu_flagged_in_two_runs_on_two_nodes_is_a_repeat_offender(tmp_path, capsys):
    # SYNTHETIC: cuda:3's board (its UUID) capped in node-a's run, then moved to node-b as cuda:3 there again.
    a = eight_gpus("node-a", uuid="aaaa0000", when="2026-11-28T00:00:00+00:00")
    b = eight_gpus("node-b", uuid="bbbb0000", when="2026-11-29T00:00:00+00:00")
    moved = "GPU-aaaa0000-0000-4000-8000-000000000003"
    b["machine_info"]["devices"][4]["uuid"] = moved
    a["machine_info"]["devices"][4]["uuid"] = "GPU-aaaa0000-0000-4000-8000-000000000003"
    fleet.write(tmp_path, "a", a)
    fleet.write(tmp_path, "b", b)
    # node-a since got a new board in that slot: its latest run no longer has the moved one.
    a2 = eight_gpus("node-a", uuid="aaaa0000", when="2026-11-30T00:00:00+00:00")
    a2["machine_info"]["devices"][4]["uuid"] = "GPU-cccc0000-0000-4000-8000-000000000003"
    fleet.write(tmp_path, "a2", a2)
    _, result = health(capsys, tmp_path)
    (entry,) = [e for e in result["repeat_offenders"] if e["uuid"] == moved]
    assert [r["node"].split(" · ")[0] for r in entry["runs"]] == ["node-a", "node-b"]
    assert entry["now_on"].startswith("node-b") and entry["runs"][0]["kinds"] == ["straggler"]
    main(["health", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"repeat offender {moved}: flagged in 2 runs: node-a" in out
    # Each of the other three slow GPUs kept its slot and its UUID on its node: flagged in every run too.
    assert len(result["repeat_offenders"]) > 1
