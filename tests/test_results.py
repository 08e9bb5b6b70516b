"""suite.results: loading every kind of input into the tidy table, labels, migrations, ratio math."""

from __future__ import annotations

import importlib.util
import json
import os
import math
from pathlib import Path

import pandas as pd
import pytest

from suite.errors import UserError
from suite.results import (
    geometric_mean,
    load_results,
    match_key,
    parse_label_args,
    relative_speed,
    speed_ratios,
)

DATA = Path(__file__).parent / "data"


def fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_loads_our_results_file():
    loaded = load_results([DATA / "h200x2.json"])
    assert loaded.warnings == []
    assert list(loaded.machines) == ["2xNVIDIA H200 @ gpu-box-3"]
    machine = loaded.machines["2xNVIDIA H200 @ gpu-box-3"]
    assert machine.software["torch"] == "2.13.0" and machine.schema_version == 1 and not machine.partial
    table = loaded.table
    assert len(table) == machine.n_benchmarks == 110
    assert not table["partial"].any()
    mm = table[(table["case"] == "matmul") & (table["device"] == "cuda:0")].iloc[0]
    assert mm["metric_name"] == "tflops" and mm["metric_unit"] == "TFLOP/s" and mm["metric"] == mm["tflops"]
    assert mm["dtype"] == "float32" and mm["m"] == 1024
    copy = table[(table["case"] == "copy") & (table["src"] == "cpu")].iloc[0]
    assert copy["dst"] == "cuda:0" and copy["metric_unit"] == "GB/s" and copy["memory"] == "pinned"
    same = table[(table["case"] == "copy") & (table["src"] == table["dst"])].iloc[0]
    assert same["traffic_gbps"] == pytest.approx(2 * same["gbps"])
    # Rates are measurements, never part of a benchmark's identity.
    assert "tflops" not in mm["params"] and "dtype=float32" in mm["params"]
    coll = table[table["case"] == "collectives"].iloc[0]
    assert coll["metric_name"] == "busbw"
    model = table[table["case"] == "model"].iloc[0]
    assert model["metric_unit"] == "samples/s"


def test_older_schema_is_migrated_with_rates_from_the_median():
    loaded = load_results([DATA / "schema0.json"])
    table = loaded.table
    assert (table["schema_version"] == 0).all()
    mm = table[table["case"] == "matmul"].iloc[0]
    assert mm["tflops"] == pytest.approx(mm["flops"] / mm["median"] / 1e12)
    copy = table[table["case"] == "copy"].iloc[0]
    assert copy["gbps"] == pytest.approx(copy["bytes"] / copy["median"] / 1e9)


def test_foreign_pytest_benchmark_file_gives_timings_only():
    loaded = load_results([DATA / "foreign.json"])
    assert list(loaded.machines) == ["laptop-7"]
    table = loaded.table
    assert set(table["case"]) == {"other"}
    assert table["metric"].isna().all()
    assert table["match_key"].str.startswith("fullname:tests/test_foo.py::").all()
    assert loaded.machines["laptop-7"].foreign


def test_foreign_file_without_node_is_labelled_by_its_file_stem(tmp_path):
    data = fixtures().foreign_results()
    del data["machine_info"]["node"]
    loaded = load_results([write(tmp_path / "ci-run-17.json", data)])
    assert list(loaded.machines) == ["ci-run-17"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("truncated.json", "not JSON (truncated?)"),
        ("empty.json", "empty file"),
        ("not_object.json", "top level is a JSON list"),
        ("no_benchmarks.json", "no 'benchmarks' list"),
        ("newer_schema.json", "written by gpubench-suite 9.0.0 (results schema 99); this is 0.1.0, which reads schema <= 1: upgrade to 9.0.0 or later to read it"),
    ],
)
def test_unreadable_file_is_one_warning_and_skipped(name, reason):
    loaded = load_results([DATA / name, DATA / "h200x2.json"])
    assert len(loaded.warnings) == 1
    assert loaded.warnings[0].startswith(str(DATA / name) + ": ") and reason in loaded.warnings[0]
    assert loaded.warnings[0].endswith("skipped")
    assert list(loaded.machines) == ["2xNVIDIA H200 @ gpu-box-3"]
    with pytest.raises(UserError, match="no results could be read"):
        load_results([DATA / name])


def test_a_file_without_results_beside_others_is_a_machine_and_a_warning(tmp_path):
    """Kept as a machine (compare and health must see that a machine's latest run measured nothing)."""
    data = json.loads((DATA / "h200x2.json").read_text())
    empty = tmp_path / "skipped.json"
    empty.write_text(json.dumps({**data, "benchmarks": []}), encoding="utf-8")
    loaded = load_results([DATA / "h200x2.json", empty])
    assert loaded.warnings == [
        f"{empty}: holds no benchmark results (every benchmark skipped, or the run stopped before the first)"
    ]
    assert sorted(m.n_benchmarks for m in loaded.machines.values()) == [0, 110]
    assert set(loaded.table["file"]) == {str(DATA / "h200x2.json")}


def test_empty_folder_and_missing_path_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="folder holds no results files"):
        load_results([tmp_path])
    with pytest.raises(UserError, match="no such file or folder"):
        load_results([tmp_path / "nope.json"])


def test_partial_results_keep_complete_lines_and_drop_a_truncated_last_line():
    loaded = load_results([DATA / "partial"])
    assert len(loaded.table) == 11  # 12 written, the last cut mid-line
    assert loaded.table["partial"].all()
    assert any("truncated last line" in w for w in loaded.warnings)
    assert next(iter(loaded.machines.values())).partial


def test_finished_json_supersedes_its_stale_partial(tmp_path):
    f = fixtures()
    write(tmp_path / "box.json", f.synthetic_results("box", n_gpus=1, limit=5))
    run = f.synthetic_results("box", n_gpus=1, limit=3)
    header = {"partial": True, **{k: v for k, v in run.items() if k != "benchmarks"}}
    (tmp_path / "box.partial.jsonl").write_text(
        "\n".join([json.dumps(header)] + [json.dumps(b) for b in run["benchmarks"]]), encoding="utf-8"
    )
    partial, done = tmp_path / "box.partial.jsonl", tmp_path / "box.json"
    os.utime(partial, (1_000_000, 1_000_000))  # the run wrote its partial file first, the JSON at its end
    loaded = load_results([tmp_path])
    assert len(loaded.machines) == 1 and len(loaded.table) == 5 and not loaded.table["partial"].any()
    assert [w for w in loaded.warnings if "stale partial" in w and "box.partial.jsonl" in w]
    # A later run killed beside an older complete JSON: its partial file is read, not hidden by the JSON.
    os.utime(done, (500_000, 500_000))
    loaded = load_results([tmp_path])
    assert len(loaded.machines) == 2 and loaded.table["partial"].sum() == 3
    # An empty JSON (a write that failed) hides nothing either.
    done.write_text("")
    os.utime(done, (2_000_000, 2_000_000))
    loaded = load_results([tmp_path])
    assert loaded.table["partial"].sum() == 3 and not any("stale partial" in w for w in loaded.warnings)


def test_machine_labels(tmp_path):
    f = fixtures()
    loaded = load_results([DATA / "cpu_only.json"])
    assert list(loaded.machines) == ["CPU (Intel Core i7-1185G7) @ laptop-1"]
    mixed = f.synthetic_results("mix", n_gpus=2, limit=3)
    mixed["machine_info"]["devices"][2]["name"] = "NVIDIA A100-SXM4-80GB"
    eight = f.synthetic_results("big", gpu="NVIDIA H100 80GB HBM3", n_gpus=8, limit=3)
    loaded = load_results([write(tmp_path / "mix.json", mixed), write(tmp_path / "big.json", eight)])
    assert list(loaded.machines) == [
        "NVIDIA H200 + NVIDIA A100-SXM4-80GB @ mix",
        "8xNVIDIA H100 80GB HBM3 @ big",
    ]


def test_a_torchrun_job_is_labelled_with_its_launch_not_taken_for_a_second_run(tmp_path):
    # The node's collectives job used to take the clean label, and the node's own run became `… [stem]`.
    f = fixtures()
    job = f.synthetic_results("node", gpu="NVIDIA H100 80GB HBM3", n_gpus=8, limit=3)
    job["suite"]["distributed"] = {"world_size": 16, "nnodes": 2}
    own = f.synthetic_results("node", gpu="NVIDIA H100 80GB HBM3", n_gpus=8, limit=3)
    loaded = load_results([write(tmp_path / "a-coll.json", job), write(tmp_path / "b-node.json", own)])
    assert list(loaded.machines) == ["8xNVIDIA H100 80GB HBM3 @ node (torchrun 16 ranks on 2 nodes)",
                                     "8xNVIDIA H100 80GB HBM3 @ node"]


def test_label_overrides_and_duplicates(tmp_path):
    f = fixtures()
    a = write(tmp_path / "a.json", f.synthetic_results("same", n_gpus=1, limit=3))
    b = write(tmp_path / "b.json", f.synthetic_results("same", n_gpus=1, limit=3))
    loaded = load_results([a, b])
    assert list(loaded.machines) == ["NVIDIA H200 @ same", "NVIDIA H200 @ same [b]"]
    loaded = load_results([a, b], labels=parse_label_args([f"{a}=first", "b.json=second"]))
    assert list(loaded.machines) == ["first", "second"]
    assert set(loaded.table["label"]) == {"first", "second"}
    loaded = load_results([a], labels={"zzz.json": "nobody"})
    assert any("matches no loaded file" in w for w in loaded.warnings)
    with pytest.raises(UserError, match="FILE=NAME"):
        parse_label_args(["no-equals-sign"])


def _table(rows):
    base = {"case": "matmul", "metric_name": "tflops", "params_json": "{}", "fullname": "x", "invalid": ""}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_speed_ratio_and_geometric_mean_against_hand_computed_values():
    table = _table(
        [
            {"label": "base", "match_key": "a", "metric": 100.0, "median": 2.0},
            {"label": "base", "match_key": "b", "metric": 200.0, "median": 1.0},
            {"label": "base", "match_key": "c", "metric": math.nan, "median": 4.0, "metric_name": None},
            {"label": "base", "match_key": "only-base", "metric": 1.0, "median": 1.0},
            {"label": "new", "match_key": "a", "metric": 200.0, "median": 1.0},  # 2x
            {"label": "new", "match_key": "b", "metric": 800.0, "median": 0.25},  # 4x
            {
                "label": "new",
                "match_key": "c",
                "metric": math.nan,
                "median": 1.0,
                "metric_name": None,
            },  # 4/1 = 4x
            {"label": "new", "match_key": "only-new", "metric": 9.0, "median": 9.0},
        ]
    )
    ratios = speed_ratios(table, "base").set_index("match_key")["ratio"]
    assert ratios.to_dict() == pytest.approx({"a": 2.0, "b": 4.0, "c": 4.0})
    speed = relative_speed(table, "base")
    assert len(speed) == 1 and speed["n"].iloc[0] == 3
    assert speed["speed"].iloc[0] == pytest.approx((2 * 4 * 4) ** (1 / 3))
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([0.5, 2.0]) == pytest.approx(1.0)
    assert math.isnan(geometric_mean([]))


def test_relative_speed_of_real_fixtures_is_near_the_fabricated_factor():
    loaded = load_results([DATA / "a100x2.json", DATA / "h200x2.json"])
    speed = relative_speed(loaded.table, "2xNVIDIA A100-SXM4-80GB @ gpu-box-1")
    # The H200 fixture was fabricated twice as fast (speed 1.0 vs 0.5, +-5% jitter) in every family.
    assert speed["speed"].between(1.8, 2.2).all() and set(speed["case"]) >= {"matmul", "copy", "habits"}


def test_match_key_maps_device_ids():
    key = match_key("copy", json.dumps({"src": "cpu", "dst": "cuda:0"}), "f", False, {"cuda:0": "cuda:1"})
    assert key == 'copy|{"dst": "cuda:1", "src": "cpu"}'
    assert match_key("other", "{}", "t.py::x", True) == "fullname:t.py::x"


@pytest.mark.parametrize("extra", [{}, None, [1], "x", {"case": 3}])
def test_a_row_without_our_extra_info_is_left_out_not_the_file(tmp_path, extra):
    """One damaged row of our own file is dropped with a warning; the file stays ours (matched by case and
    parameters), so compare does not call every benchmark missing and the report draws the rest."""
    data = json.loads((DATA / "h200x2.json").read_text())
    n = len(data["benchmarks"])
    data["benchmarks"][0]["extra_info"] = extra
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(data))
    loaded = load_results([path])
    assert len(loaded.table) == n - 1
    assert not loaded.table["match_key"].str.startswith("fullname:").any(), "still the suite's own rows"
    assert any("ignored 1 benchmark(s) without the suite's extra_info.case" in w for w in loaded.warnings)


def test_files_nested_too_deep_or_binary_are_skipped_in_one_line(tmp_path, capsys):
    from suite.cli import main

    (tmp_path / "deep.json").write_text("[" * 200_000)
    (tmp_path / "deep.partial.jsonl").write_text("[" * 200_000 + "\n")
    (tmp_path / "core.json").write_bytes(b"\x7fELF\x00\x01" + bytes(range(256)) * 100)
    with pytest.raises(UserError) as err:
        load_results([tmp_path])
    text = str(err.value)
    assert "deep.json: not JSON" in text and "core.json: a binary file, not results" in text
    assert main(["health", str(tmp_path)]) == 2 and "Traceback" not in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [
    ["report", str(DATA / "h200x2.json"), "-o", "{tmp}/r.html", "--csv", "/dev/full"],
    ["schema", "-o", "/dev/full"],
])
def test_an_output_that_cannot_be_written_is_one_line(argv, tmp_path, capsys):
    from suite.cli import main

    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write") and "No space left on device" in err and err.count("\n") == 1


def test_invalid_numbers_are_marked_with_the_reason_and_keep_the_benchmarks_identity(tmp_path):
    data = json.loads((DATA / "h200x2.json").read_text())
    # Ten benchmarks with a rate (tflops or gbps) and a size (flops or bytes), made invalid in turn.
    b = [x for x in data["benchmarks"] if {"tflops", "flops"} <= x["extra_info"].keys()][:10]
    b[0]["stats"]["median"] = math.nan
    b[1]["stats"]["median"] = -1.0
    b[2]["stats"]["median"] = 0
    b[3]["extra_info"]["tflops"] = -3.0
    b[4]["extra_info"]["tflops"] = math.inf
    b[5]["stats"]["iqr"] = -0.5
    b[6]["extra_info"]["flops"] = math.nan
    b[7]["stats"]["median"] = math.inf
    b[7]["extra_info"]["tflops"] = math.nan  # the first reason is kept: the time's
    b[8]["stats"]["iqr"] = 0  # no spread: valid
    b[9]["extra_info"].pop("tflops")  # a rate not recorded is no broken rate
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data, allow_nan=True))
    table = load_results([path]).table.set_index("name")
    good = load_results([DATA / "h200x2.json"]).table.set_index("name")
    names = [x["name"] for x in b]
    assert list(table.loc[names, "invalid"]) == [
        "NaN median", "negative median", "zero median", "negative tflops", "infinite tflops", "negative iqr",
        "NaN flops", "infinite median", "", ""]
    assert (table.drop(names)["invalid"] == "").all() and (good["invalid"] == "").all()
    assert table["match_key"].equals(good["match_key"]), "validity is no part of a benchmark's identity"


def test_another_tools_zero_rate_is_its_print_precision_not_invalid():
    table = load_results([DATA / "imported" / "nccl-tests" / "all_reduce_perf_2x8xH100.txt"]).table
    assert (table["busbw"] == 0).any() and (table["invalid"] == "").all()


def test_invalid_results_are_left_out_of_speed_ratios():
    table = _table([
        {"label": "base", "match_key": "a", "metric": 100.0, "median": 2.0},
        {"label": "base", "match_key": "b", "metric": 100.0, "median": 2.0},
        {"label": "new", "match_key": "a", "metric": 200.0, "median": 1.0},
        {"label": "new", "match_key": "b", "metric": -200.0, "median": -1.0, "invalid": "negative median"},
    ])
    assert speed_ratios(table, "base")["match_key"].tolist() == ["a"]
