"""Fuzzing the results loader: random and truncated JSON either loads or gives one-line warnings/errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.errors import UserError
from suite.results import load_results

DATA = Path(__file__).resolve().parent / "data"
GOOD = {name: (DATA / name).read_bytes() for name in ("h200x2.json", "cpu_only.json", "schema0.json", "foreign.json")}
PARTIAL = (DATA / "partial" / "crash.partial.jsonl").read_bytes()
# 1000 truncations + 1000 random documents: 2000 inputs, well under a minute with the config fuzz.
EXAMPLES = 1000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
# Long fuzzing: the slow tier (`pytest -m slow`).
pytestmark = pytest.mark.slow

vocabulary = st.sampled_from(["benchmarks", "stats", "median", "iqr", "q1", "q3", "rounds", "extra_info", "case",
                              "device", "src", "dst", "bytes", "gbps", "tflops", "suite", "schema_version",
                              "schema", "version", "machine_info", "devices", "node", "name", "fullname",
                              "params", "partial", "software", "id", "kind", "memory_bytes"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=True),
                    st.text(max_size=8), vocabulary)
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.one_of(vocabulary, st.text(max_size=5)),
                                                                          inner, max_size=6)), max_leaves=25)


def load_or_user_error(path: Path) -> None:
    try:
        loaded = load_results([path])
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    assert all("\n" not in w for w in loaded.warnings)
    # A file that loads has results: one that holds none is a UserError, never an empty table that the
    # report and health would have to survive.
    assert len(loaded.table) > 0

# Files that parse but measured nothing: each is "no results" (exit 2), never a crash or a verdict.
OURS = json.loads(GOOD["h200x2.json"])
EMPTY = {
    "bare.json": json.dumps({"benchmarks": []}),
    "ours.json": json.dumps({**OURS, "benchmarks": []}),
    "no_stats.json": json.dumps({**OURS, "benchmarks": [{"name": "x", "stats": {}}]}),
    # The partial file of a run whose every benchmark was skipped: the header and progress lines only.
    "skipped.partial.jsonl": PARTIAL.decode().splitlines()[0] + '\n{"started": "test_matmul[cpu]"}\n',
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_files_without_results_are_one_line_errors(tmp_path, name):
    path = tmp_path / name
    path.write_text(EMPTY[name], encoding="utf-8")
    # A file whose benchmarks lack stats says what is malformed, not that it holds nothing.
    held = "no readable benchmark .*without stats.median" if name == "no_stats.json" else "no benchmark results"
    with pytest.raises(UserError, match=f"no results: .* holds {held}") as info:
        load_results([path])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("command", ["health", "report", "compare"])
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_commands_on_files_without_results_exit_2_with_one_line(tmp_path, capsys, command, name):
    from suite.cli import main

    path = tmp_path / name
    path.write_text(EMPTY[name], encoding="utf-8")
    argv = {"health": [str(path)], "report": [str(path), "-o", str(tmp_path / "r.html")],
            "compare": [str(DATA / "h200x2.json"), str(path)]}[command]
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no results: ")
    assert not (tmp_path / "r.html").exists()


@FUZZ
@given(st.sampled_from(sorted(GOOD) + ["partial"]), st.floats(0, 1))
def test_truncated_files(tmp_path_factory, name, fraction):
    data = PARTIAL if name == "partial" else GOOD[name]
    suffix = ".partial.jsonl" if name == "partial" else ".json"
    path = tmp_path_factory.mktemp("fuzz") / f"cut{suffix}"
    path.write_bytes(data[: int(len(data) * fraction)])
    load_or_user_error(path)


@FUZZ
@given(documents)
def test_random_documents(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "random.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    load_or_user_error(path)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.sampled_from(sorted(GOOD)), st.data())
def test_mutated_benchmark_entries(tmp_path_factory, name, data):
    """A real file with one benchmark's fields replaced by random values."""
    obj = json.loads(GOOD[name])
    bench = obj["benchmarks"][0]
    key = data.draw(st.sampled_from(sorted(bench)))
    bench[key] = data.draw(documents)
    if isinstance(bench.get("stats"), dict) and bench["stats"]:
        skey = data.draw(st.sampled_from(sorted(bench["stats"])))
        bench["stats"][skey] = data.draw(scalars)
    path = tmp_path_factory.mktemp("fuzz") / "mutated.json"
    path.write_text(json.dumps(obj, allow_nan=True))
    load_or_user_error(path)
