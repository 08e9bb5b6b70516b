"""Inputs that used to mislead: each is one line naming the problem and the fix, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from suite.cli import COMMANDS
from suite.distributed import launch
from suite.errors import UserError
from suite.partial import check_writable
from suite.results import load_results
from tests.test_distributed_launch import no_torchrun  # noqa: F401 - the fixture: torchrun started, not run


def _load_error(*paths) -> str:
    with pytest.raises(UserError) as info:
        load_results(paths)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_malformed_stats_are_named_not_called_skipped(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": [
        {"name": "a", "fullname": "a", "stats": "fast"}, {"name": "b", "fullname": "b", "stats": {"median": "x"}}]}))
    message = _load_error(path)
    assert "ignored 2 benchmark(s) without stats.median" in message and "skipped" not in message
    assert "rerun the benchmarks" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_and_a_symlink_loop_are_named_as_such(tmp_path):
    fifo, loop = tmp_path / "pipe", tmp_path / "loop"
    os.mkfifo(fifo)
    loop.symlink_to(tmp_path / "back")
    (tmp_path / "back").symlink_to(loop)
    message = _load_error(fifo, loop)
    assert f"{fifo}: a FIFO, socket or device, not a results file" in message
    assert f"{loop}: a symlink loop (a link that leads back to itself)" in message
    assert "no such file" not in message


def test_an_nccl_tests_json_is_not_called_a_foreign_pytest_benchmark_file(tmp_path):
    path = tmp_path / "all_reduce.json"  # nccl-tests -J, cut before its results
    path.write_text(json.dumps({"version": 3, "args": ["./build/all_reduce_perf"], "nccl_version": 22300}))
    message = _load_error(path)
    assert "not a pytest-benchmark" not in message and "neither pytest-benchmark JSON nor nccl-tests" in message
    assert "nccl-tests text or -J JSON output" in message


def test_a_results_name_too_long_for_the_file_system_is_one_line(tmp_path):
    with pytest.raises(UserError) as info:
        check_writable(tmp_path / ("a" * 300 + ".json"))
    message = str(info.value)
    assert "\n" not in message and "a name of 305 characters is too long" in message
    assert message.endswith("give a name of at most 241")
    check_writable(tmp_path / ("a" * 236 + ".json"))  # its NAME.partial.jsonl.lock is 255 bytes: fine


def test_more_ranks_than_cores_is_refused_in_one_line(no_torchrun, monkeypatch, capsys):
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    assert launch.main(["--nproc", "64", "--suite-devices", "cpu"]) == 2
    assert capsys.readouterr().err == ("error: --nproc 64: this node has 2 CPU core(s), and Gloo ranks beyond them "
                                       "time each other's waits, not the collective; give --nproc 2 or fewer\n")
    assert no_torchrun == []
    launch.main(["--nproc", "2", "--suite-devices", "cpu"])
    assert no_torchrun and "torchrun_quietly" in " ".join(no_torchrun[0])


def test_sigterm_to_torchrun_is_one_line_not_a_traceback(monkeypatch, capsys):
    from torch.distributed.elastic.multiprocessing.api import SignalException

    def stopped(argv):
        raise SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM)

    monkeypatch.setitem(sys.modules, "torch.distributed.run", type(sys)("run"))
    sys.modules["torch.distributed.run"].main = stopped
    assert launch.torchrun_quietly(["--standalone"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("[suite] torchrun stopped by SIGTERM: its ranks stopped")
    assert "--suite-resume" in err


def test_the_quiet_torchrun_runs_torchrun_with_the_shown_arguments(no_torchrun, capsys):
    launch.main(["--nproc", "2", "--suite-devices", "cpu", "--benchmark-json", "out.json"])
    shown = capsys.readouterr().out.splitlines()[0].removeprefix("+ ").split()
    assert no_torchrun[0][3:] == shown[3:] and Path(no_torchrun[0][0]) == Path(sys.executable)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_prints(command, capsys):
    # argparse formats help strings with %: a stray one ("within 1%") is a traceback on --help.
    from suite.cli import main

    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0 and "usage:" in capsys.readouterr().out
