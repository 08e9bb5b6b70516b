"""Config loading: YAML through the safe loader, typed objects, one-line errors naming file, key and value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from suite.config import load_config, parse_config
from suite.errors import UserError
from suite.units import format_size, parse_size

ROOT = Path(__file__).resolve().parent.parent


def error_of(data, source="x.yaml") -> str:
    with pytest.raises(UserError) as info:
        parse_config(data, source)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["default.yaml", "quick.yaml"])
def test_shipped_configs_load(name):
    config = load_config(ROOT / "configs" / name)
    assert config.cases.matmul.dtypes


def test_defaults_and_aliases():
    config = parse_config({"cases": {"matmul": {"dtypes": ["fp32", "torch.bfloat16", "half"], "shapes": [[8, 4, 2], "16x8x4"]}}})
    assert config.cases.matmul.dtypes == ["float32", "bfloat16", "float16"]
    assert config.cases.matmul.shapes == [(8, 4, 2), (16, 8, 4)]
    assert parse_config(None).devices == "all"


def test_cpu_override_applies_to_the_cpu_only():
    config = parse_config({"cases": {"matmul": {"shapes": ["64x64x64"], "cpu": {"shapes": ["8x8x8"]}}}})
    assert config.cases.matmul.for_device("cpu").shapes == [(8, 8, 8)]
    assert config.cases.matmul.for_device("cuda:0").shapes == [(64, 64, 64)]
    assert config.cases.matmul.for_device("cpu").dtypes == ["float32"], "unset keys keep the section's value"


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"cases": {"matmul": {"dtypes": ["float32", "float33"]}}},
         "x.yaml: cases.matmul.dtypes[1]: 'float33' is not a dtype; allowed: bfloat16, float16, float32, float64"),
        ({"cases": {"matmul": {"shapes": ["10x10"]}}}, "x.yaml: cases.matmul.shapes[0]: '10x10' is not a matmul shape"),
        ({"cases": {"matmul": {"shapes": []}}}, "x.yaml: cases.matmul.shapes: [] is invalid: List should have at least 1 item"),
        ({"cases": {"matmul": {"dtype": ["float32"]}}},
         "x.yaml: cases.matmul.dtype: unknown key 'dtype'; allowed keys here: enabled, timing, dtypes, shapes, scaling, concurrent, cpu"),
        ({"cases": {"matmul": {"cpu": {"sizes": 1}}}}, "x.yaml: cases.matmul.cpu.sizes: unknown key 'sizes'; allowed keys here: dtypes, shapes"),
        ({"devcies": "all"}, "x.yaml: devcies: unknown key 'devcies'; allowed keys here: devices, timing, cases"),
        ({"devices": "cuda:x"}, "x.yaml: devices: 'cuda:x' is not a device"),
        ({"devices": []}, "x.yaml: devices: empty device list"),
        ({"timing": {"max_time": "abc"}}, "x.yaml: timing.max_time: 'abc' is invalid: Input should be a valid number"),
        ({"timing": {"min_rounds": 0}}, "x.yaml: timing.min_rounds: 0 is invalid: Input should be greater than or equal to 1"),
        (["devices"], "x.yaml: the config must be a mapping"),
    ],
)
def test_bad_values_name_file_key_value_and_allowed(data, expected):
    assert error_of(data).startswith(expected)


def test_several_problems_are_named_on_one_line():
    message = error_of({"devcies": 1, "timing": {"max_time": "x"}})
    assert "unknown key 'devcies'" in message and "timing.max_time: 'x' is invalid" in message
    assert "\n" not in message and "more problem" not in message
    many = error_of({"timing": {"max_time": -1, "min_rounds": -3, "warmup_s": -1, "precision": -1,
                                "confidence": 7}})
    assert many.count("timing.") == 4 and many.endswith("(and 1 more problem(s))")


def test_a_scalar_where_a_list_belongs_names_the_fix():
    assert "cases.matmul.dtypes: 'float32' is invalid: a list is expected; write [float32]" in error_of(
        {"cases": {"matmul": {"dtypes": "float32"}}})


def test_load_config_file_errors(tmp_path):
    with pytest.raises(UserError, match="config file not found; pass --suite-config"):
        load_config(tmp_path / "nope.yaml")
    # A relative path names the folder it was looked for in: `--suite-config configs/quick.yaml` from /tmp.
    with pytest.raises(UserError, match=re.escape(f"not found (relative to the current folder, {Path.cwd()})")):
        load_config("nope/quick.yaml")
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path)
    tabbed = tmp_path / "tab.yaml"
    tabbed.write_text("cases:\n\tmatmul: {}\n")
    with pytest.raises(UserError, match=r"not valid YAML: line 2, column 1: .*use spaces"):
        load_config(tabbed)
    dup = tmp_path / "dup.yaml"
    dup.write_text("devices: cpu\ntiming: {}\ndevices: all\n")
    with pytest.raises(UserError, match=r"duplicate key 'devices' \(first at line 1\)"):
        load_config(dup)
    # A mapping or list as a key (a stray `}:` after a flow mapping, found by the mutation fuzzer): one line,
    # not a TypeError traceback from the duplicate-key check.
    for text, where, kind in [("cases:\n  conv:\n    shapes:\n      - {name: a, size: 1}: 2\n", "line 4, column 9",
                                "mapping"),
                               ("devices: cpu\n[cpu, gpus]: 1\n", "line 2, column 1", "list")]:
        bad = tmp_path / f"key-{kind}.yaml"
        bad.write_text(text)
        with pytest.raises(UserError) as info:
            load_config(bad)
        assert str(info.value) == (f"{bad}: not valid YAML: {where}: a key must be a name or a number, not a "
                                   f"{kind}")
    code = tmp_path / "evil.yaml"
    code.write_text("devices: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(code)


@pytest.mark.parametrize("text, size", [("4KiB", 4096), ("64MiB", 64 * 2**20), ("1GB", 10**9), (512, 512), ("1.5KiB", 1536), ("2 mib", 2 * 2**20)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["3XB", "-1", 0, True, "1.3B", "", None, "KiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="size|bytes"):
        parse_size(bad)


def test_format_size():
    assert [format_size(n) for n in (4096, 64 * 2**20, 1000, 2**30)] == ["4KiB", "64MiB", "1000B", "1GiB"]


def test_schema_command_exports_json_schema(capsys):
    import json

    from suite.cli import main

    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert {"devices", "timing", "cases"} <= set(schema["properties"])


def test_schema_check_refuses_a_config_that_selects_no_benchmarks(tmp_path, capsys):
    from suite import cases
    from suite.cli import main
    from suite.config import nothing_selected

    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump({"cases": {name: {"enabled": False} for name in cases.FAMILIES}}))
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"cases": {name: {"enabled": name == "copy"} for name in cases.FAMILIES}}))
    assert main(["schema", "--check", str(one)]) == 0
    assert capsys.readouterr().out == f"{one}: ok\n"
    assert main(["schema", "--check", str(off)]) != 0
    err = capsys.readouterr().err
    # The line pytest gives for the same config (suite.plugin raises it as a UsageError), one line.
    assert err == f"error: {nothing_selected(off)}\n" and "selects no benchmarks" in err


def test_schema_check_without_a_file_is_an_error_not_the_schema(capsys):
    from suite.cli import main

    assert main(["schema", "--check"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == ("error: --check needs at least one config file: python -m suite "
                                         "schema --check CONFIG...")


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"timing": {"max_time": float("inf")}}, "timing.max_time: inf is invalid: Input should be a finite number"),
        ({"timing": {"warmup_s": float("nan")}}, "timing.warmup_s: nan is invalid: Input should be a finite number"),
        ({"timing": {"max_time": 1e9}}, "timing.max_time: 1000000000.0 is invalid: Input should be less than or equal to 86400"),
        ({"timing": {"min_rounds": 100_000_000}}, "timing.min_rounds: 100000000 is invalid: Input should be less than or equal to 100000"),
        ({"cases": {"copy": {"sizes": ["99999999999999999999999TiB"]}}},
         "cases.copy.sizes[0]: '99999999999999999999999TiB' is larger than any device holds; give at most 4TiB"),
        ({"cases": {"matmul": {"shapes": ["99999999x99999999x2"]}}}, "cases.matmul.shapes[0]: '99999999x99999999x2': a matrix"),
        ({"cases": {"conv": {"batch": 10**9}}}, "cases.conv: layer resnet50-conv1 at batch 1000000000 is larger than any"),
        ({"cases": {"collectives": {"rounds": 10**9}}}, "cases.collectives.rounds: 1000000000 is invalid: Input should be less"),
        ({"cases": {"habits": {"timing": {"max_time": float("inf")}}}}, "cases.habits.timing.max_time: inf is invalid"),
        ({"devices": 5}, "devices: 5 is not a device; write [cuda:5] for GPU 5, or gpus for every GPU"),
        ({"devices": ["cpu", 1]}, "devices: 1 is not a device; write [cuda:1] for GPU 1"),
    ],
)
def test_values_no_device_could_run_are_one_line_errors(data, expected):
    assert error_of(data).startswith(f"x.yaml: {expected}")


def test_the_yaml_spelling_of_infinity_is_refused(tmp_path):
    path = tmp_path / "inf.yaml"
    path.write_text("timing:\n  max_time: .inf\n")
    with pytest.raises(UserError, match=r"inf.yaml: timing.max_time: inf is invalid: Input should be a finite number$"):
        load_config(path)
