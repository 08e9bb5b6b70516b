"""torchrun for the collectives: this rank's start-up and process group, the lockstep timer, the pytest plugin.

Registered from benchmarks/conftest.py: under torchrun it creates the process group at session start (once every
rank arrived with the same config hash), keeps rank != 0 from writing results, and times the collective tests by
the slowest rank. launch.py starts the ranks, store.py holds their meeting points, lockstep.py their agreements.
"""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from suite import pb_adapter
from suite.cases import FAMILIES, family_read
from suite.config import resolved
from suite.distributed.launch import (BACKEND_DEVICE_KIND, TORCHRUN_HINT, LaunchEnv, launch_environment, main,
                                      not_launched_reason, rank_device, resolve_backend, start_nccl_log,
                                      stop_nccl_log, torchrun_command, xccl_available)
from suite.distributed.lockstep import DistState, apply_resume, describe_outcome, merge_clocks
from suite.distributed.store import (GROUP_FAILURES, STORE_PREFIX, CaseAborted, RankTimeout, announce, by_rank,
                                     config_digest, gather_hosts, meet, open_store, sync)
from suite.errors import UserError

# Re-exported: what other modules and the tests take from suite.distributed besides this module's own names.
__all__ = ["BACKEND_DEVICE_KIND", "GROUP_FAILURES", "TORCHRUN_HINT", "CaseAborted", "apply_resume", "by_rank",
           "describe_outcome", "launch_environment", "main", "merge_clocks", "not_launched_reason", "sync",
           "torchrun_command"]

_STATE: DistState | None = None
_INITS = 0  # each init gets fresh store keys (same count on every rank: inits happen in lockstep)
_NCCL_CHOICES: dict | None = None  # what NCCL's start-up log says it chose (launch.start_nccl_log); NCCL only


def current() -> DistState | None:
    return _STATE


def supports_device_id(init_process_group) -> bool:
    """Whether this torch's init_process_group takes `device_id` (pytorch PR 114916, Dec 2023: torch 2.2 on;
    pyproject allows torch 2.1). Without it the NCCL communicator is created lazily, at the first collective,
    which is then where a broken setup shows."""
    import inspect

    return "device_id" in inspect.signature(init_process_group).parameters


def init(env: LaunchEnv, backend: str, timeout_s: float, digest: str) -> DistState:
    """Meet every rank (naming the missing ones), refuse different configs, then create the process group."""
    import torch
    import torch.distributed as dist

    global _STATE, _INITS, _NCCL_CHOICES
    _INITS += 1
    if backend == "xccl" and not xccl_available():
        raise UserError("backend xccl: this torch has no XCCL (torch.distributed.is_xccl_available() is False; "
                        "it is built into the XPU wheels of torch 2.8 and later): install such a torch, or set "
                        "cases.collectives.backend: gloo")
    rank_device(backend, env.local_rank)  # no such device, or fewer than ranks: said before meeting the others
    store = dist.PrefixStore(f"{STORE_PREFIX}/{env.run_id}/{_INITS}", open_store(env, timeout_s))
    announce(store, env.rank)
    meet(store, env.rank, env.world_size, digest, timeout_s)
    # nnodes and ranks per node from the hostnames: torchrun's variables count its agents, not hosts.
    hosts, environments = gather_hosts(store, env.rank, env.world_size, timeout_s)
    env = env.with_hosts(hosts)
    device = rank_device(backend, env.local_rank, position=env.host_position)
    state = DistState(env, backend, device, timeout_s, digest, store=store, environments=environments)
    if not dist.is_initialized():  # else a script made its own process group: reuse it, leave it to its owner
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
        log = start_nccl_log() if backend == "nccl" and _NCCL_CHOICES is None else None
        try:
            dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                                    world_size=env.world_size, timeout=timedelta(seconds=timeout_s), **options)
            if isinstance(log, Path):  # the communicator made now (lazily before torch 2.2), while NCCL logs
                dist.all_reduce(torch.ones(1, device=device))
        finally:
            if log is not None:
                _NCCL_CHOICES = stop_nccl_log(log)
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

    def __call__(self) -> float:
        import torch
        import torch.distributed as dist

        from suite.devices import synchronize

        state = current()
        device = torch.device(state.device if state else "cpu")
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

# What the ranks other than 0 run with: only rank 0 writes results and shows the table (every round's time is
# already the max over ranks, the same everywhere).
_OTHER_RANKS_OPTIONS = {"benchmark_json": None, "benchmark_save": None, "benchmark_histogram": None,
                        "benchmark_cprofile_dump": None, "benchmark_autosave": False, "benchmark_quiet": True}


@contextlib.contextmanager
def _usage_error():
    """A refusal or a missing rank at start-up or collection ends the run as a one-line pytest.UsageError."""
    try:
        yield
    except (UserError, RankTimeout) as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    env = LaunchEnv.from_environ()
    if env is None:
        return
    if hasattr(config.option, "randomly_reorganize"):  # pytest-randomly: every rank must keep one order
        config.option.randomly_reorganize = False
    if env.rank == 0:
        return
    for name, value in _OTHER_RANKS_OPTIONS.items():
        if hasattr(config.option, name):
            setattr(config.option, name, value)
    config.option.verbose = min(config.option.verbose, -1)


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
        raise pytest.UsageError(f"rank {env.rank}: the {backend} process group did not start "
                                f"({type(exc).__name__}: {first}); with NCCL every rank needs a GPU of its "
                                "own: start at most as many ranks per node as it has GPUs "
                                "(--nproc-per-node), or set cases.collectives.backend: gloo") from None


def _torchrun_family(item: pytest.Item) -> str | None:
    """The family of a test that runs under torchrun (its read module's TORCHRUN), or None."""
    name = str(getattr(item, "originalname", "")).removeprefix("test_")
    return name if name in FAMILIES and family_read(name, "TORCHRUN") else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    env = LaunchEnv.from_environ()
    ours = [item for item in items if _torchrun_family(item) is not None]
    if env is not None and env.world_size >= 2 and len(ours) < len(items):
        # Under torchrun every rank would run the other families too, all at once on the same devices: each
        # would measure a fraction of the true rate. Only the torchrun families run here; every rank drops the
        # same.
        others = [item for item in items if _torchrun_family(item) is None]
        items[:] = ours
        config.hook.pytest_deselected(items=others)
    for item in ours:
        timer = SlowestRankTimer()  # one per test: a round broken by an error leaves no state behind
        marks = [i for i, m in enumerate(item.own_markers) if m.name == "benchmark"]
        for i in marks:
            item.own_markers[i] = pytest.mark.benchmark(**{**item.own_markers[i].kwargs, "timer": timer}).mark
        if not marks:
            item.add_marker(pytest.mark.benchmark(timer=timer, group=_torchrun_family(item)))

@pytest.hookimpl(wrapper=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_resume(config: pytest.Config, items: list[pytest.Item]):
    # After every pytest_collection_modifyitems (suite.plugin's --suite-resume selection, which only rank 0
    # makes, among them) and before pytest_collection_finish compares the ranks' test lists.
    result = yield
    if _STATE is not None:
        with _usage_error():
            _STATE.same_resume(config, items)
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    if _STATE is not None:
        with _usage_error():
            _STATE.same_tests([item.nodeid for item in session.items])


@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    if _STATE is not None:
        block = _STATE.describe()
        if _NCCL_CHOICES is not None and _STATE.backend == "nccl":
            block["nccl_choices"] = _NCCL_CHOICES
        output_json.setdefault("suite", {})["distributed"] = block


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _STATE is not None and _STATE._tries:
        # The ranks leave together, once rank 0 has written its JSON: torchrun stops every rank as soon as one
        # exits with an error (a case that failed on every rank), which would kill rank 0 before it wrote the
        # results. (Not after a run that measured nothing: refused at start, its ranks may not all be here.)
        try:
            _STATE.agree("the end of the run")
        except RankTimeout as exc:
            print(f"[suite] rank {_STATE.env.rank}: {exc}", file=sys.stderr)
    shutdown()


