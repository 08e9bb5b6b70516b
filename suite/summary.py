"""The end-of-run summary in each family's units (TFLOP/s, GB/s, busbw, N x slower) and the progress lines."""

from __future__ import annotations

import os
import time
from collections import defaultdict

from suite.cases import FAMILIES, family_read
from suite.limits import limits_held
from suite.timing import format_duration

# A family the plan gives at least this long, or that has run this long, gets progress lines while it runs.
PROGRESS_MIN_S = 5.0
# At most one progress line per family this often (and one when it finishes).
PROGRESS_INTERVAL_S = 30.0
# Widest grid shown; wider ones are cut with a note (a 9-device matrix has 9 columns).
MAX_COLUMNS = 12
# Rows of the generic section (a family without a section of its own): enough to see it ran and its range; the
# rest is in the JSON and the report.
GENERIC_MAX_ROWS = 20
# The rate a generic section shows: the family's RATE, else the first of these a result has.
RATE_KEYS = (("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("busbw", "busbw GB/s"), ("samples_per_s", "samples/s"))


def num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def cell(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if value < 10**digits else f"{value:.0f}"


def grid(title: str, rows: dict, columns: list, corner: str = "") -> list[str]:
    """A text table: rows {label: {column: text}}; columns in order."""
    if not rows:
        return []
    shown = columns[:MAX_COLUMNS]
    width0 = max(len(corner), *(len(str(r)) for r in rows))
    widths = [max(len(str(c)), *(len(rows[r].get(c, "-")) for r in rows)) for c in shown]
    lines = [title, f"  {corner:<{width0}}  " + "  ".join(f"{str(c):>{w}}" for c, w in zip(shown, widths))]
    for label, cells in rows.items():
        lines.append(
            f"  {str(label):<{width0}}  "
            + "  ".join(f"{cells.get(c, '-'):>{w}}" for c, w in zip(shown, widths))
        )
    if len(columns) > len(shown):
        lines.append(f"  ({len(columns) - len(shown)} more columns in the JSON / report)")
    return lines


def extra_info(bench: dict) -> dict:
    """A result's extra_info, {} where it has none (old, partial or hand-written files)."""
    info = bench.get("extra_info")
    return info if isinstance(info, dict) else {}


def _by_family(benchmarks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for bench in benchmarks:
        out[str(extra_info(bench).get("case") or "other")].append(bench)
    return out


def median_of(bench: dict) -> float | None:
    stats = bench.get("stats")
    return num(stats.get("median")) if isinstance(stats, dict) else None


def size_of(info: dict) -> int | None:
    size = info.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def precision(info: dict) -> str:
    """The precision a result ran in (older files named only the storage `dtype`)."""
    return str(info.get("precision") or info.get("dtype"))


def compute_grid(name: str, benches: list[dict], key, column) -> list[str]:
    """TFLOP/s by `key(info)` rows and `column(info)` columns, each row's best % of ceiling / datasheet."""
    rows: dict = defaultdict(dict)
    columns: dict = {}  # in first-seen order
    pct: dict = {}
    for b in benches:
        info = extra_info(b)
        tf = num(info.get("tflops"))
        if tf is None:
            continue
        row, col = key(info), column(info)
        columns.setdefault(col)
        rows[row][col] = cell(tf)
        ceil, sheet = num(info.get("pct_of_ceiling")), num(info.get("pct_of_datasheet"))
        best = pct.get(row)
        if best is None or tf > best[0]:
            pct[row] = (tf, ceil, sheet)
    for row, (_, ceil, sheet) in pct.items():
        rows[row]["% ceiling"] = f"{ceil:.0f}%" if ceil is not None else "-"
        rows[row]["% datasheet"] = f"{sheet:.0f}%" if sheet is not None else "-"
    if not rows:
        return []
    extra = ["% ceiling"] + (["% datasheet"] if any(v[2] is not None for v in pct.values()) else [])
    return grid(f"{name}: TFLOP/s (% of ceiling / datasheet: the row's best)", dict(rows), [*columns, *extra])


def _stopping(benchmarks: list[dict]) -> list[str]:
    counts: dict = defaultdict(int)
    margins = []
    for b in benchmarks:
        info = extra_info(b)
        counts[str(info.get("stopped_on") or "unknown")] += 1
        if num(info.get("margin")) is not None and info.get("stopped_on") == "time":
            margins.append(info["margin"])
    if not counts:
        return []
    text = ", ".join(f"{n} on {k}" for k, n in sorted(counts.items()))
    worst = f"; stopped on time, the widest margin was +-{max(margins):.1%}" if margins else ""
    return [f"stopping: {text}{worst}"]


# Limits that point at the machine rather than the workload: the power limit holding a GPU under a large
# matmul is its normal state, so it is not called out at the end of a run.
_MACHINE_LIMITS = ("thermal", "board_limit", "reliability", "hw_thermal", "hw_power_brake")


def _held(benchmarks: list[dict]) -> list[str]:
    """One line per machine limit that held a GPU's clocks for 5% of a benchmark's warm-up and timing or
    more (NVML)."""
    seen: dict[str, list[float]] = defaultdict(list)
    for b in benchmarks:
        info = extra_info(b)
        for limit, share in limits_held(info).items():
            if limit in _MACHINE_LIMITS and share >= 0.05:
                seen[limit].append(share)
    return [f"clocks held back by {limit.replace('_', ' ')} (NVML) in {len(shares)} benchmark(s), up to "
            f"{max(shares):.0%} of the time: see clocks_held_{limit} in the JSON, `python -m suite health`"
            for limit, shares in sorted(seen.items())]


# Host-bound benchmarks named in the line that lists them; the rest are counted.
MAX_HOST_BOUND_NAMED = 3


def _host_bound(benchmarks: list[dict]) -> list[str]:
    """One line naming the accelerator results whose time the host set (suite.timing.bound_info)."""
    names = [str(b.get("name") or "?") for b in benchmarks if extra_info(b).get("bound") == "host"]
    if not names:
        return []
    more = f" and {len(names) - MAX_HOST_BOUND_NAMED} more" if len(names) > MAX_HOST_BOUND_NAMED else ""
    return [f"host-bound: {len(names)} benchmark(s) measured how fast Python issues the work, not the device "
            f"(bound=host in the JSON; health does not judge them): {', '.join(names[:MAX_HOST_BOUND_NAMED])}{more}"]


def _rate(info: dict, first: str | None = None) -> tuple[float, str] | None:
    for key, unit in sorted(RATE_KEYS, key=lambda ku: ku[0] != first):
        value = num(info.get(key))
        if value is not None:
            return value, unit
    return None


def _generic(name: str, benches: list[dict]) -> list[str]:
    """Any family without a section of its own (or whose section finds none of its keys): each result's rate,
    else its median time, by the benchmark's parameter id."""
    rows: dict = {}
    first = family_read(name, "RATE")
    for b in benches:
        label = str(b.get("param") or b.get("name") or "?")
        rate = _rate(extra_info(b), first)
        if rate is not None:
            rows[label] = {"result": f"{cell(rate[0])} {rate[1]}"}
        elif median_of(b) is not None:
            rows[label] = {"result": f"{format_time(median_of(b))} per call"}
    if not rows:
        return []
    shown = dict(list(rows.items())[:GENERIC_MAX_ROWS])
    lines = grid(f"{name}: rate, or median time per call", shown, ["result"], "benchmark")
    if len(rows) > len(shown):
        lines.append(f"  ({len(rows) - len(shown)} more in the JSON / report)")
    return lines


def _ran_on(info: dict) -> str:
    """What a result ran on: its device, the ends of its copy (src->dst), or its GPUs."""
    ends = "->".join(str(info.get(k)) for k in ("src", "dst") if info.get(k))
    return str(info.get("device") or ends or info.get("gpus") or "")


def _per_watt(families: dict[str, list[dict]]) -> list[str]:
    """Each family's best rate per device beside its rate per watt and mean power, where telemetry recorded
    perf_per_w (suite.telemetry); nothing where none did."""
    rows: dict = {}
    for name, benches in families.items():
        first = family_read(name, "RATE")
        for b in benches:
            info = extra_info(b)
            rate, per_watt = _rate(info, first), num(info.get("perf_per_w"))
            if rate is None or per_watt is None:
                continue
            key = f"{name} {_ran_on(info)}".strip()
            if key not in rows or rate[0] > rows[key]["value"]:
                watts = num(info.get("power_w"))
                rows[key] = {"value": rate[0], "rate": f"{cell(rate[0])} {rate[1]}",
                             "rate/W": f"{cell(per_watt)} {rate[1]}/W",
                             "power": f"{watts:.0f} W" if watts else "-"}
    title = "perf per watt: each family's best rate on each device, its rate per watt and mean power"
    return grid(title, rows, ["rate", "rate/W", "power"], "family device") + ([""] if rows else [])


def render(benchmarks: list[dict]) -> list[str]:
    """The summary lines for finished benchmarks (pytest-benchmark JSON entries with our extra_info): each
    family's own section (its read module's `summary`), else the generic one; registered families first."""
    families = _by_family(benchmarks)
    lines: list[str] = []
    for name in [n for n in FAMILIES if n in families] + sorted(set(families) - set(FAMILIES)):
        benches = families[name]
        own = family_read(name, "summary")
        part = (own(benches) if own else []) or _generic(name, benches)
        if part:
            lines += part + [""]
    return lines + _per_watt(families) + _stopping(benchmarks) + _held(benchmarks) + _host_bound(benchmarks)


def shown_on_this_rank(env=os.environ) -> bool:
    """Whether this process prints the summary: under torchrun every rank runs the session,
    and only rank 0 (which writes the results) prints it; a run without RANK always does."""
    return env.get("RANK", "0").strip() in ("", "0")


class Progress:
    """One line per family that runs longer than PROGRESS_MIN_S: how many done, its ETA, and the run's.

    `planned_s`: family -> the plan's seconds for its benchmarks in this run (suite.plan). The run's ETA is
    what is left of the running family at its own pace, plus each family not yet begun at its plan figure: a
    family that finished counts what it took, and one not begun is never guessed from the one running."""

    def __init__(self, counts: dict[str, int], planned_s: dict[str, float] | None = None,
                 clock=time.monotonic) -> None:
        self.counts = counts
        self.planned = planned_s or {}
        self.done: dict[str, int] = defaultdict(int)
        self.spent: dict[str, float] = defaultdict(float)
        self.last: dict[str, float] = {}
        self.clock = clock

    def _left(self, family: str) -> float:
        done, total = self.done[family], self.counts[family]
        if done:
            return (total - done) * self.spent[family] / done
        return self.planned.get(family, 0.0)

    def finished(self, family: str, seconds: float) -> str | None:
        """Count one finished benchmark of `family` that took `seconds`; a progress line when one is due."""
        total = self.counts.get(family, 0)
        self.done[family] += 1
        self.spent[family] += seconds
        if max(self.planned.get(family, 0.0), self.spent[family]) < PROGRESS_MIN_S:
            return None
        now = self.clock()
        done = self.done[family]
        if done >= total:
            return f"[suite] {family}: {done}/{total} done in {format_duration(self.spent[family])}"
        if now - self.last.get(family, now - PROGRESS_INTERVAL_S - 1) < PROGRESS_INTERVAL_S:
            return None
        self.last[family] = now
        left = sum(self._left(f) for f in self.counts)
        return (
            f"[suite] {family}: {done}/{total} done, ETA {format_duration(self._left(family))} "
            f"(whole run: about {format_duration(left)} left)"
        )
