"""suite.health: expected figures, stragglers and the fleet verdict, on SYNTHETIC fleets from a real run."""

from __future__ import annotations

import json
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
    assert "FLAGGED  h100-vm" in text and "cuda:0 straggler:" in text
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
