"""Performance per watt: the end-of-run summary's rate/W beside the rate, and the report's table and chart.

The machines here are SYNTHETIC (tests/fleet.py: a real CPU run copied onto fake GPUs) with perf_per_w and
power_w written by hand; nothing was measured on a GPU.
"""

from __future__ import annotations

from suite.report import charts
from suite.report.command import render_report
from suite.results import load_results
from suite.summary import render
from tests import fleet


def test_the_summary_shows_rate_per_watt_beside_the_rate_only_where_recorded():
    benches = [{"stats": {"median": 0.01}, "extra_info": {
        "case": "matmul", "device": "cuda:0", "dtype": "bfloat16", "tflops": tf, "perf_per_w": ppw, "power_w": w}}
        for tf, ppw, w in ((600.0, 0.9, 667.0), (400.0, 1.1, 364.0))]
    lines = render(benches)
    start = lines.index(next(x for x in lines if x.startswith("perf per watt")))
    assert lines[start + 2].split() == ["matmul", "cuda:0", "600", "TFLOP/s", "0.9", "TFLOP/s/W", "667", "W"]
    for b in benches:
        del b["extra_info"]["perf_per_w"]
    assert not any(x.startswith("perf per watt") for x in render(benches))


def _machine(folder, host: str, watts: float) -> None:
    data = fleet.machine(host, n_gpus=1, seed=len(host))
    for b in data["benchmarks"]:
        extra = b["extra_info"]
        rate = next((extra[k] for k in fleet.RATE_KEYS if isinstance(extra.get(k), float)), None)
        if rate is not None:
            extra.update(perf_per_w=rate / watts, power_w=watts)
    fleet.write(folder, host, data)


def test_the_report_puts_rate_and_rate_per_watt_side_by_side_per_family_and_machine(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or "")
    _machine(tmp_path, "frugal", 300.0)
    _machine(tmp_path, "hungry", 700.0)
    html = render_report(load_results([tmp_path]))
    assert html.count("rate per watt") >= 5 and "TFLOP/s/W" in html and "GB/s/W" in html
    assert "700 W" in html and "300 W" in html
    titles = [fig.axes[1].get_xlabel() for fig in drawn if len(fig.axes) == 2
              and fig.axes[1].get_xlabel().endswith("/W (higher is better)")]
    assert "TFLOP/s/W (higher is better)" in titles
    two_bars = next(fig for fig in drawn if fig.axes and fig.axes[-1].get_xlabel() == titles[0])
    rate, per_watt = (sorted(p.get_width() for p in ax.patches) for ax in two_bars.axes)
    assert len(rate) == 2 and per_watt[1] / per_watt[0] > 2  # the same speed at 300 W and at 700 W
