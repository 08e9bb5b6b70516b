"""The pytest plugin: config and device options, parametrisation from the YAML, `measure`, JSON additions."""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import shlex
import signal
import threading
import time
from pathlib import Path

import pytest

from suite.timing import process_age

# The run's clock starts with the process (a budget covers the whole run: interpreter start, importing torch);
# a later run in the same process (pytest.main from a script) starts at its own pytest_configure.
_STARTED = [time.monotonic() - process_age()]

import torch  # noqa: E402 - after taking the start time

from suite import SCHEMA_VERSION, __version__  # noqa: E402
from suite import devices as dev  # noqa: E402
from suite import pb_adapter  # noqa: E402
from suite.budget import RunState  # noqa: E402
from suite.cases import FAMILIES, Case, family_module  # noqa: E402
from suite.cases.ceiling import annotate  # noqa: E402 - pct_of_ceiling / pct_of_datasheet on compute results
from suite.config import DEFAULT_CONFIG, SuiteConfig, load_config, nothing_selected, resolved  # noqa: E402
from suite.errors import UserError  # noqa: E402
from suite.partial import PartialState, what_measures, write_json_atomically  # noqa: E402
from suite.requirements import refusal  # noqa: E402
from suite.run import Outcome, measure_case  # noqa: E402
from suite.summary import render  # noqa: E402
from suite.timing import SyncTimer, min_round_seconds  # noqa: E402

_CONFIG = pytest.StashKey[SuiteConfig]()
_CONFIG_PATH = pytest.StashKey[str]()
_DEVICES = pytest.StashKey[list]()
_CASES = pytest.StashKey[dict]()
_PARTIAL = pytest.StashKey[PartialState]()
_RUN = pytest.StashKey[RunState]()
_OUTCOME = pytest.StashKey[Outcome]()  # what the run ended with: the end-of-run lines and exit status
_SIGTERM_HANDLER = pytest.StashKey[object]()  # this run's SIGTERM handler, to restore the default after it

# Our timing settings (config `timing`) map onto these pytest-benchmark marker keywords; a user who passes
# the matching --benchmark-* option on the command line keeps theirs.
_TIMING_OPTIONS = {name: "--benchmark-" + name.replace("_", "-") for name in (
    "min_time", "max_time", "min_rounds", "calibration_precision", "precision", "confidence")}
SUMMARY_MODES = ("rates", "both", "off")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suite", "multi-device benchmarking suite")
    group.addoption(
        "--suite-config",
        default=None,
        metavar="PATH",
        help=f"YAML config of the cases to run (default: {DEFAULT_CONFIG}, relative to the project root)",
    )
    group.addoption(
        "--suite-devices",
        default=None,
        metavar="LIST",
        help="override the config's devices: all, cpu, gpus, cuda:1, or a comma-separated list (cpu,cuda:1); "
        "refused when none of them is on this machine",
    )
    group.addoption(
        "--suite-resume",
        action="store_true",
        default=False,
        help="continue an interrupted run: keep the benchmarks in <json>.partial.jsonl, run only the rest",
    )
    group.addoption(
        "--suite-budget",
        default=None,
        metavar="DURATION",
        help="the whole run, overhead included, in at most this time (600, 90s, 10m, 1h): each benchmark's "
        "max_time is cut where needed, never raised; a budget too small is refused before anything runs "
        "(overrides timing.budget)",
    )
    group.addoption(
        "--suite-summary",
        default="rates",
        choices=SUMMARY_MODES,
        help="end-of-run summary: rates (each family in its units: TFLOP/s, GB/s, busbw; the default), both "
        "(also pytest-benchmark's timing table), off (pytest-benchmark's table only)",
    )
    group.addoption("--suite-no-telemetry", action="store_true", default=False,
                    help="read no power, energy, clocks or PCIe link over the timed rounds (docs/running.md)")


def pytest_configure(config: pytest.Config) -> None:
    problem = refusal(config)
    if problem:
        raise pytest.UsageError(problem)
    config.addinivalue_line("markers", "gpu: needs a real accelerator; skipped where none is present")
    # A benchmark run shows warnings (a torch deprecation, say) but never fails on one; the project's own
    # tests keep pyproject's "error" filter. Later filterwarnings entries win.
    config.addinivalue_line("filterwarnings", "default")
    # The default config is the project's, wherever pytest was started from.
    path = Path(config.getoption("suite_config") or Path(config.rootpath) / DEFAULT_CONFIG)
    given = config.getoption("suite_devices")
    try:
        if given is not None and not given.strip():  # an empty shell variable: not the config's devices in silence
            raise UserError("--suite-devices is empty: name the devices (all, cpu, gpus, cuda:1, cpu,cuda:1) or "
                            "leave the option out to use the config's")
        suite_config = load_config(path)
        devices = dev.check_spec(given or suite_config.devices,
                                 option="--suite-devices" if given else f"{path}: devices")
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_CONFIG] = suite_config
    config.stash[_CONFIG_PATH] = str(path)
    config.stash[_DEVICES] = devices
    config.stash[_CASES] = {}
    config.stash[_OUTCOME] = Outcome()
    run = config.stash[_RUN] = RunState(started=_STARTED.pop() if _STARTED else time.monotonic())
    try:
        run.set_budget(config.getoption("suite_budget"), suite_config.timing.budget)
    except ValueError as exc:
        raise pytest.UsageError(f"--suite-budget: {exc}") from None
    identity = {"config": resolved(suite_config), "devices": devices, "now": lambda: what_measures(devices)}
    try:
        config.stash[_PARTIAL] = PartialState.start(config, identity, lambda: _suite_block(config))
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    _stop_on_sigterm(config)
    _keep_inputs_for_run(config)


def _keep_inputs_for_run(config: pytest.Config) -> None:
    """Draw each input once per run (suite.cases.common.randn): every device and precision of a shape uses the
    same operands. Left as it is where a caller (the GPU check) keeps them already."""
    from suite.cases.common import keep_inputs, keeping_inputs

    if not keeping_inputs():
        keep_inputs(True)
        config.add_cleanup(functools.partial(keep_inputs, False))


class Terminated(KeyboardInterrupt):
    """SIGTERM: a batch scheduler's time limit or preemption (Slurm sends it, then SIGKILL after KillWait),
    `scancel`, `kill`, torchrun stopping its ranks. The run ends as Ctrl-C ends it: the finished benchmarks
    stay in the partial file for --suite-resume, and one line says so."""


# The exit status of a run that SIGTERM stopped: what a shell reports for a process SIGTERM killed, so a job
# script that tells a time limit from a failure by the exit status sees the usual one.
TERMINATED_EXIT = 128 + signal.SIGTERM


def _stop_on_sigterm(config: pytest.Config) -> None:
    """Turn SIGTERM into `Terminated` for this run, unless something else (a harness) already handles it, or
    the run is one rank of several under torchrun: its agent SIGTERMs the ranks when one fails, and a rank that
    stopped on its own would wait timeout_s at the run's last agreement for ranks that wait in a collective for
    it (5 minutes, where dying at once takes a second). Rank 0's partial file keeps what finished either way."""
    ranks = int(os.environ.get("WORLD_SIZE", "1") or 1) if os.environ.get("TORCHELASTIC_RUN_ID") else 1
    if threading.current_thread() is not threading.main_thread() or ranks > 1 or (
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        config.stash.setdefault(_OUTCOME, Outcome()).terminated = True
        raise Terminated("SIGTERM: stopping the run (a second SIGTERM kills it at once)")

    signal.signal(signal.SIGTERM, stop)
    config.stash[_SIGTERM_HANDLER] = stop
    config.add_cleanup(functools.partial(_default_sigterm, config))


def _default_sigterm(config: pytest.Config) -> None:
    """SIGTERM back to its default (the process ends at once), where this run had set it."""
    if _SIGTERM_HANDLER in config.stash and signal.getsignal(signal.SIGTERM) is config.stash[_SIGTERM_HANDLER]:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _family_of(function_name: str) -> str | None:
    name = function_name.removeprefix("test_")
    return name if name in FAMILIES else None


def _case_of(config: pytest.Config, item: pytest.Item) -> Case | None:
    """The case a collected test measures, or None (not a case family's test, or its "none" placeholder)."""
    callspec = getattr(item, "callspec", None)
    family = _family_of(getattr(item, "originalname", item.name))
    return config.stash[_CASES].get((family, callspec.params.get("case"))) if callspec is not None else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    family = _family_of(metafunc.function.__name__)
    if family is None:
        raise pytest.UsageError(
            f"{metafunc.function.__name__}: no case family of that name; known: {', '.join(FAMILIES)}"
        )
    config = metafunc.config
    cases = family_module(family).enumerate_cases(config.stash[_CONFIG], config.stash[_DEVICES])
    if not cases:
        reason = f"no {family} cases selected by {config.stash[_CONFIG_PATH]} (disabled or empty)"
        metafunc.parametrize("case", [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))])
        return
    config.stash[_CASES].update({(family, c.id): c for c in cases})
    metafunc.parametrize("case", [c.id for c in cases], ids=[c.id for c in cases], indirect=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    items = [i for i in session.items if getattr(i, "callspec", None) and "case" in i.callspec.params]
    if items and all(i.callspec.params["case"] is None for i in items) and len(items) == len(session.items):
        raise pytest.UsageError(nothing_selected(session.config.stash[_CONFIG_PATH]))
    _plan(session.config, session.items)


def _plan(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The budget and progress lines over what will run: planned once every pytest_collection_modifyitems is
    done, -k/-m, --suite-resume and, under torchrun, suite.distributed's (every rank drops what rank 0's resume
    dropped, and the other families) among them, so each rank plans for the same tests."""
    if _RUN not in config.stash:
        return
    cases = {item.nodeid: case for item in items if (case := _case_of(config, item)) is not None}
    try:
        config.stash[_RUN].plan(cases, config.stash[_CONFIG], user_timing(config))
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None


def _user_set(config: pytest.Config, option: str) -> bool:
    """Whether the user gave `option`: on the command line, in PYTEST_ADDOPTS or in the ini file's addopts."""
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    with contextlib.suppress(ValueError):
        args += config.getini("addopts")
    return any(a == option or a.startswith(option + "=") for a in args)


def user_timing(config: pytest.Config) -> dict:
    """The timing keys set by --benchmark-* options on the command line (or addopts), with pytest-benchmark's
    parsed values: they beat the config's for every benchmark (the markers leave them out), so a budget plans
    with them: a --benchmark-min-rounds or --benchmark-min-time above the config's is counted in the least
    the run needs and in each share. A user's --benchmark-min-time is the round floor as given: no
    accelerator floor."""
    user = {}
    for name, flag in _TIMING_OPTIONS.items():
        value = config.getoption("benchmark_" + name) if _user_set(config, flag) else None
        if value is not None:  # seconds come as text ('0.1'), the fixture's float() reads them
            user[name] = int(value) if name in ("min_rounds", "calibration_precision") else float(value)
    if "min_time" in user:
        user["accelerator_min_time"] = user["min_time"]  # the user's floor, on accelerators too
    return user


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: the budget is shared over what will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timers: dict[tuple, SyncTimer] = {}  # one per device set: the devices a round synchronises
    for item in items:
        case = _case_of(config, item)
        if case is None:
            continue
        timing = config.stash[_CONFIG].timing_for(case.family)
        timer = timers.setdefault(tuple(case.devices), SyncTimer([torch.device(d) for d in case.devices]))
        item.add_marker(pytest.mark.benchmark(**_benchmark_options(config, case, timing), timer=timer,
                                              group=case.family))
        if timing.time_limit_s and config.pluginmanager.hasplugin("timeout") and not _user_set(config, "--timeout"):
            item.add_marker(pytest.mark.timeout(timing.time_limit_s))
    if _PARTIAL in config.stash:
        config.stash[_PARTIAL].select(config, items)


def _benchmark_options(config: pytest.Config, case: Case, timing) -> dict:
    """The config's timing as `benchmark` marker keywords, less those the user set on the command line."""
    options = {name: getattr(timing, name) for name, flag in _TIMING_OPTIONS.items() if not _user_set(config, flag)}
    if "min_time" in options:
        options["min_time"] = min_round_seconds(case, timing)
    if options.get("precision") is None:
        options.pop("precision", None)  # off: pytest-benchmark's fixed rounds
    return options


@pytest.fixture
def case(request: pytest.FixtureRequest) -> Case:
    family = _family_of(request.function.__name__)
    return request.config.stash[_CASES][(family, request.param)]


@pytest.fixture
def suite_config(request: pytest.FixtureRequest) -> SuiteConfig:
    return request.config.stash[_CONFIG]


@pytest.fixture
def measure(request: pytest.FixtureRequest, benchmark):
    """`measure(case)`: run one case through the suite's measurement rules into `benchmark` (suite.run)."""
    stash = request.config.stash
    return functools.partial(measure_case, benchmark=benchmark, config=stash[_CONFIG], nodeid=request.node.nodeid,
                             partial=stash.get(_PARTIAL, None), budget=stash[_RUN],
                             telemetry=not request.config.getoption("suite_no_telemetry"))


# --- JSON additions ----------------------------------------------------------------------------------


# pytest-benchmark's hooks are optional: with `-p no:benchmark` pytest would reject them in an INTERNALERROR
# traceback before pytest_configure could refuse the run in one line.
@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info.update(dev.inventory().as_machine_info())


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    if _CONFIG not in config.stash:
        return
    # pytest-benchmark always puts every round's time into --benchmark-json; keep the file small (a default
    # run has thousands of rounds) unless the user asked for the samples with --benchmark-save-data.
    if not config.getoption("benchmark_save_data"):
        for bench in output_json.get("benchmarks", []):
            (bench.get("stats") or {}).pop("data", None)
    # A test that did not pass (pytest-timeout's Failed mid-timing, a failing check or teardown) leaves
    # pytest-benchmark a result of interrupted rounds: it is no measurement.
    failed = config.stash[_OUTCOME].failed if _OUTCOME in config.stash else set()
    if failed and "benchmarks" in output_json:
        output_json["benchmarks"] = [b for b in output_json["benchmarks"] if b.get("fullname") not in failed]
    state = config.stash.get(_PARTIAL, None)
    if state is not None and state.reused:
        output_json.setdefault("benchmarks", []).extend(state.reused)
    output_json["suite"] = _suite_block(config)
    annotate(output_json)


def _suite_block(config: pytest.Config) -> dict:
    return {"version": __version__, "schema_version": SCHEMA_VERSION, "config_path": config.stash[_CONFIG_PATH],
            "devices": config.stash[_DEVICES], "config": resolved(config.stash[_CONFIG]),
            "budget_s": config.stash[_RUN].budget_s, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


# --- crash-safe results (suite.partial), the budget and progress lines (suite.budget) ----------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    run = item.config.stash.get(_RUN, None)
    if run is None:
        return
    share = run.start(item.nodeid)
    marker = item.get_closest_marker("benchmark")
    if share is not None and marker is not None:
        # pytest-benchmark reads the closest `benchmark` marker when its fixture is set up, which is next. A
        # user's --benchmark-max-time is each share's ceiling (user_timing): the budget still holds under it.
        item.add_marker(pytest.mark.benchmark(**dict(marker.kwargs, max_time=share)), append=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    # pytest-timeout 2.4 says "Timeout (>1.0s) from pytest-timeout.", 2.3 "Timeout >1.0s".
    if report.failed and call.excinfo is not None and re.match(r"Timeout \(?>", str(call.excinfo.value)):
        # pytest-timeout's stop at time_limit_s: the stacks it dumped show where it was; the failure itself
        # is one line naming the limit and the fix, not the benchmark loop's traceback.
        report.longrepr = (f"{str(call.excinfo.value).rstrip('.')}: the case ran past timing.time_limit_s; "
                           "raise it in the config (or --timeout), or use smaller sizes")
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    stats = getattr(fixture, "stats", None)
    run = item.config.stash.get(_RUN, None)
    if run is not None and report.when == "call":
        run.timed(item.nodeid, stats)
    if report.failed and _OUTCOME in item.config.stash:
        item.config.stash[_OUTCOME].failed.add(item.nodeid)
    state = item.config.stash.get(_PARTIAL, None)
    if state is not None:
        passed = report.when == "call" and stats is not None and not fixture.has_error
        # Every round's time only with --benchmark-save-data (a default run has thousands): the JSON is made
        # from the journal.
        data = bool(item.config.getoption("benchmark_save_data"))
        state.report(item.nodeid, report.when, report.outcome, stats.as_dict(include_data=data) if passed else None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """After a test's setup, call and teardown (and their reports): its progress line and the budget's
    accounting. Written here because pytest captures output during those phases (without -s it is lost)."""
    try:
        return (yield)
    finally:
        run = item.config.stash.get(_RUN, None)
        line = run.finish(item.nodeid) if run is not None else None
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None and item.config.getoption("verbose") >= 0:
            reporter.write_line(line)


# Exit status of a run with --benchmark-json that measured nothing (pytest's "no tests collected"): not 0,
# so a job that asked for results and got none fails.
NOTHING_MEASURED_EXIT = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_save(session: pytest.Session):
    """Around pytest-benchmark's own hook, which would write the JSON.

    A run with a journal (rank 0 with --benchmark-json) writes its JSON from the journal at the end
    (pytest_sessionfinish below), as `suite finish` does after a crash: one source for both, so a normal end and
    a recovered crash give the same file. pytest-benchmark still stores --benchmark-save/--benchmark-autosave.
    Where there is no journal, its JSON is kept, written through `_save_json`.

    The JSON is written to a temporary file and renamed into place: pytest-benchmark truncates the file and
    then writes it, so a full disk would leave an empty JSON (and a traceback). A write that fails leaves the
    earlier file as it was, says so in one line, and fails the run; the partial file keeps the results.

    Ctrl-C (or a KeyboardInterrupt): pytest-benchmark would write the benchmarks finished so far as a
    complete-looking JSON (with the interrupted one half-timed), and the partial file would then be dropped,
    leaving nothing to resume. The JSON is not written; the partial file keeps every finished benchmark, and
    one line says how to go on."""
    config = session.config
    state = config.stash.get(_PARTIAL, None)
    outcome = config.stash.setdefault(_OUTCOME, Outcome())
    # The tests are over: a SIGTERM from here on ends the process at once (its default action).
    # An exception raised inside pytest-benchmark's save would be a traceback, and killing loses nothing: the
    # JSON is renamed into place whole or not at all, and the partial file holds every result until then.
    _default_sigterm(config)
    if state is not None and state.writer is not None:
        pb_adapter.write_no_json(config, keep_table=True)
    else:
        pb_adapter.write_json_with(config, functools.partial(_save_json, config))
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    # pytest-benchmark would store the benchmarks finished so far, and the one cut off mid-timing, as a whole
    # run: --benchmark-compare takes the latest stored run as its baseline.
    if interrupted and pb_adapter.store_nothing(config):
        outcome.not_stored = (
            "[suite] nothing stored by --benchmark-save/--benchmark-autosave: a run cut short would become the "
            "baseline --benchmark-compare takes; run it again whole to store it")
    if interrupted and state is not None and state.writer is not None:
        # No JSON; a benchmark interrupted before its first round has no statistics to show either.
        pb_adapter.write_no_json(config)
        outcome.interrupted = state.interrupted_line("stopped by SIGTERM" if outcome.terminated else "interrupted")
    result = yield
    if outcome.unsaved:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if outcome.terminated:
        session.exitstatus = TERMINATED_EXIT
    return result


def _save_json(config: pytest.Config, path, output_json: dict) -> None:
    """--benchmark-json written whole or not at all; a write that fails is one line in the run's outcome."""
    try:
        write_json_atomically(Path(path), output_json)
    except OSError as exc:
        state = config.stash.get(_PARTIAL, None)
        kept = state.unsaved_kept() if state else "nothing measured could be kept"
        config.stash.setdefault(_OUTCOME, Outcome()).unsaved = (
            f"[suite] cannot write {Path(path).resolve()} ({exc.strerror or exc}): {kept}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(_PARTIAL, None)
    outcome = config.stash.setdefault(_OUTCOME, Outcome())
    if state is None or state.writer is None or pb_adapter.session(config) is None or outcome.interrupted:
        return
    measured = pb_adapter.measured(config)
    if not measured and not state.reused:  # nothing to write; where pytest's exit status is not 0, it stands
        if session.exitstatus == pytest.ExitCode.OK:
            if why := _why_nothing(config):  # said in the terminal summary, after pytest's progress line
                out = config.getoption("benchmark_json")
                outcome.nothing = f"[suite] nothing measured: {why}; no results written to {out}"
                session.exitstatus = NOTHING_MEASURED_EXIT
            state.discard()  # cases that skipped after they started left a file of skips
        return
    doc = state.journal_json()
    # As pytest-benchmark would: every plugin's additions (ours below: the suite block, the benchmarks a resume
    # kept, % of ceiling; suite.distributed's ranks and NCCL's choices).
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=measured, output_json=doc)
    _save_json(config, config.getoption("benchmark_json"), doc)
    if outcome.unsaved:
        return  # the exit status is set by pytest_sessionfinish_save, around this hook
    if not measured and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        # pytest's "no tests" once --suite-resume deselected every test: they were measured, and the JSON
        # holds them all.
        session.exitstatus = pytest.ExitCode.OK


def _why_nothing(config: pytest.Config) -> str | None:
    """Why a run with --benchmark-json measured nothing, or None where nothing was to run (--co, --setup-plan:
    pytest's own exit status stands)."""
    if any(getattr(config.option, name, False) for name in ("collectonly", "setupplan", "setuponly")):
        return None
    if pb_adapter.disabled(config):
        return "benchmarks are disabled (--benchmark-disable: each ran once, untimed)"
    # Every selected case skipped (no such device, -k matched only skips): pytest-benchmark writes no JSON, and a
    # silent exit 0 would pass for a run that measured something.
    return "every selected case was skipped (pytest -rs shows why)"


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_PARTIAL, None)
    if state is not None:
        state.finish()


# --- progress lines and the summary --------------------------------------------------------------------


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Under pytest-benchmark's header (its defaults, which the config's timing replaces): what is in effect."""
    if _CONFIG not in config.stash:
        return None
    timing = config.stash[_CONFIG].timing.model_copy(update=user_timing(config))
    stop = f"precision +-{timing.precision:.3g} at {timing.confidence:g}" if timing.precision else "precision off"
    budget = config.stash[_RUN].budget_s if _RUN in config.stash else None
    return [f"suite: config {config.stash[_CONFIG_PATH]}, devices {', '.join(config.stash[_DEVICES])}; timing "
            f"max_time={timing.max_time:g}s min_rounds={timing.min_rounds} {stop} (family sections may differ)"
            + (f", budget {budget:g}s" if budget else "")]


# pytest-benchmark options whose output comes with its table (a quiet session writes none of it).
_TABLE_OPTIONS = ("benchmark_histogram", "benchmark_compare", "benchmark_cprofile")


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if _RUN not in config.stash:
        return
    missing = dev.missing_devices(config.stash[_DEVICES])
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if missing and reporter is not None:
        reporter.write_line(
            f"[suite] warning: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on this machine "
            f"(it has: {', '.join(dev.present_devices())}): {'its' if len(missing) == 1 else 'their'} cases are "
            "skipped", yellow=True,
        )
    distributed = config.pluginmanager.get_plugin("suite.distributed")  # registered beside this plugin
    if distributed is not None:
        distributed.join_group(config.stash[_CONFIG], config.stash[_DEVICES])
    if reporter is not None and _user_set(config, "--benchmark-timer"):
        reporter.write_line(
            "[suite] warning: --benchmark-timer is ignored: the suite's timer synchronises the devices at both "
            "ends of every round (a plain clock would time the launches only)", yellow=True)
    # pytest-benchmark draws its histograms, its comparison and its cProfile tables with its table: a user who
    # asked for one of them gets that table too, as with --suite-summary=both.
    table_asked = any(config.getoption(name, None) for name in _TABLE_OPTIONS)
    if config.getoption("suite_summary") == "rates" and not table_asked:
        # Our summary replaces pytest-benchmark's table (kept with --suite-summary=both or off); --benchmark-json
        # and the comparison checks are unaffected.
        pb_adapter.quiet(config)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    from suite.summary import shown_on_this_rank

    outcome = config.stash.get(_OUTCOME, None) or Outcome()
    for line, colour in ((outcome.nothing, "red"), (outcome.not_stored, "yellow"), (outcome.interrupted, "yellow")):
        if line:
            terminalreporter.write_line(line, **{colour: True})
    if outcome.interrupted:
        return
    if _RUN not in config.stash or config.getoption("suite_summary") == "off" or not shown_on_this_rank():
        return
    state = config.stash.get(_PARTIAL, None)
    benchmarks = copy.deepcopy([b.as_dict(include_data=False) for b in pb_adapter.measured(config)
                                if not b.has_error and b.stats and b.fullname not in outcome.failed]
                               + (state.reused if state is not None else []))
    if not benchmarks:
        return
    doc = {"machine_info": dev.inventory().as_machine_info(), "benchmarks": benchmarks}
    annotate(doc)
    terminalreporter.write_sep("=", "suite summary (--suite-summary=both adds pytest-benchmark's table)")
    for line in render(benchmarks):
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_unsaved(terminalreporter, config: pytest.Config) -> None:
    """Last, after every table: the results JSON could not be written (a full disk), and what was kept."""
    outcome = config.stash.get(_OUTCOME, None)
    if outcome is not None and outcome.unsaved:
        terminalreporter.write_line(outcome.unsaved, red=True)
