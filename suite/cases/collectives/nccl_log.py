"""What NCCL says it chose, read from its INFO log (NCCL_DEBUG=INFO, subsystems INIT, ENV and GRAPH).

Read once per run from the log NCCL writes while its first communicator starts (suite.distributed.launch sets
it up): NVLink SHARP (NVLS) multicast, multi-node NVLink, the channels of each kind, and the algorithm and
protocol where the environment or an nccl.conf set them. Which algorithm and protocol a call took is NCCL's
TUNING subsystem, a line per collective: read for one untimed call per case (suite.distributed.launch's
nccl_tuning_log), never inside the timed loop. Lines from another rank are alike.
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


# `NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}` (2.19 on; rank 0 only).
_TUNING = re.compile(r"NCCL INFO \w+: \d+ Bytes -> Algo (\w+) proto (\w+)")


def tuning_choice(text: str) -> dict:
    """`nccl_algo` and `nccl_proto` of the last collective the TUNING log names; {} where it names none (Send
    and Recv, which all_to_all is made of, log no such line)."""
    found = _TUNING.findall(text)
    return {"nccl_algo": found[-1][0], "nccl_proto": found[-1][1]} if found else {}
