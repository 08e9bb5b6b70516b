"""The ranks' meeting points in the TCPStore: start-up, agreements naming a missing rank, what rank 0 shares."""

from __future__ import annotations

import hashlib
import json
import socket
from datetime import timedelta
from typing import Any

from suite.distributed.launch import LaunchEnv, launch_environment
from suite.errors import UserError

# A client's connection to the store gets this share of timeout_s: torch's TCPStore client tries once more
# after its first connect timeout, so a missing rank 0 is reported after about timeout_s, not twice that.
CONNECT_SHARE = 0.5
# Our keys in the store (torchrun's agent store is shared with torch's own keys).
STORE_PREFIX = "gpubench-suite"


# The run's count of case failures that may have left a collective timed out (a failure while timing, or a
# rank's own failure before it): a Gloo group is made anew after one (DistState._renew_group).
GROUP_FAILURES = "group-failures"


class RankTimeout(RuntimeError):
    """Some ranks did not arrive within the timeout; the message names them."""


class CaseAborted(RuntimeError):
    """Another rank left this case before an agreement this rank waited at (it failed or skipped alone): go to
    the case's last agreement (DistState.ready), which brings that rank's reason."""


# What a rank that leaves a case early writes, before its reason, as its problem at the agreement the others
# may wait at (leave): they stop waiting there at once, not after timeout_s.
_LEFT = "\x00left: "
# The value of an agreement's `done` key when a rank gave up waiting there first (see sync).
_ABANDONED = "abandoned"


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
        raise RankTimeout(f"rank {env.rank}: could not reach the store at {env.master_addr}:{env.master_port} "
                          f"within {timeout_s:g} s (rank 0 missing, or MASTER_ADDR/MASTER_PORT wrong?): "
                          f"{first}") from None


def sync(store, key: str, rank: int, world_size: int, timeout_s: float, problem: str | None = None,
         what: str | None = None) -> dict[int, str]:
    """Every rank arrives at `key`, optionally with a problem; return {rank: problem} for the ranks that had one.

    Raises RankTimeout naming the ranks that did not arrive within `timeout_s`. O(1) store operations per rank
    and three keys per agreement unless something is wrong (a problem is one more key; a timeout reads each
    rank's `at` key to name the missing).
    """
    if problem:
        post(store, key, rank, problem)
    store.set(f"at/rank{rank}", key)  # this rank's latest agreement: a timeout names the ranks not at it
    # Whether the agreement happened is one atomic decision (compare_set on `done`): the last rank to arrive
    # marks it done, a rank that gives up waiting marks it abandoned, and whichever comes first holds. Without
    # that, a rank arriving after another gave up would pass an agreement the other never completed and
    # stay one step out of line for the rest of the run.
    if store.add(f"{key}/arrived", 1) == world_size:
        # Done holds the run's failure count as the agreement completed, for every rank to read
        # (DistState._renew_group): read later, a rank that already went on could have raised it for one rank
        # and not for another.
        store.compare_set(f"{key}/done", "", str(store.add(GROUP_FAILURES, 0)))
    try:
        store.wait([f"{key}/done"], timedelta(seconds=timeout_s))
    except RuntimeError:
        # Who is missing, read before giving up on them (a late rank may arrive the moment after).
        missing = [r for r in range(world_size)
                   if not store.check([f"at/rank{r}"]) or store.get(f"at/rank{r}").decode() != key] or ["?"]
        if store.compare_set(f"{key}/done", "", _ABANDONED) != _ABANDONED.encode():
            return posts(store, key)  # everyone arrived just as the wait gave up
        raise RankTimeout(f"rank(s) {', '.join(map(str, missing))} of {world_size} did not arrive at "
                          f"{what or key} within {timeout_s:g} s (timeout_s in the collectives config); see "
                          "the missing rank's own output (torchrun prefixes it with [rankN]:) for why it "
                          "crashed or hangs") from None
    if store.get(f"{key}/done") == _ABANDONED.encode():
        raise RankTimeout(f"rank {rank} reached {what or key} after the other ranks had stopped waiting for "
                          f"it ({timeout_s:g} s, timeout_s in the collectives config); see this rank's output "
                          "above for what kept it")
    return posts(store, key)


def post(store, key: str, rank: int, text: str) -> None:
    """Add this rank's `text` to `key`'s posts: a counter and one key per post, so reading them costs a store
    operation per post, not per rank."""
    store.set(f"{key}/post{store.add(f'{key}/posts', 1)}", json.dumps([rank, text]))


def posts(store, key: str) -> dict[int, str]:
    """{rank: text} of the posts to `key` so far."""
    keys = [f"{key}/post{i}" for i in range(1, store.add(f"{key}/posts", 0) + 1)]
    return dict(json.loads(v) for v in get_all(store, keys)) if keys else {}


def forget(store, key: str) -> None:
    """Delete the keys of agreement (or posts) `key`: only once no rank can read them again."""
    count = store.add(f"{key}/posts", 0)
    for name in ["arrived", "done", "posts", *(f"post{i}" for i in range(1, count + 1))]:
        store.delete_key(f"{key}/{name}")


def left_ranks(found: dict[int, str]) -> dict[int, str]:
    """{rank: reason} of the ranks in sync's answer that left instead of arriving (leave)."""
    return {r: text[len(_LEFT):] for r, text in found.items() if text.startswith(_LEFT)}


def leave(store, key: str, rank: int, problem: str) -> None:
    """This rank will not arrive at `key`: the ranks waiting there wake at once and see `problem` (marked as
    left) from sync. Only on this failure path."""
    post(store, key, rank, _LEFT + problem)
    store.compare_set(f"{key}/done", "", "left")  # unless the others already gave up on it (sync)


def compare(store, key: str, rank: int, world_size: int, digest: str, timeout_s: float, what: str,
            differs: str) -> None:
    """Every rank brings a digest; a UserError, `differs` with {listed} filled in, names the ranks whose digest
    is not rank 0's."""
    if rank == 0:
        store.set(f"{key}/rank0-digest", digest)
    sync(store, f"{key}/arrive", rank, world_size, timeout_s, what=what)
    first = store.get(f"{key}/rank0-digest").decode()
    differ = sync(store, f"{key}/compare", rank, world_size, timeout_s, None if first == digest else digest)
    if differ:
        listed = "; ".join(f"rank {r}: {d[:12]}" for r, d in sorted(differ.items())) + f"; rank 0: {first[:12]}"
        raise UserError(differs.format(listed=listed))


def by_rank(problems: dict[int, str]) -> str:
    """'rank 1: X; ranks 0, 2: Y': the ranks of each distinct problem."""
    groups: dict[str, list[int]] = {}
    for rank, text in sorted(problems.items()):
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {text}"
                     for text, ranks in groups.items())


def share(store, key: str, rank: int, payload: Any, timeout_s: float, what: str) -> Any:
    """Rank 0 publishes `payload` (JSON) under `key`; every other rank reads it, waiting up to timeout_s."""
    if rank == 0:
        store.set(key, json.dumps(payload))
        return payload
    try:
        return json.loads(store.get(key))
    except RuntimeError:  # DistStoreError: the key never came
        raise RankTimeout(f"rank {rank}: rank 0 did not share {what} within {timeout_s:g} s (timeout_s in the "
                          "collectives config); see rank 0's own output (torchrun prefixes it with [rank0]:) for "
                          "why it crashed or hangs") from None


def announce(store, rank: int, host: str | None = None) -> None:
    """Before the start-up meeting: this rank's hostname and launch environment (once every rank has met,
    every rank's are in the store)."""
    info = {"host": host or socket.gethostname(), "env": launch_environment()}
    store.set(f"hosts/rank{rank}", json.dumps(info))


def get_all(store, keys: list[str]) -> list[bytes]:
    """The values of `keys`, in one round trip where the store has multi_get (torch 2.4 on)."""
    multi_get = getattr(store, "multi_get", None)
    return multi_get(keys) if multi_get is not None else [store.get(k) for k in keys]


def gather_hosts(store, rank: int, world_size: int, timeout_s: float) -> tuple[list[str], dict[int, dict]]:
    """After the meeting: rank 0 reads every rank's announcement and shares the hostnames (by rank); every
    other rank reads them with one store call. Returns (hostnames, {rank: environment}, the latter on
    rank 0)."""
    if rank != 0:
        return share(store, "hosts/all", rank, None, timeout_s, "the ranks' hostnames"), {}
    infos = [json.loads(v) for v in get_all(store, [f"hosts/rank{r}" for r in range(world_size)])]
    hosts = [i["host"] for i in infos]
    share(store, "hosts/all", 0, hosts, timeout_s, "the ranks' hostnames")
    return hosts, {r: i["env"] for r, i in enumerate(infos)}


def meet(store, rank: int, world_size: int, digest: str, timeout_s: float) -> None:
    """Wait for every rank (RankTimeout names the missing ones); UserError when their config hashes differ."""
    compare(store, "config", rank, world_size, digest, timeout_s, "start-up (process group creation)",
            "ranks started with different configs (sha256 {listed}): start every rank with the same --suite-config "
            "file, --suite-devices and suite version")
