"""Collectives in lockstep under torchrun: a rank that fails or skips a case alone makes every rank fail or
skip it (the run goes on, rank 0 writes its JSON), a failure while timing names the rank that failed, and
rank 0 records the most held-down GPU of any rank."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest
import yaml

from suite import distributed
from suite.distributed import CaseAborted, DistState, LaunchEnv, RankTimeout
from tests.test_collectives import TINY, _in_threads, _only_collectives
from tests.test_distributed_launch import _clean_env, _pytest_args

# Injected on rank 1 only (FAULTS names case-id fragment=fault, comma-separated): `oom` out of memory in the
# build, before the family's own agreement; `check` a wrong result after the check's agreement; `timing` an
# error in the third timed call. CLOCKS: every rank's ClockWatch result is its rank's entry of this JSON.
# SLOW_JSON: rank 0 takes 2 s more to finish (write its results) than rank 1.
FAULTS = textwrap.dedent("""
    import json, os, time

    import pytest

    RANK = os.environ.get("RANK")


    def _faulty(build, fault):
        import torch

        def wrapped(case, config):
            if fault == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            work = build(case, config)
            if fault == "check":
                real_check = work.check

                def check():
                    real_check()
                    raise AssertionError("injected wrong result")

                work.check = check
            if fault == "precheck":
                def check():
                    raise RuntimeError("injected failure before the check's collective")

                work.check = check
            if fault == "timing":
                real_fn, calls = work.fn, []

                def fn():
                    calls.append(1)
                    if len(calls) == 3:
                        raise RuntimeError("injected failure mid-timing")
                    return real_fn()

                work.fn = fn
            return work

        return wrapped


    def pytest_configure(config):
        # Patched here, not at import: suite's modules must be imported after pytest registers its plugins.
        from suite import devices
        from suite.cases.collectives import measure

        faults = dict(f.split("=") for f in os.environ.get("FAULTS", "").split(",") if f)
        real_build = measure.build

        def build(case, config):
            fault = next((f for part, f in faults.items() if part in case.id), None)
            if RANK == "1" and fault:
                return _faulty(real_build, fault)(case, config)
            return real_build(case, config)

        measure.build = build
        clocks = json.loads(os.environ.get("CLOCKS", "null"))
        if clocks is not None:
            devices.ClockWatch.stop = lambda self: clocks[RANK]
        before = os.environ.get("BEFORE_START")  # rank 0 fails in the measure fixture, before run_case
        if before and RANK == "0":
            import suite.run as run

            real_warmup = run.warmup_seconds

            def warmup_seconds(case, timing):
                if before in case.id:
                    raise OSError("injected: disk full writing the partial file")
                return real_warmup(case, timing)

            run.warmup_seconds = warmup_seconds


    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(session):
        if RANK == "0" and os.environ.get("SLOW_JSON"):
            time.sleep(2.0)  # rank 0 still writing its results when rank 1 has finished
""")


def _torchrun(tmp_path, ops, timeout_s, **env):
    import subprocess

    config = _only_collectives(TINY)
    config["cases"]["collectives"] = {**config["cases"]["collectives"], "ops": ops, "timeout_s": timeout_s}
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(config))
    (tmp_path / "faults.py").write_text(FAULTS)
    out = tmp_path / "out.json"
    environ = _clean_env(
        PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])), **env
    )
    start = time.monotonic()
    proc = subprocess.run(distributed.torchrun_command(2, _pytest_args(cfg, out, "-p", "faults", "-rsf")),
                          check=False, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)
    data = json.loads(out.read_text()) if out.exists() else None
    return proc, proc.stdout + proc.stderr, data, time.monotonic() - start


# --- 1. a case that fails or skips on one rank: every rank does, and the run goes on ----------------------


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_case_that_fails_or_skips_on_one_rank_does_on_every_rank_and_the_run_goes_on(tmp_path):
    # Rank 1 runs out of memory building broadcast (before the family's agreement) and finds a wrong result in
    # reduce (after the check's agreement). Rank 0 used to wait for it in the next collective or agreement
    # until timeout_s, rank 1 then blamed rank 0 ("rank(s) 0 of 2 did not arrive") and torchrun killed
    # rank 0: no JSON.
    proc, text, data, took = _torchrun(tmp_path, ["all_reduce", "broadcast", "reduce", "all_to_all"], 8,
                                       FAULTS="broadcast=oom,-reduce-=check", SLOW_JSON="1")
    assert proc.returncode != 0, text[-3000:]  # reduce failed, on every rank
    assert "did not arrive" not in text, text[-3000:]
    # Rank 0's report names rank 1 and its error (rank 1 reports its own, without the prefix).
    assert "rank 1: out of memory for gloo-broadcast-float32-4KiB-inplace: use smaller sizes" in text
    assert "\nrank 1: AssertionError: injected wrong result\n" in text
    # Rank 1 failed too, and torchrun stops every rank once one exits with an error: the ranks leave together.
    assert data is not None, text[-3000:]
    names = sorted(b["name"] for b in data["benchmarks"])
    assert names == ["test_collectives[gloo-all_reduce-float32-4KiB-inplace]",
                     "test_collectives[gloo-all_to_all-float32-4KiB-outofplace]"]
    assert not (tmp_path / "out.partial.jsonl").exists()
    assert took < 60  # nobody waited for timeout_s (8 s) at each of the cases


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_rank_that_fails_before_a_case_starts_costs_that_case_only(tmp_path):
    # Rank 0 fails in the measure fixture, before run_case (its partial file cannot be written): rank 1,
    # waiting at the case's agreements, hears it at once, and both go on in step with the next case.
    proc, text, data, took = _torchrun(tmp_path, ["all_reduce", "broadcast", "reduce", "all_to_all"], 8,
                                       BEFORE_START="broadcast")
    assert "rank 0: OSError: injected: disk full writing the partial file" in text, text[-3000:]
    assert "did not arrive" not in text and "stopped waiting" not in text, text[-3000:]
    assert data is not None, text[-3000:]
    assert sorted(b["name"] for b in data["benchmarks"]) == [
        "test_collectives[gloo-all_reduce-float32-4KiB-inplace]",
        "test_collectives[gloo-all_to_all-float32-4KiB-outofplace]",
        "test_collectives[gloo-reduce-float32-4KiB-inplace]",
    ]
    assert took < 40  # nobody waited for timeout_s (8 s)


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_failure_while_timing_names_the_rank_that_failed_and_the_later_cases_still_run(tmp_path):
    # No agreement is possible inside timing: rank 0 waits in the collective until timeout_s, then names
    # rank 1 (which posted its error) instead of being blamed by it; rank 1 waits that long more at the next
    # agreement. Gloo closed the group on that timeout: the ranks make a new one, so reduce still runs (it
    # used to fail at once: "Application timeout caused pair closure").
    _, text, data, took = _torchrun(tmp_path, ["all_reduce", "broadcast", "reduce"], 3, FAULTS="broadcast=timing")
    assert "failed while timing on rank 1: RuntimeError: injected failure mid-timing; this rank failed " \
           "after it, waiting in a collective" in text, text[-3000:]
    assert "did not arrive" not in text, text[-3000:]
    assert "pair closure" not in text, text[-3000:]
    assert data is not None, text[-3000:]  # rank 0 was not killed: the ranks left the run together
    assert [b["name"] for b in data["benchmarks"]] == [
        "test_collectives[gloo-all_reduce-float32-4KiB-inplace]",
        "test_collectives[gloo-reduce-float32-4KiB-inplace]",
    ], text[-3000:]
    assert took < 60


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
@pytest.mark.parametrize("env", [
    {"FAULTS": "broadcast=timing,-reduce-=oom"},  # rank 1 then leaves the next case's build agreement
    {"FAULTS": "broadcast=timing", "BEFORE_START": "-reduce-"},  # a rank leaves the next case before it starts
])
def test_the_group_is_made_anew_in_step_when_a_rank_leaves_the_case_after_a_timing_failure(tmp_path, env):
    # The new group is made where every rank comes (the case's `ready`), not at an agreement one rank left:
    # the others used to wait in the new group's start-up for a rank that was elsewhere, and every later case
    # failed ("Default process group has not been initialized").
    _, text, data, took = _torchrun(tmp_path, ["all_reduce", "broadcast", "reduce", "all_to_all"], 3, **env)
    assert data is not None, text[-3000:]
    assert sorted(b["name"] for b in data["benchmarks"]) == [
        "test_collectives[gloo-all_reduce-float32-4KiB-inplace]",
        "test_collectives[gloo-all_to_all-float32-4KiB-outofplace]",
    ], text[-3000:]
    assert "not been initialized" not in text and "did not arrive" not in text, text[-3000:]
    assert took < 60


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_collective_that_timed_out_in_the_check_does_not_break_the_later_cases(tmp_path):
    # Rank 1's check fails before its collective; rank 0 waits in it until timeout_s and Gloo closes the
    # group's connections: the ranks make a new group at the case's `ready`, and reduce runs.
    _, text, data, took = _torchrun(tmp_path, ["all_reduce", "broadcast", "reduce"], 3, FAULTS="broadcast=precheck")
    assert data is not None, text[-3000:]
    assert [b["name"] for b in data["benchmarks"]] == [
        "test_collectives[gloo-all_reduce-float32-4KiB-inplace]",
        "test_collectives[gloo-reduce-float32-4KiB-inplace]",
    ], text[-3000:]
    assert "pair closure" not in text, text[-3000:]
    assert took < 60


# --- the lockstep in threads (one store, fake ranks) ------------------------------------------------------


def _state(store, rank, world=2, timeout_s=5.0):
    env = LaunchEnv(rank, world, rank, world, "127.0.0.1", 0, False, "t")
    return DistState(env, "gloo", "cpu", timeout_s, "d", store=store)


def test_a_rank_that_leaves_a_case_wakes_the_ranks_waiting_in_it():
    def rank(store, r):
        state = _state(store, r, timeout_s=20.0)
        state.begin_case("c")
        start = time.monotonic()
        problem = None
        if r == 1:
            problem = {"kind": "skip", "text": "out of memory"}  # before the case's first agreement
        else:
            with pytest.raises(CaseAborted, match=r"rank 1: out of memory \(left c before c build\)"):
                state.agree("c build")
        outcome = state.ready(problem)
        state.end_case()
        state.begin_case("d")  # the next case starts in step on both ranks
        found = state.agree("d build", "x" if r == 0 else None)
        return outcome, found, time.monotonic() - start

    results = _in_threads(rank)
    for r in (0, 1):
        outcome, found, took = results[r]
        assert outcome == {1: {"kind": "skip", "text": "out of memory"}} and found == {0: "x"}
        assert took < 5.0  # not the 20 s timeout


def test_a_timeout_after_a_failure_while_timing_names_the_rank_that_failed():
    def rank(store, r):
        state = _state(store, r, timeout_s=0.5)
        state.begin_case("gloo-broadcast")
        if r == 0:
            return None  # still inside the collective, waiting for rank 1
        state.timing_failed("RuntimeError: boom")
        state.end_case()
        state.begin_case("next")
        start = time.monotonic()
        with pytest.raises(RankTimeout) as info:
            state.agree("next build")
        return str(info.value), time.monotonic() - start

    message, took = _in_threads(rank)[1]
    assert message.startswith("rank(s) 0 of 2 did not arrive at next build within 1 s")  # timeout_s + grace
    assert message.endswith("; before that, gloo-broadcast failed while timing (rank 1: RuntimeError: boom): "
                            "the ranks that did not arrive may have waited for that rank in its collective")
    assert took >= 0.9


def test_a_finished_cases_keys_are_deleted_once_every_rank_reached_the_next_cases_start():
    """The store holds about one case's keys, not every case's: rank 0 deletes a case's keys at the next case's
    `ready`, after a problem, a rank that left an agreement, and a failure while timing alike."""
    import threading

    between = threading.Barrier(2)

    def rank(store, r):
        state = _state(store, r)
        counts = []
        for i in range(6):
            state.begin_case(f"c{i}")
            state.agree("build", "odd" if i == 2 and r == 1 else None)
            state.ready({"kind": "skip", "text": "x"} if i == 3 and r == 0 else None)  # leaves agreement 2
            if i == 4 and r == 1:
                state.timing_failed("RuntimeError: boom")
            state.gather_clocks({"clocks_held": 0.1})
            state.end_case()
            between.wait()
            counts.append(store.num_keys())
            between.wait()
        left = [f"case:c{i}:1/{name}" for i in range(5) for name in (
            "1/arrived", "1/done", "1/posts", "1/post1", "2/posts", "2/post1", "ready/arrived", "ready/done",
            "timing/posts", "timing/post1", "clocks/rank1")]
        return counts, [k for k in left if store.check([k])], store.check(["case:c5:1/ready/done"])

    results = _in_threads(rank)
    assert not isinstance(results[1], Exception), results[1]
    counts, left, last_kept = results[0]
    assert left == [] and last_kept, left  # the last case's keys stay (a rank may still read them)
    assert counts[1] == counts[5], counts  # two plain cases after plain ones: as many keys, not more


# --- 2. machine state from every rank ---------------------------------------------------------------------


def test_rank_0_records_the_most_held_down_gpu_of_any_rank():
    held = {0: {"clocks_held": 0.1, "clocks_held_thermal": 0.1, "clocks_window_s": 2.0},
            1: {"clocks_held": 0.6, "clocks_held_power": 0.6, "clocks_window_s": 2.1},
            2: {}}  # no NVML on that rank

    def rank(store, r):
        state = _state(store, r, world=3)
        state.begin_case("c")
        return state.gather_clocks(held[r])

    results = _in_threads(rank, world=3)
    assert results[0] == {"clocks_held": 0.6, "clocks_held_power": 0.6, "clocks_held_thermal": 0.1,
                          "clocks_window_s": 2.1, "clocks_held_rank": 1}
    assert results[1] == held[1] and results[2] == {}  # the others keep their own (they write nothing)
    assert distributed.merge_clocks({0: {}, 1: {}}) == {}


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_clocks_held_on_another_rank_reach_the_json(tmp_path):
    # ClockWatch watches only its own rank's GPU and only rank 0 writes: a capped GPU on rank 1 never showed.
    clocks = {"0": {"clocks_held": 0.0, "clocks_window_s": 1.0},
              "1": {"clocks_held": 0.4, "clocks_held_power": 0.4, "clocks_window_s": 1.0}}
    proc, text, data, _ = _torchrun(tmp_path, ["all_reduce"], 30, CLOCKS=json.dumps(clocks))
    assert proc.returncode == 0, text[-3000:]
    info = data["benchmarks"][0]["extra_info"]
    assert (info["clocks_held"], info["clocks_held_power"], info["clocks_held_rank"]) == (0.4, 0.4, 1)


def test_every_rank_reads_the_failure_count_the_agreement_completed_with():
    """A rank past an agreement may count a new failure before a slower rank reads the count: each reads the
    number recorded as the agreement completed, so both make a new group at the same agreement or neither."""
    import threading

    passed = threading.Barrier(2)

    def run(store, rank):
        distributed.sync(store, "a", rank, 2, 5.0)
        passed.wait()
        if rank == 1:
            store.add(distributed.GROUP_FAILURES, 1)  # already on to its next case, failing there
        passed.wait()
        return int(store.get("a/done")), int(store.add(distributed.GROUP_FAILURES, 0))

    results = _in_threads(run)
    assert results[0] == results[1] == (0, 1), results
