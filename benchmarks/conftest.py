"""Loads the suite's pytest plugin for `pytest benchmarks` (config, devices, parametrisation, JSON)."""

pytest_plugins = ["suite.plugin"]
