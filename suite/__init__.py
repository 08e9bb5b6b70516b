"""Multi-device benchmarking suite: YAML-configured pytest-benchmark cases, results and reports."""

__version__ = "0.1.0"

# Version of the results layout we add to pytest-benchmark's JSON (the `suite` block, extra_info keys,
# machine_info.devices). Bump it when a reader would misread an older file; suite.results migrates older ones.
SCHEMA_VERSION = 1
