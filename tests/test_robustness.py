"""Nothing lost: crash-safe partial results, resume, out of memory, time limits, unwritable outputs."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from suite.errors import UserError
from suite.partial import (
    PartialRun,
    RunLock,
    check_same_run,
    check_writable,
    partial_path,
    read_partial,
    refuse_to_overwrite,
)

ROOT = Path(__file__).resolve().parent.parent
FAST = {"devices": "cpu", "timing": {"warmup_s": 0.0, "max_time": 0.02, "min_rounds": 2}}
FAKE_TESTS = '''
def test_oom(case, measure):
    measure(case)

def test_sleepy(case, measure):
    measure(case)

def test_quick(case, measure):
    measure(case)

def test_stall(case, measure):
    measure(case)
'''


@pytest.fixture
def fake_suite(pytester, tmp_path):
    """A benchmarks folder of the test-only families (tests/fake_families.py), and a way to run it."""
    pytester.makeconftest('pytest_plugins = ["suite.plugin", "tests.fake_families"]')
    pytester.makepyfile(test_fake=FAKE_TESTS)

    def command(config: dict, out: Path, *args: str) -> list[str]:
        cfg = tmp_path / "suite.yaml"
        cfg.write_text(yaml.safe_dump(config))
        return [sys.executable, "-m", "pytest", str(pytester.path), f"--rootdir={pytester.path}", "-p", "no:cacheprovider",
                f"--suite-config={cfg}", f"--benchmark-json={out}", "-rs", "-q", *args]

    return command


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_sigkill_keeps_every_finished_benchmark_and_resume_completes(fake_suite, tmp_path):
    out = tmp_path / "results" / "run.json"
    partial = partial_path(out)
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(fake_suite(FAST, out, "-k", "quick"), env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                cwd=tmp_path)
    deadline = time.monotonic() + 120
    finished = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists():
            finished = partial.read_text().count('"stats"')
            if finished >= 5:
                break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed: " + log.read_text()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists(), "pytest-benchmark writes its JSON only at the end; the kill came first"

    run = read_partial(partial)
    assert len(run.benchmarks) >= finished >= 5
    assert run.header["partial"] is True and run.header["machine_info"]["devices"][0]["id"] == "cpu"
    for bench in run.benchmarks.values():
        assert bench["extra_info"]["case"] == "quick" and bench["stats"]["median"] > 0
    kept = set(run.benchmarks)

    # `python -m suite finish`: the JSON of the killed run, from its journal, still marked partial; the journal
    # stays for the resume below.
    from suite.cli import main

    finished = tmp_path / "finished.json"
    assert main(["finish", str(partial), "-o", str(finished)]) == 0
    doc = json.loads(finished.read_text())
    assert doc["partial"] is True and [b["fullname"] for b in doc["benchmarks"]] == list(run.benchmarks)
    assert doc["machine_info"] == run.header["machine_info"] and doc["suite"]["devices"] == ["cpu"]
    assert partial.exists()

    # A resume whose every selected test the killed run finished: nothing left to run (pytest alone would
    # exit 5, "no tests"); the JSON is made from the partial file and the run passes. On a copy, so the
    # resume of the whole run below still has the partial file.
    done = sorted(kept)[0]
    other = out.with_name("subset.json")
    partial_path(other).write_bytes(partial.read_bytes())
    result = subprocess.run(fake_suite(FAST, other, "-k", done.split("::")[-1], "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert [b["fullname"] for b in json.loads(other.read_text())["benchmarks"]] == [done]

    # A plain rerun would start the partial file afresh: refused, in one line, before anything runs.
    before = partial.read_bytes()
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick"), env=_env(), capture_output=True, text=True,
                            timeout=180, cwd=tmp_path)
    assert result.returncode == 4, result.stdout[-2000:]
    assert (
        f"holds {len(kept)} finished benchmark(s) of an interrupted run: add --suite-resume" in result.stderr
    )
    assert partial.read_bytes() == before, "nothing measured is lost"

    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    data = json.loads(out.read_text())
    names = [b["fullname"] for b in data["benchmarks"]]
    assert len(names) == len(set(names)) == 40, "every case exactly once: the kept ones and the rest"
    assert kept <= set(names)
    assert f"{40 - len(kept)} passed, {len(kept) + 6} deselected" in result.stdout, "only the rest (6: -k)"
    assert not partial.exists(), "a completed run replaces the partial file with the JSON"


def test_resume_retries_a_case_a_run_died_in_once_and_skips_it_after_two(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    partial = partial_path(out)
    for attempt in (1, 2):
        args = ("-k", "sleepy") if attempt == 1 else ("-k", "sleepy", "--suite-resume")
        proc = subprocess.Popen(fake_suite(FAST, out, *args), env=_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=tmp_path)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not partial.exists() or partial.read_text().count('"started": "test_fake.py::test_sleepy[cpu-slow]"') < attempt
        ):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)  # killed while the slow case sleeps: as if it crashed the process
        proc.wait(timeout=30)
        assert read_partial(partial).deaths("test_fake.py::test_sleepy[cpu-slow]") == attempt
    result = subprocess.run(fake_suite(FAST, out, "-k", "sleepy", "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 earlier runs died while it was running" in result.stdout
    retry = f"pytest 'test_fake.py::test_sleepy[cpu-slow]' --suite-config {tmp_path / 'suite.yaml'}"
    assert retry + f" --benchmark-json {tmp_path / 'run-retry.json'}" in result.stdout.replace("\n", "")
    assert [b["name"] for b in json.loads(out.read_text())["benchmarks"]] == ["test_sleepy[cpu-fast]"]


def test_out_of_memory_is_a_skip_with_the_reason_and_the_next_case_runs(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    result = subprocess.run(fake_suite(FAST, out, "-k", "oom"), env=_env(), capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "SKIPPED" in result.stdout and "out of memory for cpu-huge" in result.stdout
    assert "out of memory for cpu-late" in result.stdout, "running out while timing is a skip too"
    assert "1 passed, 2 skipped" in result.stdout
    assert [b["name"] for b in json.loads(out.read_text())["benchmarks"]] == ["test_oom[cpu-small]"]


def test_time_limit_fails_the_case_with_the_limit_and_the_run_goes_on(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    config = {**FAST, "timing": {**FAST["timing"], "time_limit_s": 1}}
    start = time.monotonic()
    result = subprocess.run(fake_suite(config, out, "-k", "sleepy"), env=_env(), capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert time.monotonic() - start < 25, "the 30 s case was stopped at its 1 s limit"
    assert result.returncode == 1
    assert re.search(r"Timeout \(?>1\.0s", result.stdout)  # pytest-timeout 2.4's words, or 2.3's
    assert "1 failed, 1 passed" in result.stdout
    assert [b["name"] for b in json.loads(out.read_text())["benchmarks"]] == ["test_sleepy[cpu-fast]"]


def test_output_folder_is_created_and_unwritable_path_fails_before_running(run_benchmarks, tmp_path):
    tiny = {**FAST, "cases": {"matmul": {"shapes": ["8x8x8"]}}}
    result, data = run_benchmarks(tiny, "-k", "matmul")
    assert data is not None  # run_benchmarks writes into tmp_path/results.json

    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny))
    proc = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "benchmarks"), f"--suite-config={cfg}",
                           f"--benchmark-json={blocker}/sub/out.json", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "cannot create the folder" in proc.stderr and "choose a writable path" in proc.stderr
    assert "passed" not in proc.stdout, "refused before measuring anything"


def test_config_selecting_zero_benchmarks_says_so(run_benchmarks):
    result, data = run_benchmarks({"cases": {"matmul": {"enabled": False}}}, tests="benchmarks/test_matmul.py")
    assert result.ret != 0 and data is None
    assert "selects no benchmarks" in result.stderr.str()


def test_resume_without_a_partial_file_is_a_clear_error(run_benchmarks):
    result, _ = run_benchmarks({**FAST}, "--suite-resume", tests="benchmarks/test_matmul.py")
    assert result.ret != 0
    assert "--suite-resume: there is no" in result.stderr.str()


def test_partial_reader_drops_a_torn_last_line_and_leaves_out_a_corrupt_one(tmp_path):
    path = tmp_path / "x.partial.jsonl"
    bench = {"name": "t[a]", "fullname": "b/t.py::t[a]", "stats": {"median": 1.0}}
    path.write_text(json.dumps({"partial": True}) + "\n" + json.dumps(bench) + '\n{"name": "t[b]", "stat')
    run = read_partial(path)
    assert list(run.benchmarks) == ["b/t.py::t[a]"]
    path.write_text('{"partial": true}\nnot json\n[1]\n' + json.dumps(bench) + "\n")
    run = read_partial(path)
    assert run.unreadable == [2, 3] and list(run.benchmarks) == ["b/t.py::t[a]"]


def test_a_stray_byte_spoils_its_line_not_the_partial_file(tmp_path):
    # One non-UTF-8 byte used to make the whole file unreadable: resume refused it, a plain rerun wiped it.
    path = tmp_path / "x.partial.jsonl"
    bench = {"name": "t[a]", "fullname": "b/t.py::t[a]", "stats": {"median": 1.0}}
    path.write_bytes(b'{"partial": true}\n{"started": "\xff"}\n' + json.dumps(bench).encode() + b"\n")
    run = read_partial(path)
    assert run.unreadable == [2] and list(run.benchmarks) == ["b/t.py::t[a]"]
    with pytest.raises(UserError, match="holds 1 finished benchmark"):
        refuse_to_overwrite(path)


def test_a_second_run_on_the_same_results_file_is_refused_while_the_first_runs(fake_suite, tmp_path):
    # Two runs given one --benchmark-json both wrote its partial file; the first to end deleted it, and the
    # JSON held only one run's results.
    out = tmp_path / "run.json"
    first = RunLock(partial_path(out))
    first.acquire(out)  # a run in progress
    try:
        with pytest.raises(UserError, match=rf"another run \(pid {os.getpid()} on .*\) is writing it now"):
            RunLock(partial_path(out)).acquire(out)
        result = subprocess.run(fake_suite(FAST, out, "-k", "quick"), env=_env(), capture_output=True,
                                text=True, timeout=120, cwd=tmp_path)
        assert result.returncode == 4 and "is writing it now; wait for it to end" in result.stderr
        assert "Traceback" not in result.stderr and not partial_path(out).exists()
    finally:
        first.release()
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick"), env=_env(), capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert not first.path.exists(), "a finished run leaves no lock file"


def test_finish_writes_a_journal_s_json_beside_it_and_refuses_what_it_cannot(tmp_path, capsys):
    from suite.cli import main

    journal = tmp_path / "run.partial.jsonl"
    header = {"partial": True, "machine_info": {"node": "n", "devices": []}, "commit_info": {},
              "suite": {"devices": ["cpu"]}, "datetime": "2026-01-01T00:00:00", "version": "5.3.1"}
    bench = {"name": "test_quick[cpu]", "fullname": "t.py::test_quick[cpu]", "stats": {"median": 1.0},
             "extra_info": {}}
    lines = [header, {"started": bench["fullname"]}, bench, {"finished": bench["fullname"], "outcome": "passed"},
             {"started": "t.py::test_quick[cpu-2]"}]
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"name": "torn')
    assert main(["finish", str(journal)]) == 0
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["benchmarks"] == [bench] and doc["partial"] is True and doc["datetime"] == header["datetime"]
    assert doc["suite"]["devices"] == ["cpu"] and "ceilings" in doc["suite"], "annotated as a run's end is"
    assert journal.exists() and not Path(f"{journal}.lock").exists()
    capsys.readouterr()

    assert main(["finish", str(journal)]) == 2, "an existing JSON is kept"
    assert "run.json exists; give another path with -o" in capsys.readouterr().err
    journal.write_text(json.dumps(header) + "\n")
    assert main(["finish", str(journal), "-o", str(tmp_path / "other.json")]) == 2
    assert "no finished benchmark: nothing to write" in capsys.readouterr().err
    assert main(["finish", str(tmp_path / "run.json")]) == 2, "not a journal"
    assert not (tmp_path / "other.json").exists()


KEEP_JOURNAL = """
import shutil

import pytest

from suite.partial import partial_path


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # Every test has run: the journal is whole, and the run's JSON is not written yet.
    journal = partial_path(session.config.getoption("benchmark_json"))
    shutil.copy(journal, journal.with_name("kept" + journal.name))
"""


def test_a_finished_run_s_json_is_its_journal_as_finish_makes_it(fake_suite, pytester, tmp_path):
    # One source of truth: the JSON at a run's end and the one `suite finish` makes from the same journal hold
    # the same header and benchmarks; only the "partial" mark and the suite block's end time differ.
    pytester.makeconftest('pytest_plugins = ["suite.plugin", "tests.fake_families"]\n' + KEEP_JOURNAL)
    from suite.cli import main

    out = tmp_path / "run.json"
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--benchmark-save-data"), env=_env(),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    run = json.loads(out.read_text())
    assert not partial_path(out).exists(), "a finished run leaves no journal"
    journal = partial_path(out).with_name("kept" + partial_path(out).name)
    assert main(["finish", str(journal), "-o", str(tmp_path / "finished.json")]) == 0
    finished = json.loads((tmp_path / "finished.json").read_text())
    assert finished.pop("partial") is True and "partial" not in run
    for doc in (run, finished):
        doc["suite"].pop("finished")
    assert run == finished and len(run["benchmarks"]) >= 2
    assert all(len(b["stats"]["data"]) == b["stats"]["rounds"] for b in run["benchmarks"]), \
        "--benchmark-save-data keeps every round's time"
    assert set(run) == {"machine_info", "commit_info", "benchmarks", "datetime", "version", "suite"}


def test_a_dangling_symlink_as_the_results_file_is_kept(tmp_path):
    link = tmp_path / "x.json"
    link.symlink_to(tmp_path / "elsewhere" / "real.json")
    (tmp_path / "elsewhere").mkdir()
    check_writable(link)
    assert link.is_symlink() and not (tmp_path / "elsewhere" / "real.json").exists()


HEADER = {"partial": True, "machine_info": {"node": platform.node(), "software": {"torch": "2.1.0"},
                                            "devices": [{"id": "cuda:0", "name": "NVIDIA A100", "uuid": "GPU-1"}]},
          "suite": {"config": {"a": 1}, "devices": ["cpu", "cuda:0"]}}


@pytest.mark.parametrize(("header", "now", "says"), [
    (None, {}, "but no readable header"),
    (HEADER, {"software": {"torch": "2.13.0"}}, "other software or hardware (torch 2.1.0 -> 2.13.0)"),
    (HEADER, {"hardware": {"cuda:0": {"name": "NVIDIA A100", "uuid": "GPU-2"}}}, "cuda:0 uuid GPU-1 -> GPU-2"),
])
def test_resume_refuses_what_cannot_be_told_to_be_the_same_run(header, now, says):
    run = PartialRun(header=header, benchmarks={"b/t.py::t[a]": {}})
    identity = {"config": {"a": 1}, "devices": ["cpu", "cuda:0"], "now": lambda: now}
    with pytest.raises(UserError, match=re.escape(says)):
        check_same_run(Path("x.partial.jsonl"), run, identity)
    same = {"software": {"torch": "2.1.0"}, "hardware": {"cuda:0": {"name": "NVIDIA A100", "uuid": "GPU-1"}}}
    if header is not None:
        check_same_run(Path("x.partial.jsonl"), run, {**identity, "now": lambda: same})


def test_resume_refuses_a_partial_file_of_another_config(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    partial = partial_path(out)
    header = {"partial": True, "machine_info": {"node": "elsewhere"},
              "suite": {"config": {"devices": "cpu"}, "devices": ["cpu"], "config_path": "old.yaml"}}
    partial.write_text(json.dumps(header) + "\n")
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 4
    assert "was measured with another config or device list (old.yaml" in result.stderr


def test_a_benchmark_stopped_by_the_time_limit_while_timed_is_not_saved(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    # 3 s: the 40 quick cases must each finish inside it too, and on a slow first call (Python 3.12 with
    # torch 2.11 here) 1 s was not always enough for the first; the stall case runs 20 s.
    config = {**FAST, "timing": {**FAST["timing"], "time_limit_s": 3}}
    result = subprocess.run(fake_suite(config, out, "-k", "stall or quick"), env=_env(), capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 1, result.stdout[-2000:]
    assert re.search(r"Timeout \(?>3\.0s\)?( from pytest-timeout)?: the case ran past timing\.time_limit_s; "
                     r"raise it in the config", result.stdout)
    names = [b["name"] for b in json.loads(out.read_text())["benchmarks"]]
    assert "test_stall[cpu-midway]" not in names, "interrupted rounds are no measurement"
    assert len(names) == 40


def test_partial_file_holds_only_benchmarks_whose_test_passed(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    config = {**FAST, "timing": {**FAST["timing"], "time_limit_s": 1}}
    proc = subprocess.Popen(fake_suite(config, out, "-k", "stall or sleepy"), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    partial = partial_path(out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not partial.exists() or '"finished": "test_fake.py::test_stall'
                                           not in partial.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # in the slow sleepy case, after the stalled one ended
    proc.wait(timeout=30)
    run = read_partial(partial)
    assert run.outcomes["test_fake.py::test_stall[cpu-midway]"] == "failed"
    assert "test_fake.py::test_stall[cpu-midway]" not in run.benchmarks


def test_resume_of_an_empty_partial_file_says_there_is_nothing_to_resume(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    partial_path(out).write_text("")
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 4
    assert "holds no finished benchmark and no interrupted test: nothing to resume" in result.stderr


def test_a_run_that_measured_nothing_says_so_and_does_not_exit_0(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    result = subprocess.run(fake_suite(FAST, out, "-k", "oom and huge"), env=_env(),  # a skip: out of memory
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 5, result.stdout[-2000:]
    assert f"[suite] nothing measured: every selected case was skipped (pytest -rs shows why); no results " \
           f"written to {out}" in result.stdout
    assert not out.exists()
    assert not partial_path(out).exists(), "a partial file of skips is no run to judge or report"


def _wait_for(proc, partial: Path, text: str, count: int, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and partial.read_text().count(text) >= count:
            return
        time.sleep(0.02)
    raise AssertionError("the run ended before it could be interrupted: " + log.read_text()[-2000:])


def _signal_mid_stall(fake_suite, tmp_path, out: Path, signum: int, select: str = "quick or stall",
                      *args: str) -> tuple[int, str]:
    """Run the 40 quick cases (unless `select` leaves them out) and the stall case, send `signum` inside the
    stall case's timed rounds (100 x 0.2 s): (exit status, output)."""
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        # SIGINT at its default in the child: under a shell's `cmd &` it inherits SIGINT ignored, and Python
        # then never raises KeyboardInterrupt (the signal would do nothing and the run finish).
        proc = subprocess.Popen(fake_suite(FAST, out, "-k", select, *args), env=_env(), stdout=fh,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                                stderr=subprocess.STDOUT, cwd=tmp_path)
    _wait_for(proc, partial_path(out), '"started": "test_fake.py::test_stall', 1, log)
    time.sleep(0.5)
    proc.send_signal(signum)
    return proc.wait(timeout=60), log.read_text()


def test_ctrl_c_keeps_the_partial_file_and_writes_no_complete_looking_json(fake_suite, tmp_path):
    # Ctrl-C in the middle of a benchmark's rounds: pytest-benchmark used to write the finished benchmarks
    # (and the interrupted one, half-timed) as a complete-looking JSON, the partial file was then dropped, and
    # --suite-resume had nothing to resume.
    # pytest-benchmark's own storage too: the cut run would have become --benchmark-compare's baseline.
    out = tmp_path / "results" / "run.json"
    partial = partial_path(out)
    store = tmp_path / "store"
    status, text = _signal_mid_stall(fake_suite, tmp_path, out, signal.SIGINT, "quick or stall",
                                     "--benchmark-autosave", f"--benchmark-storage={store}")
    assert status == pytest.ExitCode.INTERRUPTED
    assert not out.exists(), text[-2000:]
    assert not [p for p in store.rglob("*") if p.is_file()], text[-2000:]
    assert "[suite] nothing stored by --benchmark-save/--benchmark-autosave: a run cut short" in text
    run = read_partial(partial)
    assert len(run.benchmarks) == 40 and not any("stall" in name for name in run.benchmarks)
    assert (f"[suite] interrupted: 40 finished benchmark(s) kept in {partial}; rerun the same command with "
            "--suite-resume to run the rest") in text
    assert "Traceback" not in text
    # The plain rerun is still refused, and the resume keeps all 40.
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick"), env=_env(), capture_output=True, text=True,
                            timeout=180, cwd=tmp_path)
    assert result.returncode == 4 and "holds 40 finished benchmark(s)" in result.stderr
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--suite-resume"), env=_env(),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert len(json.loads(out.read_text())["benchmarks"]) == 40 and not partial.exists()


def test_sigterm_ends_the_run_as_ctrl_c_does_and_exits_143(fake_suite, tmp_path):
    # Slurm's time limit, preemption or scancel send SIGTERM (then SIGKILL): before, the run died at once with
    # no word; the partial file survived, but nothing said so or how to go on.
    out = tmp_path / "run.json"
    partial = partial_path(out)
    status, text = _signal_mid_stall(fake_suite, tmp_path, out, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM killed
    assert not out.exists(), text[-2000:]
    assert len(read_partial(partial).benchmarks) == 40
    assert (f"[suite] stopped by SIGTERM: 40 finished benchmark(s) kept in {partial}; rerun the same command "
            "with --suite-resume to run the rest") in text
    assert "Traceback" not in text


def test_sigterm_before_any_benchmark_finished_says_so(fake_suite, tmp_path):
    out = tmp_path / "run.json"
    status, text = _signal_mid_stall(fake_suite, tmp_path, out, signal.SIGTERM, select="stall")
    assert status == 128 + signal.SIGTERM
    assert f"[suite] stopped by SIGTERM before any benchmark finished: no results written to {out}" in text


def test_a_rank_of_several_under_torchrun_keeps_sigterms_default(monkeypatch):
    # torchrun's agent SIGTERMs the ranks when one fails; a rank that stopped on its own waited timeout_s at the
    # run's last agreement for ranks waiting in a collective for it (5 minutes instead of a second).
    from types import SimpleNamespace

    from suite.plugin import _stop_on_sigterm

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    config = SimpleNamespace(stash={}, add_cleanup=lambda f: None)
    try:
        _stop_on_sigterm(config)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setenv("WORLD_SIZE", "1")  # one rank: nobody waits for it
    try:
        _stop_on_sigterm(config)
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_the_first_sigterm_stops_the_run_the_second_kills_and_the_run_s_end_restores_the_default():
    from types import SimpleNamespace

    from suite.plugin import _OUTCOME, Terminated, _stop_on_sigterm

    cleanups = []
    config = SimpleNamespace(stash={}, add_cleanup=cleanups.append)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    try:
        _stop_on_sigterm(config)
        stop = signal.getsignal(signal.SIGTERM)
        assert stop is not signal.SIG_DFL and len(cleanups) == 1
        cleanups[0]()  # the run ends: SIGTERM is the default again
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, stop)
        with pytest.raises(Terminated, match="SIGTERM"):
            stop(signal.SIGTERM, None)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "a second SIGTERM kills at once"
        assert config.stash[_OUTCOME].terminated is True, "the run knows it was SIGTERM"
        theirs = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        cleanups[0]()  # a handler set since is not the run's to reset
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        del theirs
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_sigterm_handler_set_by_someone_else_is_left_alone(pytestconfig):
    from suite.plugin import _stop_on_sigterm

    def theirs(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, theirs)
    try:
        _stop_on_sigterm(pytestconfig)
        assert signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_python_O_is_refused_in_one_line_since_it_strips_every_result_check():
    result = subprocess.run([sys.executable, "-O", "-m", "pytest", "benchmarks", "--suite-config",
                             "configs/quick.yaml", "-k", "matmul", "--co", "-q", "-p", "no:cacheprovider"],
                            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "python -O (or PYTHONOPTIMIZE) strips the result checks" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


DISK_FULL = '''
import errno, os
from pathlib import Path

def pytest_configure(config):
    import suite.partial as partial

    real, count = partial.PartialWriter.write, [0]

    def write(self, obj, **kwargs):
        count[0] += 1
        if count[0] > int(os.environ.get("FULL_AFTER", "1000000")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, obj, **kwargs)

    partial.PartialWriter.write = write
    real_bytes = Path.write_bytes

    def write_bytes(self, data):
        if self.name.endswith(".tmp") and os.environ.get("JSON_FULL"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_bytes(self, data)

    Path.write_bytes = write_bytes
'''


def test_a_full_disk_loses_nothing_it_could_keep_and_says_so_in_one_line(fake_suite, tmp_path):
    (tmp_path / "diskfull.py").write_text(DISK_FULL)
    env = dict(_env(), PYTHONPATH=os.pathsep.join([str(tmp_path), _env()["PYTHONPATH"]]))
    out = tmp_path / "run.json"
    # The partial file fills up mid-run: the run goes on and its JSON holds everything.
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "-p", "diskfull"), capture_output=True,
                            text=True, timeout=180, cwd=tmp_path, env=dict(env, FULL_AFTER="7"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.count(f"[suite] cannot write {partial_path(out)} (No space left on device)") == 1
    assert len(json.loads(out.read_text())["benchmarks"]) == 40 and not partial_path(out).exists()
    out.unlink()
    # The JSON cannot be written at the end: one line, exit 1, no file, the partial file kept to resume.
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "-p", "diskfull"), capture_output=True,
                            text=True, timeout=180, cwd=tmp_path, env=dict(env, JSON_FULL="1"))
    text = result.stdout + result.stderr
    assert result.returncode == 1, text[-3000:]
    assert (f"[suite] cannot write {out} (No space left on device): the 40 benchmark(s) written to "
            f"{partial_path(out)} are kept") in result.stdout
    assert "Traceback" not in text and not out.exists() and len(read_partial(partial_path(out)).benchmarks) == 40
    result = subprocess.run(fake_suite(FAST, out, "-k", "quick", "--suite-resume"), capture_output=True,
                            text=True, timeout=180, cwd=tmp_path, env=env)
    assert result.returncode == 0 and len(json.loads(out.read_text())["benchmarks"]) == 40


def test_resume_refuses_another_device_list():
    run = PartialRun(header=HEADER, benchmarks={"b/t.py::t[a]": {}})
    with pytest.raises(UserError, match="another config or device list"):
        check_same_run(Path("x.partial.jsonl"), run, {"config": {"a": 1}, "devices": ["cpu"], "now": lambda: {}})


def test_an_older_complete_json_does_not_drop_the_partial_file(tmp_path):
    from types import SimpleNamespace

    from suite.partial import PartialState, PartialWriter

    out = tmp_path / "run.json"
    out.write_text(json.dumps({"benchmarks": []}))
    os.utime(out, (time.time() - 3600, time.time() - 3600))  # a finished run of an hour ago
    partial = partial_path(out)
    writer = PartialWriter(partial)
    writer.write({"started": "t"})
    state = PartialState(SimpleNamespace(getoption=lambda name: str(out)), writer, None)
    state.measuring.add("t::a")  # a benchmark was running when this run was interrupted ...
    writer.write({"started": "t::a"})
    state.finish()  # ... so it wrote no JSON of its own
    assert partial.exists()


def test_a_benchmark_costs_two_fsyncs_and_every_line_is_flushed_before_the_next_test(tmp_path, monkeypatch):
    # An fsync per line (started, result, finished) cost milliseconds each on a network file system. The
    # result line needs none of its own: the "finished" line right after it is fsynced, which writes both.
    from types import SimpleNamespace

    import suite.partial as partial_module
    from suite.partial import PartialState, PartialWriter

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(partial_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    out = tmp_path / "run.json"
    writer = PartialWriter(partial_path(out))
    writer.has_header = True
    state = PartialState(SimpleNamespace(getoption=lambda name: str(out)), writer, None)
    state.measure_starts("t.py::t[a]")
    assert len(synced) == 1
    state.report("t.py::t[a]", "call", "passed", {"fullname": "t.py::t[a]", "stats": {"median": 1.0}})
    state.report("t.py::t[a]", "teardown", "passed", None)
    assert len(synced) == 2
    run = read_partial(partial_path(out))  # read from another file object: flushed, not only buffered
    assert list(run.benchmarks) == ["t.py::t[a]"] and run.finished["t.py::t[a]"] == 1
    writer.close()


def test_a_symlinked_results_file_is_written_through_the_link(fake_suite, tmp_path):
    (tmp_path / "store").mkdir()
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "store" / "real.json")  # dangling until the run writes it
    result = subprocess.run(fake_suite(FAST, link, "-k", "quick"), env=_env(), capture_output=True, text=True,
                            timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:]
    assert link.is_symlink() and len(json.loads((tmp_path / "store" / "real.json").read_text())["benchmarks"]) == 40


def test_a_lock_the_file_system_never_grants_is_given_up_on_with_a_warning(tmp_path, monkeypatch, capsys):
    # An NFS mount whose lock service is down: flock waits in the kernel, and the run would hang before it
    # measured anything.
    import fcntl

    import suite.partial as partial

    monkeypatch.setattr(partial, "LOCK_WAIT_S", 0.2)
    monkeypatch.setattr(fcntl, "flock", lambda fd, op: time.sleep(5))
    start = time.monotonic()
    lock = RunLock(partial_path(tmp_path / "run.json"))
    lock.acquire(tmp_path / "run.json")
    assert time.monotonic() - start < 2
    assert "did not grant a lock in 0.2 s (a network mount?): this run goes on" in capsys.readouterr().err
    stuck = lock._stuck
    lock.release()  # closes the lock file the waiting thread was given (left open, a later test's warning)
    assert stuck.closed and lock._stuck is None


def test_ctrl_c_stores_nothing_under_a_named_benchmark_save_either(fake_suite, tmp_path):
    # --benchmark-save=NAME, not only --benchmark-autosave: either would make the cut run the compare baseline.
    out = tmp_path / "results" / "run.json"
    store = tmp_path / "store"
    status, text = _signal_mid_stall(fake_suite, tmp_path, out, signal.SIGINT, "stall",
                                     "--benchmark-save=cut", f"--benchmark-storage={store}")
    assert status == pytest.ExitCode.INTERRUPTED, text[-2000:]
    assert not [p for p in store.rglob("*") if p.is_file()], text[-2000:]
    assert "[suite] nothing stored by --benchmark-save/--benchmark-autosave: a run cut short" in text


def test_a_host_copy_larger_than_the_host_is_a_skip_in_seconds_and_the_next_case_runs(run_benchmarks):
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gib = 64
    while gib * 2**30 <= 2 * total:  # more than the host has, whatever it has (64 GiB on a 24 GiB machine)
        gib *= 2
    config = {**FAST, "cases": {"copy": {"sizes": [f"{gib}GiB", "4KiB"], "directions": ["uni"]}}}
    start = time.monotonic()
    result, data = run_benchmarks(config, tests="benchmarks/test_copy.py")
    assert time.monotonic() - start < 90, "refused before allocating, not killed by the kernel minutes later"
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert f"out of host memory for cpu->cpu-pageable-{gib}GiB (needs {2 * gib}.0 GiB; the host has" in out
    assert re.search(r"has \d+\.\d GiB free of \d+\.\d GiB", out)
    assert "1 passed, 1 skipped" in out
    assert [b["name"] for b in data["benchmarks"]] == ["test_copy[cpu->cpu-pageable-4KiB]"]


def test_a_run_whose_only_test_failed_leaves_no_partial_file(fake_suite, tmp_path):
    # `health` on the folder would take a partial file of no benchmarks for the node's latest run (exit 2).
    out = tmp_path / "run.json"
    config = {**FAST, "timing": {**FAST["timing"], "time_limit_s": 1}}
    result = subprocess.run(fake_suite(config, out, "-k", "sleepy and slow"), env=_env(), capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)  # fails at its time limit, before it is timed
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout[-2000:]
    assert not partial_path(out).exists()
