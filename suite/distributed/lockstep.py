"""One rank's lockstep with the others: agreements per case, the Gloo group made anew after a failure, resume."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from suite.distributed.launch import LaunchEnv, launch_environment, nccl_version, xccl_version
from suite.distributed.store import (GROUP_FAILURES, CaseAborted, RankTimeout, by_rank, compare, config_digest,
                                     forget, get_all, leave, left_ranks, post, posts, share, sync)

# How a round is timed, against nccl-tests (barrier, host timer around `iters` collectives, time averaged
# across ranks): we also barrier and time `iterations` collectives with the host clock after a device
# synchronisation, but take the MAXIMUM across ranks, not the mean: a collective is done only when its slowest
# rank is, and the max gives every rank the same number, so any rank could write the results.
ROUND_TIME = "max over ranks of (barrier; t0; iterations x collective; synchronize; t1)"


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
    _seq: int = field(default=0, repr=False)  # agreements outside cases so far
    # The running case (begin_case .. end_case): its keys' prefix, id and agreements so far. Agreements in a
    # case are counted from 1 in that case, so a rank that left one early is not behind in the next.
    _case: str | None = field(default=None, repr=False)
    _case_id: str = field(default="", repr=False)
    _case_seq: int = field(default=0, repr=False)
    _tries: dict = field(default_factory=dict, repr=False)  # case id -> how often this rank started it
    # After a failure while timing, until the next agreement every rank reached: the case's key prefix and id
    # (its posts name the rank that failed). Such an agreement waits timeout_s longer: the other ranks may
    # wait in that case's collective up to timeout_s.
    _failed_timing: tuple[str, str] | None = field(default=None, repr=False)
    _failures_seen: int = field(default=0, repr=False)  # the run's failures (GROUP_FAILURES) at _renew_group
    # Rank 0: the last case's key prefix and its numbered agreements, whose keys go once the next case's
    # `ready` passed (ready).
    _last_case: tuple[str, int] | None = field(default=None, repr=False)

    def agree(self, what: str, problem: str | None = None) -> dict[int, str]:
        """Lockstep point between ranks (outside timing): every rank reports its problem or none.

        In a case, raises CaseAborted when a rank left the case instead of arriving (DistState.ready)."""
        if self._case is None:
            key = self._step(what)
        else:
            self._case_seq += 1
            key = f"{self._case}/{self._case_seq}"
        found = self._sync(key, problem, what)
        left = left_ranks(found)
        if left:
            # Not here: the rank that left makes the group anew at `ready`, where the others come next.
            raise CaseAborted(f"{by_rank(left)} (left {self._case_id} before {what})")
        self._renew_group(key)
        return found

    def _step(self, what: str) -> str:
        """The key of the run's next agreement outside a case."""
        self._seq += 1
        return f"step{self._seq}:{what}"

    # --- one case in lockstep (suite.plugin.run_case) ---

    def begin_case(self, case_id: str) -> None:
        """Every rank calls it as a case starts: the case's agreements get keys of their own, named by the case
        and how often this rank started it, never by a count of cases (a rank that failed before one case's
        start would pair every later case with another case on the other ranks)."""
        self._tries[case_id] = self._tries.get(case_id, 0) + 1
        self._case, self._case_id, self._case_seq = f"case:{case_id}:{self._tries[case_id]}", case_id, 0

    def end_case(self) -> None:
        self._last_case, self._case = (self._case, self._case_seq), None

    def ready(self, problem: dict | None) -> dict[int, dict]:
        """The case's last agreement before timing, reached by every rank whatever happened in its build,
        check or set-up: `problem` is this rank's own ({"kind": "skip" or "fail", "text": ...}) or None.
        Returns {rank: problem} of the ranks that had one; if any, no rank may time the case.

        A rank with a problem first leaves the case's next agreement, where the others may wait for it (it
        failed before reaching the one they are at): they wake at once (CaseAborted) and come here."""
        if problem is not None:
            leave(self.store, f"{self._case}/{self._case_seq + 1}", self.env.rank, problem["text"])
            if problem.get("kind") == "fail":
                # It may have left the others in a collective of the build or check, which then timed out.
                self.store.add(GROUP_FAILURES, 1)
        key = f"{self._case}/ready"
        found = self._sync(key, json.dumps(problem) if problem else None, f"{self._case_id} start of timing")
        if self.env.rank == 0 and self._last_case is not None:
            self._forget(*self._last_case)
        self._renew_group(key)
        return {r: json.loads(text) for r, text in found.items()}

    def _forget(self, case: str, agreements: int) -> None:
        """Delete a finished case's keys once every rank reached the next case's `ready` (none reads them again:
        each rank is past all of that case's agreements, posts and clocks, and its pending failure while timing
        was cleared by this agreement). Up to one more numbered agreement than rank 0 counted: the one a rank
        left, if rank 0 left it first. A store error here shows at the next agreement."""
        self._last_case = None
        with contextlib.suppress(RuntimeError):
            for name in [*range(1, agreements + 2), "ready", "timing"]:
                forget(self.store, f"{case}/{name}")
            for r in range(1, self.env.world_size):
                self.store.delete_key(f"{case}/clocks/rank{r}")

    def _sync(self, key: str, problem: str | None, what: str) -> dict[int, str]:
        timeout = self.timeout_s * (2 if self._failed_timing else 1)
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
        failures = int(self.store.get(f"{key}/done"))
        if failures == self._failures_seen:
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("gloo", store=dist.PrefixStore(f"pg:{key}", self.store),
                                rank=self.env.rank, world_size=self.env.world_size,
                                timeout=timedelta(seconds=self.timeout_s))
        self._failures_seen = failures  # only once made: a failed start is tried again at the next agreement

    def timing_failed(self, text: str) -> dict[int, str]:
        """This rank failed while timing the case (no agreement is possible there: the others are inside a
        collective that waits for it until timeout_s). Posts `text` for them and returns what the other ranks
        posted so far, {rank: text}: a rank that fails on waiting names the rank it waited for."""
        post(self.store, f"{self._case}/timing", self.env.rank, text)
        self.store.add(GROUP_FAILURES, 1)  # before this rank reaches the next agreement (_renew_group)
        self._failed_timing = (self._case, self._case_id)
        return {r: t for r, t in posts(self.store, f"{self._case}/timing").items() if r != self.env.rank}

    def _timing_failure_note(self) -> str:
        """For a timeout after a case that failed while timing: which rank failed there (the missing ranks
        likely still wait for it in that case's collective), so the missing ranks are not blamed alone."""
        if self._failed_timing is None:
            return ""
        case, case_id = self._failed_timing
        try:
            failed = posts(self.store, f"{case}/timing")
        except RuntimeError:  # the store itself is gone: the timeout says enough
            return ""
        return (f"; before that, {case_id} failed while timing ({by_rank(failed)}): the ranks that did not "
                "arrive may have waited for that rank in its collective")

    def gather_clocks(self, held: dict) -> dict:
        """Every rank's ClockWatch result for the case (devices.ClockWatch.stop) to rank 0, which records the
        largest share per limit over all ranks and the rank of the largest (clocks_held_rank): a GPU held
        down on any rank slows the collective. One store operation per rank; others return their own."""
        key = f"{self._case}/clocks"
        if self.env.rank != 0:
            self.store.set(f"{key}/rank{self.env.rank}", json.dumps(held))
            return held
        try:
            raw = get_all(self.store, [f"{key}/rank{r}" for r in range(1, self.env.world_size)])
        except RuntimeError:  # a rank that failed after timing posts anyway; one that died: keep rank 0's
            return held
        return merge_clocks({0: held, **{r: json.loads(v) for r, v in enumerate(raw, start=1)}})

    def same_tests(self, nodeids: list[str]) -> None:
        """Every rank collected the same tests in the same order (else they would wait in different cases)."""
        compare(self.store, self._step("collection"), self.env.rank, self.env.world_size, config_digest(nodeids),
                self.timeout_s, "collection", "ranks collected different tests or orders (sha256 of the test ids "
                "{listed}): give every rank the same pytest arguments (-k, -m, paths) and no random ordering")

    def same_resume(self, config, items: list) -> None:
        """--suite-resume: only rank 0 reads the partial file and drops (or skips) what it holds; every other
        rank drops and skips the same tests, else they would collect more than rank 0 and wait in a case it
        never runs. One store read per rank."""
        mine = resume_choices(config, items) if self.env.rank == 0 else None
        choices = share(self.store, self._step("resume"), self.env.rank, mine, self.timeout_s,
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


