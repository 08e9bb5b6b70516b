"""Tooling that checks the suite itself: the GPU check, accuracy, evidence, wheel carrying, the H200 probe.

Installed with the package (`python -m suite accuracy`, `python -m suite.tools.gpu_check`), but never imported
by a run (`suite.plugin`), by the analysis commands, or by a family's measure.py; each family's part of it is
its `suite/cases/<family>/checks.py`, reached through `suite.cases.family_part(name, "checks")`.
"""

from pathlib import Path

# The checkout (or the installed tree): commands run from it, and the tools read its configs, benchmarks and docs.
ROOT = Path(__file__).resolve().parent.parent.parent
