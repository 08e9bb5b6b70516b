"""suite.compare: matching across machines, the noise-aware gate and its exit codes."""

from __future__ import annotations

import copy
import csv
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.cli import main
from suite.compare import classify, parse_threshold
from suite.errors import UserError

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


def fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scaled(data: dict, index: int, factor: float, iqr_share: float | None = None) -> dict:
    """A copy where benchmark `index` takes `factor` times as long (optionally with a wider IQR)."""
    out = copy.deepcopy(data)
    stats = out["benchmarks"][index]["stats"]
    for key in ("min", "max", "mean", "median", "q1", "q3", "ld15iqr", "hd15iqr"):
        stats[key] *= factor
    if iqr_share is not None:
        stats["iqr"] = stats["median"] * iqr_share
        stats["q1"], stats["q3"] = stats["median"] - stats["iqr"] / 2, stats["median"] + stats["iqr"] / 2
    return out


@pytest.fixture
def pair(tmp_path):
    """Write baseline.json and return a function writing a candidate from it."""
    base = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    base_path = tmp_path / "baseline.json"
    base_path.write_text(json.dumps(base), encoding="utf-8")

    def candidate(data: dict) -> str:
        path = tmp_path / "candidate.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return str(path)

    return str(base_path), base, candidate


@pytest.mark.parametrize(
    ("text", "value"), [("5%", 0.05), ("5", 0.05), (" 2.5 % ", 0.025), ("0", 0.0), ("10.", 0.1)]
)
def test_threshold_is_a_percentage_with_or_without_the_sign(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "-5", "5%%", "", "five", "1e3", "nan"])
def test_threshold_garbage_is_a_user_error(text):
    with pytest.raises(UserError, match="not a percentage"):
        parse_threshold(text)


def test_classify_needs_both_threshold_and_noise():
    assert classify(1.0, 1.2, 0.01, 0.01, 0.05) == "regression"
    assert classify(1.0, 1.2, 0.3, 0.3, 0.05) == "unchanged"  # 0.2 s apart, noise 0.3 s: no verdict
    assert classify(1.0, 1.04, 0.0, 0.0, 0.05) == "unchanged"  # below the threshold
    assert classify(1.0, 0.8, 0.01, 0.01, 0.05) == "improvement"


def test_fabricated_regression_exits_1(pair, capsys):
    base_path, base, candidate = pair
    cand = candidate(scaled(base, 0, 1.5))
    assert main(["compare", base_path, cand]) == 1
    out = capsys.readouterr().out
    assert "1 regression" in out and "19 unchanged" in out
    assert out.splitlines()[3].startswith("regression") and base["benchmarks"][0]["name"] in out


def test_fabricated_improvement_exits_0(pair, capsys):
    base_path, base, candidate = pair
    assert main(["compare", base_path, candidate(scaled(base, 0, 0.5))]) == 0
    assert "1 improvement" in capsys.readouterr().out


def test_slowdown_within_noise_exits_0(pair, capsys):
    base_path, base, candidate = pair
    noisy = scaled(scaled(base, 0, 1.0, iqr_share=0.4), 0, 1.0)
    base_file = Path(base_path)
    base_file.write_text(json.dumps(noisy), encoding="utf-8")
    assert main(["compare", base_path, candidate(scaled(noisy, 0, 1.1, iqr_share=0.4))]) == 0
    assert "0 regression" in capsys.readouterr().out


def test_threshold_is_honoured(pair):
    base_path, base, candidate = pair
    cand = candidate(scaled(base, 0, 1.2))
    assert main(["compare", base_path, cand, "--threshold", "30%"]) == 0
    assert main(["compare", base_path, cand, "--threshold", "10"]) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", str(DATA / "truncated.json"), str(DATA / "h200x2.json")],
        ["compare", str(DATA / "h200x2.json"), str(DATA / "empty.json")],
        ["compare", str(DATA / "h200x2.json"), str(DATA / "a100x2.json"), "--threshold", "abc"],
        ["compare", str(DATA / "h200x2.json"), str(DATA / "a100x2.json"), "--map", "cuda:0"],
        ["compare", str(DATA / "imported"), str(DATA / "a100x2.json")],  # a folder without that machine
        ["compare", str(DATA / "h200x2.json"), str(DATA / "a100x2.json"), "--threshold", "5",
         "--threshold", "6"],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err


def test_exit_code_through_python_m_suite(pair):
    base_path, base, candidate = pair
    cand = candidate(scaled(base, 0, 2.0))
    proc = subprocess.run(
        [sys.executable, "-m", "suite", "compare", base_path, cand],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "regression" in proc.stdout


def test_device_map_matches_runs_on_different_devices(pair, capsys):
    base_path, base, candidate = pair
    moved = json.loads(json.dumps(base).replace("cuda:0", "cuda:1"))
    cand = candidate(moved)
    main(["compare", base_path, cand])
    out = capsys.readouterr().out
    assert "missing" in out and "only in candidate" in out
    assert main(["compare", base_path, cand, "--map", "cuda:0=cuda:1"]) == 0
    out = capsys.readouterr().out
    assert "0 missing, 0 only in candidate" in out


def test_matching_is_by_parameters_not_test_name(pair, capsys):
    base_path, base, candidate = pair
    renamed = copy.deepcopy(base)
    for bench in renamed["benchmarks"]:
        bench["name"] = "renamed_" + bench["name"]
    assert main(["compare", base_path, candidate(renamed), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["unchanged"] == 20 and result["counts"]["missing"] == 0


def test_foreign_files_match_by_fullname_and_formats_parse(tmp_path, capsys):
    data = fixtures().foreign_results()
    a = tmp_path / "a.json"
    a.write_text(json.dumps(data), encoding="utf-8")
    b = tmp_path / "b.json"
    b.write_text(json.dumps(scaled(data, 1, 3.0)), encoding="utf-8")
    assert main(["compare", str(a), str(b), "--format", "csv", "--metric", "min"]) == 1
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (
        len(rows) == 3 and rows[0]["status"] == "regression" and float(rows[0]["ratio"]) == pytest.approx(3.0)
    )
    assert (
        main(
            [
                "compare",
                str(a),
                str(b),
                "--format",
                "markdown",
                "--label",
                "a.json=old",
                "--label",
                "b.json=new",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert out.startswith("**old -> new") and "| regression |" in out


def test_two_real_runs_of_one_machine_line_up(capsys):
    """Run-dependent figures in extra_info (ceiling_tflops, ...) are not parameters: shared cases match."""
    real = Path(__file__).parent / "data" / "real"
    code = main(["compare", str(real / "cpu_quick_run.json"), str(real / "cpu_default_run.json"),
                 "--format", "json", "--threshold", "1000%", "--allow-missing"])  # two configs: a subset
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    matched = [r for r in rows if r["status"] in ("unchanged", "regression", "improvement")]
    assert len(matched) >= 4, "the matmul, copy and ceiling cases both runs share"


def test_per_family_thresholds(pair, capsys):
    base_path, base, candidate = pair
    family = base["benchmarks"][0]["extra_info"]["case"]
    cand = candidate(scaled(base, 0, 1.2))
    assert main(["compare", base_path, cand, "--threshold", f"{family}=30%", "--threshold", "5%"]) == 0
    other = "copy" if family != "copy" else "matmul"  # a real family, not the one slowed down
    assert main(["compare", base_path, cand, "--threshold", f"{other}=30%", "--threshold", "10"]) == 1
    capsys.readouterr()
    assert main(["compare", base_path, cand, "--threshold", f"{family}=10%", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["thresholds"] == {family: 0.1}


def test_too_few_rounds_is_not_judged_not_a_regression(pair, capsys):
    base_path, base, candidate = pair
    slow = scaled(base, 0, 2.0)
    slow["benchmarks"][0]["stats"]["rounds"] = 3
    assert main(["compare", base_path, candidate(slow), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["not judged"] == 1 and result["counts"]["regression"] == 0


def test_folders_compare_each_machines_latest_run(tmp_path, capsys):
    data = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "a.json").write_text(json.dumps(data), encoding="utf-8")
    early = {**scaled(data, 0, 3.0), "datetime": "2020-01-01T00:00:00"}  # older and slower: must be ignored
    (new_dir / "early.json").write_text(json.dumps(early), encoding="utf-8")
    late = {**scaled(data, 1, 2.0), "datetime": "2030-01-01T00:00:00"}
    (new_dir / "late.json").write_text(json.dumps(late), encoding="utf-8")
    assert main(["compare", str(old_dir), str(new_dir), "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["benchmark"] for r in rows if r["status"] == "regression"] == [data["benchmarks"][1]["name"]]


def test_how_a_run_stopped_does_not_change_which_benchmarks_match(pair, capsys):
    """Each run stops on its own rounds and margin (extra_info from precision stopping): two runs of the same
    cases must still line up one to one, and a slowdown still shows."""
    base_path, base, candidate = pair
    stopped = copy.deepcopy(base)
    for bench in base["benchmarks"]:
        bench["extra_info"].update(rounds=12, margin=0.004, confidence=0.99, precision_target=0.01,
                                   stopped_on="precision")
    for bench in stopped["benchmarks"]:
        bench["extra_info"].update(rounds=40, margin=0.031, confidence=0.99, precision_target=0.01,
                                   stopped_on="time")
    Path(base_path).write_text(json.dumps(base), encoding="utf-8")
    assert main(["compare", base_path, candidate(scaled(stopped, 0, 1.5))]) == 1
    out = capsys.readouterr().out
    assert "1 regression" in out and "19 unchanged" in out
    assert "0 missing, 0 only in candidate" in out


@pytest.mark.parametrize(
    ("value", "message"), [("cpy=10%", "no family 'cpy'"), ("copy=", "for family 'copy'")]
)
def test_bad_family_thresholds_are_one_line_errors(pair, value, message, capsys):
    base_path, base, candidate = pair
    assert main(["compare", base_path, candidate(base), "--threshold", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err


def test_no_positive_time_is_not_judged(pair, capsys):
    base_path, base, candidate = pair
    broken = scaled(base, 0, 1.0)
    broken["benchmarks"][0]["stats"]["median"] = 0.0
    main(["compare", base_path, candidate(broken), "--format", "json"])
    rows = json.loads(capsys.readouterr().out)["results"]
    assert {r["status"] for r in rows if r["benchmark"] == base["benchmarks"][0]["name"]} == {"not judged"}


def _baseline_folder_of_two(tmp_path):
    """(old, new): a baseline folder with machines `box` and `gone`, and an empty candidate folder."""
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    for host in ("box", "gone"):
        data = fixtures().synthetic_results(host, n_gpus=1, seed=3, limit=20)
        (old_dir / f"{host}.json").write_text(json.dumps(data), encoding="utf-8")
    return old_dir, new_dir


def test_folders_pair_a_driver_upgrade_and_list_unmatched_machines(tmp_path, capsys):
    old_dir, new_dir = _baseline_folder_of_two(tmp_path)
    upgraded = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    for d in upgraded["machine_info"]["devices"]:
        d["driver_version"] = "999.1"
    (new_dir / "box.json").write_text(json.dumps(scaled(upgraded, 0, 2.0)), encoding="utf-8")
    (new_dir / "fresh.json").write_text(
        json.dumps(fixtures().synthetic_results("fresh", n_gpus=1, seed=3, limit=20)), encoding="utf-8"
    )
    assert main(["compare", str(old_dir), str(new_dir)]) == 1  # box paired despite the new driver
    err = capsys.readouterr().err
    assert "same host and GPUs, another driver" in err
    assert "only in the baseline, not compared: NVIDIA H200 @ gone" in err
    assert "only in the candidate, not compared: NVIDIA H200 @ fresh" in err


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    # More output than a pipe holds (64 KiB), so the writer meets the closed pipe.
    paths = []
    for seed in (1, 2):
        data = fixtures().synthetic_results("box", n_gpus=8, seed=seed)
        paths.append(tmp_path / f"run{seed}.json")
        paths[-1].write_text(json.dumps(data), encoding="utf-8")
    done = subprocess.run(
        f"{sys.executable} -m suite compare {paths[0]} {paths[1]} --format json | head -1",
        shell=True, capture_output=True, text=True, cwd=Path(__file__).parents[1], check=False,
    )
    assert done.stdout.strip() == "{" and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_a_candidate_that_measured_nothing_is_an_error_not_a_pass(pair, tmp_path, capsys):
    base_path, base, candidate = pair
    for empty in ({"benchmarks": []}, {**base, "benchmarks": []}):
        assert main(["compare", base_path, candidate(empty)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and "holds no benchmark results" in err[-1]
    # In a folder, the machine's newest run measured nothing: not passed, nor an older run judged instead.
    runs = tmp_path / "runs"
    runs.mkdir()
    old, new = {**base, "datetime": "2026-01-01T00:00:00"}, {**base, "datetime": "2026-02-01T00:00:00"}
    (runs / "a_old.json").write_text(json.dumps(old), encoding="utf-8")
    (runs / "b_new.json").write_text(json.dumps({**new, "benchmarks": []}), encoding="utf-8")
    assert main(["compare", base_path, str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "candidate" in err and "b_new.json" in err and "holds no benchmark results" in err


def test_benchmarks_missing_from_the_candidate_fail_unless_allowed(pair, capsys):
    base_path, base, candidate = pair
    subset = {**base, "benchmarks": base["benchmarks"][:2]}
    cand = candidate(subset)
    assert main(["compare", base_path, cand]) == 1
    captured = capsys.readouterr()
    assert "2 unchanged" in captured.out and "18 missing" in captured.out
    assert "18 benchmark(s) of the baseline missing from the candidate" in captured.err
    assert "--allow-missing" in captured.err
    assert main(["compare", base_path, cand, "--allow-missing"]) == 0
    assert "18 missing" in capsys.readouterr().out  # still listed, no longer failing
    # A regression still fails when the subset is allowed.
    assert main(["compare", base_path, candidate(scaled(subset, 0, 2.0)), "--allow-missing"]) == 1
    capsys.readouterr()
    # A missing row shows the baseline's time; a row only in the candidate, the candidate's.
    cand = candidate(subset)
    assert main(["compare", cand, base_path, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    extra = next(r for r in rows if r["status"] == "only in candidate")
    bench = next(b for b in base["benchmarks"] if b["name"] == extra["benchmark"])
    assert extra["candidate"] == bench["stats"]["median"] and extra["baseline"] is None
    assert main(["compare", base_path, cand, "--format", "json", "--allow-missing"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    gone = next(r for r in rows if r["status"] == "missing")
    bench = next(b for b in base["benchmarks"] if b["name"] == gone["benchmark"])
    assert gone["baseline"] == bench["stats"]["median"] and gone["candidate"] is None


def test_a_machine_missing_from_the_candidate_folder_fails_unless_allowed(tmp_path, capsys):
    old_dir, new_dir = _baseline_folder_of_two(tmp_path)
    same = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    (new_dir / "box.json").write_text(json.dumps(same), encoding="utf-8")
    assert main(["compare", str(old_dir), str(new_dir)]) == 1
    assert "1 machine(s) of the baseline missing from the candidate" in capsys.readouterr().err
    assert main(["compare", str(old_dir), str(new_dir), "--allow-missing"]) == 0


@pytest.mark.parametrize(
    ("mapping", "message"),
    [("cuda:7=cuda:0", "the baseline has no device cuda:7 (it has: cpu, cuda:0)"),
     ("cuda:0=cuda:3", "the candidate has no device cuda:3 (it has: cpu, cuda:0)")],
)
def test_map_naming_a_device_a_run_lacks_is_a_one_line_error(pair, mapping, message, capsys):
    base_path, base, candidate = pair
    assert main(["compare", base_path, candidate(base), "--map", mapping]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("error:")]) == 1
    assert err[-1].startswith("error: --map") and message in err[-1]


def test_copies_missing_because_the_candidate_had_no_nvml_say_so(tmp_path, capsys):
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    peer = [b for b in data["benchmarks"] if b["extra_info"].get("case") == "copy"
            and "cpu" not in (b["extra_info"].get("src", "cpu"), b["extra_info"].get("dst", "cpu"))
            and b["extra_info"]["src"] != b["extra_info"]["dst"]]
    assert peer
    base = copy.deepcopy(data)
    for b in base["benchmarks"]:
        if b in peer:
            b["extra_info"]["link"] = "NV18"
    (tmp_path / "base.json").write_text(json.dumps(base), encoding="utf-8")
    cand = copy.deepcopy(data)
    cand["benchmarks"] = [b for b in cand["benchmarks"] if b["name"] != peer[0]["name"]]
    (tmp_path / "cand.json").write_text(json.dumps(cand), encoding="utf-8")
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json")]) == 1
    err = capsys.readouterr().err
    assert "1 benchmark(s) of the baseline missing" in err and "install nvidia-ml-py" in err
    # Neither side read the links: the plain missing message alone.
    (tmp_path / "base.json").write_text(json.dumps(data), encoding="utf-8")
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json")]) == 1
    assert "nvidia-ml-py" not in capsys.readouterr().err


def test_nothing_in_common_fails_even_with_allow_missing(tmp_path, capsys):
    """--allow-missing lets a candidate measure a subset; a candidate with no benchmark of the baseline
    compared nothing and must not pass a gate."""
    data = json.loads((DATA / "h200x2.json").read_text())
    for bench in data["benchmarks"]:
        bench["extra_info"]["case"] = "other_" + bench["extra_info"]["case"]
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps(data))
    assert main(["compare", str(DATA / "h200x2.json"), str(cand), "--allow-missing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "compare: no benchmark of the baseline is in the candidate: nothing was compared"
    )


def test_different_hardware_is_named_in_a_warning(capsys):
    main(["compare", str(DATA / "h200x2.json"), str(DATA / "a100x2.json")])
    err = capsys.readouterr().err
    assert "warning: different hardware (2×NVIDIA H200 against 2×NVIDIA A100-SXM4-80GB)" in err
    main(["compare", str(DATA / "h200x2.json"), str(DATA / "h200x2.json")])
    assert "different hardware" not in capsys.readouterr().err


def _peer_copy(bench: dict) -> bool:
    extra = bench["extra_info"]
    src, dst = extra.get("src", "cpu"), extra.get("dst", "cpu")
    return extra.get("case") == "copy" and "cpu" not in (src, dst) and src != dst


def _write_partial(path: Path, run: dict, keep: list[dict], stopped_in: dict | None) -> str:
    """A partial file as suite.partial writes it: header, finished benchmarks, and (a run killed mid-test)
    the test that had started, its result line cut by the kill."""
    lines = [json.dumps({"partial": True, **{k: v for k, v in run.items() if k != "benchmarks"}})]
    for bench in keep:
        lines += [json.dumps({"started": bench["fullname"]}), json.dumps(bench),
                  json.dumps({"finished": bench["fullname"], "outcome": "passed"})]
    if stopped_in is not None:
        lines += [json.dumps({"started": stopped_in["fullname"]}), json.dumps(stopped_in)[:40]]
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def _linked_baseline_and_partial_candidate(tmp_path) -> tuple[str, str, dict]:
    """A baseline whose peer copies recorded their link (NVML), and a partial candidate killed before its
    peer copies, in the middle of the first of them."""
    data = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))
    for bench in data["benchmarks"]:
        bench.setdefault("fullname", f"benchmarks/test_x.py::{bench['name']}")
        if _peer_copy(bench):
            bench["extra_info"]["link"] = "NV18"
    base = tmp_path / "base.json"
    base.write_text(json.dumps(data), encoding="utf-8")
    peer = [b for b in data["benchmarks"] if _peer_copy(b)]
    done = [b for b in data["benchmarks"] if not _peer_copy(b)]
    cand = _write_partial(tmp_path / "cand.partial.jsonl", data, done, stopped_in=peer[0])
    return str(base), cand, peer[0]


def test_a_partial_candidate_is_marked_and_blamed_for_what_it_lacks(tmp_path, capsys):
    """A killed run compared with --allow-missing passed without a word; without it, stderr blamed NVML."""
    base, cand, stopped = _linked_baseline_and_partial_candidate(tmp_path)
    assert main(["compare", base, cand, "--allow-missing"]) == 0
    out, err = capsys.readouterr()
    assert "(partial: the run did not finish)" in out.splitlines()[0]
    assert "candidate" in err and "partial run" in err and "--allow-missing passes" in err
    assert main(["compare", base, cand]) == 1
    err = capsys.readouterr().err
    missing = [line for line in err.splitlines() if "of the baseline missing" in line]
    assert len(missing) == 1 and "did not finish" in missing[0] and stopped["name"] in missing[0]
    assert "--suite-resume" in missing[0]
    assert "nvidia-ml-py" not in err  # its peer copies were never reached: no sign of a missing NVML
    assert main(["compare", base, cand, "--format", "json", "--allow-missing"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["candidate_partial"] is True and result["baseline_partial"] is False


def test_the_nvml_hint_needs_candidate_peer_copies_without_a_link(tmp_path, capsys):
    """A narrower candidate without peer copies at all is no sign of a missing NVML either."""
    base, _, _ = _linked_baseline_and_partial_candidate(tmp_path)
    data = json.loads(Path(base).read_text(encoding="utf-8"))
    narrow = {**data, "benchmarks": [b for b in data["benchmarks"] if not _peer_copy(b)]}
    (tmp_path / "narrow.json").write_text(json.dumps(narrow), encoding="utf-8")
    assert main(["compare", base, str(tmp_path / "narrow.json")]) == 1
    err = capsys.readouterr().err
    assert "of the baseline missing" in err and "nvidia-ml-py" not in err and "partial" not in err


def _two_machine_folders(tmp_path) -> tuple[str, str, dict]:
    """old/ and new/ with machines `box` (one benchmark 2x slower) and `gone`, identical."""
    old_dir, new_dir = _baseline_folder_of_two(tmp_path)
    box = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    (new_dir / "box.json").write_text(json.dumps(scaled(box, 0, 2.0)), encoding="utf-8")
    gone = fixtures().synthetic_results("gone", n_gpus=1, seed=3, limit=20)
    (new_dir / "gone.json").write_text(json.dumps(gone), encoding="utf-8")
    return str(old_dir), str(new_dir), box


def test_folders_end_with_a_summary_of_each_pair_and_the_exit_reason(tmp_path, capsys):
    old_dir, new_dir, _ = _two_machine_folders(tmp_path)
    assert main(["compare", old_dir, new_dir]) == 1
    lines = capsys.readouterr().out.rstrip().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("baseline "))
    assert lines[head].split()[:6] == ["baseline", "candidate", "regressions", "improvements", "missing",
                                       "verdict"]
    rows = lines[head + 1: head + 3]
    assert rows[0].split()[-6:] == ["box", "same", "1", "0", "0", "regression"]
    assert rows[1].split()[-6:] == ["gone", "same", "0", "0", "0", "pass"]
    assert lines[-1] == "exit 1: 1 regression(s) on 1 of 2 machine pairs"


def test_folders_in_csv_are_one_table_with_machine_columns(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    old_dir, new_dir, box = _two_machine_folders(tmp_path)
    assert main(["compare", old_dir, new_dir, "--format", "csv"]) == 1
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(table) == 40 and set(table["status"]) == {"regression", "unchanged"}
    assert list(table.columns[:2]) == ["baseline_machine", "candidate_machine"]
    assert table.groupby("candidate_machine").size().to_dict() == {
        "NVIDIA H200 @ box": 20, "NVIDIA H200 @ gone": 20}
    slow = table[table["status"] == "regression"]
    assert slow["benchmark"].tolist() == [box["benchmarks"][0]["name"]]
    assert slow["baseline_machine"].tolist() == ["NVIDIA H200 @ box"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "csv", "json"])
def test_changed_only_lists_the_changed_rows_and_keeps_every_count(pair, fmt, capsys):
    base_path, base, candidate = pair
    cand = candidate({**scaled(base, 0, 2.0), "benchmarks": scaled(base, 0, 2.0)["benchmarks"][:-1]})
    assert main(["compare", base_path, cand, "--format", fmt, "--changed-only", "--allow-missing"]) == 1
    out = capsys.readouterr().out
    slow, gone = base["benchmarks"][0]["name"], base["benchmarks"][-1]["name"]
    if fmt == "json":
        result = json.loads(out)
        assert result["changed_only"] is True
        assert result["counts"]["unchanged"] == 18 and result["counts"]["regression"] == 1
        assert [(r["status"], r["benchmark"]) for r in result["results"]] == [("regression", slow),
                                                                             ("missing", gone)]
        return
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [(r["status"], r["benchmark"]) for r in rows] == [("regression", slow), ("missing", gone)]
        return
    assert "1 regression" in out and "18 unchanged" in out and "1 missing" in out  # the counts stay whole
    assert slow in out and gone in out
    assert not [line for line in out.splitlines() if "unchanged" in line and "test_" in line]


def test_the_summary_names_a_torchrun_jobs_launch_once():
    from suite.compare import Pair, summary_table

    label = "8xNVIDIA H100 80GB HBM3 @ h100-01 (torchrun 16 ranks on 2 nodes)"
    launch = "torchrun 16 ranks on 2 nodes"
    text = summary_table([Pair(label, label, [], base_launch=launch, cand_launch=launch)], "text", False)
    assert text.count("torchrun 16 ranks on 2 nodes") == 1 and "same" in text


def test_the_noise_boundary_both_ways():
    # Found by mutation: a wider noise share, and improvements judged without the noise, passed every test.
    assert classify(1.0, 1.2, 0.15, 0.15, 0.05) == "regression"  # 0.2 apart, noise 0.5 x 0.3 = 0.15
    assert classify(1.0, 0.8, 0.3, 0.3, 0.05) == "unchanged"  # an improvement inside the noise


def test_a_baseline_with_too_few_rounds_is_not_judged(tmp_path, capsys):
    base = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    base["benchmarks"][0]["stats"]["rounds"] = 3
    (tmp_path / "b.json").write_text(json.dumps(base))
    cand = scaled(base, 0, 2.0)
    cand["benchmarks"][0]["stats"]["rounds"] = 20
    (tmp_path / "c.json").write_text(json.dumps(cand))
    assert main(["compare", str(tmp_path / "b.json"), str(tmp_path / "c.json"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["not judged"] == 1


def _history(tmp_path, factors: list[float]) -> Path:
    """A baseline folder of one machine's runs, benchmark 0 taking each factor times as long, oldest first."""
    data = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    folder = tmp_path / "history"
    folder.mkdir()
    for day, factor in enumerate(factors, 1):
        run = {**scaled(data, 0, factor), "datetime": f"2026-11-{day:02d}T00:00:00"}
        (folder / f"box-{day:02d}.json").write_text(json.dumps(run), encoding="utf-8")
    return folder


def test_a_change_within_the_baseline_machines_own_range_is_no_regression(tmp_path, capsys):
    # One run's IQR does not see run-to-run drift: the latest baseline run happened to be fast, and a
    # candidate 8% slower is as slow as a run of four days ago.
    data = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    cand = tmp_path / "candidate.json"
    cand.write_text(json.dumps({**scaled(data, 0, 1.08), "datetime": "2026-12-01T00:00:00"}), encoding="utf-8")
    name = data["benchmarks"][0]["name"]

    assert main(["compare", str(_history(tmp_path, [1.0, 1.09, 1.02, 1.0])), str(cand), "--format", "json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out)["results"] if r["benchmark"] == name]
    assert row["status"] == "unchanged" and row["note"] == "within 4 baseline runs' range"
    assert row["change_pct"] == pytest.approx(8.0)

    # Slower than every run the machine has shown: a regression.
    cand.write_text(json.dumps({**scaled(data, 0, 1.2), "datetime": "2026-12-01T00:00:00"}), encoding="utf-8")
    assert main(["compare", str(tmp_path / "history"), str(cand)]) == 1
    assert "1 regression" in capsys.readouterr().out


def test_the_range_needs_three_runs_and_covers_only_the_latest_five(tmp_path, capsys):
    data = fixtures().synthetic_results("box", n_gpus=1, seed=3, limit=20)
    cand = tmp_path / "candidate.json"
    cand.write_text(json.dumps({**scaled(data, 0, 1.08), "datetime": "2026-12-01T00:00:00"}), encoding="utf-8")
    # Two runs are no range: the plain rule.
    assert main(["compare", str(_history(tmp_path, [1.09, 1.0])), str(cand)]) == 1
    capsys.readouterr()
    # The slow run is the sixth newest: out of the range.
    folder = tmp_path / "six"
    (tmp_path / "history").rename(tmp_path / "two")
    _history(tmp_path, [1.09, 1.0, 1.0, 1.01, 1.0, 1.0]).rename(folder)
    assert main(["compare", str(folder), str(cand), "--format", "csv"]) == 1
    text = capsys.readouterr().out
    assert text.splitlines()[0].endswith(",note") and "baseline runs' range" not in text


def broken(data: dict, indices, median: float) -> dict:
    """A copy where the benchmarks at `indices` record `median` as their median time."""
    out = copy.deepcopy(data)
    for i in indices:
        out["benchmarks"][i]["stats"]["median"] = median
    return out


@pytest.mark.parametrize("median", [float("nan"), -1.0, 0.0, float("inf")])
def test_a_candidate_with_invalid_results_fails_naming_each(pair, capsys, median):
    base_path, base, candidate = pair
    assert main(["compare", base_path, candidate(broken(base, [0, 1], median)), "--format", "json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["counts"]["invalid"] == 2 and result["counts"]["unchanged"] == 18
    reason = {"nan": "NaN", "-1.0": "negative", "0.0": "zero", "inf": "infinite"}[str(median)] + " median"
    named = [line for line in captured.err.splitlines() if line.startswith("compare: invalid in the")]
    assert named == [f"compare: invalid in the candidate: {base['benchmarks'][i]['name']} ({reason})"
                     for i in (0, 1)]


def test_invalid_results_are_named_one_a_line_up_to_a_cap(pair, capsys):
    base_path, base, candidate = pair
    assert main(["compare", base_path, candidate(broken(base, range(15), -1.0))]) == 1
    captured = capsys.readouterr()
    assert "exit 1: 15 invalid result(s) in the candidate" in captured.out
    named = [line for line in captured.err.splitlines() if line.endswith(" (negative median)")]
    assert len(named) == 10 and all(line.startswith("compare: invalid in the candidate: ") for line in named)
    assert "compare: invalid in the candidate: ... and 5 more" in captured.err


def test_nothing_valid_compared_exits_2(pair, capsys):
    """A candidate whose every median is NaN or negative once passed: "no regression in 20 compared"."""
    base_path, base, candidate = pair
    nan = broken(broken(base, range(0, 20, 2), float("nan")), range(1, 20, 2), -1.0)
    assert main(["compare", base_path, candidate(nan)]) == 2
    captured = capsys.readouterr()
    assert "exit 2: nothing valid was compared: 20 benchmark(s) with an invalid result" in captured.out
    assert "compare: nothing valid was compared" in captured.err and "Traceback" not in captured.err


def test_a_baseline_result_that_is_invalid_is_not_judged(pair, capsys):
    base_path, base, candidate = pair
    Path(base_path).write_text(json.dumps(broken(base, [0], float("nan")), allow_nan=True), encoding="utf-8")
    assert main(["compare", base_path, candidate(base), "--format", "json"]) == 0
    captured = capsys.readouterr()
    (row,) = [r for r in json.loads(captured.out)["results"] if r["invalid"]]
    assert row["status"] == "not judged" and row["invalid"] == "baseline: NaN median"
    assert "warning: 1 benchmark(s) invalid in the baseline: not judged" in captured.err


def test_of_a_benchmark_recorded_twice_the_invalid_one_is_judged(pair, capsys):
    base_path, base, candidate = pair
    twice = copy.deepcopy(base)
    twice["benchmarks"].append(broken(base, [0], -1.0)["benchmarks"][0])
    assert main(["compare", base_path, candidate(twice)]) == 1
    assert "1 invalid" in capsys.readouterr().out


def test_an_invalid_result_only_in_the_candidate_fails_too(pair, capsys):
    """A NaN parameter makes a benchmark of its own: garbage that passed as `only in candidate`."""
    base_path, base, candidate = pair
    extra = copy.deepcopy(base)
    bench = copy.deepcopy(base["benchmarks"][0])
    bench["extra_info"]["bytes" if "bytes" in bench["extra_info"] else "m"] = float("nan")
    extra["benchmarks"].append(bench)
    assert main(["compare", base_path, candidate(extra)]) == 1
    captured = capsys.readouterr()
    assert "1 only in candidate, 1 invalid" in captured.out
    assert f"compare: invalid in the candidate: {bench['name']} (NaN " in captured.err


def with_perf_per_w(data: dict, watts: float = 500.0, skip: tuple[int, ...] = ()) -> dict:
    """A copy whose benchmarks record perf_per_w (their time's inverse per `watts`), but those in `skip`."""
    out = copy.deepcopy(data)
    for i, b in enumerate(out["benchmarks"]):
        if i not in skip:
            b["extra_info"]["perf_per_w"] = 1 / b["stats"]["median"] / watts
    return out


def test_perf_per_w_catches_a_drop_in_efficiency_at_the_same_speed(pair, capsys):
    base_path, base, candidate = pair
    Path(base_path).write_text(json.dumps(with_perf_per_w(base)), encoding="utf-8")
    # As fast as before, drawing more power on one benchmark: the time sees nothing, perf_per_w a regression.
    cand = with_perf_per_w(base)
    cand["benchmarks"][0]["extra_info"]["perf_per_w"] /= 1.5
    path = candidate(cand)
    assert main(["compare", base_path, path]) == 0
    capsys.readouterr()
    assert main(["compare", base_path, path, "--metric", "perf_per_w"]) == 1
    out = capsys.readouterr().out
    assert "perf_per_w (rate per watt, higher is better" in out and "1 regression" in out
    first = out.splitlines()[3]
    assert first.startswith("regression") and "1.500" in first and "/W" in first
    # Higher is better: the same change the other way is an improvement.
    cand["benchmarks"][0]["extra_info"]["perf_per_w"] *= 1.5**2
    assert main(["compare", base_path, candidate(cand), "--metric", "perf_per_w"]) == 0
    assert "1 improvement" in capsys.readouterr().out


def test_perf_per_w_missing_on_a_side_is_not_judged_never_passed(pair, capsys):
    base_path, base, candidate = pair
    Path(base_path).write_text(json.dumps(with_perf_per_w(base)), encoding="utf-8")
    # One benchmark without it: not judged, said so, and the rest still judged.
    assert main(["compare", base_path, candidate(with_perf_per_w(base, skip=(0,))), "--metric",
                 "perf_per_w"]) == 0
    captured = capsys.readouterr()
    assert "not judged (not recorded: perf_per_w (candidate))" in captured.out
    assert "1 not judged" in captured.out and "19 unchanged" in captured.out
    assert "warning: 1 benchmark(s) without perf_per_w on a side: not judged" in captured.err
    # A candidate without telemetry: nothing was judged, exit 2, never a pass.
    assert main(["compare", base_path, candidate(base), "--metric", "perf_per_w"]) == 2
    captured = capsys.readouterr()
    assert "exit 2: nothing was judged: 20 benchmark(s) in common lack the metric" in captured.out
    assert "no benchmark in common has perf_per_w on both sides" in captured.err
    result = json.loads(_json_compare(capsys, base_path, candidate(base)))
    assert result["counts"]["not judged"] == 20 and result["metric"] == "perf_per_w"


def _json_compare(capsys, base_path: str, cand_path: str) -> str:
    assert main(["compare", base_path, cand_path, "--metric", "perf_per_w", "--format", "json"]) == 2
    return capsys.readouterr().out
