"""A torchrun rank dies with its agent: set as early as a rank can, by benchmarks/conftest.py, before pytest
loads the suite's plugins (torch, the config). A module of its own, not the plugin: a plugin imported before
pytest registers it cannot have its asserts rewritten (PytestAssertRewriteWarning)."""

from __future__ import annotations

import os
import sys


def die_with_agent(environ: dict | None = None) -> bool:
    """Under torchrun on Linux: this rank is killed (SIGKILL) when its agent dies. Workers run in sessions of
    their own, so a time limit that kills only torchrun (`timeout -s KILL torchrun ...`) would leave them
    running without the agent's store: every later case fails, and rank 0 writes a complete-looking JSON of
    the cases before and deletes the partial file that --suite-resume needs. Returns whether it is set."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in env:
        return False
    import ctypes
    import signal

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no prctl in this libc: ranks outlive a killed agent, as before
        return False


DIES_WITH_AGENT = die_with_agent()
