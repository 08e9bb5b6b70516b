"""Invalid numbers through the analysis side: NaN, Inf, zero and negative figures anywhere in a results file
go through report, compare and health without a traceback, and no gate passes over them."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.cli import main
from suite.report import charts
from suite.results import NUMERIC_KEYS, RATE_UNITS, STAT_KEYS, load_results

DATA = Path(__file__).parent / "data"
RUN = json.loads((DATA / "real" / "h200_quick.json").read_text(encoding="utf-8"))
# The first benchmark of each family of a real H200 run: health calls it HEALTHY, so a gate that passes
# garbage shows, and a report of it is drawn in well under a second.
FIRST = {}
for bench in RUN["benchmarks"]:
    FIRST.setdefault(bench["extra_info"]["case"], bench)
SMALL = {**RUN, "benchmarks": list(FIRST.values())}
BAD = st.sampled_from([math.nan, math.inf, -math.inf, 0, 0.0, -1, -2.5e-6])
# The loader's rule, restated: every number finite; a time or rate positive, every other number it is
# measured by non-negative.
POSITIVE = {"median", *RATE_UNITS, "traffic_gbps", "algbw"}


def broken(bench: dict) -> bool:
    def bad(numbers: dict, checked) -> bool:
        return any(not math.isfinite(v) or (k in checked and (v < 0 or (v == 0 and k in POSITIVE)))
                   for k, v in numbers.items() if isinstance(v, (int, float)))

    return bad(bench["stats"], STAT_KEYS) or bad(bench["extra_info"], NUMERIC_KEYS)


def _draw(fig) -> str:
    """Lays the figure out, as the PNG would (where an axis that cannot be log-scaled fails), without
    encoding it: the property test builds dozens of reports."""
    fig.canvas.draw()
    return ""


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_bad_numbers_never_crash_a_command_nor_pass_a_gate(tmp_path_factory, capsys, data):
    doc = copy.deepcopy(SMALL)
    benches = doc["benchmarks"]
    for _ in range(data.draw(st.integers(1, 4))):
        bench = data.draw(st.sampled_from(benches))
        where = data.draw(st.sampled_from(["stats", "extra_info", "duplicate"]))
        if where == "duplicate":
            benches.append(copy.deepcopy(bench))
            continue
        numeric = sorted(k for k, v in bench[where].items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool))
        bench[where][data.draw(st.sampled_from(numeric))] = data.draw(BAD)
    folder = tmp_path_factory.mktemp("invalid")
    base, cand = folder / "baseline.json", folder / "candidate.json"
    base.write_text(json.dumps(SMALL), encoding="utf-8")
    cand.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")
    invalid = (load_results([cand]).table["invalid"] != "").any()
    assert invalid == any(broken(b) for b in benches)
    capsys.readouterr()
    with mock.patch.object(charts, "_png", _draw):
        codes = {
            "compare": main(["compare", str(base), str(cand)]),
            "health": main(["health", str(cand)]),
            "report": main(["report", str(base), str(cand), "-o", str(folder / "r.html")]),
        }
    err = capsys.readouterr().err
    assert "Traceback" not in err and codes["report"] == 0, (codes, err)
    if invalid:
        assert codes["compare"] != 0 and codes["health"] != 0, (codes, err)
        assert "invalid: " in (folder / "r.html").read_text(encoding="utf-8")


def test_an_invalid_twin_of_a_valid_result_still_shows_in_the_report(tmp_path):
    # A file holding one test id twice is shown once; where one copy is invalid, that copy is the one shown
    # (the first copy valid, the second NaN: keeping the first hid the NaN).
    doc = copy.deepcopy(SMALL)
    twin = copy.deepcopy(next(b for b in doc["benchmarks"] if b["extra_info"]["case"] == "ceiling"))
    twin["stats"]["hd15iqr"] = math.nan
    doc["benchmarks"].append(twin)
    cand = tmp_path / "candidate.json"
    cand.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")
    with mock.patch.object(charts, "_png", _draw):
        assert main(["report", str(cand), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "invalid: " in html and "appear twice in one machine" in html
