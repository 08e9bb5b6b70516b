"""Crash-safe results: every finished benchmark is appended and flushed to `<json>.partial.jsonl` at once.

pytest-benchmark writes `--benchmark-json` only when the session ends, so a run killed halfway (SIGKILL, a
driver hang, the job's time limit) would lose everything. The partial file is the run's record instead: the
JSON at the end is made from it (`PartialState.journal_json`), as `suite finish` makes it after a crash. It
holds, line by line:

    {"partial": true, "machine_info": ..., "commit_info": ..., "suite": ..., "datetime": ..., "version": ...}
    {"started": "<nodeid>"}                      when a test starts measuring (its devices are present)
    {<benchmark>}                                 a finished benchmark whose test passed, as in the final JSON
    {"finished": "<nodeid>", "outcome": "..."}   after each test that started (passed, failed, skipped)

The file is created when the first test starts measuring: a run refused up front, or one whose every case is
skipped, leaves none. A completed run replaces it with the normal JSON. `python -m suite report`/`compare` read
it (marked partial), and `pytest benchmarks --suite-resume` re-runs only what it lacks. Readers skip lines that
are not benchmarks (they have no "stats") and an unparsable last line (the write the kill interrupted).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from suite import pb_adapter
from suite.errors import UserError

SUFFIX = ".partial.jsonl"
# A test that was running when this many runs died is skipped by --suite-resume: once may be the job's time
# limit or a stray kill (so it is retried; a hang is caught by the per-case time limit), twice is the test
# crashing the process, which would stop every resumed run at the same place.
MAX_DEATHS = 2


def partial_path(json_path: str | Path) -> Path:
    """results/x.json -> results/x.partial.jsonl"""
    path = Path(json_path)
    return path.with_name(path.name.removesuffix(".json") + SUFFIX)


class PartialWriter:
    """Appends one JSON object per line, flushed and fsynced, so a kill loses at most the line being written.

    The file is opened (created, or with `append` continued) on the first write, so a run that writes nothing
    leaves nothing behind.
    """

    def __init__(self, path: Path, append: bool = False) -> None:
        self.path = path
        self.append = append
        self._fh = None
        self.has_header = append and path.exists() and path.stat().st_size > 0

    def write(self, obj: dict, durable: bool = True) -> None:
        """Append `obj`, flushed (a killed process loses nothing); `durable`: also fsynced, so that a kernel panic
        (a GPU driver's, say) loses nothing either. A line written with durable=False must be followed at once by
        a durable one, whose fsync writes both: an fsync costs milliseconds on a network file system."""
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            mode = "a" if self.append else "w"
            self._fh = open(self.path, mode, encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self._fh.write(pb_adapter.dumps(obj) + "\n")
        self._fh.flush()
        if durable:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            with contextlib.suppress(OSError):  # its last flush failed (a full disk): said when the write failed
                self._fh.close()


@dataclass
class PartialRun:
    """What an earlier, interrupted run left: its header, finished benchmarks, and the test it died in."""

    header: dict | None = None
    benchmarks: dict[str, dict] = field(default_factory=dict)  # fullname -> benchmark
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/skipped
    started: Counter = field(default_factory=Counter)
    finished: Counter = field(default_factory=Counter)
    lines: list[str] = field(default_factory=list)  # the valid lines, to rewrite without a torn last one
    unreadable: list[int] = field(default_factory=list)  # numbers of corrupt lines before the last, left out

    def deaths(self, nodeid: str) -> int:
        """How many runs died while this test was running (started, never finished)."""
        return self.started[nodeid] - self.finished[nodeid]

    def add(self, obj: dict) -> None:
        """One line of the file: the header, a test's "started" or "finished", or a finished benchmark."""
        if obj.get("partial"):
            self.header = obj
        elif "started" in obj:
            self.started[obj["started"]] += 1
        elif "finished" in obj:
            self.finished[obj["finished"]] += 1
            self.outcomes[obj["finished"]] = obj.get("outcome", "")
        elif "stats" in obj and "fullname" in obj:
            self.benchmarks[obj["fullname"]] = obj


def read_partial(path: Path) -> PartialRun:
    """Parse a partial file; a torn last line is dropped, a corrupt one elsewhere is left out and its number
    kept in `unreadable` (what it held is measured again: a lost result line reruns its test, a lost
    "finished" line counts as a death), as `report` reads the same file."""
    run = PartialRun()
    try:
        raw = path.read_bytes().splitlines()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the partial results ({exc}); delete it to start afresh") from None
    for number, data in enumerate(raw, 1):
        if not data.strip():
            continue
        try:  # one line at a time: a stray byte spoils its line, not the file
            line = data.decode("utf-8")
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            if number == len(raw):
                break  # the write a kill interrupted
            obj = None
        if not isinstance(obj, dict):
            run.unreadable.append(number)
            continue
        run.lines.append(line)
        run.add(obj)
    return run


def results_json(header: dict | None, benchmarks: list[dict], suite: dict | None, partial: bool = False) -> dict:
    """The results JSON a journal stands for: its header (without the "partial" mark unless `partial`), the
    benchmarks and the `suite` block."""
    doc = {key: value for key, value in (header or {}).items() if partial or key != "partial"}
    return {**doc, "benchmarks": benchmarks, "suite": suite}


def rewrite_clean(path: Path, run: PartialRun) -> None:
    """Drop a torn last line before appending to the file again."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in run.lines), encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomically(path: Path, doc: dict) -> None:
    """Write the results JSON to a temporary file renamed into place: an OSError (a full disk) leaves the
    earlier file as it was. A symlinked path: its target is written, the link kept."""
    path = path.resolve()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(pb_adapter.dumps(doc, indent=4).encode())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


# The longest file name most file systems take (ext4, xfs, btrfs); a longer one fails deep in a write.
NAME_MAX = 255


def check_writable(json_path: Path) -> None:
    """Create the output folder and prove the JSON can be written, before anything is measured."""
    longest = partial_path(json_path).name + ".lock"  # the longest name a run writes beside the JSON
    if len(os.fsencode(longest)) > NAME_MAX:
        raise UserError(f"--benchmark-json {json_path.name[:40]}...: a name of {len(json_path.name)} characters is "
                        f"too long (the run also writes NAME.partial.jsonl.lock beside it, and a file name holds at "
                        f"most {NAME_MAX} bytes); give a name of at most {NAME_MAX - len(longest) + len(json_path.name)}")
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--benchmark-json {json_path}: cannot create the folder {json_path.parent} "
                        f"({exc.strerror}); choose a writable path") from None
    if json_path.is_dir():
        raise UserError(f"--benchmark-json {json_path}: is a directory; give a file path such as {json_path}/results.json")
    target = json_path.resolve()  # a symlink's target: created and removed here, the link itself kept
    existed = target.exists()
    try:
        with open(json_path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UserError(f"--benchmark-json {json_path}: cannot be written ({exc.strerror}); choose a writable path") from None
    if not existed:
        target.unlink(missing_ok=True)


# How long a run waits for the results lock: a local disk answers at once; a network mount whose lock service
# is down would otherwise block the run, uninterruptibly, before it measured anything.
LOCK_WAIT_S = 10.0


class RunLock:
    """One run at a time per results file: `<json>.partial.jsonl.lock`, held (flock) from the start of a run to
    its end: two runs given one --benchmark-json would both write the partial file, and the first to finish
    would delete it and leave the JSON of only one. Where the file system has no locks (some network mounts),
    runs are not kept apart."""

    def __init__(self, partial: Path) -> None:
        self.path = partial.with_name(partial.name + ".lock")
        self._fh = None
        self._stuck = None  # a lock file whose lock the file system never answered

    def acquire(self, json_path: Path) -> None:
        try:
            import fcntl
        except ImportError:  # not on POSIX
            return
        try:
            fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run
        except OSError:
            return
        outcome = self._flock(fh, fcntl)
        if outcome == "waiting":
            # A network mount whose lock service does not answer (NFS's lockd, a server in its grace period):
            # the lock is given up on, not waited for in silence; the file stays open for the thread that
            # still waits on it.
            self._stuck = fh
            print(f"warning: {self.path}: the file system did not grant a lock in {LOCK_WAIT_S:g} s (a network "
                  "mount?): this run goes on, but a second run on the same --benchmark-json would not be "
                  "refused", file=sys.stderr)
            return
        if outcome == "held":
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise UserError(f"--benchmark-json {json_path}: another run ({holder}) is writing it now; wait "
                            "for it to end, or give this run another --benchmark-json")
        if outcome == "none":  # no locks on this file system
            fh.close()
            return
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {platform.node()}, started {time.strftime('%H:%M:%S')}\n")
        fh.flush()
        self._fh = fh

    @staticmethod
    def _flock(fh, fcntl) -> str:
        """Try the lock in a thread, for at most LOCK_WAIT_S: "locked", "held" (by another run), "none" (the
        file system has no locks) or "waiting" (it has not answered)."""
        import threading

        outcome = ["waiting"]

        def attempt() -> None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                outcome[0] = "locked"
            except BlockingIOError:
                outcome[0] = "held"
            except OSError:
                outcome[0] = "none"

        thread = threading.Thread(target=attempt, name="results-lock", daemon=True)
        thread.start()
        thread.join(LOCK_WAIT_S)
        return outcome[0]

    def release(self) -> None:
        if self._fh is not None:
            self.path.unlink(missing_ok=True)  # while still held: a run starting now makes a new one
            self._fh.close()
            self._fh = None
        if self._stuck is not None:  # the run is over: the thread still waiting on it keeps its own reference
            with contextlib.suppress(OSError):
                self._stuck.close()
            self._stuck = None


# --- the partial file of a pytest run (suite.plugin drives it) -------------------------------------------


class PartialState:
    """The partial results file of this run and, with --suite-resume, what the interrupted run left.

    `suite_block` gives the run's `suite` block for the header; `identity` is what a resumed run must share
    with the earlier one ({"config": resolved config, "devices": [...]}).
    """

    def __init__(self, config, writer: PartialWriter | None, previous: PartialRun | None,
                 suite_block: Callable[[], dict] | None = None) -> None:
        self.config = config  # the pytest.Config
        self.writer = writer
        self.previous = previous or PartialRun()
        self.suite_block = suite_block or dict
        self.reused: list[dict] = []  # benchmarks of the earlier run kept instead of re-run
        # The journal's content, also held here: the results JSON at the end is made from it (journal_json), and
        # a journal that could not be written (a full disk) loses nothing of it.
        self.header: dict | None = self.previous.header
        self.kept: list[dict] = []  # this run's benchmarks, in the order they were journaled
        self.outcomes: dict[str, str] = {}
        self.measuring: set[str] = set()  # tests that wrote "started"
        self.results: dict[str, dict] = {}  # nodeid -> benchmark, written once the whole test passed
        self.written = 0  # benchmarks this run wrote to the partial file
        self.write_error = ""  # why the partial file could not be written (then it is written no more)
        self.lock: RunLock | None = None  # held from the start of the run to its end
        self.started = time.time()

    @classmethod
    def start(cls, config, identity: dict, suite_block: Callable[[], dict]) -> "PartialState":
        json_path = config.getoption("benchmark_json", None)
        resume = config.getoption("suite_resume")
        # Under torchrun only rank 0 writes results (suite.distributed); the other ranks write nothing.
        rank0 = os.environ.get("RANK", "0") == "0"
        if rank0 and json_path is None and resume:
            raise UserError("--suite-resume needs --benchmark-json PATH: the results file of the run to resume")
        if not rank0 or json_path is None:
            return cls(config, None, None, suite_block)
        json_path = Path(json_path)
        check_writable(json_path)
        partial = partial_path(json_path)
        lock = RunLock(partial)
        lock.acquire(json_path)
        try:
            state = cls._start(config, json_path, partial, resume, identity, suite_block)
        except BaseException:
            lock.release()
            raise
        state.lock = lock
        return state

    @classmethod
    def _start(cls, config, json_path: Path, partial: Path, resume: bool, identity: dict,
               suite_block: Callable[[], dict]) -> "PartialState":
        previous = None
        if not resume and partial.exists():
            refuse_to_overwrite(partial)
        if resume:
            if not partial.exists():
                raise UserError(f"--suite-resume: there is no {partial} to resume (the run finished, or wrote "
                                "to another --benchmark-json); run without --suite-resume")
            previous = read_partial(partial)
            if bad := previous.unreadable:
                lines = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
                print(f"warning: {partial}: left out {len(bad)} unreadable line(s) ({lines}); what they held is "
                      "measured again", file=sys.stderr)
            check_same_run(partial, previous, identity)
            if not previous.benchmarks and not any(previous.deaths(n) for n in previous.started):
                raise UserError(f"--suite-resume: {partial} holds no finished benchmark and no interrupted "
                                "test: nothing to resume; delete it and run without --suite-resume")
            rewrite_clean(partial, previous)
        return cls(config, PartialWriter(partial, append=resume), previous, suite_block)

    def write(self, obj: dict, durable: bool = True) -> None:
        if self.writer is None or self.write_error:
            return
        try:
            if not self.writer.has_header:
                self.header = self.header or self._header()
                self.writer.write(self.header, durable=False)  # made durable by the line after it
                self.writer.has_header = True
            self.writer.write(obj, durable=durable)
        except OSError as exc:  # a full disk, a quota: the run goes on, its results held for the final JSON
            self.write_error = f"{exc.strerror or exc}"
            line = (f"[suite] cannot write {self.writer.path} ({self.write_error}): from here on the results are "
                    "held in memory only, until the JSON at the end; a run killed now loses them. Free space, "
                    "or stop it (Ctrl-C) and --suite-resume later")
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            capture = self.config.pluginmanager.get_plugin("capturemanager")
            if reporter is not None and capture is not None:  # pytest captures output inside a test's hooks
                with capture.global_and_fixture_disabled():
                    reporter.write_line(line, red=True)
            else:
                print(line, file=sys.stderr)

    def _header(self) -> dict:
        made = pb_adapter.header(self.config)
        return {"partial": True, "machine_info": made["machine_info"], "commit_info": made["commit_info"],
                "suite": self.suite_block(), "datetime": made["datetime"], "version": made["version"]}

    def select(self, config, items: list) -> None:
        """With --suite-resume: drop what the earlier runs finished; skip a test that runs died in twice."""
        import pytest

        done = [i for i in items if i.nodeid in self.previous.benchmarks]
        for item in items:
            deaths = self.previous.deaths(item.nodeid)
            if deaths >= MAX_DEATHS:
                item.add_marker(pytest.mark.skip(reason=(
                    f"{deaths} earlier runs died while it was running (it crashes or hangs the process); to "
                    f"retry it, run it alone: {retry_command(config, item.nodeid)}"
                )))
        if done:
            items[:] = [i for i in items if i.nodeid not in self.previous.benchmarks]
            config.hook.pytest_deselected(items=done)
            self.reused = [self.previous.benchmarks[i.nodeid] for i in done]

    def finished_count(self) -> int:
        """Benchmarks the partial file holds now: the earlier run's (--suite-resume appends) and this run's."""
        return len(self.previous.benchmarks) + self.written

    def interrupted_line(self, how: str) -> str:
        """What a run stopped by Ctrl-C or SIGTERM (`how`) kept, and how to go on."""
        kept = self.finished_count()
        if kept:
            return (f"[suite] {how}: {kept} finished benchmark(s) kept in {self.writer.path}; rerun the same "
                    "command with --suite-resume to run the rest")
        return (f"[suite] {how} before any benchmark finished: no results written to "
                f"{self.config.getoption('benchmark_json')}")

    def unsaved_kept(self) -> str:
        """What is kept when the results JSON cannot be written."""
        if self.writer is None:
            return "nothing measured could be kept"
        return (f"the {self.finished_count()} benchmark(s) written to {self.writer.path} are kept; free space and "
                "rerun the same command with --suite-resume to write it")

    def discard(self) -> None:
        """Drop the file of a run that measured nothing: a file of skips holds no results, and `health` or
        `report` would take it for the node's latest run."""
        self.writer.close()
        self.writer.path.unlink(missing_ok=True)

    def journal_json(self) -> dict:
        """The results JSON at the end of a run before pytest_benchmark_update_json adds to it (the run's
        `suite` block, the benchmarks a resumed run kept): the journal's header and this run's benchmarks, as
        `suite finish` makes it from a killed run's journal."""
        if self.header is None:  # every test failed before a result was journaled
            self.header = self._header()
        return results_json(self.header, list(self.kept), None)

    def measure_starts(self, nodeid: str) -> None:
        """A test starts measuring (its devices are there): from here a death is counted against it."""
        self.measuring.add(nodeid)
        self.write({"started": nodeid})

    def report(self, nodeid: str, when: str, outcome: str, benchmark: dict | None) -> None:
        """A phase of a test ended; `benchmark` (the call's result) is written once the whole test passed."""
        if when == "call" or outcome != "passed":
            self.outcomes.setdefault(nodeid, outcome)
        if when == "call" and benchmark is not None and outcome == "passed":
            self.results[nodeid] = benchmark
        if when != "teardown":
            return
        outcome = self.outcomes.pop(nodeid, "passed")
        result = self.results.pop(nodeid, None)
        if result is not None and outcome == "passed":
            # Made durable by the "finished" line written right after it (one fsync for both). The "started"
            # and "finished" lines are each fsynced: after a kernel panic they say which test was running.
            self.kept.append(result)
            self.write(result, durable=nodeid not in self.measuring)
            self.written += 0 if self.write_error else 1
        if nodeid in self.measuring:
            self.measuring.discard(nodeid)
            self.write({"finished": nodeid, "outcome": outcome})

    def finish(self) -> None:
        """Close the file; drop it once the complete JSON exists (that holds everything)."""
        try:
            self._finish()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _finish(self) -> None:
        if self.writer is None:
            return
        self.writer.close()
        json_path = Path(self.config.getoption("benchmark_json"))
        try:
            complete = json_path.stat().st_mtime >= self.started and "benchmarks" in json.loads(json_path.read_text())
        except (OSError, ValueError):
            complete = False
        # A file of no benchmark and no test cut short (the only test failed) is nothing to resume, and
        # `health` or `report` would take it for the node's latest run.
        if complete or not (self.written or self.previous.benchmarks or self.measuring or self.previous.started):
            self.writer.path.unlink(missing_ok=True)


def retry_command(config, nodeid: str) -> str:
    """The command that runs one test alone with this run's config, into a results file of its own (this
    run's partial file must not be overwritten)."""
    import shlex

    parts = ["pytest", nodeid]
    suite_config = config.getoption("suite_config", None)
    if suite_config:
        parts += ["--suite-config", str(suite_config)]
    json_path = config.getoption("benchmark_json", None)
    if json_path:
        path = Path(json_path)
        parts += ["--benchmark-json", str(path.with_name(path.name.removesuffix(".json") + "-retry.json"))]
    return shlex.join(parts)


def refuse_to_overwrite(partial: Path) -> None:
    """A new run (no --suite-resume) would start `partial` afresh: refused while it holds an interrupted run's
    finished benchmarks, which would be lost. A file with none (the run died in its first test) is
    overwritten."""
    try:
        finished = len(read_partial(partial).benchmarks)
    except UserError as exc:  # cannot be read (permissions): whatever it holds, a new run must not wipe it
        raise UserError(f"{exc} (or run with another --benchmark-json)") from None
    if finished:
        raise UserError(f"{partial} holds {finished} finished benchmark(s) of an interrupted run: add --suite-resume "
                        "to keep them and run the rest, or delete the file to start afresh")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def check_same_run(partial: Path, previous: PartialRun, identity: dict) -> None:
    """Resume only the same measurement: the same config, devices and machine, or the JSON would mix runs."""
    if previous.header is None:
        if previous.benchmarks:  # its header line is the unreadable one: nothing says what it measured
            raise UserError(f"--suite-resume: {partial} holds {len(previous.benchmarks)} finished "
                            "benchmark(s) but no readable header (config, devices, machine): it cannot be "
                            "told to be this run's; run without --suite-resume into another "
                            "--benchmark-json, or delete it")
        return  # died before its first result: nothing to merge
    old, info = _dict(previous.header.get("suite")), _dict(previous.header.get("machine_info"))
    if old.get("config") != identity.get("config") or old.get("devices") != identity.get("devices"):
        raise UserError(f"--suite-resume: {partial} was measured with another config or device list "
                        f"({old.get('config_path')}, devices {old.get('devices')}); resume with the same "
                        "--suite-config and --suite-devices, or run without --suite-resume")
    host = info.get("node")
    if host and host != platform.node():
        raise UserError(f"--suite-resume: {partial} was measured on {host}, not on this machine "
                        f"({platform.node()}); run without --suite-resume")
    changed = _changes(info, identity["now"]() if callable(identity.get("now")) else {})
    if changed:
        raise UserError(f"--suite-resume: {partial} was measured with other software or hardware "
                        f"({'; '.join(changed[:3])}{'; ...' if len(changed) > 3 else ''}): one JSON would mix them; "
                        "run without --suite-resume into another --benchmark-json")


# The software whose version a resumed run must share with the run it resumes.
SAME_SOFTWARE = ("torch", "cuda", "hip", "python", "suite")


def _changes(info: dict, now: dict) -> list[str]:
    """What differs between the journal's machine_info and this process (software versions, each device's
    name and UUID), as "what old -> new"; what either side does not record is not compared."""
    software = _dict(info.get("software"))
    changed = [f"{key} {software[key]} -> {value}" for key, value in (now.get("software") or {}).items()
               if key in SAME_SOFTWARE and software.get(key, value) != value]
    recorded = {str(d.get("id")): d for d in info.get("devices") or [] if isinstance(d, dict)}
    for name, props in (now.get("hardware") or {}).items():
        old = recorded.get(name, {})
        changed += [f"{name} {key} {old[key]} -> {value}" for key, value in props.items()
                    if old.get(key) not in (None, value)]
    return changed


def what_measures(devices: list[str]) -> dict:
    """This process's software and the selected accelerators (name, UUID): what a resumed run must share with
    the run it resumes (check_same_run), read only when resuming."""
    import torch

    from suite import __version__
    from suite import devices as dev

    platform = dev.current_platform()
    hardware = {}
    for name in devices:
        if torch.device(name).type != "cpu" and name in dev.present_devices():
            with contextlib.suppress(Exception):  # a device that cannot say: compared by what it can
                props = platform.properties(torch.device(name))
                hardware[name] = {k: props.get(k) for k in ("name", "uuid") if props.get(k)}
    return {"software": {**platform.software(), "suite": __version__}, "hardware": hardware}
