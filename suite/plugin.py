"""The pytest plugin: config and device options, parametrisation from the YAML, `measure`, JSON additions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from suite import SCHEMA_VERSION, __version__
from suite import devices as dev
from suite.cases import Case, SkipCase, family_module, FAMILIES
from suite.config import DEFAULT_CONFIG, SuiteConfig, load_config, resolved
from suite.errors import UserError
from suite.timing import SyncTimer, warm_up
from suite.units import gbps, tflops

_CONFIG = pytest.StashKey[SuiteConfig]()
_CONFIG_PATH = pytest.StashKey[str]()
_DEVICES = pytest.StashKey[list]()
_CASES = pytest.StashKey[dict]()

# Our timing settings (config `timing`) map onto these pytest-benchmark marker keywords; a user who passes
# the matching --benchmark-* option on the command line keeps theirs.
_TIMING_OPTIONS = {
    "min_time": "--benchmark-min-time",
    "max_time": "--benchmark-max-time",
    "min_rounds": "--benchmark-min-rounds",
    "calibration_precision": "--benchmark-calibration-precision",
}


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


def _user_set(config: pytest.Config, option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in config.invocation_params.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timing = config.stash[_CONFIG].timing
    registry = config.stash[_CASES]
    timers: dict[tuple, SyncTimer] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        family = _family_of(getattr(item, "originalname", item.name))
        if callspec is None or family is None or (family, callspec.params.get("case")) not in registry:
            continue
        case = registry[(family, callspec.params["case"])]
        key = tuple(case.devices)
        timer = timers.setdefault(key, SyncTimer([torch.device(d) for d in key]))
        options = {"timer": timer, "group": family}
        for name, flag in _TIMING_OPTIONS.items():
            if not _user_set(config, flag):
                options[name] = getattr(timing, name)
        item.add_marker(pytest.mark.benchmark(**options))


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
    try:
        work = family.build(case, config)
        work.check()
    except SkipCase as exc:
        pytest.skip(str(exc))
    except (RuntimeError, MemoryError) as exc:
        reason = _oom_reason(exc, case)
        if reason is None:
            raise
        pytest.skip(reason)

    timer = SyncTimer([torch.device(d) for d in case.devices])
    warm_up(work.fn, timer, config.timing.warmup_s)
    benchmark(work.fn)

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
    benchmark.extra_info.update(info)
    return info


@pytest.fixture
def measure(request: pytest.FixtureRequest, benchmark):
    """`measure(case)`: run one case through the suite's measurement rules into `benchmark`."""
    config = request.config.stash[_CONFIG]

    def _measure(case: Case) -> dict:
        return run_case(case, benchmark, config)

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
    output_json["suite"] = {
        "version": __version__,
        "schema_version": SCHEMA_VERSION,
        "config_path": config.stash[_CONFIG_PATH],
        "devices": config.stash[_DEVICES],
        "config": resolved(config.stash[_CONFIG]),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
