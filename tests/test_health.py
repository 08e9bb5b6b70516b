"""suite.health: expected figures, stragglers and the fleet verdict, on SYNTHETIC fleets from a real run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from suite.cli import main
from suite.errors import UserError
from suite.health.checks import judge
from suite.health.expect import load_expectations
from suite.results import load_results
from tests import fleet

DATA = Path(__file__).parent / "data"
IMPORTED = DATA / "imported"


def health_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["health", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def node(result: dict, host: str) -> dict:
    return next(n for n in result["nodes"] if n["node"].startswith(host))


def test_one_degraded_device_is_named_with_its_numbers(tmp_path, capsys):
    fleet.write(tmp_path, "box", fleet.machine("box", slow=0.8, slow_device=2))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 1
    findings = node(result, "box")["findings"]
    stragglers = [f for f in findings if f["kind"] == "straggler"]
    assert stragglers and {f["device"] for f in stragglers} == {"cuda:2"}
    assert all(f["pct"] < 90 for f in stragglers)
    assert "peers" in stragglers[0]["text"]


def test_one_degraded_machine_is_flagged_against_its_fleet(tmp_path, capsys):
    for i in range(6):
        fleet.write(tmp_path, f"n{i}", fleet.machine(f"node-{i}", seed=i, slow=0.8 if i == 3 else 1.0))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 1
    flagged = [n["node"] for n in result["nodes"] if n["status"] == "flagged"]
    assert flagged == [node(result, "node-3")["node"]]
    kinds = {f["kind"] for f in node(result, "node-3")["findings"]}
    assert kinds == {"fleet"}
    assert all(0.75 < f["measured"] < 0.85 for f in node(result, "node-3")["findings"])


def test_two_nodes_sharing_a_hostname_are_judged_apart(tmp_path, capsys):
    # A cloud image's `ubuntu` on two nodes: the newer run used to stand for both, and the faulty node's
    # straggler was never judged (HEALTHY, exit 0).
    fleet.write(tmp_path, "a", fleet.machine("ubuntu", uuid="3f2a9c1e", when="2026-11-29T18:00:00+00:00",
                                             slow=0.7, slow_device=3))
    fleet.write(tmp_path, "b", fleet.machine("ubuntu", uuid="77b10d42", when="2026-11-29T19:00:00+00:00"))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 1
    status = {n["node"].split(" · ")[0]: n["status"] for n in result["nodes"]}
    assert status == {"ubuntu [3f2a9c1e]": "flagged", "ubuntu [77b10d42]": "healthy"}
    loaded = load_results([tmp_path])
    assert any("hostname 'ubuntu' is reported by 2 machines with different GPUs" in w for w in loaded.warnings)
    assert set(loaded.table["host"]) == {"ubuntu [3f2a9c1e]", "ubuntu [77b10d42]"}
    # One node's two runs (same GPUs) stay one machine, judged by its latest run.
    fleet.write(tmp_path, "a2", fleet.machine("ubuntu", uuid="3f2a9c1e", when="2026-11-29T20:00:00+00:00"))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0 and len(result["nodes"]) == 2


def test_a_node_whose_gpu_was_replaced_is_still_one_node(tmp_path, capsys):
    # Its slow GPU (the one with the smallest UUID) replaced: the node is healthy again, not split in two
    # with the old run flagged for ever. A run on some of its GPUs is the same node too.
    fleet.write(tmp_path, "before", fleet.machine("node-7", uuid="30000000", slow=0.7, slow_device=0,
                                                  when="2026-11-28T00:00:00+00:00"))
    after = fleet.machine("node-7", uuid="30000000", when="2026-11-29T00:00:00+00:00")
    after["machine_info"]["devices"][1]["uuid"] = "GPU-10000000-0000-4000-8000-000000000000"  # the new cuda:0
    fleet.write(tmp_path, "after", after)
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0 and [n["status"] for n in result["nodes"]] == ["healthy"]
    # (health counts a node by host and GPU count: the subset run is judged as a node of 1 GPU, unsplit.)
    some = fleet.machine("node-7", uuid="30000000", n_gpus=1, when="2026-11-27T00:00:00+00:00")
    some["machine_info"]["devices"][1]["uuid"] = "GPU-30000000-0000-4000-8000-000000000002"  # cuda:2 alone
    fleet.write(tmp_path, "some", some)
    loaded = load_results([tmp_path])
    assert not any("hostname" in w for w in loaded.warnings) and set(loaded.table["host"]) == {"node-7"}


@pytest.mark.parametrize("slow", [0.5, 0.8])
def test_the_smallest_fleet_of_three_flags_its_slow_machine(tmp_path, capsys, slow):
    # With the machine itself in the quartiles, three machines could never flag one, even at half speed.
    for i in range(3):
        fleet.write(tmp_path, f"n{i}", fleet.machine(f"node-{i}", seed=i, slow=slow if i == 2 else 1.0))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 1
    assert [n["node"] for n in result["nodes"] if n["status"] == "flagged"] == [node(result, "node-2")["node"]]
    assert all(slow - 0.06 < f["measured"] < slow + 0.06 for f in node(result, "node-2")["findings"])
    assert "the median of the other 2" in node(result, "node-2")["findings"][0]["text"]


def test_a_fleet_of_three_with_ordinary_noise_is_healthy(tmp_path, capsys):
    for i in range(3):
        fleet.write(tmp_path, f"n{i}", fleet.machine(f"node-{i}", seed=i))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0 and result["counts"]["flagged"] == 0


def test_undegraded_fleet_with_ordinary_noise_is_healthy(tmp_path, capsys):
    for i in range(6):
        fleet.write(tmp_path, f"n{i}", fleet.machine(f"node-{i}", seed=i))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0, [f for n in result["nodes"] for f in n["findings"]]
    assert result["verdict"] == "healthy" and result["counts"]["flagged"] == 0


def test_same_files_give_the_same_verdict_whatever_their_order(tmp_path, capsys):
    paths = [
        fleet.write(tmp_path, f"n{i}", fleet.machine(f"node-{i}", seed=i, slow=0.8 if i == 1 else 1.0))
        for i in range(4)
    ]
    main(["health", *map(str, paths)])
    first = capsys.readouterr().out
    main(["health", *map(str, reversed(paths))])
    assert capsys.readouterr().out == first


def test_only_the_latest_run_of_a_machine_is_judged(tmp_path, capsys):
    fleet.write(
        tmp_path, "old", fleet.machine("box", slow=0.8, slow_device=1, when="2026-01-01T00:00:00+00:00")
    )
    fleet.write(tmp_path, "new", fleet.machine("box", when="2026-02-01T00:00:00+00:00"))
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0 and len(node(result, "box")["runs"]) == 1  # the old run's straggler would exit 1


def test_a_node_whose_latest_run_measured_nothing_is_not_called_healthy(tmp_path, capsys):
    """An all-skipped or crashed run is the node's news: neither a healthy verdict nor its older run's."""
    fleet.write(tmp_path, "other", fleet.machine("other", when="2026-02-01T00:00:00+00:00"))
    fleet.write(tmp_path, "old", fleet.machine("box", when="2026-01-01T00:00:00+00:00"))
    empty = {**fleet.machine("box", when="2026-02-01T00:00:00+00:00"), "benchmarks": []}
    path = fleet.write(tmp_path, "new", empty)
    assert main(["health", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {path}: the latest run of box")
    assert "holds no benchmark results" in err[-1]
    assert sum(line.startswith("error:") for line in err) == 1


def test_nvbandwidth_issue_6_slow_link_is_low_and_a_straggler(capsys):
    code, result = health_json(capsys, str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json"))
    assert code == 1
    findings = node(result, "h100-vm")["findings"]
    low = [f for f in findings if f["kind"] == "low"]
    assert [(f["device"], round(f["measured"], 1)) for f in low] == [("cuda:0", 14.2)]
    straggler = [f for f in findings if f["kind"] == "straggler"]
    assert [f["device"] for f in straggler] == ["cuda:0"]
    assert "14.2 GB/s, peers 56.7 GB/s–57.1 GB/s" in straggler[0]["text"]
    table = {(e["device"], e["measure"]): e for e in node(result, "h100-vm")["expectations"]}
    assert table[("cuda:1", "h2d")]["verdict"] == "ok" and table[("cuda:1", "h2d")]["source"]


def test_fail_on_chooses_what_exits_1(capsys):
    path = str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json")
    assert main(["health", path, "--fail-on", "fleet"]) == 0
    assert main(["health", path, "--fail-on", "straggler"]) == 1
    capsys.readouterr()


def test_text_and_markdown_name_the_device(capsys):
    path = str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json")
    main(["health", path])
    text = capsys.readouterr().out
    # the PCI address is the one nvbandwidth's device list gives (00000000:1b:00)
    assert "FLAGGED  h100-vm" in text and "cuda:0 (PCI 0000:1b:00.0) straggler:" in text
    main(["health", path, "--format", "markdown"])
    assert "| flagged | h100-vm" in capsys.readouterr().out


def test_user_expectations_replace_shipped_ones(tmp_path, capsys):
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "expect:\n  - {link: pcie5, measure: h2d, value: 10, source: our own acceptance figure}\n",
        encoding="utf-8",
    )
    path = str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json")
    code, result = health_json(capsys, path, "--expect", str(extra), "--fail-on", "low")
    assert code == 0
    assert {e["source"] for e in node(result, "h100-vm")["expectations"]} == {"our own acceptance figure"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("expect:\n  - {link: pcie5, measure: h2d, value: 10}\n", "has no `source`"),
        ("expect:\n  - {model: X, measure: warp, value: 1, source: s}\n", "is not one of"),
        ("expect: [\n", "not valid YAML"),
        ("colour: red\n", "unknown key"),
        ("expect: 5\n", "not a list of entries"),
        ("models:\n  - {name: X, match: X, host_link: 7}\n", "host_link 7"),
        (
            "expect:\n  - {link: pcie5, measure: h2d, value: 10, source: s, colour: red}\n",
            "unknown key.s. colour",
        ),
        (
            (
                "models: [{name: X, match: X}]\nexpect:\n"
                "  - {model: X, measure: all_reduce_busbw, gpus: '8', value: 1, source: s}\n"
            ),
            "is not a GPU count",
        ),
    ],
)
def test_bad_expectation_files_are_one_line_errors(tmp_path, content, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_expectations([str(bad)])


@pytest.mark.parametrize(
    "argv",
    [
        ["health", str(DATA / "empty.json")],
        ["health", str(DATA / "h200x2.json"), "--fail-on", "slow"],
        ["health", str(DATA / "h200x2.json"), "--expect", str(DATA / "nope.yaml")],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err


def test_every_shipped_figure_has_a_source_and_a_known_model():
    expectations = load_expectations()
    assert expectations.figures and all(f.source for f in expectations.figures.values())
    assert expectations.model_of("NVIDIA GH200 480GB")["name"] == "NVIDIA GH200"  # longest match wins
    assert expectations.model_of("NVIDIA H100 80GB HBM3")["name"] == "NVIDIA H100"


def test_pct_of_expected_is_set_on_the_judged_rows():
    loaded = load_results([IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json"])
    health = judge(loaded, load_expectations())
    pct = health.pct_of_expected.round(0).tolist()
    assert pct == [27.0, 110.0, 109.0, 110.0]


# --- expected figures on results of our own layout (CONSTRUCTED numbers, named GPU models) ---

H100 = "NVIDIA H100 80GB HBM3"


def bench(name: str, extra: dict, median: float) -> dict:
    stats = {
        "median": median,
        "iqr": median * 0.01,
        "q1": median,
        "q3": median,
        "mean": median,
        "min": median,
        "max": median,
        "rounds": 10,
        "iterations": 1,
    }
    return {"name": name, "fullname": f"tests::{name}", "extra_info": extra, "stats": stats}


def ours(
    host: str,
    gpus: int,
    benchmarks: list[dict],
    config: dict | None = None,
    gpu: str = H100,
    **device: object,
) -> dict:
    devices = [{"id": f"cuda:{i}", "kind": "cuda", "name": gpu, **device} for i in range(gpus)]
    block = {"schema_version": 1, **({"config": config} if config else {})}
    return {
        "machine_info": {"node": host, "devices": devices},
        "benchmarks": benchmarks,
        "suite": block,
        "datetime": "2026-11-29T18:00:00+00:00",
    }


def matmul(device: str, tflops: float, precision: str = "bfloat16") -> dict:
    flops = 2 * 8192**3
    extra = {
        "case": "matmul",
        "device": device,
        "dtype": precision,
        "m": 8192,
        "n": 8192,
        "k": 8192,
        "flops": flops,
        "tflops": tflops,
    }
    return bench(f"test_matmul[{device}-{precision}]", extra, flops / tflops / 1e12)


def copy(src: str, dst: str, gbps: float, memory: str = "device") -> dict:
    size = 256 * 2**20
    extra = {
        "case": "copy",
        "src": src,
        "dst": dst,
        "bytes": size,
        "gbps": gbps,
        "memory": memory,
        "direction": "uni",
    }
    return bench(f"test_copy[{src}->{dst}]", extra, size / gbps / 1e9)


def all_reduce(busbw: float, world: int, nnodes: int) -> dict:
    size = 2**30
    extra = {
        "case": "collectives",
        "op": "all_reduce",
        "bytes": size,
        "busbw": busbw,
        "algbw": busbw / 2,
        "world_size": world,
        "nnodes": nnodes,
        "ranks_per_node": world // nnodes,
    }
    return bench(f"test_collectives[all_reduce-{world}x{nnodes}]", extra, size / busbw / 1e9)


def test_expected_figures_judge_our_own_matmul_and_copies(tmp_path, capsys):
    benches = [
        matmul("cuda:0", 780),
        matmul("cuda:1", 600),
        copy("cuda:0", "cuda:0", 1400),
        copy("cuda:1", "cuda:1", 1380),
        copy("cuda:0", "cuda:1", 370),
        copy("cuda:1", "cuda:0", 250),
    ]
    path = fleet.write(tmp_path, "box", ours("box", 2, benches))
    code, result = health_json(capsys, str(path))
    table = {(e["device"], e["measure"]): e for e in node(result, "box")["expectations"]}
    assert table[("cuda:0", "matmul_bf16")]["verdict"] == "ok"
    assert table[("cuda:1", "matmul_bf16")]["verdict"] == "low"
    assert table[("cuda:1", "matmul_bf16")]["pct_of_expected"] == pytest.approx(600 / 795 * 100)
    assert table[("cuda:0", "same_device")]["expected"] == 1450  # HBM copy 2900 read+write, halved
    assert table[("cuda:0->cuda:1", "peer")]["verdict"] == "ok"
    assert table[("cuda:1->cuda:0", "peer")]["verdict"] == "low"
    low = {(f["device"], f["text"].split()[0]) for f in node(result, "box")["findings"] if f["kind"] == "low"}
    assert low == {("cuda:1", "matmul_bf16"), ("cuda:1->cuda:0", "peer")} and code == 1


# HBM peaks (GB/s, datasheets) of the slowest-memory part each model's `match` takes in: a same-device copy
# reads and writes every byte, so bytes counted once can never pass half the peak.
MEMORY_PEAK_GBPS = {"NVIDIA A100": 1555, "NVIDIA H100": 3350, "NVIDIA H200": 4800}


def test_same_device_figures_count_bytes_once_so_stay_under_half_the_memory_peak():
    figures = [f for f in load_expectations().figures.values() if f.measure == "same_device"]
    assert {f.model for f in figures} <= set(MEMORY_PEAK_GBPS), "add the new model's memory peak"
    for f in figures:  # bandwidthTest --dtod counts read + write: an unhalved figure of it fails here
        assert f.value <= MEMORY_PEAK_GBPS[f.model] / 2, (f.model, f.value, f.source)


def test_a_healthy_a100_40gb_same_device_copy_is_ok(tmp_path, capsys):
    # 700 GB/s counted once is 90% of what an A100-SXM4-40GB's 1555 GB/s can copy (CONSTRUCTED figure).
    benches = [copy("cuda:0", "cuda:0", 700)]
    path = fleet.write(tmp_path, "a100", ours("a100", 1, benches, gpu="NVIDIA A100-SXM4-40GB"))
    _, result = health_json(capsys, str(path))
    (entry,) = [e for e in node(result, "a100")["expectations"] if e["measure"] == "same_device"]
    assert entry["verdict"] == "ok" and entry["expected"] == 578


def test_all_reduce_figure_judges_one_node_only(tmp_path, capsys):
    one = fleet.write(tmp_path, "one", ours("one", 8, [all_reduce(250, 8, 1)]))
    _, result = health_json(capsys, str(one))
    (entry,) = [e for e in node(result, "one")["expectations"] if e["measure"] == "all_reduce_busbw"]
    assert entry["device"] == "8 GPUs" and entry["verdict"] == "low" and entry["expected"] == 370
    two = fleet.write(tmp_path, "two", ours("two", 4, [all_reduce(250, 8, 2)]))  # 2 nodes of 4 GPUs
    code, result = health_json(capsys, str(two))
    assert not [e for e in node(result, "two")["expectations"] if e["measure"] == "all_reduce_busbw"]
    assert code == 2 and node(result, "two")["status"] == "not judged", "nothing else applied to it"


def test_peer_figures_only_for_nvlink_models():
    expectations = load_expectations()
    assert expectations.figure("NVIDIA A100-SXM4-80GB", "peer").value == 274
    for pcie in ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"):
        assert expectations.figure(pcie, "peer") is None
        assert expectations.figure(pcie, "h2d").value == 25.9  # the host link still has its figure
    # NVL cards are PCIe parts at 350-600 W: no SXM matmul, peer or all-reduce figure judges them.
    for nvl in ("NVIDIA H100 NVL", "NVIDIA H200 NVL"):
        for measure in ("matmul_bf16", "peer", "same_device"):
            assert expectations.figure(nvl, measure) is None, (nvl, measure)
        assert expectations.figure(nvl, "all_reduce_busbw", gpus=8) is None
        assert expectations.figure(nvl, "h2d").value == 52
    assert expectations.figure("NVIDIA H200", "peer").value == 396


def test_host_link_without_a_figure_is_listed_as_no_figure(tmp_path, capsys):
    path = fleet.write(
        tmp_path, "gen3", ours("gen3", 1, [copy("cpu", "cuda:0", 11.5, "pinned")], pcie_gen_max=3)
    )
    code, result = health_json(capsys, str(path))
    (entry,) = node(result, "gen3")["expectations"]
    assert entry["verdict"] == "no figure" and "pcie3" in entry["source"] and code == 0


def test_missing_lists_only_what_the_config_selected(tmp_path, capsys):
    config = {"cases": {"matmul": {"enabled": True, "dtypes": ["bfloat16"], "shapes": [[8192, 8192, 8192]]}}}
    path = fleet.write(tmp_path, "box", ours("box", 1, [matmul("cuda:0", 780)], config))
    _, result = health_json(capsys, str(path))
    assert [f for f in node(result, "box")["findings"] if f["kind"] == "missing"] == []
    config["cases"]["matmul"]["dtypes"].append("float16")  # asked for, not measured: missing
    path = fleet.write(tmp_path, "box", ours("box", 1, [matmul("cuda:0", 780)], config))
    _, result = health_json(capsys, str(path))
    missing = [f["text"].split(":")[0] for f in node(result, "box")["findings"] if f["kind"] == "missing"]
    assert missing == ["matmul_fp16"]


def test_a_torchrun_job_is_not_missing_what_only_a_single_process_run_measures(tmp_path, capsys):
    # One config for both runs of the node: the torchrun job measures only the collectives, the single
    # process never does, and a 2-node job has no 1-node all_reduce figure. None of that is missing.
    config = {"cases": {
        "matmul": {"enabled": True, "dtypes": ["bfloat16"], "shapes": [[8192, 8192, 8192]]},
        "collectives": {"enabled": True, "ops": ["all_reduce"], "sizes": ["1GiB"]},
    }}
    fleet.write(tmp_path, "box", ours("box", 8, [matmul(f"cuda:{i}", 780) for i in range(8)], config))
    coll = ours("box", 8, [all_reduce(470, 16, 2)], config)
    coll["suite"]["distributed"] = {"world_size": 16, "nnodes": 2, "ranks_per_node": 8}
    fleet.write(tmp_path, "coll", coll)
    code, result = health_json(capsys, str(tmp_path), "--fail-on", "missing")
    findings = [f for n in result["nodes"] for f in n["findings"] if f["kind"] == "missing"]
    assert findings == [] and code == 0
    # What the single-process run was asked for and lacks is still missing, once per device, not again for
    # the torchrun job.
    config["cases"]["matmul"]["dtypes"].append("float16")
    fleet.write(tmp_path, "box", ours("box", 8, [matmul(f"cuda:{i}", 780) for i in range(8)], config))
    code, result = health_json(capsys, str(tmp_path), "--fail-on", "missing")
    texts = [f["text"] for n in result["nodes"] for f in n["findings"] if f["kind"] == "missing"]
    assert len(texts) == 8 and all(t.startswith("matmul_fp16") for t in texts) and code == 1


def test_a_slow_nodes_fleet_finding_names_what_nccl_chose_otherwise(tmp_path, capsys):
    """NVLS or not moves all-reduce busbw by a third: a node without it is slow against its fleet, and the
    finding says what NCCL's log recorded there and on the others (suite.distributed's nccl_choices)."""
    for i, (busbw, nvls) in enumerate([(470, True), (480, True), (475, True), (472, True), (320, False)]):
        coll = ours(f"node-{i}", 8, [all_reduce(busbw, 8, 1)])
        coll["suite"]["distributed"] = {"world_size": 8, "nnodes": 1, "ranks_per_node": 8, "nccl_choices": {
            "version": "2.21.5", "nvls": nvls, "nvls_channels": 16 if nvls else 0}}
        fleet.write(tmp_path, f"n{i}", coll)
    code, result = health_json(capsys, str(tmp_path))
    texts = [f["text"] for f in node(result, "node-4")["findings"] if f["kind"] == "fleet"]
    assert code == 1 and len(texts) == 1, result
    assert texts[0].endswith(" (NCCL chose: nvls no here, yes on node-0, node-1, node-2 and 1 more; nvls_channels "
                             "0 here, 16 on node-0, node-1, node-2 and 1 more)"), texts
    # Where NCCL chose alike, or a run recorded nothing (an older file), the finding adds nothing.
    for i in range(4):
        data = json.loads((tmp_path / f"n{i}.json").read_text(encoding="utf-8"))
        del data["suite"]["distributed"]["nccl_choices"]
        fleet.write(tmp_path, f"n{i}", data)
    _, result = health_json(capsys, str(tmp_path))
    assert [f["text"] for f in node(result, "node-4")["findings"] if f["kind"] == "fleet"][0].endswith("×)")


def test_a_slow_nodes_fleet_finding_names_the_algorithm_nccl_took_per_case_otherwise(tmp_path, capsys):
    """extra_info.nccl_algo/nccl_proto (NCCL's TUNING line for a case's untimed check call): a node whose
    all-reduce took RING where its peers took NVLS says so."""
    for i, (busbw, algo) in enumerate([(470, "NVLS"), (480, "NVLS"), (475, "NVLS"), (472, "NVLS"), (320, "RING")]):
        bench = all_reduce(busbw, 8, 1)
        bench["extra_info"].update(nccl_algo=algo, nccl_proto="SIMPLE")
        fleet.write(tmp_path, f"n{i}", ours(f"node-{i}", 8, [bench]))
    code, result = health_json(capsys, str(tmp_path))
    texts = [f["text"] for f in node(result, "node-4")["findings"] if f["kind"] == "fleet"]
    assert code == 1 and len(texts) == 1, result
    assert texts[0].endswith(" (NCCL chose: algo/proto RING/SIMPLE here, NVLS/SIMPLE on node-0, node-1, node-2 "
                             "and 1 more)"), texts


def test_missing_findings_do_not_depend_on_other_files(capsys):
    path = str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json")

    def missing(*paths: str) -> list[tuple]:
        _, result = health_json(capsys, *paths)
        return sorted(
            (f["device"], f["text"]) for f in node(result, "h100-vm")["findings"] if f["kind"] == "missing"
        )

    alone = missing(path)
    assert alone and alone == missing(path, str(DATA / "h200x2.json"))


def test_files_without_a_host_stay_separate_nodes(tmp_path, capsys):
    dcgm = json.loads((IMPORTED / "nvbandwidth" / "dcgm_v0.5_one_gpu.json").read_text(encoding="utf-8"))
    (tmp_path / "node-a.json").write_text(json.dumps(dcgm), encoding="utf-8")
    dcgm["nvbandwidth"]["testcases"][0]["bandwidth_matrix"] = [["3.1"]]
    (tmp_path / "node-b.json").write_text(json.dumps(dcgm), encoding="utf-8")
    _, result = health_json(capsys, str(tmp_path))
    assert sorted(n["node"].split(" ·")[0] for n in result["nodes"]) == ["node-a", "node-b"]


def test_a_named_file_that_cannot_be_read_exits_2(tmp_path, capsys):
    good = str(IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json")
    assert main(["health", good, str(tmp_path / "nope.json")]) == 2
    assert main(["health", good, str(IMPORTED / "nvbandwidth" / "truncated.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "truncated.json" in err[-1]


def test_untimed_runs_are_chosen_by_file_name_not_modification_time(tmp_path, capsys):
    """Neither tool records when it ran: copying a folder (new mtimes) must not change the verdict."""
    source = json.loads(
        (IMPORTED / "nvbandwidth" / "constructed_issue6_h100x4.json").read_text(encoding="utf-8")
    )
    fixed = json.loads(json.dumps(source))
    fixed["nvbandwidth"]["testcases"][0]["bandwidth_matrix"] = [["57.0", "57.06", "56.68", "57.07"]]
    first, second = tmp_path / "a" / "1-before.json", tmp_path / "a" / "2-after.json"
    first.parent.mkdir()
    first.write_text(json.dumps(source), encoding="utf-8")
    second.write_text(json.dumps(fixed), encoding="utf-8")
    os.utime(second, (1_000_000, 1_000_000))  # the later name is the older file
    code, _ = health_json(capsys, str(first.parent))
    err = capsys.readouterr().err
    assert code == 0
    copied = tmp_path / "b"
    copied.mkdir()
    for p in (second, first):  # copied in the other order: mtimes flip
        (copied / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["health", str(copied)]) == 0
    assert "judged the last by file name, 2-after.json" in capsys.readouterr().err + err


def _pair_copies(gpus: int, nvlinked, slow=None, links=True) -> list[dict]:
    """Every ordered GPU pair's copy: 100 GB/s over NVLink (`nvlinked(i, j)`), 20 GB/s across the sockets
    (SYS); the pair `slow` at a fifth of that; each with its link recorded, as NVML tells it, if `links`."""
    out = []
    for i in range(gpus):
        for j in range(gpus):
            if i != j:
                nv = nvlinked(i, j)
                gbps = (100.0 if nv else 20.0) * (0.2 if (i, j) == slow else 1)
                out.append(copy(f"cuda:{i}", f"cuda:{j}", gbps))
                if links:
                    out[-1]["extra_info"]["link"] = "NV4" if nv else "SYS"
    return out


def _stragglers(capsys, tmp_path, gpus: int, benches: list[dict]) -> tuple[int, set[str]]:
    path = fleet.write(tmp_path, "mixed", ours("mixed", gpus, benches, gpu="NVIDIA L40S"))
    code, result = health_json(capsys, str(path))
    return code, {f["device"] for f in node(result, "mixed")["findings"] if f["kind"] == "straggler"}


def test_gpu_pairs_are_peers_only_over_the_same_link(tmp_path, capsys):
    # Five PCIe GPUs: 0-3 joined by NVLink bridges, GPU 4 across the sockets from all of them. Healthy: its
    # pairs are slower by design. Without the links (a run without NVML) every pair is every other's peer,
    # and GPU 4's pairs, the minority, read as stragglers.
    def nvlinked(i, j):
        return i < 4 and j < 4

    assert _stragglers(capsys, tmp_path, 5, _pair_copies(5, nvlinked)) == (0, set())
    code, found = _stragglers(capsys, tmp_path, 5, _pair_copies(5, nvlinked, links=False))
    assert code == 1
    assert found == {f"cuda:{i}->cuda:4" for i in range(4)} | {f"cuda:4->cuda:{i}" for i in range(4)}


def test_a_slow_nvlink_pair_stands_out_among_its_links_pairs(tmp_path, capsys):
    # Four PCIe GPUs: 0<->1 and 2<->3 over NVLink bridges, the other pairs (the majority) across the sockets.
    # 2->3 at a fifth of its link's speed (P2P disabled: staged through the host) is a straggler among the
    # NVLink pairs; without the links the slower majority hides it.
    def nvlinked(i, j):
        return {i, j} in ({0, 1}, {2, 3})

    assert _stragglers(capsys, tmp_path, 4, _pair_copies(4, nvlinked)) == (0, set())
    code, found = _stragglers(capsys, tmp_path, 4, _pair_copies(4, nvlinked, slow=(2, 3)))
    assert (code, found) == (1, {"cuda:2->cuda:3"})
    assert _stragglers(capsys, tmp_path, 4, _pair_copies(4, nvlinked, slow=(2, 3), links=False)) == (0, set())


@pytest.mark.parametrize("counts, switched, flagged", [
    ([18] * 8, True, {}),  # an HGX node: every GPU's 18 links up
    ([18, 18, 18, 17, 18, 18, 18, 18], True, {"cuda:3": "nvlinks_active 17, peers 18: 1 NVLink(s) down"}),
    ([18, 0, 18, 18], True, {"cuda:1": "nvlinks_active 0, peers 18: 18 NVLink(s) down"}),
    ([4, 4, 0, 0], False, {}),  # PCIe cards, one bridged pair: the builder's choice, not a fault
])
def test_a_gpu_with_nvlinks_down_is_a_straggler(counts, switched, flagged, tmp_path, capsys):
    data = ours("node", len(counts), [matmul(f"cuda:{i}", 780) for i in range(len(counts))])
    for device, n in zip(data["machine_info"]["devices"], counts):
        device.update(nvlinks_active=n, nvlinks_to_switch=n if switched else 0)
    code, result = health_json(capsys, str(fleet.write(tmp_path, "node", data)))
    found = {f["device"]: f["text"] for f in node(result, "node")["findings"] if f["kind"] == "straggler"}
    assert {d: t.split(" (NVML)")[0] for d, t in found.items()} == flagged
    assert code == (1 if flagged else 0)


@pytest.mark.parametrize("links, flagged", [
    ([(16, 5)] * 8, {}),
    ([(16, 5)] * 5 + [(4, 5)] + [(16, 5)] * 2, {"cuda:5": "pcie_width_max x4, peers x16"}),
    ([(16, 5), (16, 4), (16, 5), (16, 5)], {"cuda:1": "pcie_gen_max gen 4, peers gen 5"}),
    ([(16, 5), (4, 5)], {"cuda:1": "pcie_width_max x4, peers x16"}),
    ([(16, 5), (0xFFFFFFFF, 0xFFFFFFFF), (16, 5)], {}),  # NVML's "not available": no figure, not a wide link
])
def test_a_gpu_on_a_narrower_pcie_link_than_its_peers_is_a_straggler(links, flagged, tmp_path, capsys):
    # A GPU on a x4 riser: NVML recorded it, but health only guessed at NUMA beside its slow host copies.
    data = ours("node", len(links), [matmul(f"cuda:{i}", 780) for i in range(len(links))])
    for device, (width, gen) in zip(data["machine_info"]["devices"], links):
        device.update(pcie_width_max=width, pcie_gen_max=gen, pcie_width_current=width, pcie_gen_current=1)
    code, result = health_json(capsys, str(fleet.write(tmp_path, "node", data)))
    found = {f["device"]: f["text"] for f in node(result, "node")["findings"] if f["kind"] == "straggler"}
    assert {d: t.split(" (NVML)")[0] for d, t in found.items()} == flagged
    assert code == (1 if flagged else 0)


def test_an_nvlink_pair_with_links_down_is_judged_among_all_nvlink_pairs(tmp_path, capsys):
    # An HGX node whose GPU 3 has 6 of 18 links up: NVML names its pairs NV6, the others NV18. Its 14 pairs
    # at a third of the speed are stragglers among the NVLink pairs, not a group of their own.
    benches = []
    for i in range(8):
        for j in range(8):
            if i != j:
                down = 3 in (i, j)
                benches.append(copy(f"cuda:{i}", f"cuda:{j}", 120.0 if down else 360.0))
                benches[-1]["extra_info"]["link"] = "NV6" if down else "NV18"
    code, found = _stragglers(capsys, tmp_path, 8, benches)
    assert code == 1
    others = [k for k in range(8) if k != 3]
    assert found == {f"cuda:{k}->cuda:3" for k in others} | {f"cuda:3->cuda:{k}" for k in others}


def test_a_slow_gpu_held_by_a_limit_says_so(tmp_path, capsys):
    benches = [matmul(f"cuda:{i}", 600 if i == 2 else 780) for i in range(4)]
    for i, b in enumerate(benches):
        b["extra_info"].update(clocks_held=0.62 if i == 2 else 0.3, clocks_held_power=0.3)
        if i == 2:
            b["extra_info"].update(clocks_held_thermal=0.62)
    _, result = health_json(capsys, str(fleet.write(tmp_path, "box", ours("box", 4, benches))))
    texts = {f["kind"]: f["text"] for f in node(result, "box")["findings"] if f["device"] == "cuda:2"}
    held = ("; clocks held back 62% of the time by (software) thermal slowdown, 30% of the time by the power "
            "limit (NVML)")
    assert texts["straggler"].endswith(held) and texts["low"].endswith(held)
    # Each limit under 5% of the time: not named.
    benches[2]["extra_info"].update(clocks_held=0.04, clocks_held_thermal=0.04, clocks_held_power=0.02)
    _, result = health_json(capsys, str(fleet.write(tmp_path, "box", ours("box", 4, benches))))
    assert not any("clocks held" in f["text"] for f in node(result, "box")["findings"])


NEAR = "(numactl --cpunodebind=1 --membind=1 measures the near path)"


@pytest.mark.parametrize("used, mems, says", [
    ([0], [0, 1], f"; cuda:0 is on NUMA node 1, this run's CPUs on node 0: its host memory was likely on "
                  f"another node {NEAR}"),
    ([0, 1], [0, 1], f"; this run was not bound to cuda:0's NUMA node (1): its host memory may have been on "
                     f"another {NEAR}"),
    ([1], [0], f"; cuda:0 is on NUMA node 1, and this run's memory could come only from node 0 {NEAR}"),
    ([1], [0, 1], None),  # bound to the GPU's own node: NUMA is not why it is slow
])
def test_a_slow_host_link_names_the_numa_nodes(used, mems, says, tmp_path, capsys):
    # nvbandwidth issue 6's four GPUs: cuda:0's host->device 14.2 GB/s against ~57; cuda:0 on node 1.
    rates = (14.2, 57.06, 56.68, 57.07)
    benches = [copy("cpu", f"cuda:{i}", gbps, memory="pinned") for i, gbps in enumerate(rates)]
    data = ours("vm", 4, benches)
    for d in data["machine_info"]["devices"]:
        d["numa_node"] = 1 if d["id"] == "cuda:0" else 0
    data["machine_info"]["devices"].insert(0, {"id": "cpu", "kind": "cpu", "name": "CPU", "numa_nodes": 2,
                                               "numa_nodes_used": used, "numa_mems_allowed": mems})
    _, result = health_json(capsys, str(fleet.write(tmp_path, "vm", data)))
    (text,) = [f["text"] for f in node(result, "vm")["findings"] if f["kind"] == "straggler"]
    assert text.endswith(says) if says else "NUMA" not in text, text


def test_a_host_copy_the_run_bound_to_its_gpus_node_gets_no_numa_note(tmp_path, capsys):
    # The run spans both nodes, but bound each host copy's host side to its GPU's node (host_numa_node):
    # its memory was near, so NUMA is not why cuda:0 is slow.
    rates = (14.2, 57.06, 56.68, 57.07)
    benches = [copy("cpu", f"cuda:{i}", gbps, memory="pinned") for i, gbps in enumerate(rates)]
    for i, b in enumerate(benches):
        b["extra_info"]["host_numa_node"] = 1 if i == 0 else 0
    data = ours("vm", 4, benches)
    for d in data["machine_info"]["devices"]:
        d["numa_node"] = 1 if d["id"] == "cuda:0" else 0
    data["machine_info"]["devices"].insert(0, {"id": "cpu", "kind": "cpu", "name": "CPU", "numa_nodes": 2,
                                               "numa_nodes_used": [0, 1], "numa_mems_allowed": [0, 1]})
    _, result = health_json(capsys, str(fleet.write(tmp_path, "vm", data)))
    (text,) = [f["text"] for f in node(result, "vm")["findings"] if f["kind"] == "straggler"]
    assert "14.2" in text and "NUMA" not in text, text


def test_numa_is_named_only_beside_host_links_and_on_low_results_too(tmp_path, capsys):
    # An H100 node, CPUs bound to node 0, cuda:1 on node 1. Its device->host copy is low against the expected
    # figure and a straggler; its peer and same-device copies are neither and carry no NUMA note.
    benches = [copy(f"cuda:{i}", "cpu", 10.0 if i == 1 else 50.0, memory="pinned") for i in range(4)]
    benches += [copy("cuda:1", "cuda:1", 1400), copy("cuda:1", "cuda:0", 370)]
    data = ours("box", 4, benches, pcie_gen_max=5)
    for d in data["machine_info"]["devices"]:
        d["numa_node"] = 1 if d["id"] == "cuda:1" else 0
    data["machine_info"]["devices"].insert(0, {"id": "cpu", "kind": "cpu", "numa_nodes": 2,
                                               "numa_nodes_used": [0]})
    _, result = health_json(capsys, str(fleet.write(tmp_path, "box", data)))
    found = {(f["kind"], f["device"]): f["text"] for f in node(result, "box")["findings"]}
    assert "NUMA node 1" in found[("straggler", "cuda:1")] and "NUMA node 1" in found[("low", "cuda:1")]
    assert not any("NUMA" in text for (kind, device), text in found.items() if device != "cuda:1")


def test_a_nodes_collectives_job_and_its_single_process_run_are_both_judged(tmp_path, capsys):
    """The collectives run in a torchrun job of their own: a newer collectives file must not hide the node's
    matmul and copy results from health (nor the other way round)."""
    node_run = ours("box", 2, [matmul("cuda:0", 780), matmul("cuda:1", 500)])
    node_run["datetime"] = "2026-11-29T10:00:00+00:00"
    fleet.write(tmp_path, "node", node_run)
    coll = ours("box", 2, [all_reduce(250, 2, 1)])
    coll["suite"]["distributed"] = {"world_size": 2, "nnodes": 1, "ranks_per_node": 2}
    coll["datetime"] = "2026-11-29T12:00:00+00:00"
    fleet.write(tmp_path, "coll", coll)
    code, result = health_json(capsys, str(tmp_path))
    box = node(result, "box")
    assert len(box["runs"]) == 2, box["runs"]
    assert code == 1 and any(f["device"] == "cuda:1" for f in box["findings"]), "the matmul run was judged"
    # A newer single-process run replaces the older one, not the collectives job.
    newer = ours("box", 2, [matmul("cuda:0", 780), matmul("cuda:1", 780)])
    newer["datetime"] = "2026-11-29T14:00:00+00:00"
    fleet.write(tmp_path, "node2", newer)
    code, result = health_json(capsys, str(tmp_path))
    assert len(node(result, "box")["runs"]) == 2 and code == 0


def test_compare_pairs_each_launch_of_a_folder(tmp_path, capsys):
    for side, speed in (("base", 780), ("cand", 700)):
        folder = tmp_path / side
        folder.mkdir()
        run = ours("box", 1, [matmul("cuda:0", speed)])
        fleet.write(folder, "node", run)
        coll = ours("box", 1, [all_reduce(250, 2, 1)])
        coll["suite"]["distributed"] = {"world_size": 2, "nnodes": 1}
        coll["datetime"] = "2026-11-29T19:00:00+00:00"
        fleet.write(folder, "coll", coll)
    code = main(["compare", str(tmp_path / "base"), str(tmp_path / "cand")])
    out = capsys.readouterr().out
    assert code == 1 and "test_matmul[cuda:0-bfloat16]" in out and "test_collectives[all_reduce-2x1]" in out


@pytest.mark.parametrize("name", ["foreign.json", "cpu_only.json"])
def test_a_node_no_check_applies_to_is_not_judged_not_healthy(name, capsys):
    """Another tool's timings, or a CPU-only run: no expected figure, no peer, no fleet. HEALTHY would be a
    verdict nothing supports; a gate that checked nothing exits 2."""
    code, result = health_json(capsys, str(DATA / name))
    assert code == 2 and result["verdict"] == "not judged"
    assert [n["status"] for n in result["nodes"]] == ["not judged"] and result["nodes"][0]["checks"] == []
    assert main(["health", str(DATA / name)]) == 2
    out, err = capsys.readouterr()
    assert "NOT JUDGED" in out and "not judged: no expected figure applies" in out
    assert err.strip().splitlines()[-1].startswith("health: nothing was judged")


def test_a_judged_node_beside_an_unjudged_one_passes_and_names_it(tmp_path, capsys):
    fleet.write(tmp_path, "box", ours("box", 2, [matmul("cuda:0", 780), matmul("cuda:1", 780)]))
    (tmp_path / "laptop.json").write_text((DATA / "cpu_only.json").read_text())
    code, result = health_json(capsys, str(tmp_path))
    assert code == 0 and result["verdict"] == "healthy"
    assert node(result, "box")["checks"] == ["expected", "straggler"]
    assert node(result, "laptop")["status"] == "not judged"


def test_a_partial_run_is_said_to_be_one(tmp_path, capsys):
    data = ours("box", 2, [matmul("cuda:0", 780), matmul("cuda:1", 780)])
    path = tmp_path / "run.partial.jsonl"
    header = {k: v for k, v in data.items() if k != "benchmarks"}
    path.write_text(
        "\n".join(json.dumps(o) for o in [{"partial": True, **header}, *data["benchmarks"]]) + "\n"
    )
    assert main(["health", str(path)]) == 0
    assert f"partial: {path} (a killed run: judged on what it finished)" in capsys.readouterr().out


def test_a_straggler_held_by_the_hardware_power_brake_says_so(tmp_path, capsys):
    slow = matmul("cuda:1", 390)
    slow["extra_info"].update(clocks_held=0.55, clocks_held_hw_power_brake=0.55, clocks_window_s=1.5)
    fleet.write(tmp_path, "box", ours("box", 4, [matmul("cuda:0", 780), slow, matmul("cuda:2", 781),
                                                matmul("cuda:3", 779)]))
    code, result = health_json(capsys, str(tmp_path))
    (f,) = [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]
    assert code == 1 and f["device"] == "cuda:1"
    assert "clocks held back 55% of the time by the hardware power brake (clocks halved or more)" in f["text"]


def test_a_noisy_device_is_not_a_straggler(tmp_path, capsys):
    # Found by mutation: the straggler's noise guard could be removed without a test failing.
    data = fleet.machine("box", slow=0.85, slow_device=2)
    for b in data["benchmarks"]:
        b["stats"]["iqr"] = 0.5 * b["stats"]["median"]
    fleet.write(tmp_path, "box", data)
    _, result = health_json(capsys, str(tmp_path))
    assert not [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]


def test_a_device_is_judged_on_its_best_qualifying_result(tmp_path, capsys):
    weak = matmul("cuda:0", 300)
    weak["name"] = weak["fullname"] = "test_matmul[cuda:0-bfloat16-again]"
    path = fleet.write(tmp_path, "box", ours("box", 1, [matmul("cuda:0", 780), weak]))
    _, result = health_json(capsys, str(path))
    table = {(e["device"], e["measure"]): e for e in node(result, "box")["expectations"]}
    assert table[("cuda:0", "matmul_bf16")]["verdict"] == "ok"


def test_a_host_bound_figure_is_shown_not_judged(tmp_path, capsys):
    # cuda:1's figure was set by Python issuing the calls (suite.timing.bound_info): half its peers' rate says
    # nothing of the GPU, so it is no straggler and no low figure; the same figure device-bound is both.
    def run(bound: str) -> dict:
        slow = matmul("cuda:1", 390)
        slow["extra_info"].update(bound=bound, host_share=0.99 if bound == "host" else 0.02)
        fleet.write(tmp_path, "box", ours("box", 4, [matmul("cuda:0", 780), slow, matmul("cuda:2", 781),
                                                    matmul("cuda:3", 779)]))
        code = main(["health", str(tmp_path), "--format", "json"])
        out, err = capsys.readouterr()
        return code, {**json.loads(out), "stderr": err}

    def judged(result) -> set:
        return {(f["kind"], f["device"]) for f in node(result, "box")["findings"] if f["kind"] != "missing"}

    code, result = run("device")
    assert code == 1 and judged(result) == {("low", "cuda:1"), ("straggler", "cuda:1")}
    code, result = run("host")
    assert code == 0 and judged(result) == set()
    assert "warning: 1 host-bound result(s) not judged (the host, not the device, set their time)" in (
        result["stderr"])


def test_a_finding_names_the_hardware_behind_cuda_n(tmp_path, capsys):
    # Under CUDA_VISIBLE_DEVICES=4,5,6,7 the slow cuda:1 is the board at PCI 0000:3b:00.0, not the host's GPU 1.
    data = ours("box", 4, [matmul("cuda:0", 780), matmul("cuda:1", 390), matmul("cuda:2", 781),
                           matmul("cuda:3", 779)])
    for i, d in enumerate(d for d in data["machine_info"]["devices"] if d["id"] != "cpu"):
        d.update(pci_bus_id=f"0000:{0x18 + 0x23 * i:02x}:00.0", uuid=f"GPU-{i}aa1c")
    fleet.write(tmp_path, "box", data)
    code, result = health_json(capsys, str(tmp_path))
    (f,) = [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]
    assert code == 1 and f["device"] == "cuda:1" and f["identity"] == "PCI 0000:3b:00.0, GPU-1aa1c"
    assert main(["health", str(tmp_path)]) == 1
    assert "cuda:1 (PCI 0000:3b:00.0, GPU-1aa1c) straggler: " in capsys.readouterr().out


@pytest.mark.parametrize("median", [float("nan"), -1.0])
def test_invalid_results_are_a_finding_that_fails_by_default(tmp_path, capsys, median):
    """A real H200 run is healthy; with one median broken it is flagged, naming the result and why (it once
    stayed HEALTHY with every median NaN or negative)."""
    data = json.loads((DATA / "real" / "h200_quick.json").read_text())
    assert main(["health", str(DATA / "real" / "h200_quick.json")]) == 0
    name = data["benchmarks"][0]["name"]
    data["benchmarks"][0]["stats"]["median"] = median
    (tmp_path / "bad.json").write_text(json.dumps(data, allow_nan=True))
    capsys.readouterr()
    code, result = health_json(capsys, str(tmp_path / "bad.json"))
    assert code == 1 and result["verdict"] == "flagged" and "invalid" in result["fail_on"]
    (f,) = [f for f in result["nodes"][0]["findings"] if f["kind"] == "invalid"]
    reason = {"nan": "NaN", "-1.0": "negative"}[str(median)]
    assert f["device"] == "cuda:0" and f["text"] == f"{name}: {reason} median"
    assert result["counts"]["invalid"] == 1
    assert main(["health", str(tmp_path / "bad.json")]) == 1
    assert f"cuda:0 (GPU-3291c09b-08f8-9b12-f76b-1fc8deec764d) invalid: {name}: {reason} median" in \
        capsys.readouterr().out


def test_a_finding_names_the_boards_serial_where_the_run_recorded_it(tmp_path, capsys):
    data = ours("box", 4, [matmul("cuda:0", 780), matmul("cuda:1", 390), matmul("cuda:2", 781),
                           matmul("cuda:3", 779)])
    for i, d in enumerate(d for d in data["machine_info"]["devices"] if d["id"] != "cpu"):
        d.update(pci_bus_id=f"0000:{0x18 + 0x23 * i:02x}:00.0", uuid=f"GPU-{i}aa1c", serial=f"16521{i}")
    fleet.write(tmp_path, "box", data)
    code, result = health_json(capsys, str(tmp_path))
    (f,) = [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]
    assert f["identity"] == "PCI 0000:3b:00.0, GPU-1aa1c, serial 165211" and f["serial"] == "165211"


def test_a_gpu_slower_than_the_others_while_all_ran_at_once_is_a_straggler(tmp_path, capsys):
    # Each GPU alone reads fine; under the whole node's load cuda:2 falls 15% behind (heat, power, NUMA).
    def all_gpus(rates: dict) -> dict:
        b = matmul("all-gpus", sum(rates.values()))
        b["name"] = "test_matmul[all-gpus-bfloat16-8192x8192x8192]"
        b["extra_info"].update(gpus=list(rates), gpu_count=len(rates), per_device_tflops=rates)
        return b

    alone = [matmul(f"cuda:{i}", 780) for i in range(4)]
    rates = {"cuda:0": 700.0, "cuda:1": 705.0, "cuda:2": 600.0, "cuda:3": 698.0}
    fleet.write(tmp_path, "box", ours("box", 4, [*alone, all_gpus(rates)]))
    code, result = health_json(capsys, str(tmp_path))
    (f,) = [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]
    assert code == 1 and f["device"] == "cuda:2" and "while all 4 GPUs ran at once" in f["text"]
    assert f["measured"] == 600.0 and f["reference"] == 700.0
    # Within the margin of each other: nothing.
    even = tmp_path / "even"
    even.mkdir()
    fleet.write(even, "box", ours("box", 4, [*alone, all_gpus({**rates, "cuda:2": 660.0})]))
    code, result = health_json(capsys, str(even))
    assert not [f for f in node(result, "box")["findings"] if f["kind"] == "straggler"]
