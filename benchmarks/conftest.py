"""Loads the suite's pytest plugin for `pytest benchmarks` (config, devices, parametrisation, JSON)."""

# suite.distributed: torchrun runs (process group, lockstep timer, only rank 0 writes results).
pytest_plugins = ["suite.plugin", "suite.distributed"]
