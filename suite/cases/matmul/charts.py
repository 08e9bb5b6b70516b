"""The matmul family's report chart: TFLOP/s per device, dtype and shape (a matmul result without a rate draws
nothing rather than the generic median times)."""

from suite.report.charts import tflops_bars

CHARTS = [tflops_bars]
