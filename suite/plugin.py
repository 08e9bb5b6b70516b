"""The pytest plugin: config and device options, parametrisation from the YAML, `measure`, JSON additions."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from pathlib import Path

import pytest

from suite.timing import process_age

# The run's clock starts with the process (a budget covers the whole run: interpreter start, importing torch);
# a later run in the same process (pytest.main from a script) starts at its own pytest_configure.
_STARTED = [time.monotonic() - process_age()]

import torch  # noqa: E402 - after taking the start time

from suite import SCHEMA_VERSION, __version__
from suite import devices as dev
from suite.cases import Case, SkipCase, family_module, FAMILIES
from suite.config import DEFAULT_CONFIG, SuiteConfig, load_config, nothing_selected, resolved
from suite.errors import UserError
from suite.partial import MAX_DEATHS, PartialRun, PartialWriter, check_writable, partial_path, read_partial, rewrite_clean
from suite.timing import SyncTimer, cap_rounds_by_time, parse_duration, stopping_info, warm_up  # noqa: E402
from suite.units import gbps, tflops  # noqa: E402

_CONFIG = pytest.StashKey[SuiteConfig]()
_CONFIG_PATH = pytest.StashKey[str]()
_DEVICES = pytest.StashKey[list]()
_CASES = pytest.StashKey[dict]()
_PARTIAL = pytest.StashKey["PartialState"]()
_RUN = pytest.StashKey["RunState"]()

# Our timing settings (config `timing`) map onto these pytest-benchmark marker keywords; a user who passes
# the matching --benchmark-* option on the command line keeps theirs.
_TIMING_OPTIONS = {
    "min_time": "--benchmark-min-time",
    "max_time": "--benchmark-max-time",
    "min_rounds": "--benchmark-min-rounds",
    "calibration_precision": "--benchmark-calibration-precision",
    "precision": "--benchmark-precision",
    "confidence": "--benchmark-confidence",
}
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
        help="override the config's devices: all, cpu, gpus, cuda:1, or a comma-separated list (cpu,cuda:1)",
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
        help="the whole run, overhead included, in this time (600, 90s, 10m, 1h): time is shared out over the "
        "selected benchmarks; a budget too small is refused before anything runs (overrides timing.budget)",
    )
    group.addoption(
        "--suite-summary",
        default="rates",
        choices=SUMMARY_MODES,
        help="end-of-run summary: rates (each family in its units: TFLOP/s, GB/s, busbw; the default), both "
        "(also pytest-benchmark's timing table), off (pytest-benchmark's table only)",
    )


def _config_path(config: pytest.Config) -> Path:
    given = config.getoption("suite_config")
    if given:
        return Path(given)
    # The default is the project's config, wherever pytest was started from.
    return Path(config.rootpath) / DEFAULT_CONFIG


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real accelerator; skipped where none is present")
    # A benchmark run shows warnings (a torch deprecation, say) but never fails on one; the project's own
    # tests keep pyproject's "error" filter. Later filterwarnings entries win.
    config.addinivalue_line("filterwarnings", "default")
    path = _config_path(config)
    try:
        suite_config = load_config(path)
        spec = config.getoption("suite_devices") or suite_config.devices
        devices = dev.check_spec(spec)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_CONFIG] = suite_config
    config.stash[_CONFIG_PATH] = str(path)
    config.stash[_DEVICES] = devices
    config.stash[_CASES] = {}
    config.stash[_RUN] = RunState(started=_STARTED.pop() if _STARTED else time.monotonic())
    try:
        budget = config.getoption("suite_budget")
        config.stash[_RUN].budget_s = parse_duration(budget) if budget is not None else suite_config.timing.budget
    except ValueError as exc:
        raise pytest.UsageError(f"--suite-budget: {exc}") from None
    try:
        config.stash[_PARTIAL] = PartialState.start(config)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None


def _family_of(function_name: str) -> str | None:
    name = function_name.removeprefix("test_")
    return name if name in FAMILIES else None


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
    registry = config.stash[_CASES]
    if not cases:
        reason = f"no {family} cases selected by {config.stash[_CONFIG_PATH]} (disabled or empty)"
        metafunc.parametrize("case", [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))])
        return
    for case in cases:
        registry[(family, case.id)] = case
    metafunc.parametrize("case", [c.id for c in cases], ids=[c.id for c in cases], indirect=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    items = [i for i in session.items if getattr(i, "callspec", None) and "case" in i.callspec.params]
    if items and all(i.callspec.params["case"] is None for i in items) and len(items) == len(session.items):
        raise pytest.UsageError(nothing_selected(session.config.stash[_CONFIG_PATH]))


def _user_set(config: pytest.Config, option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in config.invocation_params.args)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: the budget is shared over what will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_config = config.stash[_CONFIG]
    registry = config.stash[_CASES]
    timers: dict[tuple, SyncTimer] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        family = _family_of(getattr(item, "originalname", item.name))
        if callspec is None or family is None or (family, callspec.params.get("case")) not in registry:
            continue
        case = registry[(family, callspec.params["case"])]
        timing = suite_config.timing_for(family)
        key = tuple(case.devices)
        timer = timers.setdefault(key, SyncTimer([torch.device(d) for d in key]))
        options = {"timer": timer, "group": family}
        for name, flag in _TIMING_OPTIONS.items():
            if not _user_set(config, flag):
                options[name] = getattr(timing, name)
        if options.get("precision") is None:
            options.pop("precision", None)  # off: pytest-benchmark's fixed rounds
        item.add_marker(pytest.mark.benchmark(**options))
        if timing.time_limit_s and config.pluginmanager.hasplugin("timeout") and not _user_set(config, "--timeout"):
            item.add_marker(pytest.mark.timeout(timing.time_limit_s))
    if _PARTIAL in config.stash:
        config.stash[_PARTIAL].select(config, items)
    config.stash[_RUN].plan(config, items)


@pytest.fixture
def case(request: pytest.FixtureRequest) -> Case:
    family = _family_of(request.function.__name__)
    return request.config.stash[_CASES][(family, request.param)]


@pytest.fixture
def suite_config(request: pytest.FixtureRequest) -> SuiteConfig:
    return request.config.stash[_CONFIG]


def _oom_reason(exc: BaseException, case: Case) -> str | None:
    text = str(exc)
    is_oom = isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text.lower())
    )
    if not is_oom:
        return None
    plat = dev.current_platform()
    free = []
    for name in case.devices:
        device = torch.device(name)
        plat.empty_cache(device)
        info = plat.mem_get_info(device)
        if info:
            free.append(f"{name} has {info[0] / 2**30:.1f} GiB free of {info[1] / 2**30:.1f} GiB")
    detail = f" ({'; '.join(free)})" if free else ""
    return f"out of memory for {case.id}{detail}: use smaller sizes for this device"


def run_case(case: Case, benchmark, config: SuiteConfig) -> dict:
    """Skip if a device is missing; build; check once; warm up; time with `benchmark`; return extra_info."""
    for name in case.devices:
        reason = dev.missing_reason(name)
        if reason:
            pytest.skip(reason)
    family = family_module(case.family)
    # Out of memory anywhere (inputs, check, autotuning workspaces in warm-up, allocations in the timed op) is a
    # skip with the reason; pytest-benchmark drops a benchmark that raised, so nothing partial is saved.
    try:
        try:
            work = family.build(case, config)
            work.check()
            if work.pedantic is not None:
                # Fixed rounds and warm-up from the case (collectives: every rank must run the same calls in
                # lockstep; time-based warm-up and calibration would differ between ranks and hang them).
                benchmark.pedantic(work.fn, **work.pedantic)
            else:
                timer = SyncTimer([torch.device(d) for d in case.devices])
                warm_up(work.fn, timer, config.timing.warmup_s)
                benchmark(work.fn)
        except SkipCase as exc:
            pytest.skip(str(exc))
        except (RuntimeError, MemoryError) as exc:
            reason = _oom_reason(exc, case)
            if reason is None:
                raise
            pytest.skip(reason)
    except BaseException:
        # The error (or skip) raised first is the one to report; a failing synchronisation must not replace it.
        with contextlib.suppress(Exception):
            dev.synchronize(*case.devices)
        raise
    # pytest-benchmark makes one more, untimed call after the timed rounds, and side streams may still copy
    # into this case's buffers: wait for all of it, so no work of this case is queued when its tensors are
    # freed (the caching allocator would hand them to the next case) or when the next case starts timing.
    dev.synchronize(*case.devices)

    info: dict = {"case": case.family, **case.info}
    stats = getattr(benchmark, "stats", None)
    median = stats.stats.median if stats is not None else None
    for key in ("flops", "bytes", "traffic_bytes", "samples"):
        value = getattr(work, key)
        if value is not None:
            info[key] = value
    if median:
        if work.flops is not None:
            info["tflops"] = tflops(work.flops, median)
        if work.bytes is not None:
            info["gbps"] = gbps(work.bytes, median)
        if work.traffic_bytes is not None:
            info["traffic_gbps"] = gbps(work.traffic_bytes, median)
        if work.samples is not None:
            info["samples_per_s"] = work.samples / median
    info.update(work.extra)
    if median and work.derive is not None:
        info.update(work.derive(median))
    if stats is not None:
        info.update(stopping_info(stats, pedantic=work.pedantic is not None))
    benchmark.extra_info.update(info)
    return info


@pytest.fixture
def measure(request: pytest.FixtureRequest, benchmark):
    """`measure(case)`: run one case through the suite's measurement rules into `benchmark`."""
    config = request.config.stash[_CONFIG]

    def _measure(case: Case) -> dict:
        from suite.plan import warmup_seconds

        timing = config.timing_for(case.family)
        # The case's own timing (its family's `timing:` keys; a sustained warm-up for compute on accelerators).
        timing = timing.model_copy(update={"warmup_s": warmup_seconds(case, timing)})
        request.config.stash[_RUN].warmups[request.node.nodeid] = timing.warmup_s
        cap_rounds_by_time(benchmark)
        return run_case(case, benchmark, config.model_copy(update={"timing": timing}))

    return _measure


# --- JSON additions ----------------------------------------------------------------------------------


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info.update(dev.inventory().as_machine_info())


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    if _CONFIG not in config.stash:
        return
    # pytest-benchmark always puts every round's time into --benchmark-json; keep the file small (a default
    # run has thousands of rounds) unless the user asked for the samples with --benchmark-save-data.
    if not config.getoption("benchmark_save_data"):
        for bench in output_json.get("benchmarks", []):
            (bench.get("stats") or {}).pop("data", None)
    state = config.stash.get(_PARTIAL, None)
    if state is not None and state.reused:
        output_json.setdefault("benchmarks", []).extend(state.reused)
    output_json["suite"] = _suite_block(config)
    from suite.cases.ceiling.measure import annotate  # pct_of_ceiling / pct_of_datasheet on every compute result
    annotate(output_json)


def _suite_block(config: pytest.Config) -> dict:
    return {
        "version": __version__,
        "schema_version": SCHEMA_VERSION,
        "config_path": config.stash[_CONFIG_PATH],
        "devices": config.stash[_DEVICES],
        "config": resolved(config.stash[_CONFIG]),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# --- crash-safe results (suite.partial) -----------------------------------------------------------------


class PartialState:
    """The partial results file of this run and, with --suite-resume, what the interrupted run left."""

    def __init__(self, config: pytest.Config, writer: PartialWriter | None, previous: PartialRun | None) -> None:
        self.config = config
        self.writer = writer
        self.previous = previous or PartialRun()
        self.reused: list[dict] = []  # benchmarks of the earlier run kept instead of re-run
        self.outcomes: dict[str, str] = {}
        self.started = time.time()

    @classmethod
    def start(cls, config: pytest.Config) -> "PartialState":
        json_path = config.getoption("benchmark_json", None)
        resume = config.getoption("suite_resume")
        if os.environ.get("RANK", "0") != "0":
            # Under torchrun only rank 0 writes results (suite.distributed); the other ranks write nothing.
            return cls(config, None, None)
        if json_path is None:
            if resume:
                raise UserError("--suite-resume needs --benchmark-json PATH: the results file of the run to resume")
            return cls(config, None, None)
        json_path = Path(json_path)
        check_writable(json_path)
        partial = partial_path(json_path)
        previous = None
        if resume:
            if not partial.exists():
                raise UserError(
                    f"--suite-resume: there is no {partial} to resume (the run finished, or wrote to another "
                    "--benchmark-json); run without --suite-resume"
                )
            previous = read_partial(partial)
            _check_same_run(config, partial, previous)
            rewrite_clean(partial, previous)
        return cls(config, PartialWriter(partial, append=resume), previous)

    def write(self, obj: dict) -> None:
        if self.writer is None:
            return
        if not self.writer.has_header:
            self.writer.has_header = True
            self.writer.write(self._header())
        self.writer.write(obj)

    def _header(self) -> dict:
        from pytest_benchmark import __version__ as pb_version

        hook = self.config.hook
        machine_info = hook.pytest_benchmark_generate_machine_info(config=self.config)
        hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=machine_info)
        commit_info = hook.pytest_benchmark_generate_commit_info(config=self.config)
        return {
            "partial": True,
            "machine_info": machine_info,
            "commit_info": commit_info,
            "suite": _suite_block(self.config),
            "datetime": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "version": pb_version,
        }

    def select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """With --suite-resume: drop what the earlier runs finished; skip a test that runs died in twice."""
        done = [i for i in items if i.nodeid in self.previous.benchmarks]
        for item in items:
            deaths = self.previous.deaths(item.nodeid)
            if deaths >= MAX_DEATHS:
                item.add_marker(pytest.mark.skip(reason=(
                    f"{deaths} earlier runs died while it was running (it crashes or hangs the process); to "
                    f"retry it, run it alone: pytest {item.nodeid!s}"
                )))
        if done:
            items[:] = [i for i in items if i.nodeid not in self.previous.benchmarks]
            config.hook.pytest_deselected(items=done)
            self.reused = [self.previous.benchmarks[i.nodeid] for i in done]

    def finish(self) -> None:
        """Close the file; drop it once the complete JSON exists (it now holds everything)."""
        if self.writer is None:
            return
        self.writer.close()
        json_path = Path(self.config.getoption("benchmark_json"))
        try:
            complete = json_path.stat().st_mtime >= self.started and "benchmarks" in json.loads(json_path.read_text())
        except (OSError, ValueError):
            complete = False
        if complete:
            self.writer.path.unlink(missing_ok=True)


def _check_same_run(config: pytest.Config, partial: Path, previous: PartialRun) -> None:
    """Resume only the same measurement: the same config, devices and machine, or the JSON would mix runs."""
    import platform

    header = previous.header or {}
    old = header.get("suite") or {}
    host = (header.get("machine_info") or {}).get("node")
    if previous.header is None:
        return  # died before its first result: nothing to merge
    if old.get("config") != resolved(config.stash[_CONFIG]) or old.get("devices") != config.stash[_DEVICES]:
        raise UserError(
            f"--suite-resume: {partial} was measured with another config or device list ({old.get('config_path')}, "
            f"devices {old.get('devices')}); resume with the same --suite-config and --suite-devices, or run "
            "without --suite-resume"
        )
    if host and host != platform.node():
        raise UserError(f"--suite-resume: {partial} was measured on {host}, not on this machine ({platform.node()}); "
                        "run without --suite-resume")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash.get(_PARTIAL, None)
    if state is not None:
        state.write({"started": item.nodeid})
    run = item.config.stash.get(_RUN, None)
    if run is not None:
        run.start(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    run = item.config.stash.get(_RUN, None)
    if run is not None and report.when == "call":
        run.timed(item.nodeid, getattr(getattr(item, "funcargs", {}).get("benchmark"), "stats", None))
    state = item.config.stash.get(_PARTIAL, None)
    if state is None:
        return
    if report.when == "call" or report.outcome != "passed":
        state.outcomes.setdefault(item.nodeid, report.outcome)
    if report.when == "call" and report.passed:
        fixture = getattr(item, "funcargs", {}).get("benchmark")
        stats = getattr(fixture, "stats", None)
        if stats is not None and not fixture.has_error:
            state.write(stats.as_dict(include_data=False))
    if report.when == "teardown":
        state.write({"finished": item.nodeid, "outcome": state.outcomes.pop(item.nodeid, "passed")})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_PARTIAL, None)
    bs = getattr(session.config, "_benchmarksession", None)
    if state is None or state.writer is None or bs is None:
        return
    if not bs.benchmarks and state.reused:
        # Everything was already measured: pytest-benchmark has nothing to save, so the JSON is made from the
        # partial file's own header and benchmarks.
        header = dict(state.previous.header or {})
        header.pop("partial", None)
        header["benchmarks"] = state.reused
        header["suite"] = _suite_block(session.config)
        Path(session.config.getoption("benchmark_json")).write_text(json.dumps(header, indent=4))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_PARTIAL, None)
    if state is not None:
        state.finish()


# --- budget, progress lines and the summary ---------------------------------------------------------------


class RunState:
    """This run's budget schedule, per-test clocks for progress lines, and what each benchmark timed."""

    def __init__(self, started: float) -> None:
        self.run_started = started
        self.budget_s: float | None = None
        self.schedule = None  # suite.plan.BudgetSchedule when a budget is set
        self.progress = None  # suite.summary.Progress
        self.families: dict[str, str] = {}  # nodeid -> family of the selected benchmarks
        self.started: dict[str, float] = {}
        self.timed_s: dict[str, float] = {}
        self.warmups: dict[str, float] = {}

    def plan(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """After selection: the families for progress lines; with a budget, refuse it now if it is too small."""
        from suite.plan import BudgetSchedule, budget_error
        from suite.summary import Progress

        registry = config.stash[_CASES]
        cases = {}
        for item in items:
            callspec = getattr(item, "callspec", None)
            family = _family_of(getattr(item, "originalname", item.name))
            if callspec is not None and (family, callspec.params.get("case")) in registry:
                cases[item.nodeid] = registry[(family, callspec.params["case"])]
                self.families[item.nodeid] = family
        counts: dict[str, int] = {}
        for family in self.families.values():
            counts[family] = counts.get(family, 0) + 1
        self.progress = Progress(counts)
        if self.budget_s is None or not cases:
            return
        self.schedule = BudgetSchedule.for_cases(self.budget_s, cases, config.stash[_CONFIG], self.run_started)
        minimum = self.schedule.minimum_s()
        if minimum > self.budget_s:
            source = "--suite-budget" if config.getoption("suite_budget") else "timing.budget"
            raise pytest.UsageError(str(budget_error(self.budget_s, minimum, len(cases), source)))

    def start(self, item: pytest.Item) -> None:
        self.started[item.nodeid] = time.monotonic()
        if self.schedule is None:
            return
        share = self.schedule.start(item.nodeid)
        marker = item.get_closest_marker("benchmark")
        if share is not None and marker is not None and not _user_set(item.config, "--benchmark-max-time"):
            # pytest-benchmark reads the closest `benchmark` marker when its fixture is set up, which is next.
            item.add_marker(pytest.mark.benchmark(**dict(marker.kwargs, max_time=share)), append=False)

    def timed(self, nodeid: str, stats) -> None:
        if stats is not None and stats.stats.data:
            self.timed_s[nodeid] = sum(stats.stats.data) * stats.iterations

    def finish(self, config: pytest.Config, nodeid: str) -> None:
        started = self.started.pop(nodeid, None)
        family = self.families.get(nodeid)
        if started is None or family is None:
            return
        wall = time.monotonic() - started
        if self.schedule is not None and nodeid in self.timed_s:
            self.schedule.finish(nodeid, wall - self.timed_s[nodeid] - self.warmups.get(nodeid, 0.0))
        line = self.progress.finished(family, wall) if self.progress is not None else None
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None and config.getoption("verbose") >= 0:
            reporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem) -> None:
    run = item.config.stash.get(_RUN, None)
    if run is not None:
        run.finish(item.config, item.nodeid)


def pytest_sessionstart(session: pytest.Session) -> None:
    bs = getattr(session.config, "_benchmarksession", None)
    if bs is not None and _RUN in session.config.stash and session.config.getoption("suite_summary") == "rates":
        # Our summary replaces pytest-benchmark's table (kept with --suite-summary=both or off); --benchmark-json
        # and the comparison checks are unaffected.
        bs.quiet = True


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    from suite.summary import render, shown_on_this_rank

    if _RUN not in config.stash or config.getoption("suite_summary") == "off" or not shown_on_this_rank():
        return
    bs = getattr(config, "_benchmarksession", None)
    benchmarks = [copy.deepcopy(b.as_dict(include_data=False)) for b in getattr(bs, "benchmarks", [])
                  if not b.has_error and b.stats]
    state = config.stash.get(_PARTIAL, None)
    if state is not None:
        benchmarks += copy.deepcopy(state.reused)
    if not benchmarks:
        return
    from suite.cases.ceiling import annotate

    doc = {"machine_info": dev.inventory().as_machine_info(), "benchmarks": benchmarks}
    annotate(doc)
    terminalreporter.write_sep("=", "suite summary (--suite-summary=both adds pytest-benchmark's table)")
    for line in render(benchmarks):
        terminalreporter.write_line(line)
