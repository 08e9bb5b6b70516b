"""The conv family's report chart: TFLOP/s per device, precision and layer (layout, step, batch)."""

from __future__ import annotations

import json

import pandas as pd

from suite.report.charts import Chart, count_text, tflops_bars


def _pair(value: object) -> str:
    """A [h, w] parameter (stored as JSON text) as `h×w`; anything else as it is."""
    try:
        dims = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    return "×".join(str(d) for d in dims) if isinstance(dims, list) else str(value)


def _conv_layer(rows: pd.DataFrame) -> pd.Series:
    """`resnet50-conv2-3x3 · nchw · fwd · b32`: the layer's name (or its dimensions), layout, step, batch; never
    the whole parameter dump, which made each bar label wider than the chart."""
    def one(r: dict) -> str:
        layer = r.get("layer")
        if not isinstance(layer, str) or not layer:  # a shape without a name: 56×56 64→64 k3×3
            channels = f"{count_text(r.get('in_channels'))}→{count_text(r.get('out_channels'))}"
            layer = f"{_pair(r.get('size'))} {channels} k{_pair(r.get('kernel'))}"
        return f"{layer} · {r.get('layout')} · {r.get('step')} · b{count_text(r.get('batch'))}"

    return pd.Series([one(r) for r in rows.to_dict("records")], index=rows.index, dtype=object)


def conv_bars(rows: pd.DataFrame, machines: list[str]) -> list[Chart]:
    """TFLOP/s per device, precision and layer (layout, step, batch)."""
    return tflops_bars(rows, machines, _conv_layer)


CHARTS = [conv_bars]
