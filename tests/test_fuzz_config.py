"""Fuzzing the config loader: every input either loads or gives the one-line error; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.config import json_schema, load_config, parse_config_text
from suite.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [(ROOT / "configs" / name).read_text() for name in ("default.yaml", "quick.yaml")]
# Together with the results-loader fuzz this stays well under a minute on a 2-core machine.
EXAMPLES = 1000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
# Long fuzzing: the slow tier (`pytest -m slow`).
pytestmark = pytest.mark.slow

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=12),
    st.sampled_from(["all", "cpu", "cuda:1", "float32", "bf16", "64MiB", "4x4x4", "1e9", "-1", "0"]),
)
keys = st.one_of(st.text(max_size=10), st.sampled_from(["devices", "timing", "cases", "matmul", "dtypes",
                                                        "shapes", "cpu", "enabled", "max_time", "min_rounds"]))
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(keys, inner, max_size=4)), max_leaves=12)


def loads_or_user_error(text: str) -> None:
    try:
        parse_config_text(text, "fuzz.yaml")
    except UserError as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml: ") and "\n" not in message and "Traceback" not in message


@FUZZ
@given(documents)
def test_random_documents(doc):
    loads_or_user_error(yaml.safe_dump(doc))


@FUZZ
@given(st.sampled_from(SHIPPED), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 8),
                                                    st.text(alphabet=" \t\n:-[]{},#&*!|>'\"%@`x0.5", max_size=3)),
                                          min_size=1, max_size=4))
def test_mutations_of_the_shipped_configs(text, edits):
    for position, delete, insert in edits:
        at = position % (len(text) + 1)
        text = text[:at] + insert + text[at + delete:]
    loads_or_user_error(text)


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=200))
def test_random_bytes_in_a_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_bytes(data)
    try:
        load_config(path)
    except UserError as exc:
        assert "\n" not in str(exc)


def test_schema_validates_the_shipped_configs():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for name in ("default.yaml", "quick.yaml"):
        jsonschema.validate(yaml.safe_load((ROOT / "configs" / name).read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"devcies": "all"}, schema)
    assert json.dumps(schema)
