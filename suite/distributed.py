"""torch.distributed for the collectives: launch environment, start-up with named missing ranks, lockstep timer.

Also a pytest plugin (registered from benchmarks/conftest.py): under torchrun it creates the process group at
session start (after every rank arrived and showed the same config hash), keeps rank != 0 from writing results,
and gives the collective tests a timer whose round time is the slowest rank's, the same on every rank.
`python -m suite.distributed --nproc 2 [pytest args]` wraps torchrun for one node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from suite import pb_adapter
from suite.cases import FAMILIES, family_read
from suite.config import resolved
from suite.errors import UserError

TORCHRUN_HINT = (
    "torchrun --nproc-per-node=N -m pytest benchmarks/test_collectives.py --benchmark-json out.json "
    "(or: python -m suite.distributed --nproc N)"
)
# How a round is timed, against nccl-tests (barrier, host timer around `iters` collectives, time averaged
# across ranks): we also barrier and time `iterations` collectives with the host clock after a device
# synchronisation, but take the MAXIMUM across ranks, not the mean: a collective is done only when its slowest
# rank is, and the max gives every rank the same number, so any rank could write the results.
ROUND_TIME = "max over ranks of (barrier; t0; iterations x collective; synchronize; t1)"
# A client's connection to the store gets this share of timeout_s: torch's TCPStore client tries once more
# after its first connect timeout, so a missing rank 0 is reported after about timeout_s, not twice that.
CONNECT_SHARE = 0.5
# Our keys in the store (torchrun's agent store is shared with torch's own keys).
_STORE_PREFIX = "gpubench-suite"
# The environment that changes what a collective measures (links, algorithms, interfaces): recorded with the
# results, so two runs' numbers are read next to their settings.
# NCCL's choices (NCCL_ALGO, NCCL_PROTO, NVLS) move all-reduce busbw by a third; FI_* (libfabric, EFA) and
# UCX_* set the inter-node transport.
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CCL_", "TORCH_XCCL_", "FI_", "UCX_")
ENV_SUFFIXES = ("_SOCKET_IFNAME",)
# NCCL also reads its variables from these files (NCCL_CONF_FILE first, then the user's, then the system's):
# recorded under their path, their settings joined with "; ".
NCCL_CONF_FILES = ("~/.nccl.conf", "/etc/nccl.conf")


# The run's count of case failures that may have left a collective timed out (a failure while timing, or a
# rank's own failure before it): a Gloo group is made anew after one (DistState._renew_group).
GROUP_FAILURES = "group-failures"


class RankTimeout(RuntimeError):
    """Some ranks did not arrive within the timeout; the message names them."""


class CaseAborted(RuntimeError):
    """Another rank left this case before an agreement this rank waited at (it failed or skipped alone): go to
    the case's last agreement (DistState.ready), which brings that rank's reason."""


# What a rank that leaves a case early writes, before its reason, as its problem at the agreement the others
# may wait at (suite.distributed.leave): they stop waiting there at once, not after timeout_s.
_LEFT = "\x00left: "
# The value of an agreement's `done` key when a rank gave up waiting there first (see sync).
_ABANDONED = "abandoned"


@dataclass(frozen=True)
class LaunchEnv:
    """What torchrun (or srun + torchrun) tells each rank through the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the store; every rank is a client
    run_id: str
    # Every rank's hostname, by rank, once start-up gathered them (empty before). With them local_world_size
    # is the ranks on this rank's host: torchrun's LOCAL_WORLD_SIZE counts one agent's ranks, and under srun
    # with one task per GPU each host runs several agents of one rank each.
    hosts: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: dict | None = None) -> LaunchEnv | None:
        """None when not launched by torchrun (RANK and WORLD_SIZE unset)."""
        env = os.environ if environ is None else environ
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        try:
            world = int(env["WORLD_SIZE"])
            return cls(
                rank=int(env["RANK"]),
                world_size=world,
                local_rank=int(env.get("LOCAL_RANK", 0)),
                local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
                master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                master_port=int(env.get("MASTER_PORT", 29500)),
                agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
                run_id=f"{env.get('TORCHELASTIC_RUN_ID', 'none')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}",
            )
        except ValueError as exc:
            raise UserError(f"torchrun environment: {exc}; RANK, WORLD_SIZE, LOCAL_RANK must be integers") from None

    @property
    def nnodes(self) -> int:
        """Distinct hosts once start-up gathered the hostnames; before, torchrun's count of agents."""
        if self.hosts:
            return len(set(self.hosts))
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def host_position(self) -> int | None:
        """This rank's position among the ranks on its host, once start-up gathered the hostnames."""
        return self.hosts[: self.rank].count(self.hosts[self.rank]) if self.hosts else None

    def with_hosts(self, hosts: list[str]) -> LaunchEnv:
        """This environment with every rank's hostname, and local_world_size counted from them."""
        return dataclasses.replace(self, hosts=tuple(hosts), local_world_size=hosts.count(hosts[self.rank]))


def launch_environment(environ: dict | None = None) -> dict[str, str]:
    """The NCCL_*, TORCH_NCCL_*, GLOO_*, CCL_*, TORCH_XCCL_*, FI_*, UCX_* and *_SOCKET_IFNAME variables, sorted,
    and the settings of the NCCL configuration files that exist."""
    env = os.environ if environ is None else environ
    found = {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES) or k.endswith(ENV_SUFFIXES)}
    for name in (env.get("NCCL_CONF_FILE"), *NCCL_CONF_FILES):
        path = Path(name).expanduser() if name else None
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path else []
        except OSError:
            continue
        settings = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if settings:
            found[str(path)] = "; ".join(settings)
    return found


def nccl_version() -> str | None:
    """The NCCL torch runs with (torch.cuda.nccl.version()), where CUDA is available; None elsewhere."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch without NCCL, or a driver problem: nothing to record
        return None
    # A tuple (2, 21, 5); older torch gave NCCL's own integer code, kept as it is.
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def xccl_available() -> bool:
    """Whether this torch has Intel's XCCL backend (torch.distributed.is_xccl_available: torch 2.7 on, built
    into the XPU wheels from torch 2.8)."""
    import torch.distributed as dist

    try:
        return bool(getattr(dist, "is_xccl_available", lambda: False)())
    except Exception:  # noqa: BLE001 - a broken XPU runtime: no XCCL
        return False


def xccl_version() -> str | None:
    """oneCCL's version where this torch exposes it (a private binding in newer XPU builds), else None."""
    try:
        from torch._C import _distributed_c10d

        return str(_distributed_c10d.get_xccl_version())
    except Exception:  # noqa: BLE001 - absent in most builds: nothing to record
        return None


def resolve_backend(setting: str, devices: list[str]) -> str:
    """auto -> NCCL when CUDA devices are selected and NCCL is built in, else Gloo. XCCL (Intel XPUs) is only
    taken when asked for (backend: xccl): it is untested here, and a hung XCCL collective does not time out
    unless TORCH_XCCL_BLOCKING_WAIT=1 (docs/collectives.md)."""
    import torch
    import torch.distributed as dist

    if setting != "auto":
        return setting
    wants_cuda = any(d.startswith("cuda") for d in devices) and torch.cuda.is_available()
    return "nccl" if wants_cuda and dist.is_nccl_available() else "gloo"


# The device kind each GPU backend's ranks run on; every other backend (Gloo) runs on the CPU.
BACKEND_DEVICE_KIND = {"nccl": "cuda", "xccl": "xpu"}


def rank_device(backend: str, local_rank: int, gpu_count: int | None = None, position: int | None = None) -> str:
    """The rank's own device: cuda:LOCAL_RANK for NCCL, xpu:LOCAL_RANK for XCCL (device 0 when each rank sees
    one GPU), the CPU for Gloo. `position`, the rank's place among its host's ranks, wins where it fits the
    visible devices: srun starting one torchrun agent per task gives every rank LOCAL_RANK 0 (NCCL's
    "Duplicate GPU"), as do several agents on one host; agents given disjoint CUDA_VISIBLE_DEVICES keep
    LOCAL_RANK, their positions past the devices they see."""
    kind = BACKEND_DEVICE_KIND.get(backend)
    if kind is None:
        return "cpu"
    from suite.devices import current_platform

    count = current_platform().count(kind) if gpu_count is None else gpu_count
    if count == 0:
        raise UserError(f"backend {backend} needs a {kind} device per rank and this node shows none: set "
                        "cases.collectives.backend: gloo (or auto)")
    if count == 1:
        return f"{kind}:0"
    if position is not None and position < count:
        return f"{kind}:{position}"
    if local_rank >= count:
        raise UserError(f"LOCAL_RANK {local_rank} but this node shows {count} GPU(s): start at most {count} "
                        "ranks per node (--nproc-per-node)")
    return f"{kind}:{local_rank}"


def config_digest(payload: Any) -> str:
    """sha256 of the resolved config as canonical JSON: equal on every rank started with the same config."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def open_store(env: LaunchEnv, timeout_s: float):
    """A TCPStore on rank 0 (or torchrun's agent store) that does not wait for workers: we wait ourselves, so
    a timeout can name the ranks that never came."""
    import torch.distributed as dist

    is_master = env.rank == 0 and not env.agent_store
    try:
        store = dist.TCPStore(env.master_addr, env.master_port, None, is_master,
                              timeout=timedelta(seconds=timeout_s * CONNECT_SHARE), wait_for_workers=False,
                              multi_tenant=True)
        store.set_timeout(timedelta(seconds=timeout_s))
        return store
    except (RuntimeError, OSError) as exc:  # DistStoreError/DistNetworkError derive from RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RankTimeout(
            f"rank {env.rank}: could not reach the store at {env.master_addr}:{env.master_port} within "
            f"{timeout_s:g} s (rank 0 missing, or MASTER_ADDR/MASTER_PORT wrong?): {first}"
        ) from None


def sync(store, key: str, rank: int, world_size: int, timeout_s: float, problem: str | None = None,
         what: str | None = None) -> dict[int, str]:
    """Every rank arrives at `key`, optionally with a problem; return {rank: problem} for the ranks that had one.

    Raises RankTimeout naming the ranks that did not arrive within `timeout_s`. O(1) store operations per rank
    unless something is wrong (then the keys are scanned to name the ranks).
    """
    store.set(f"{key}/rank{rank}", problem or "")
    if problem:
        store.add(f"{key}/problems", 1)
    # Whether the agreement happened is one atomic decision (compare_set on `done`): the last rank to arrive
    # marks it done, a rank that gives up waiting marks it abandoned, and whichever comes first holds. Without
    # that, a rank arriving after another gave up would pass an agreement the other never completed and
    # stay one step out of line for the rest of the run.
    if store.add(f"{key}/arrived", 1) == world_size:
        # The failure count as the agreement completes, for every rank to read (DistState._renew_group): read
        # later, a rank that already went on could have raised it for one rank and not for another.
        store.set(f"{key}/failures", str(store.add(GROUP_FAILURES, 0)))
        store.compare_set(f"{key}/done", "", "1")
    try:
        store.wait([f"{key}/done"], timedelta(seconds=timeout_s))
    except RuntimeError:
        # Who is missing, read before giving up on them (a late rank may arrive the moment after).
        missing = [r for r in range(world_size) if not store.check([f"{key}/rank{r}"])] or ["?"]
        if store.compare_set(f"{key}/done", "", _ABANDONED) != _ABANDONED.encode():
            return _problems(store, key, world_size)  # everyone arrived just as the wait gave up
        raise RankTimeout(
            f"rank(s) {', '.join(map(str, missing))} of {world_size} did not arrive at {what or key} within "
            f"{timeout_s:g} s (timeout_s in the collectives config); see the missing rank's own output "
            "(torchrun prefixes it with [rankN]:) for why it crashed or hangs"
        ) from None
    if store.get(f"{key}/done") == _ABANDONED.encode():
        raise RankTimeout(
            f"rank {rank} reached {what or key} after the other ranks had stopped waiting for it "
            f"({timeout_s:g} s, timeout_s in the collectives config); see this rank's output above for what "
            "kept it"
        )
    return _problems(store, key, world_size)


def _problems(store, key: str, world_size: int) -> dict[int, str]:
    """{rank: problem} of the ranks that arrived at `key` with one."""
    if store.add(f"{key}/problems", 0) == 0:
        return {}
    # A rank that left (see leave) never arrives: read only the ranks that did (something is wrong already).
    keys = {r: f"{key}/rank{r}" for r in range(world_size)}
    found = {r: store.get(k).decode() for r, k in keys.items() if store.check([k])}
    return {r: text for r, text in found.items() if text}


def leave(store, key: str, rank: int, problem: str) -> None:
    """This rank will not arrive at `key`: the ranks waiting there wake at once and see `problem` (marked as
    left) from sync. Three store operations, only on this failure path."""
    store.set(f"{key}/rank{rank}", _LEFT + problem)
    store.add(f"{key}/problems", 1)
    store.compare_set(f"{key}/done", "", "1")  # unless the others already gave up on it (sync)


@dataclass
class DistState:
    """This rank's view of the running process group."""

    env: LaunchEnv
    backend: str
    device: str
    timeout_s: float
    digest: str
    store: Any = None
    owns_group: bool = False
    environments: dict[int, dict] = field(default_factory=dict)  # rank -> launch_environment(); rank 0 only
    _seq: int = field(default=0, repr=False)
    # The running case (begin_case .. end_case): its keys' prefix, id and agreements so far. Agreements in a
    # case are counted from 1 in that case, so a rank that left one early is not behind in the next.
    _case: str | None = field(default=None, repr=False)
    _case_id: str = field(default="", repr=False)
    _case_seq: int = field(default=0, repr=False)
    _cases: int = field(default=0, repr=False)
    _tries: dict = field(default_factory=dict, repr=False)  # case id -> how often this rank started it
    # After a failure while timing: the case's key prefix and id (its posts name the rank that failed), and
    # the extra seconds the next agreement waits (the other ranks may wait in a collective up to timeout_s).
    _failed_timing: tuple[str, str] | None = field(default=None, repr=False)
    _grace_s: float = field(default=0.0, repr=False)
    # The run's failures seen so far (GROUP_FAILURES in the store), and how often the process group was made
    # anew after one (_renew_group).
    _failures_seen: int = field(default=0, repr=False)
    _renewals: int = field(default=0, repr=False)

    def agree(self, what: str, problem: str | None = None) -> dict[int, str]:
        """Lockstep point between ranks (outside timing): every rank reports its problem or none.

        In a case, raises CaseAborted when a rank left the case instead of arriving (DistState.ready)."""
        if self._case is None:
            self._seq += 1
            key = f"step{self._seq}:{what}"
        else:
            self._case_seq += 1
            key = f"{self._case}/{self._case_seq}"
        found = self._sync(key, problem, what)
        left = {r: text[len(_LEFT):] for r, text in found.items() if text.startswith(_LEFT)}
        if left:
            # Not here: the rank that left makes the group anew at `ready`, where the others come next.
            raise CaseAborted(f"{by_rank(left)} (left {self._case_id} before {what})")
        self._renew_group(key)
        return found

    # --- one case in lockstep (suite.plugin.run_case) ---

    def begin_case(self, case_id: str) -> None:
        """Every rank calls it as a case starts: the case's agreements get keys of their own, named by the case
        and how often this rank started it, never by a count of cases (a rank that failed before one case's
        start would pair every later case with another case on the other ranks)."""
        self._cases += 1
        self._tries[case_id] = self._tries.get(case_id, 0) + 1
        self._case, self._case_id, self._case_seq = f"case:{case_id}:{self._tries[case_id]}", case_id, 0

    def end_case(self) -> None:
        self._case = None

    def ready(self, problem: dict | None) -> dict[int, dict]:
        """The case's last agreement before timing, reached by every rank whatever happened in its build,
        check or set-up: `problem` is this rank's own ({"kind": "skip" or "fail", "text": ...}) or None.
        Returns {rank: problem} of the ranks that had one; if any, no rank may time the case.

        A rank with a problem first leaves the case's next agreement, where the others may wait for it (it
        failed before reaching the one they are at): they wake at once (CaseAborted) and come here."""
        if problem is not None:
            leave(self.store, f"{self._case}/{self._case_seq + 1}", self.env.rank, problem["text"])
        if problem is not None and problem.get("kind") == "fail":
            # It may have left the others in a collective of the build or check, which then timed out.
            self.count_failure()
        key = f"{self._case}/ready"
        found = self._sync(key, json.dumps(problem) if problem else None, f"{self._case_id} start of timing")
        self._renew_group(key)
        return {r: json.loads(text) for r, text in found.items()}

    def count_failure(self) -> None:
        """Count a failure that may have closed the Gloo group, before this rank's next agreement."""
        self.store.add(GROUP_FAILURES, 1)

    def _sync(self, key: str, problem: str | None, what: str) -> dict[int, str]:
        timeout, self._grace_s = self.timeout_s + self._grace_s, 0.0
        try:
            found = sync(self.store, key, self.env.rank, self.env.world_size, timeout, problem, what=what)
        except RankTimeout as exc:
            raise RankTimeout(f"{exc}{self._timing_failure_note()}") from None
        self._failed_timing = None  # every rank came: the failure while timing is behind them all
        return found

    def _renew_group(self, key: str) -> None:
        """After a case failed, a new Gloo process group, made by every rank at once at agreement `key`.

        A rank that failed while timing, or in its build or check, may have left the others in a collective
        that gave up after timeout_s, and Gloo closes a group's connections on such a timeout: every later
        collective of that group fails at once ("Application timeout caused pair closure"), so every later case
        would fail. Each rank counts such a failure before it reaches its next agreement; the rank completing
        an agreement records the count there (sync), so every rank reads the same number and those that see it
        grow rebuild together. Called only where every rank goes on (not an agreement a rank left, whose
        ranks all come to `ready` next). NCCL's watchdog ends the ranks instead (docs)."""
        import torch.distributed as dist

        if self.backend != "gloo" or not self.owns_group:
            return
        failures = int(self.store.get(f"{key}/failures"))
        if failures == self._failures_seen:
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        self._renewals += 1
        dist.init_process_group("gloo", store=dist.PrefixStore(f"pg{self._renewals}", self.store),
                                rank=self.env.rank, world_size=self.env.world_size,
                                timeout=timedelta(seconds=self.timeout_s))
        self._failures_seen = failures  # only once made: a failed start is tried again at the next agreement

    def timing_failed(self, text: str) -> dict[int, str]:
        """This rank failed while timing the case (no agreement is possible there: the others are inside a
        collective that waits for it until timeout_s). Posts `text` for them and returns what the other ranks
        posted so far, {rank: text}: a rank that fails on waiting names the rank it waited for."""
        key = f"{self._case}/timing"
        number = self.store.add(f"{key}/count", 1)
        self.store.set(f"{key}/{number}", json.dumps([self.env.rank, text]))
        self.count_failure()  # before this rank reaches the next agreement (_renew_group)
        self._failed_timing = (self._case, self._case_id)
        # The others leave the collective up to timeout_s after this rank left it: wait that much longer for
        # them at the next agreement.
        self._grace_s = self.timeout_s
        return {r: t for r, t in self._timing_posts(self._case).items() if r != self.env.rank}

    def _timing_posts(self, case: str) -> dict[int, str]:
        key = f"{case}/timing"
        posts = [
            json.loads(self.store.get(f"{key}/{i}")) for i in range(1, self.store.add(f"{key}/count", 0) + 1)
        ]
        return {r: t for r, t in posts}

    def _timing_failure_note(self) -> str:
        """For a timeout after a case that failed while timing: which rank failed there (the missing ranks
        likely still wait for it in that case's collective), so the missing ranks are not blamed alone."""
        if self._failed_timing is None:
            return ""
        case, case_id = self._failed_timing
        try:
            posts = self._timing_posts(case)
        except RuntimeError:  # the store itself is gone: the timeout says enough
            return ""
        return (f"; before that, {case_id} failed while timing ({by_rank(posts)}): the ranks that did not "
                "arrive may have waited for that rank in its collective")

    def gather_clocks(self, held: dict) -> dict:
        """Every rank's ClockWatch result for the case (devices.ClockWatch.stop) to rank 0, which records the
        largest share per limit over all ranks and the rank of the largest (clocks_held_rank): a GPU held
        down on any rank slows the collective. One store operation per rank; others return their own."""
        key = f"{self._case}/clocks"
        if self.env.rank != 0:
            self.store.set(f"{key}/rank{self.env.rank}", json.dumps(held))
            return held
        keys = [f"{key}/rank{r}" for r in range(1, self.env.world_size)]
        try:
            raw = _get_all(self.store, keys)
        except RuntimeError:  # a rank that failed after timing posts anyway; one that died: keep rank 0's
            return held
        return merge_clocks({0: held, **{r: json.loads(v) for r, v in enumerate(raw, start=1)}})

    def same_tests(self, nodeids: list[str]) -> None:
        """Every rank collected the same tests in the same order (else they would wait in different cases)."""
        self._seq += 1
        first, differ = compare(self.store, f"step{self._seq}:collection", self.env.rank, self.env.world_size,
                                config_digest(nodeids), self.timeout_s, what="collection")
        if differ:
            raise UserError(
                f"ranks collected different tests or orders (sha256 of the test ids {_listed(first, differ)}): give "
                "every rank the same pytest arguments (-k, -m, paths) and no random ordering"
            )

    def same_resume(self, config, items: list) -> None:
        """--suite-resume: only rank 0 reads the partial file and drops (or skips) what it holds; every other
        rank drops and skips the same tests, else they would collect more than rank 0 and wait in a case it
        never runs. One store read per rank."""
        self._seq += 1
        mine = resume_choices(config, items) if self.env.rank == 0 else None
        choices = share(self.store, f"step{self._seq}:resume", self.env.rank, mine, self.timeout_s,
                        "the tests --suite-resume drops")
        if self.env.rank != 0:
            apply_resume(config, items, choices)

    def describe(self) -> dict:
        hosts = list(self.env.hosts)
        own = self.environments.get(self.env.rank, launch_environment())
        out = {
            "world_size": self.env.world_size,
            "ranks_per_node": self.env.local_world_size,  # on rank 0's host; ranks_per_host has every host
            "nnodes": self.env.nnodes,
            "ranks_per_host": {h: hosts.count(h) for h in dict.fromkeys(hosts)},
            "hosts": hosts,  # by rank
            "backend": self.backend,
            "nccl_version": nccl_version(),
            **({"xccl_version": xccl_version()} if self.backend == "xccl" else {}),
            "environment": own,  # rank 0's NCCL_*, TORCH_NCCL_*, GLOO_*, CCL_*, TORCH_XCCL_*, *_SOCKET_IFNAME
            "config_sha256": self.digest,
            "timeout_s": self.timeout_s,
            "round_time": ROUND_TIME,
        }
        differ = {str(r): e for r, e in sorted(self.environments.items()) if e != own}
        if differ:  # e.g. NCCL_SOCKET_IFNAME set per node: every rank whose variables are not rank 0's
            out["environment_by_rank"] = differ
        return out


def resume_choices(config, items: list) -> dict:
    """On rank 0, after suite.plugin's selection: the node ids --suite-resume dropped (their benchmarks are
    reused) and those it marked skip (runs died in them), with the reason."""
    from suite.partial import MAX_DEATHS

    plugin = config.pluginmanager.get_plugin("suite.plugin")
    key = getattr(plugin, "_PARTIAL", None)
    state = config.stash.get(key, None) if key is not None else None
    if state is None:
        return {"deselected": [], "skipped": {}}
    skipped = {}
    for item in items:
        if state.previous.deaths(item.nodeid) >= MAX_DEATHS:
            marks = [m for m in item.own_markers if m.name == "skip"]
            skipped[item.nodeid] = marks[-1].kwargs.get("reason", "") if marks else "skipped on rank 0"
    return {"deselected": [b.get("fullname") for b in state.reused], "skipped": skipped}


def apply_resume(config, items: list, choices: dict) -> None:
    """On the other ranks: drop and skip what rank 0's --suite-resume did (as suite.partial does)."""
    drop = set(choices.get("deselected") or ())
    gone = [i for i in items if i.nodeid in drop]
    if gone:
        items[:] = [i for i in items if i.nodeid not in drop]
        config.hook.pytest_deselected(items=gone)
    skipped = choices.get("skipped") or {}
    for item in items:
        if item.nodeid in skipped:
            item.add_marker(pytest.mark.skip(reason=skipped[item.nodeid]))


_STATE: DistState | None = None
_INITS = 0  # each init gets fresh store keys (same count on every rank: inits happen in lockstep)


def current() -> DistState | None:
    return _STATE


def not_launched_reason() -> str:
    return f"collectives need several ranks: launch with {TORCHRUN_HINT}"


def compare(store, key: str, rank: int, world_size: int, digest: str, timeout_s: float,
            what: str) -> tuple[str, dict[int, str]]:
    """Every rank brings a digest; return rank 0's and {rank: its digest} for the ranks whose digest differs."""
    if rank == 0:
        store.set(f"{key}/rank0-digest", digest)
    sync(store, f"{key}/arrive", rank, world_size, timeout_s, what=what)
    first = store.get(f"{key}/rank0-digest").decode()
    return first, sync(store, f"{key}/compare", rank, world_size, timeout_s, None if first == digest else digest)


def by_rank(problems: dict[int, str]) -> str:
    """'rank 1: X; ranks 0, 2: Y': the ranks of each distinct problem."""
    groups: dict[str, list[int]] = {}
    for rank, text in sorted(problems.items()):
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {text}"
                     for text, ranks in groups.items())


def describe_outcome(outcome: dict[int, dict], world_size: int) -> str:
    """One line for a case's agreed outcome (DistState.ready): each problem with its ranks; a problem every
    rank reported alike (the families' own agreements already name the ranks) as it is."""
    texts = {r: o["text"] for r, o in outcome.items()}
    if len(texts) == world_size and len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return by_rank(texts)


def merge_clocks(ranks: dict[int, dict]) -> dict:
    """ClockWatch results of the ranks, {rank: stop()} -> the largest share per limit over ranks, with
    `clocks_held_rank` (the rank of the largest clocks_held) and that rank's window.
    {} when none read NVML."""
    read = {r: held for r, held in ranks.items() if held}
    if not read:
        return {}
    worst = max(sorted(read), key=lambda r: read[r].get("clocks_held", 0.0))  # the lowest rank of a tie
    out = dict(read[worst])
    for held in read.values():
        for name, share in held.items():
            if name.startswith("clocks_held") and name != "clocks_held_rank":
                out[name] = max(out.get(name, 0.0), share)
    out["clocks_held_rank"] = worst
    return out


def _listed(first: str, differ: dict[int, str]) -> str:
    return "; ".join(f"rank {r}: {d[:12]}" for r, d in sorted(differ.items())) + f"; rank 0: {first[:12]}"


def share(store, key: str, rank: int, payload: Any, timeout_s: float, what: str) -> Any:
    """Rank 0 publishes `payload` (JSON) under `key`; every other rank reads it, waiting up to timeout_s."""
    if rank == 0:
        store.set(key, json.dumps(payload))
        return payload
    try:
        return json.loads(store.get(key))
    except RuntimeError:  # DistStoreError: the key never came
        raise RankTimeout(
            f"rank {rank}: rank 0 did not share {what} within {timeout_s:g} s (timeout_s in the collectives "
            "config); see rank 0's own output (torchrun prefixes it with [rank0]:) "
            "for why it crashed or hangs"
        ) from None


def announce(store, rank: int, host: str | None = None) -> None:
    """Before the start-up meeting: this rank's hostname and launch environment (once every rank has met,
    every rank's are in the store)."""
    info = {"host": host or socket.gethostname(), "env": launch_environment()}
    store.set(f"hosts/rank{rank}", json.dumps(info))


def _get_all(store, keys: list[str]) -> list[bytes]:
    """The values of `keys`, in one round trip where the store has multi_get (torch 2.4 on)."""
    multi_get = getattr(store, "multi_get", None)
    return multi_get(keys) if multi_get is not None else [store.get(k) for k in keys]


def gather_hosts(store, rank: int, world_size: int, timeout_s: float) -> tuple[list[str], dict[int, dict]]:
    """After the meeting: rank 0 reads every rank's announcement and shares the hostnames (by rank); every
    other rank reads them with one store call. Returns (hostnames, {rank: environment}, the latter on
    rank 0)."""
    if rank != 0:
        return share(store, "hosts/all", rank, None, timeout_s, "the ranks' hostnames"), {}
    keys = [f"hosts/rank{r}" for r in range(world_size)]
    raw = _get_all(store, keys)
    infos = [json.loads(v) for v in raw]
    hosts = [i["host"] for i in infos]
    share(store, "hosts/all", 0, hosts, timeout_s, "the ranks' hostnames")
    return hosts, {r: i["env"] for r, i in enumerate(infos)}


def meet(store, rank: int, world_size: int, digest: str, timeout_s: float) -> None:
    """Wait for every rank (RankTimeout names the missing ones); UserError when their config hashes differ."""
    first, differ = compare(store, "config", rank, world_size, digest, timeout_s,
                            what="start-up (process group creation)")
    if differ:
        raise UserError(
            f"ranks started with different configs (sha256 {_listed(first, differ)}): start every rank with the "
            "same --suite-config file, --suite-devices and suite version"
        )


def supports_device_id(init_process_group) -> bool:
    """Whether this torch's init_process_group takes `device_id` (pytorch PR 114916, Dec 2023: torch 2.2 on;
    pyproject allows torch 2.1). Without it the NCCL communicator is created lazily, at the first collective,
    which is then where a broken setup shows."""
    import inspect

    try:
        return "device_id" in inspect.signature(init_process_group).parameters
    except (TypeError, ValueError):
        return False


def init(env: LaunchEnv, backend: str, timeout_s: float, digest: str) -> DistState:
    """Meet every rank (naming the missing ones), refuse different configs, then create the process group."""
    import torch
    import torch.distributed as dist

    global _STATE, _INITS
    _INITS += 1
    if backend == "xccl" and not xccl_available():
        raise UserError("backend xccl: this torch has no XCCL (torch.distributed.is_xccl_available() is False; "
                        "it is built into the XPU wheels of torch 2.8 and later): install such a torch, or set "
                        "cases.collectives.backend: gloo")
    rank_device(backend, env.local_rank)  # no such device, or fewer than ranks: said before meeting the others
    store = dist.PrefixStore(f"{_STORE_PREFIX}/{env.run_id}/{_INITS}", open_store(env, timeout_s))
    announce(store, env.rank)
    meet(store, env.rank, env.world_size, digest, timeout_s)
    # nnodes and ranks per node from the hostnames: torchrun's variables count its agents, not hosts.
    hosts, environments = gather_hosts(store, env.rank, env.world_size, timeout_s)
    env = env.with_hosts(hosts)
    device = rank_device(backend, env.local_rank, position=env.host_position)
    state = DistState(env, backend, device, timeout_s, digest, store=store, environments=environments)
    if dist.is_initialized():  # a script made its own process group: reuse it, leave it to its owner
        _STATE = state
        return state
    options: dict = {}
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
        if supports_device_id(dist.init_process_group):
            # Eager NCCL init: a broken setup fails here, not in the middle of the first case.
            options["device_id"] = torch.device(device)
    elif backend == "xccl":
        # No device_id: torch before 2.7 refused a non-CUDA one, and it would not connect early for XCCL (no
        # eager init there); the current device binds the group to this rank's XPU instead of rank % count.
        torch.xpu.set_device(torch.device(device))
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                            world_size=env.world_size, timeout=timedelta(seconds=timeout_s), **options)
    state.owns_group = True
    _STATE = state
    return state


def shutdown() -> None:
    global _STATE
    import torch.distributed as dist

    if _STATE is not None and _STATE.owns_group and dist.is_initialized():
        dist.destroy_process_group()
    _STATE = None


class SlowestRankTimer:
    """pytest-benchmark timer for collectives: the round's time is the slowest rank's (see ROUND_TIME).

    pytest-benchmark calls it twice a round (start, end). Start: a barrier (a one-element all-reduce, then a
    device synchronisation), then the clock. End: a synchronisation, the clock, then the elapsed time is
    MAX-all-reduced (outside the measured interval) and the end is returned as start + slowest.
    """

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self._start: float | None = None
        self.last_elapsed: float | None = None  # the last round's slowest time, identical on every rank
        self.__name__ = repr(self)

    def _device(self):
        import torch

        state = current()
        return torch.device(state.device if state else "cpu")

    def __call__(self) -> float:
        import torch
        import torch.distributed as dist

        from suite.devices import synchronize

        device = self._device()
        if self._start is None:
            dist.all_reduce(torch.ones(1, device=device))
            synchronize(device)
            self._start = self.clock()
            return self._start
        synchronize(device)
        start, end = self._start, self.clock()
        self._start = None
        # float64 where the device has it; float32 (7 significant digits of the round time) on an XPU, which
        # may have no float64.
        dtype = torch.float32 if device.type == "xpu" else torch.float64
        elapsed = torch.tensor([end - start], dtype=dtype, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        # The same bits on every rank; start + elapsed is not (each node's clock rounds it its own way), so
        # what every rank must agree on (suite.cases.collectives' calibration) is computed from this.
        self.last_elapsed = float(elapsed.item())
        return start + self.last_elapsed

    def __repr__(self) -> str:
        state = current()
        return f"SlowestRankTimer({state.device if state else '-'})"


# --- pytest plugin ----------------------------------------------------------------------------------------

_RESULT_OPTIONS = ("benchmark_json", "benchmark_save", "benchmark_histogram", "benchmark_cprofile_dump")




@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    env = LaunchEnv.from_environ()
    if env is None:
        return
    if hasattr(config.option, "randomly_reorganize"):  # pytest-randomly: every rank must keep one order
        config.option.randomly_reorganize = False
    if env.rank == 0:
        return
    # Only rank 0 writes results: every round's time is already the max over ranks, the same everywhere.
    for name in _RESULT_OPTIONS:
        if getattr(config.option, name, None) is not None:
            setattr(config.option, name, None)
    if getattr(config.option, "benchmark_autosave", False):
        config.option.benchmark_autosave = False
    config.option.verbose = min(config.option.verbose, -1)
    if hasattr(config.option, "benchmark_quiet"):
        config.option.benchmark_quiet = True


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter) -> None:
    env = LaunchEnv.from_environ()
    if env is not None and env.rank != 0:
        pb_adapter.no_table(terminalreporter.config)  # rank 0 shows the table; the times are the same everywhere


def join_group(suite_config, devices: list[str]) -> None:
    """Under torchrun, start this rank's process group for the run's config (a SuiteConfig) and devices; the
    suite's plugin calls it at session start. A failure is a pytest.UsageError of one line."""
    env = LaunchEnv.from_environ()
    if env is None or env.world_size < 2:
        return
    section = suite_config.cases.collectives
    if not section.enabled:
        return
    backend = resolve_backend(section.backend, devices)
    payload = {"config": resolved(suite_config), "devices": devices, "backend": backend,
               "world_size": env.world_size}
    try:
        init(env, backend, section.timeout_s, config_digest(payload))
    except (UserError, RankTimeout) as exc:
        raise pytest.UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the backend's own start-up error, made one line with the usual cause
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise pytest.UsageError(
            f"rank {env.rank}: the {backend} process group did not start ({type(exc).__name__}: {first}); with "
            "NCCL every rank needs a GPU of its own: start at most as many ranks per node as it has GPUs "
            "(--nproc-per-node), or set cases.collectives.backend: gloo"
        ) from None


def _torchrun_family(item: pytest.Item) -> str | None:
    """The family of a test that runs under torchrun (its read module's TORCHRUN), or None."""
    name = str(getattr(item, "originalname", "")).removeprefix("test_")
    return name if name in FAMILIES and family_read(name, "TORCHRUN") else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    env = LaunchEnv.from_environ()
    if env is not None and env.world_size >= 2:
        # Under torchrun every rank would run the other families too, all at once on the same devices: each
        # would measure a fraction of the true rate. Only the torchrun families run here; every rank drops the
        # same.
        others = [item for item in items if _torchrun_family(item) is None]
        if others:
            items[:] = [item for item in items if _torchrun_family(item) is not None]
            config.hook.pytest_deselected(items=others)
    for item in items:
        family = _torchrun_family(item)
        if family is None:
            continue
        timer = SlowestRankTimer()  # one per test: a round broken by an error leaves no state behind
        marks = [i for i, m in enumerate(item.own_markers) if m.name == "benchmark"]
        for i in marks:
            item.own_markers[i] = pytest.mark.benchmark(**{**item.own_markers[i].kwargs, "timer": timer}).mark
        if not marks:
            item.add_marker(pytest.mark.benchmark(timer=timer, group=family))


@pytest.hookimpl(wrapper=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_resume(config: pytest.Config, items: list[pytest.Item]):
    # After every pytest_collection_modifyitems (suite.plugin's --suite-resume selection, which only rank 0
    # makes, among them) and before pytest_collection_finish compares the ranks' test lists.
    result = yield
    if _STATE is not None:
        try:
            _STATE.same_resume(config, items)
        except (UserError, RankTimeout) as exc:
            raise pytest.UsageError(str(exc)) from None
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    if _STATE is not None:
        try:
            _STATE.same_tests([item.nodeid for item in session.items])
        except (UserError, RankTimeout) as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    if _STATE is not None:
        output_json.setdefault("suite", {})["distributed"] = _STATE.describe()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _STATE is not None and _STATE._cases:
        # The ranks leave together, once rank 0 has written its JSON: torchrun stops every rank as soon as one
        # exits with an error (a case that failed on every rank), which would kill rank 0 before it wrote the
        # results. (Not after a run that measured nothing: refused at start, its ranks may not all be here.)
        try:
            _STATE.agree("the end of the run")
        except RankTimeout as exc:
            print(f"[suite] rank {_STATE.env.rank}: {exc}", file=sys.stderr)
    shutdown()


# --- python -m suite.distributed ----------------------------------------------------------------------------


# pytest options that read or write its cache: a run given one keeps the cache on.
_CACHE_OPTIONS = ("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw", "--stepwise",
                  "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset", "--lfnf",
                  "--last-failed-no-failures", "--cache-clear", "--cache-show", "cacheprovider")


def torchrun_command(nproc: int, pytest_args: list[str]) -> list[str]:
    """torchrun starting `nproc` pytest ranks. They share one rootdir, and pytest's cache writes are not atomic:
    its cache is off unless the arguments use it."""
    args = pytest_args or ["benchmarks/test_collectives.py"]
    cache = any(a.split("=")[0] in _CACHE_OPTIONS for a in args)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "pytest", *([] if cache else ["-p", "no:cacheprovider"]), *args]


def preflight(nproc: int, pytest_args: list[str]) -> None:
    """What every rank would refuse at once, checked once before torchrun starts: --nproc, the config file
    and the devices (a UserError of one line; torchrun would print each rank's error, then a traceback)."""
    import argparse

    from suite.config import DEFAULT_CONFIG, load_config

    if nproc < 1:
        raise UserError(f"--nproc {nproc}: give the number of ranks on this node, 1 or more (2 or more to "
                        "measure a collective)")
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--suite-config")
    parser.add_argument("--suite-devices")
    parser.add_argument("--rootdir")
    known, _ = parser.parse_known_args(pytest_args)
    if known.suite_devices is not None and not known.suite_devices.strip():
        raise UserError("--suite-devices is empty: name the devices (all, cpu, gpus, cuda:1, cpu,cuda:1) or leave "
                        "the option out to use the config's")
    # The plugin's default: configs/default.yaml under pytest's rootdir (this project, unless --rootdir).
    root = Path(known.rootdir) if known.rootdir else Path(__file__).resolve().parent.parent
    path = Path(known.suite_config) if known.suite_config else root / DEFAULT_CONFIG
    suite_config = load_config(path)
    from suite import devices as dev

    spec = known.suite_devices or suite_config.devices
    dev.check_spec(spec, option="--suite-devices" if known.suite_devices else f"{path}: devices")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m suite.distributed",
        description="run the collective benchmarks on this node: torchrun --standalone around pytest",
    )
    parser.add_argument("--nproc", type=int, default=None,
                        help="ranks on this node (default: one per GPU, or 2 without GPUs)")
    parser.epilog = ("every other argument goes to pytest (default benchmarks/test_collectives.py), e.g. "
                     "--suite-config configs/quick.yaml --benchmark-json out.json")
    args, rest = parser.parse_known_args(argv)
    rest = [a for a in rest if a != "--"]
    if not any(a.endswith(".py") or os.path.isdir(a) or "::" in a for a in rest):
        rest = ["benchmarks/test_collectives.py", *rest]
    if args.nproc is None:
        import torch

        args.nproc = torch.cuda.device_count() or 2
    try:
        preflight(args.nproc, rest)
    except UserError as exc:  # as `python -m suite` reports it: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    cmd = torchrun_command(args.nproc, rest)
    print("+", " ".join(cmd), flush=True)
    if os.name == "posix":
        # torchrun replaces this process: a signal or time limit aimed at this command reaches torchrun (and
        # its ranks die with it, suite.agent), rather than leaving it running without its parent.
        os.execv(cmd[0], cmd)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
