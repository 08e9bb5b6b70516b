"""The end-of-run summary in each family's units (TFLOP/s, GB/s, busbw, N x slower) and the progress lines."""

from __future__ import annotations

import os
import time
from collections import defaultdict

from suite.limits import limits_held
from suite.timing import format_duration
from suite.units import format_size

# A family with at least this many benchmarks gets progress lines while it runs.
PROGRESS_MIN_BENCHMARKS = 20
# At most one progress line per family this often (and one when it finishes).
PROGRESS_INTERVAL_S = 30.0
# Widest grid shown; wider ones are cut with a note (a 9-device copy matrix has 9 columns).
MAX_COLUMNS = 12
# Rows of the generic section (a family without a section of its own): enough to see it ran and its range; the
# rest is in the JSON and the report.
GENERIC_MAX_ROWS = 20
# The rate a generic section shows, the first of these a result has (the plugin's rate keys; collectives' busbw).
RATE_KEYS = (("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("busbw", "busbw GB/s"), ("samples_per_s", "samples/s"))


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _cell(value: float | None, digits: int = 3) -> str:
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


def _info(bench: dict) -> dict:
    """A result's extra_info, {} where it has none (old, partial or hand-written files)."""
    info = bench.get("extra_info")
    return info if isinstance(info, dict) else {}


def _by_family(benchmarks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for bench in benchmarks:
        if isinstance(bench, dict):
            out[str(_info(bench).get("case") or "other")].append(bench)
    return out


def _median(bench: dict) -> float | None:
    stats = bench.get("stats")
    return _num(stats.get("median")) if isinstance(stats, dict) else None


def _size(info: dict) -> int | None:
    size = info.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _compute(name: str, benches: list[dict], key, column) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    pct: dict = {}
    for b in benches:
        info = _info(b)
        tf = _num(info.get("tflops"))
        if tf is None:
            continue
        row, col = key(info), column(info)
        columns += [col] if col not in columns else []
        rows[row][col] = _cell(tf)
        ceil, sheet = _num(info.get("pct_of_ceiling")), _num(info.get("pct_of_datasheet"))
        best = pct.get(row)
        if best is None or tf > best[0]:
            pct[row] = (tf, ceil, sheet)
    for row, (_, ceil, sheet) in pct.items():
        rows[row]["% ceiling"] = f"{ceil:.0f}%" if ceil is not None else "-"
        rows[row]["% datasheet"] = f"{sheet:.0f}%" if sheet is not None else "-"
    if not rows:
        return []
    extra = ["% ceiling"] + (["% datasheet"] if any(v[2] is not None for v in pct.values()) else [])
    return grid(f"{name}: TFLOP/s (% of ceiling / datasheet: the row's best)", dict(rows), columns + extra)


def _precision(info: dict) -> str:
    """The precision a result ran in (older files named only the storage `dtype`)."""
    return str(info.get("precision") or info.get("dtype"))


def _shape(info: dict) -> str:
    return f"{info.get('m')}x{info.get('n')}x{info.get('k')}"


def _copy(benches: list[dict]) -> list[str]:
    # Results without the keys the tables need (files from before `size`/`path` existed) are left out here.
    uni = [
        i for i in map(_info, benches)
        if i.get("direction") == "uni" and _num(i.get("gbps")) and _size(i) and i.get("src") and i.get("dst")
    ]
    if not uni:
        return []
    largest = max(i["size"] for i in uni)
    # The matrix at the largest size: pinned host memory where there is a choice (the link's speed), else
    # whatever ran; non_blocking copies first (no host wait in the round).
    rank = {"pinned": 0, "device": 0, "pageable": 1}
    best: dict = {}
    for i in uni:
        if i["size"] != largest:
            continue
        key = (i["src"], i["dst"])
        order = (rank.get(i.get("memory"), 2), not i.get("non_blocking"))
        if key not in best or order < best[key][0]:
            best[key] = (order, i)
    devices = list(dict.fromkeys([s for s, _ in best] + [d for _, d in best]))
    rows = {
        src: {dst: _cell(best[(src, dst)][1]["gbps"]) for dst in devices if (src, dst) in best}
        for src in devices
    }
    lines = grid(
        f"copy: GB/s at {format_size(largest)} (rows: source, columns: destination; pinned host memory "
        "where it ran)",
        {s: r for s, r in rows.items() if r},
        devices,
        "src \\ dst",
    )
    # The size sweep of host<->device (or the host copy on a CPU-only machine), first accelerator.
    accel = next((d for d in devices if d != "cpu"), None)
    sweep: dict = defaultdict(dict)
    columns: list = []
    for i in uni:
        path = i.get("path")
        if path is None or accel is None and path != "host":
            continue
        if accel is not None and accel not in (i["src"], i["dst"]) or path in ("peer", "local"):
            continue
        col = f"{path} {i.get('memory', '-')}" + (" nb" if i.get("non_blocking") else "")
        columns += [col] if col not in columns else []
        sweep[i["size"]][col] = _cell(i["gbps"])
    if sweep:
        title = f"copy: GB/s by size, cpu<->{accel}" if accel else "copy: GB/s by size, cpu->cpu"
        lines += grid(title, {format_size(s): sweep[s] for s in sorted(sweep)}, columns, "size")
    return lines


def _placement(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = _info(b)
        op = i.get("op")
        columns += [op] if op not in columns else []
        size = _size(i)
        rows[f"{i.get('device')} {format_size(size)}" if size else i.get("device")][op] = format_time(_median(b))
    return grid("placement: median time per call", dict(rows), columns, "device size")


def _habits(benches: list[dict]) -> list[str]:
    pairs: dict = defaultdict(dict)
    for b in benches:
        i = _info(b)
        pairs[i.get("pair")][i.get("role")] = (i.get("variant"), _median(b))
    lines = []
    for pair, roles in pairs.items():
        slow, fast = roles.get("slow"), roles.get("fast")
        if not slow or not fast or not slow[1] or not fast[1]:
            continue
        ratio = slow[1] / fast[1]
        # The slow habit winning is no finding to report as "0.2x slower": say it, and that it is unexpected.
        verdict = f"{ratio:.1f}x slower" if ratio >= 1 else f"{1 / ratio:.1f}x faster (unexpected: noise?)"
        lines.append(
            f"  {pair}: {slow[0]} {format_time(slow[1])} vs {fast[0]} {format_time(fast[1])}: {verdict}"
        )
    return ["habits: the slow way against the fast way, equal work", *lines] if lines else []


def _collectives(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = _info(b)
        bw = _num(i.get("busbw"))
        if bw is None or _size(i) is None:
            continue
        col = f"{i.get('op')}" + (
            "" if i.get("in_place") is None else (" ip" if i.get("in_place") else " oop")
        )
        columns += [col] if col not in columns else []
        rows[(i.get("size"), i.get("dtype"))][col] = _cell(bw)
    order = sorted(rows, key=lambda sd: (sd[0], str(sd[1])))
    labelled = {f"{format_size(s)} {d}": rows[(s, d)] for s, d in order}
    return grid("collectives: busbw GB/s (nccl-tests' definition)", labelled, columns, "size dtype")


def _model(benches: list[dict]) -> list[str]:
    rows: dict = defaultdict(dict)
    columns: list = []
    for b in benches:
        i = _info(b)
        rate = _num(i.get("samples_per_s"))
        col = f"{i.get('model')}-b{i.get('batch_size')}"
        columns += [col] if col not in columns else []
        rows[f"{i.get('device')} {_precision(i)}"][col] = _cell(rate, 4)
    return grid("model: samples/s", dict(rows), columns, "device dtype")


def _stopping(benchmarks: list[dict]) -> list[str]:
    counts: dict = defaultdict(int)
    margins = []
    for b in benchmarks:
        info = _info(b) if isinstance(b, dict) else {}
        counts[str(info.get("stopped_on") or "unknown")] += 1
        if _num(info.get("margin")) is not None and info.get("stopped_on") == "time":
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
        info = _info(b) if isinstance(b, dict) else {}
        for limit, share in limits_held(info).items():
            if limit in _MACHINE_LIMITS and share >= 0.05:
                seen[limit].append(share)
    return [f"clocks held back by {limit.replace('_', ' ')} (NVML) in {len(shares)} benchmark(s), up to "
            f"{max(shares):.0%} of the time: see clocks_held_{limit} in the JSON, `python -m suite health`"
            for limit, shares in sorted(seen.items())]


def _rate(info: dict) -> tuple[float, str] | None:
    for key, unit in RATE_KEYS:
        value = _num(info.get(key))
        if value is not None:
            return value, unit
    return None


def _generic(name: str, benches: list[dict]) -> list[str]:
    """Any family without a section of its own (or whose section finds none of its keys): each result's rate,
    else its median time, by the benchmark's parameter id."""
    rows: dict = {}
    for b in benches:
        label = str(b.get("param") or b.get("name") or "?")
        rate = _rate(_info(b))
        if rate is not None:
            rows[label] = {"result": f"{_cell(rate[0])} {rate[1]}"}
        elif _median(b) is not None:
            rows[label] = {"result": f"{format_time(_median(b))} per call"}
    if not rows:
        return []
    shown = dict(list(rows.items())[:GENERIC_MAX_ROWS])
    lines = grid(f"{name}: rate, or median time per call", shown, ["result"], "benchmark")
    if len(rows) > len(shown):
        lines.append(f"  ({len(rows) - len(shown)} more in the JSON / report)")
    return lines


def render(benchmarks: list[dict]) -> list[str]:
    """The summary lines for finished benchmarks (pytest-benchmark JSON entries with our extra_info)."""
    families = _by_family(benchmarks)
    lines: list[str] = []
    sections = [
        (
            "matmul",
            lambda b: _compute("matmul", b, lambda i: f"{i.get('device')} {_precision(i)}", _shape),
        ),
        (
            "ceiling",
            lambda b: _compute(
                "ceiling", b, lambda i: f"{i.get('device')}", lambda i: f"{_precision(i)} {_shape(i)}"
            ),
        ),
        (
            "conv",
            lambda b: _compute(
                "conv",
                b,
                lambda i: f"{i.get('device')} {_precision(i)} {i.get('layout')} {i.get('step')}",
                lambda i: f"{i.get('layer')}",
            ),
        ),
        ("model", _model),
        ("copy", _copy),
        ("placement", _placement),
        ("habits", _habits),
        ("collectives", _collectives),
    ]
    own = dict(sections)
    for name in [n for n, _ in sections] + sorted(set(families) - set(own)):
        benches = families.get(name)
        if not benches:
            continue
        part = own[name](benches) if name in own else []
        part = part or _generic(name, benches)
        if part:
            lines += part + [""]
    return lines + _stopping(benchmarks) + _held(benchmarks)


def shown_on_this_rank(env=os.environ) -> bool:
    """Whether this process prints the summary: under torchrun (`suite collectives`) every rank runs the session,
    and only rank 0 (which writes the results) prints it; a run without RANK always does."""
    return env.get("RANK", "0").strip() in ("", "0")


class Progress:
    """One line per long family while it runs: how many done, the family's ETA, and the run's."""

    def __init__(self, counts: dict[str, int], clock=time.monotonic) -> None:
        self.counts = counts
        self.done: dict[str, int] = defaultdict(int)
        self.spent: dict[str, float] = defaultdict(float)
        self.last: dict[str, float] = {}
        self.clock = clock

    def finished(self, family: str, seconds: float) -> str | None:
        """Count one finished benchmark of `family` that took `seconds`; a progress line when one is due."""
        total = self.counts.get(family, 0)
        self.done[family] += 1
        self.spent[family] += seconds
        if total < PROGRESS_MIN_BENCHMARKS:
            return None
        now = self.clock()
        done = self.done[family]
        if done < total and now - self.last.get(family, now - PROGRESS_INTERVAL_S - 1) < PROGRESS_INTERVAL_S:
            return None
        self.last[family] = now
        per = self.spent[family] / done
        left = sum(
            (self.counts[f] - self.done[f]) * (self.spent[f] / self.done[f] if self.done[f] else per)
            for f in self.counts
        )
        if done >= total:
            return f"[suite] {family}: {done}/{total} done in {format_duration(self.spent[family])}"
        return (
            f"[suite] {family}: {done}/{total} done, ETA {format_duration((total - done) * per)} "
            f"(whole run: about {format_duration(left)} left)"
        )
