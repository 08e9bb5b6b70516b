"""Loads the suite's pytest plugin for `pytest benchmarks` (config, devices, parametrisation, JSON)."""

# Imported before the plugins load torch and the config: under torchrun a rank then dies with its agent from
# its first seconds.
import suite.agent  # noqa: F401

# suite.distributed: torchrun runs (process group, lockstep timer, only rank 0 writes results).
pytest_plugins = ["suite.plugin", "suite.distributed"]
