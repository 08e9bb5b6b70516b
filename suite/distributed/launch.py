"""How ranks start: torchrun's environment, each rank's backend and device, `python -m suite.distributed`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite.errors import UserError

TORCHRUN_HINT = (
    "torchrun --nproc-per-node=N -m pytest benchmarks/test_collectives.py --benchmark-json out.json "
    "(or: python -m suite.distributed --nproc N)"
)
# The environment that changes what a collective measures (links, algorithms, interfaces): recorded with the
# results, so two runs' numbers are read next to their settings.
# NCCL's choices (NCCL_ALGO, NCCL_PROTO, NVLS) move all-reduce busbw by a third; FI_* (libfabric, EFA) and
# UCX_* set the inter-node transport.
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CCL_", "TORCH_XCCL_", "FI_", "UCX_")
ENV_SUFFIXES = ("_SOCKET_IFNAME",)
# NCCL also reads its variables from these files (NCCL_CONF_FILE first, then the user's, then the system's):
# recorded under their path, their settings joined with "; ".
NCCL_CONF_FILES = ("~/.nccl.conf", "/etc/nccl.conf")


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
    for name in filter(None, (env.get("NCCL_CONF_FILE"), *NCCL_CONF_FILES)):
        path = Path(name).expanduser()
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        settings = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if settings:
            found[str(path)] = "; ".join(settings)
    return found


# NCCL's own choices (NVLS or not, its channels) are in its INFO log: INIT, ENV and GRAPH log once, while a
# communicator starts. Not TUNING: it logs every collective (a write and flush each) inside what is timed. NCCL
# reads these variables once per process, at its first use; NCCL_DEBUG_FILE keeps the log off the terminal.
NCCL_LOG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH"}
NCCL_LOG_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def start_nccl_log(environ: dict | None = None) -> Path | dict:
    """Before this process's first NCCL communicator: NCCL's start-up log into a file of its own (its path).
    Where the user set NCCL_DEBUG* (in the environment or an NCCL configuration file), their setting stands:
    the reason NCCL's choices go unrecorded."""
    env = os.environ if environ is None else environ
    if theirs := users_nccl_log(env):
        return {"unknown": f"the user set NCCL's logging: {', '.join(theirs)}"}
    path = Path(tempfile.mkdtemp(prefix="suite-nccl-")) / "nccl.log"
    env.update(NCCL_LOG, NCCL_DEBUG_FILE=str(path))
    return path


def users_nccl_log(env) -> list[str]:
    """The NCCL_DEBUG* settings the user made (in the environment or an NCCL configuration file)."""
    theirs = [k for k in NCCL_LOG_VARIABLES if k in env]
    return theirs + [k for k, v in launch_environment(env).items() if k not in env and "NCCL_DEBUG" in v]


def _loaded_nccl():
    """The libnccl this process already runs (torch's), where it can re-read its log settings
    (ncclResetDebugInit: NCCL 2.24.3 on); None where it cannot, or NCCL is linked into torch."""
    import ctypes

    try:
        lib = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD)
    except (OSError, AttributeError):  # not loaded, or no RTLD_NOLOAD (not Linux)
        return None
    return lib if hasattr(lib, "ncclResetDebugInit") else None


@contextlib.contextmanager
def nccl_tuning_log(loaded=_loaded_nccl):
    """Around one untimed collective on rank 0: NCCL's TUNING log (a line per collective naming the algorithm and
    protocol it took; rank 0 logs it) into a file of its own, switched off again before anything is timed. Yields
    a dict that then holds `nccl_algo` and `nccl_proto`; it stays empty where the user set NCCL's logging (theirs
    stands) or the NCCL in this process cannot re-read its settings."""
    found: dict = {}
    lib = None if users_nccl_log(os.environ) else loaded()
    if lib is None:
        yield found
        return
    from suite.cases.collectives.nccl_log import tuning_choice

    path = Path(tempfile.mkdtemp(prefix="suite-nccl-")) / "tuning.log"
    os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="TUNING", NCCL_DEBUG_FILE=str(path))
    lib.ncclResetDebugInit()
    try:
        yield found
    finally:
        for name in NCCL_LOG_VARIABLES:
            os.environ.pop(name, None)
        lib.ncclResetDebugInit()  # NCCL's default (no log) from its next message on; it closes the file then
        with contextlib.suppress(OSError):  # NCCL writes the file line-buffered: the call's line is in it
            found.update(tuning_choice(path.read_text(encoding="utf-8", errors="replace")))
        shutil.rmtree(path.parent, ignore_errors=True)


def stop_nccl_log(log: Path | dict, environ: dict | None = None) -> dict:
    """Once the first communicator ran a collective: what its log says NCCL chose
    (suite.cases.collectives.nccl_log); the variables and the file are removed."""
    if isinstance(log, dict):
        return log
    from suite.cases.collectives.nccl_log import nccl_choices

    env = os.environ if environ is None else environ
    for name in NCCL_LOG_VARIABLES:
        env.pop(name, None)
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    shutil.rmtree(log.parent, ignore_errors=True)
    return nccl_choices(text) or {"unknown": "NCCL wrote no start-up log"}


def nccl_version() -> str | None:
    """The NCCL torch runs with (torch.cuda.nccl.version()), where CUDA is available; None elsewhere."""
    import torch

    try:
        version = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a torch without NCCL, or a driver problem: nothing to record
        return None
    # A tuple (2, 21, 5); older torch gave NCCL's own integer code, kept as it is.
    return ".".join(map(str, version)) if isinstance(version, tuple) else None if version is None else str(version)


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


def not_launched_reason() -> str:
    return f"collectives need several ranks: launch with {TORCHRUN_HINT}"


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
    root = Path(known.rootdir) if known.rootdir else Path(__file__).resolve().parents[2]
    path = Path(known.suite_config) if known.suite_config else root / DEFAULT_CONFIG
    suite_config = load_config(path)
    from suite import devices as dev

    spec = known.suite_devices or suite_config.devices
    devices = dev.check_spec(spec, option="--suite-devices" if known.suite_devices else f"{path}: devices")
    gpus = max((dev.current_platform().count(k) for k in BACKEND_DEVICE_KIND.values()
                if any(d.startswith(k) for d in devices)), default=0)
    cores = os.cpu_count() or 1
    if gpus >= 2 and nproc > gpus:  # one GPU visible: every rank takes it (a GPU per rank, set by srun)
        raise UserError(f"--nproc {nproc}: this node shows {gpus} GPUs and each rank needs its own; give "
                        f"--nproc {gpus} or fewer")
    if gpus == 0 and nproc > max(2, cores):
        raise UserError(f"--nproc {nproc}: this node has {cores} CPU core(s), and Gloo ranks beyond them time "
                        f"each other's waits, not the collective; give --nproc {max(2, cores)} or fewer")


def main(argv: list[str] | None = None) -> int:
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
    quiet = [sys.executable, "-c", "import sys; from suite.distributed.launch import torchrun_quietly as t; "
             "sys.exit(t(sys.argv[1:]))", *cmd[3:]]
    if os.name == "posix":
        # torchrun replaces this process: a signal or time limit aimed at this command reaches torchrun (and
        # its ranks die with it, suite.agent), rather than leaving it running without its parent.
        os.execv(quiet[0], quiet)
    return subprocess.call(quiet)


def torchrun_quietly(argv: list[str]) -> int:
    """torchrun's main on `argv`; a signal that stops it (SIGTERM from a time limit, scancel) is one line, not
    torch's SignalException traceback: the ranks were stopped with it, and rank 0's partial file keeps what
    finished."""
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except SignalException as exc:
        print(f"[suite] torchrun stopped by {signal.Signals(exc.sigval).name}: its ranks stopped with it; the "
              "finished benchmarks stay in the results' .partial.jsonl (rerun with --suite-resume for the rest)",
              file=sys.stderr)
        return 128 + int(exc.sigval)
    return 0
