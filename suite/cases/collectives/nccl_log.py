"""What NCCL says it chose, read from its INFO log (NCCL_DEBUG=INFO, subsystems INIT, ENV and GRAPH).

Read once per run from the log NCCL writes while its first communicator starts (suite.distributed.launch sets
it up): NVLink SHARP (NVLS) multicast, multi-node NVLink, the channels of each kind, and the algorithm and
protocol where the environment or an nccl.conf set them. Which algorithm each call took is NCCL's TUNING
subsystem, a line per collective inside the timed loop: not read. Lines from another rank are alike.
"""

from __future__ import annotations

import re

from suite.cases.collectives.nccl_tests import library_version

_NVLS = re.compile(r"NVLS multicast support is (not )?available")
_MNNVL = re.compile(r"\bnNodes \d+ localRanks \d+ localRank \d+ MNNVL (\d+)")
_SET = re.compile(r"NCCL_(ALGO|PROTO) set by environment to (\S+)")
# `32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer` (2.19
# on; 2.18 has no collnet count): the per-peer count is not a kind of channel.
_CHANNELS = re.compile(r"\b(\d+) (coll|collnet|nvls|p2p) channels\b(?! per)")


def nccl_choices(text: str) -> dict:
    """Only what the log says: `version`, `nvls` (multicast available), `mnnvl`, `algo`/`proto` (as set by
    the environment), `<kind>_channels`; the first of each (one process's log is one rank's)."""
    found: dict = {}
    if version := library_version(text):
        found["version"] = version
    if nvls := _NVLS.search(text):
        found["nvls"] = nvls.group(1) is None
    if mnnvl := _MNNVL.search(text):
        found["mnnvl"] = mnnvl.group(1) != "0"
    for match in _SET.finditer(text):
        found.setdefault(match.group(1).lower(), match.group(2))
    for match in _CHANNELS.finditer(text):
        found.setdefault(f"{match.group(2)}_channels", int(match.group(1)))
    return found
