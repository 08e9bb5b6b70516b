"""Launching the collectives: the documented multi-node command, input refused before torchrun starts, the
recorded NCCL environment, nodes counted by hostname, --suite-resume under torchrun (and ranks that die with
their agent)."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from suite import agent, distributed
from suite.distributed import DistState, LaunchEnv, launch
from tests.test_collectives import ROOT, TINY, _in_threads, _only_collectives

DOC = os.path.join(ROOT, "docs", "collectives.md")
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "TORCHELASTIC_RUN_ID")


# --- 1. the documented multi-node command --------------------------------------------------------------


def test_multi_node_rdzv_id_is_one_fixed_name_on_every_node():
    # Computed on each node ($(date +%s)), the ids of nodes started a second apart differ: they never meet.
    text = Path(DOC).read_text(encoding="utf-8")
    ids = re.findall(r"--rdzv-id=(\S+)", text)
    assert ids, "docs/collectives.md shows no --rdzv-id"
    for value in ids:
        assert "$(" not in value and "`" not in value, f"--rdzv-id={value} is computed on each node"
    assert "same** id" in text


# --- 2. input every rank would refuse: refused once, before torchrun ------------------------------------


@pytest.fixture
def no_torchrun(monkeypatch):
    started = []
    monkeypatch.setattr(launch.subprocess, "call", lambda cmd, *a, **k: started.append(cmd) or 0)
    monkeypatch.setattr(launch.os, "execv", lambda path, cmd: started.append(cmd))
    return started


@pytest.mark.parametrize("nproc", ["0", "-1"])
def test_bad_nproc_is_one_line_before_torchrun(no_torchrun, capsys, nproc):
    from suite.cli import main

    assert main(["collectives", "--nproc", nproc]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --nproc {nproc}: give the number of ranks on this node, 1 or more (2 or more to " \
                  "measure a collective)\n"
    assert no_torchrun == []


def test_bad_config_is_one_line_once_before_torchrun(no_torchrun, capsys, tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("cases:\n  collectives:\n    ops: [all_reduce\n")
    assert distributed.main(["--nproc", "2", "--suite-config", str(bad), "--benchmark-json", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {bad}: not valid YAML: line 4")
    assert distributed.main(["--nproc", "2", f"--suite-config={tmp_path / 'missing.yaml'}"]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert distributed.main(["--nproc", "2", "--suite-devices="]) == 2  # an empty shell variable
    assert capsys.readouterr().err.startswith("error: --suite-devices is empty: name the devices")
    assert no_torchrun == []
    good = tmp_path / "tiny.yaml"
    good.write_text(yaml.safe_dump(_only_collectives(TINY)))
    distributed.main(["--nproc", "2", "--suite-config", str(good)])
    assert no_torchrun and no_torchrun[0][-2:] == ["--suite-config", str(good)]


# --- 3. the NCCL environment in the JSON ---------------------------------------------------------------


def test_describe_records_the_nccl_environment(monkeypatch):
    for name, value in {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0",
                        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "GLOO_SOCKET_IFNAME": "eth0",
                        "TP_SOCKET_IFNAME": "eth1", "NCCLX": "no"}.items():
        monkeypatch.setenv(name, value)
    env = LaunchEnv(0, 2, 0, 2, "127.0.0.1", 0, False, "t").with_hosts(["a", "a"])
    other = {**distributed.launch_environment(), "NCCL_SOCKET_IFNAME": "eth1"}
    state = DistState(env, "gloo", "cpu", 5.0, "d",
                      environments={0: distributed.launch_environment(), 1: other})
    out = state.describe()
    assert {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth1"}.items() <= out["environment"].items()
    assert "NCCLX" not in out["environment"]
    assert out["environment_by_rank"] == {"1": other}  # a rank whose variables are not rank 0's
    assert "nccl_version" in out  # None here: no CUDA


def test_nccls_log_is_set_up_only_where_the_user_left_it_and_never_per_call(tmp_path):
    env = {"PATH": "/bin"}
    path = launch.start_nccl_log(env)
    assert env == {"PATH": "/bin", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH",
                   "NCCL_DEBUG_FILE": str(path)}  # a file: nothing on the terminal; no TUNING: a line per call
    assert launch.stop_nccl_log(path, env) == {"unknown": "NCCL wrote no start-up log"}
    assert env == {"PATH": "/bin"} and not path.parent.exists()
    for theirs in ({"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG_SUBSYS": "ALL"}, {"NCCL_DEBUG_FILE": "/tmp/n.%h.%p"}):
        env = dict(theirs)
        said = launch.start_nccl_log(env)
        assert env == theirs and said == {"unknown": f"the user set NCCL's logging: {next(iter(theirs))}"}
        assert launch.stop_nccl_log(said, env) == said and env == theirs
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=INFO\n")
    env = {"NCCL_CONF_FILE": str(conf)}
    assert launch.start_nccl_log(env) == {"unknown": f"the user set NCCL's logging: {conf}"}
    assert env == {"NCCL_CONF_FILE": str(conf)}


def test_one_untimed_call_per_case_logs_which_algorithm_and_protocol_nccl_took(monkeypatch):
    """NCCL's TUNING line as its enqueue.cc formats it (rank 0, 2.19 on), written where NCCL_DEBUG_FILE says; a
    fake libnccl stands for ncclResetDebugInit: NOTHING here ran on NCCL."""
    line = "node-0:1234:1240 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}"
    for name in launch.NCCL_LOG_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    resets: list[dict] = []

    class FakeNccl:
        def ncclResetDebugInit(self):
            resets.append({k: os.environ.get(k) for k in launch.NCCL_LOG_VARIABLES})

    with launch.nccl_tuning_log(FakeNccl) as found:
        path = Path(os.environ["NCCL_DEBUG_FILE"])
        path.write_text("node-0:1234:1240 [0] NCCL INFO Broadcast: 8 Bytes -> Algo TREE proto LL channel{Lo..Hi}="
                        "{0..0}\n" + line + "\n", encoding="utf-8")
    assert found == {"nccl_algo": "RING", "nccl_proto": "SIMPLE"}, "the last call's line: the check's"
    assert resets[0]["NCCL_DEBUG"] == "INFO" and resets[0]["NCCL_DEBUG_SUBSYS"] == "TUNING"
    assert resets[1] == dict.fromkeys(launch.NCCL_LOG_VARIABLES), "off again before anything is timed"
    assert not path.parent.exists() and not any(k in os.environ for k in launch.NCCL_LOG_VARIABLES)

    # The user's logging stands; an NCCL that cannot re-read its settings is left alone. Nothing is recorded.
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    with launch.nccl_tuning_log(lambda: pytest.fail("the user's NCCL_DEBUG stands")) as found:
        pass
    assert found == {} and os.environ["NCCL_DEBUG"] == "WARN"
    monkeypatch.delenv("NCCL_DEBUG")
    with launch.nccl_tuning_log(lambda: None) as found:
        pass
    assert found == {} and not any(k in os.environ for k in launch.NCCL_LOG_VARIABLES)
    assert launch._loaded_nccl() is None, "no NCCL loaded here (a CPU build of torch)"
    from suite.cases.collectives.nccl_log import tuning_choice

    assert tuning_choice("node-0:1:1 [0] NCCL INFO Channel 00/32 : 0 1 2 3") == {}, "send/recv log no such line"


def test_what_nccl_chose_reaches_the_results_once(monkeypatch):
    """The wiring, with a fake NCCL that writes a published log where NCCL_DEBUG_FILE says: NOTHING here ran on
    NCCL or a GPU. The log is read after the group's first collective, its variables and file are gone after,
    and rank 0's suite.distributed block records what it said."""
    import torch
    import torch.distributed as dist

    from tests.test_collectives import NCCL_LOGS

    for name in launch.NCCL_LOG_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    published = Path(NCCL_LOGS, "issue892_2.18_h800_algo_env.txt").read_text(encoding="utf-8")
    seen: list = []

    def fake_nccl(backend, **_):
        seen.append({k: os.environ.get(k) for k in launch.NCCL_LOG_VARIABLES})
        Path(os.environ["NCCL_DEBUG_FILE"]).write_text(published, encoding="utf-8")

    monkeypatch.setattr(distributed, "_STATE", None)
    monkeypatch.setattr(distributed, "_NCCL_CHOICES", None)
    monkeypatch.setattr(distributed, "rank_device", lambda *a, **k: "cpu")
    monkeypatch.setattr(distributed, "supports_device_id", lambda f: False)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", fake_nccl)
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, **_: seen.append("all_reduce"))
    results = _in_threads(lambda store, rank: (
        monkeypatch.setattr(distributed, "open_store", lambda env, timeout: store),
        distributed.init(LaunchEnv(0, 1, 0, 1, "127.0.0.1", 0, False, "t"), "nccl", 10, "d")), world=1)
    assert isinstance(results[0][1], DistState), results
    assert seen == [{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH",
                     "NCCL_DEBUG_FILE": seen[0]["NCCL_DEBUG_FILE"]}, "all_reduce"]
    assert not any(name in os.environ for name in launch.NCCL_LOG_VARIABLES)
    assert not Path(seen[0]["NCCL_DEBUG_FILE"]).parent.exists()
    out: dict = {}
    distributed.pytest_benchmark_update_json(None, [], out)
    assert out["suite"]["distributed"]["nccl_choices"] == {
        "algo": "Tree,Ring,,CollnetDirect,CollnetChain,NVLS", "coll_channels": 16, "nvls_channels": 0,
        "p2p_channels": 16}
    assert "NCCL_DEBUG" not in out["suite"]["distributed"]["environment"]
    # Gloo: nothing of NCCL's.
    monkeypatch.setattr(distributed._STATE, "backend", "gloo")
    out = {}
    distributed.pytest_benchmark_update_json(None, [], out)
    assert "nccl_choices" not in out["suite"]["distributed"]


def test_the_jobs_card_shows_what_nccl_said():
    from suite.report.tables import launch_texts

    machine = SimpleNamespace(launch="torchrun 8 ranks", distributed={
        "backend": "nccl", "nccl_version": "2.24.3", "environment": {"NCCL_IB_HCA": "mlx5_0"},
        "nccl_choices": {"version": "2.24.3", "nvls": True, "nvls_channels": 16}})
    assert launch_texts(machine)[1] == "NCCL_IB_HCA=mlx5_0; NCCL chose: version=2.24.3, nvls=yes, nvls_channels=16"
    machine.distributed = {"backend": "nccl", "nccl_choices": {"unknown": "the user set NCCL's logging: NCCL_DEBUG"}}
    assert launch_texts(machine)[1] == "NCCL chose: unknown (the user set NCCL's logging: NCCL_DEBUG)"
    machine.distributed = {"backend": "nccl"}  # an older file
    assert launch_texts(machine)[1] == ""


# --- 4. nodes are hosts, not torchrun agents ------------------------------------------------------------


def test_hostnames_gathered_at_start_up_count_hosts_not_agents():
    # srun with one task per GPU: 4 torchrun agents of one rank each (LOCAL_WORLD_SIZE 1) on 2 hosts.
    hosts = ["node1", "node1", "node2", "node2"]

    def rank(store, r):
        distributed.announce(store, r, host=hosts[r])
        distributed.meet(store, r, 4, "c" * 64, 10)
        return distributed.gather_hosts(store, r, 4, 10)

    results = _in_threads(rank, world=4)
    assert [results[r][0] for r in range(4)] == [hosts] * 4
    assert set(results[0][1]) == {0, 1, 2, 3} and results[1][1] == {}  # environments: rank 0 reads them
    env = LaunchEnv(2, 4, 0, 1, "node1", 29400, True, "t")
    assert env.nnodes == 4  # torchrun's variables alone
    env = env.with_hosts(hosts)
    assert (env.nnodes, env.local_world_size) == (2, 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    return {**env, **extra}


def _pytest_args(cfg, out, *more) -> list[str]:
    return [os.path.join(ROOT, "benchmarks", "test_collectives.py"), f"--rootdir={ROOT}",
            "-p", "no:cacheprovider", "-q", f"--suite-config={cfg}", f"--benchmark-json={out}", *more]


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_two_agents_on_one_host_are_one_node_with_its_environment(tmp_path):
    # Two torchrun agents (as srun starts one per task) of one rank each, meeting through c10d.
    config = copy.deepcopy(_only_collectives(TINY))  # TINY is shared with other tests
    config["cases"]["collectives"]["ops"] = ["all_reduce"]
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(config))
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
           f"--rdzv-id=t{time.monotonic_ns()}", "-m", "pytest", *_pytest_args(cfg, out)]
    env = _clean_env(NCCL_DEBUG="INFO", GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    data = json.loads(out.read_text())
    block = data["suite"]["distributed"]
    host = socket.gethostname()
    assert (block["nnodes"], block["ranks_per_node"], block["hosts"]) == (1, 2, [host, host])
    assert {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo"}.items() <= block["environment"].items()
    info = data["benchmarks"][0]["extra_info"]
    assert (info["nnodes"], info["ranks_per_node"]) == (1, 2)


# --- 5. --suite-resume under torchrun ------------------------------------------------------------------


def test_other_ranks_drop_and_skip_what_rank_0_resume_did():
    items = [SimpleNamespace(nodeid=n, marks=[]) for n in ("a", "b", "c")]
    for item in items:
        item.add_marker = item.marks.append
    dropped = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: dropped.extend(items)))
    distributed.apply_resume(config, items, {"deselected": ["a"], "skipped": {"c": "2 earlier runs died"}})
    assert [i.nodeid for i in items] == ["b", "c"] and [i.nodeid for i in dropped] == ["a"]
    assert items[1].marks[0].kwargs["reason"] == "2 earlier runs died" and items[0].marks == []


KILLER = textwrap.dedent("""
    import os, signal, time

    import pytest

    calls = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item):
        result = yield
        calls.append(item.nodeid)
        if len(calls) == 4 and os.environ.get("RANK") == "0":
            # The 4th case measured, its result not yet written: torchrun dies (a job's time limit).
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)  # killed with its agent (suite.agent)
        return result
""")


PLANNED = textwrap.dedent("""
    import os, pathlib

    import pytest

    @pytest.hookimpl(trylast=True)  # after suite.plugin has planned the budget and progress lines
    def pytest_collection_finish(session):
        run = session.config.stash[session.config.pluginmanager.get_plugin("suite.plugin")._RUN]
        pathlib.Path(f"planned{os.environ['RANK']}.txt").write_text(str(len(run.families)))
""")


@pytest.mark.slow  # starts Python children (torchrun ranks, pytest, the CLI): the slow tier
def test_a_run_killed_mid_way_resumes_under_torchrun(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(_only_collectives(TINY)))
    (tmp_path / "killer.py").write_text(KILLER)
    (tmp_path / "planned.py").write_text(PLANNED)
    out = tmp_path / "out.json"
    partial = tmp_path / "out.partial.jsonl"
    env = _clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    first = subprocess.run(distributed.torchrun_command(2, _pytest_args(cfg, out, "-p", "killer")),
                           check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, (first.stdout + first.stderr)[-3000:]
    time.sleep(1.0)  # a rank that outlived its agent would now finish the run and delete the partial file
    assert not out.exists() and partial.exists()
    lines = [json.loads(line) for line in partial.read_text().splitlines()]
    assert len([x for x in lines if "stats" in x]) == 3 and len([x for x in lines if "started" in x]) == 4
    resumed = subprocess.run(distributed.torchrun_command(2, _pytest_args(cfg, out, "--suite-resume", "-p",
                                                                          "planned")),
                             check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "6 passed, 3 deselected" in resumed.stdout
    # Rank 1 reads no partial file: it plans its budget for the tests rank 0's resume left, not all 9.
    assert [(tmp_path / f"planned{r}.txt").read_text() for r in (0, 1)] == ["6", "6"]
    names = [b["fullname"] for b in json.loads(out.read_text())["benchmarks"]]
    assert len(names) == len(set(names)) == 9 and not partial.exists()
    assert time.monotonic() - start < 60


def test_ranks_die_with_their_agent():
    assert agent.die_with_agent({}) is False  # not under torchrun: nothing set
    if not sys.platform.startswith("linux"):
        pytest.skip("prctl(PR_SET_PDEATHSIG) is Linux's")
    code = ("import ctypes, signal; from suite.agent import die_with_agent\n"
            "ok = die_with_agent({'TORCHELASTIC_RUN_ID': 'x'}); sig = ctypes.c_int()\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
            "print(ok, sig.value == signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["True", "True"], proc.stderr
    # A rank sets it as benchmarks/conftest.py is imported, before torch and the config (seconds earlier than
    # the plugins' pytest_configure).
    code = ("import ctypes, signal, sys; import suite.agent as d; sig = ctypes.c_int()\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)\n"
            "print(d.DIES_WITH_AGENT, sig.value == signal.SIGKILL, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TORCHELASTIC_RUN_ID": "x"})
    assert proc.stdout.split() == ["True", "True", "False"], proc.stderr


def test_torchrun_ranks_leave_pytests_cache_alone_unless_asked():
    # N ranks in one rootdir would write .pytest_cache at once (pytest's writes are not atomic).
    cmd = distributed.torchrun_command(2, ["benchmarks/test_collectives.py"])
    assert cmd[cmd.index("pytest") + 1:cmd.index("pytest") + 3] == ["-p", "no:cacheprovider"]
    for asked in (["--lf"], ["--last-failed"], ["-p", "cacheprovider"], ["--cache-clear"]):
        assert "no:cacheprovider" not in distributed.torchrun_command(2, ["benchmarks", *asked])


def test_every_cache_option_keeps_pytests_cache_on_also_with_a_value():
    # Without the cache, pytest refuses these options: every rank would fail at once.
    for asked in (["--ff"], ["--failed-first"], ["--nf"], ["--sw"], ["--stepwise"], ["--cache-show=*"],
                  ["--sw-skip"], ["--stepwise-skip"], ["--lfnf=all"], ["--last-failed-no-failures", "none"]):
        assert "no:cacheprovider" not in distributed.torchrun_command(2, ["benchmarks", *asked]), asked
