"""The copy family's part of the tooling: its GPU-check step, its accuracy round and its evidence rows
(suite/tools)."""

from __future__ import annotations

from suite.cases.copy.measure import NAME, copies_per_call, issue_copies
from suite.tools.checkrow import ROUNDS, CheckRow, bench_s, judged, median, truth_s
from suite.tools.evidence import fmt
from suite.tools.paired import Pair, Target, event_seconds, one, span_seconds, timer_seconds
from suite.units import format_size

# --- GPU check ---------------------------------------------------------------------------------------------

# Large enough that launch and synchronisation costs vanish next to the copy (nvbandwidth uses 512 MiB).
CHECK_BYTES = 256 * 2**20
# Pinned and pageable both ways and the same-device copy; three of them against events.
STEP_ESTIMATE_S = truth_s(NAME, 5, 3, False)
# With two GPUs, the peer copies cuda:0->cuda:1 and cuda:0<->cuda:1 against events on both, and the pinned
# host copy both ways that the config's `directions: [uni, bi]` brings with them.
MULTI_GPU_S = ROUNDS * (3 * bench_s(NAME, False) + 2 * bench_s(NAME, False, overhead=False))
# The peer pair the check times (the quick step runs the other pairs of cuda:0 and cuda:1, unjudged).
PEER = ("cuda:0", "cuda:1")
# Its place in the check (suite.tools.gpu_check: lower first).
CHECK_ORDER = 20
# The dry run's stand-in for configs/quick.yaml's copy cases.
DRY_QUICK = {"sizes": ["4KiB"]}


def gpu_checks(ctx) -> list:
    """256 MiB pinned H2D and D2H and the same-device copy against CUDA events (alternating, same process);
    pinned faster than pageable both ways; with two GPUs, the peer copies of PEER one way and both ways against
    events on both GPUs (the dry run enumerates them on a fake node of two)."""
    gpu = ctx.device
    size = format_size(ctx.pick(CHECK_BYTES, 2**20))
    if ctx.dry_run:  # the CPU has no pinned memory: the host copy stands in for the three
        titles = {f"cpu->cpu-pageable-{size}": f"copy host {size} (dry run)"}
        pairs = ["cpu->cpu"]
    else:
        titles = {f"cpu->{gpu}-pinned-{size}": f"copy H2D pinned {size}",
                  f"{gpu}->cpu-pinned-{size}": f"copy D2H pinned {size}",
                  f"{gpu}->{gpu}-device-{size}": f"copy same-device {size}"}
        pairs = [f"cpu->{gpu}", f"{gpu}->cpu", f"{gpu}->{gpu}"]
    config = {"devices": list(dict.fromkeys(["cpu", gpu])), "cases": {"copy": {
        "sizes": [size], "memory": ["pinned", "pageable"], "non_blocking": [False], "directions": ["uni"],
        "pairs": pairs}}}
    peer_section = {**config["cases"]["copy"], "directions": ["uni", "bi"], "pairs": [*pairs, "->".join(PEER)]}
    peer = _peer_titles(format_size(CHECK_BYTES))
    dry_rows = []
    if ctx.dry_run:
        dry_rows = _dry_peer_rows(ctx, peer_section, peer)
    elif ctx.gpus >= 2:
        config = {"devices": list(dict.fromkeys([*config["devices"], *PEER])), "cases": {"copy": peer_section}}
        titles.update(peer)
    rows, seen = ctx.timing_truth(NAME, config, "benchmarks/test_copy.py", titles, _reference)
    rows += dry_rows
    for name, src, dst in (("H2D", "cpu", gpu), ("D2H", gpu, "cpu")):
        pinned, pageable = (seen.get(f"{src}->{dst}-{memory}-{size}") for memory in ("pinned", "pageable"))
        title = f"copy {name} {size}: pinned vs pageable"
        if pinned and pageable:
            fast = median([b["extra_info"]["gbps"] for b in pinned])
            slow = median([b["extra_info"]["gbps"] for b in pageable])
            rows.append(CheckRow(title, fast, slow, "GB/s", judged(ctx, fast > slow),
                                 "pinned must be faster"))
        else:
            rows.append(CheckRow(title, None, None, "GB/s", judged(ctx, False),
                                 "no pinned or no pageable result (the CPU has no pinned memory)"))
    return rows


def _peer_titles(size: str) -> dict[str, str]:
    a, b = PEER
    return {f"{a}->{b}-device-{size}": f"copy peer {a}->{b} {size} (events on both GPUs)",
            f"{a}<->{b}-device-non_blocking-{size}": f"copy peer {a}<->{b} {size} (events on both GPUs)"}


def _dry_peer_rows(ctx, section: dict, titles: dict[str, str]) -> list:
    """The dry run's peer rows: the GPU's peer config enumerated on a fake node of two GPUs (the CPU runs no
    peer copy), so a title that names no case fails here and not on the GPU."""
    from suite.devices import use_platform
    from suite.plan import NodePlatform

    section = {**section, "sizes": [format_size(CHECK_BYTES)], "pairs": ["->".join(PEER)]}
    with use_platform(NodePlatform(len(PEER))):
        ids = ctx.case_ids(NAME, ctx.write_config({"devices": list(PEER), "cases": {"copy": section}}))
    return [CheckRow(title, None, None, "ms", None if case_id in ids else False,
                     f"not judged: dry run ({case_id} enumerated on a fake node of two GPUs)" if case_id in ids
                     else f"{case_id} is not a case of the peer config ({', '.join(ids)})")
            for case_id, title in titles.items()]


def _reference(family: str, cfg, bench: dict) -> float:
    """Events on the case's GPU (paired.event_seconds); for a peer copy, events on both GPUs (peer_seconds)."""
    return (peer_seconds if bench["extra_info"].get("path") == "peer" else event_seconds)(family, cfg, bench)


def peer_seconds(family: str, cfg, bench: dict) -> float:
    """Seconds per call of the peer copy of `bench`, issued anew on a stream per GPU per direction (torch runs a
    peer copy on the source's current stream and joins the destination's: both hold the copy) and timed by
    CUDA events on all of those streams (paired.span_seconds) for as long as the suite's timed rounds lasted,
    as many copies per direction per call as the case issues."""
    import torch

    from suite.cases.buffers import buffer

    info = bench["extra_info"]
    src, dst, n = info["src"], info["dst"], info["size"]
    ends = [(src, dst), (dst, src)] if info["direction"] == "bi" else [(src, dst)]
    legs = [(buffer(a, n, False, data=True), buffer(b, n, False)) for a, b in ends]
    streams = [[torch.cuda.Stream(device=d) for d in (src, dst)] for _ in legs]
    call = issue_copies(legs, streams, copies_per_call(info))

    seconds = bench["stats"]["total"] * bench["stats"].get("iterations", 1)
    return span_seconds(call, [stream for leg in streams for stream in leg], seconds)


# --- accuracy (python -m suite accuracy) -------------------------------------------------------------------

# The CPU->CPU copy the accuracy round times (--quick: the machinery only).
ACCURACY_BYTES, QUICK_BYTES = 256 * 2**20, 2**20


def accuracy_round(runner, scale) -> list[Pair]:
    from suite.cases.buffers import buffer

    n = scale.pick(ACCURACY_BYTES, QUICK_BYTES)
    bench = one(runner.run(NAME, {"copy": {"sizes": [n], "cpu": {"sizes": [n]}}}), src="cpu", dst="cpu")
    src, dst = buffer("cpu", n), buffer("cpu", n, data=False)
    dst.copy_(src)  # first touch of dst's pages outside timing, as the suite's warm-up does
    ref = timer_seconds("dst.copy_(src)", {"src": src, "dst": dst}, scale.timer_min_run_s)
    return [Pair(NAME, f"{format_size(n)} CPU->CPU copy_", "s", "Timer", Target("within", 0.10),
                 bench["stats"]["median"], ref)]


# --- evidence (python -m suite.tools.evidence) -------------------------------------------------------------

# How the evidence rows name a copy's path.
HEADLINE_PATHS = {"h2d": "host → device", "d2h": "device → host", "local": "same device", "peer": "peer"}


def headline(results: list[tuple[dict, dict]]) -> list[tuple[str, str, str]]:
    """The GPU check's evidence rows (suite.tools.evidence): each path and memory kind at its largest size."""
    largest: dict[tuple, dict] = {}
    # Largest first (the first seen of equal sizes, as sorted keeps their order): the first of a key stays.
    for i in sorted((i for i, _ in results if i.get("gbps") is not None), key=lambda i: i["size"], reverse=True):
        largest.setdefault((i["path"], i["memory"], i.get("direction", "uni"), bool(i.get("non_blocking"))), i)
    rows = []
    for (path, memory, direction, non_blocking), i in sorted(largest.items()):
        what = f"copy {HEADLINE_PATHS.get(path, path)}{'' if memory == 'device' else ' ' + memory} "
        what += format_size(i["size"]) + ("" if direction == "uni" else f" ({direction})")
        what += ", non_blocking" if non_blocking else ""
        note = f"{fmt(i['traffic_gbps'])} GB/s read + written" if path == "local" and i.get("traffic_gbps") else ""
        rows.append((what, f"{fmt(i['gbps'])} GB/s", note))
    return rows
