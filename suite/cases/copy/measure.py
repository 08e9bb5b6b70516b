"""Copy matrix: every ordered device pair x size; pinned/pageable host memory, non_blocking, uni/bi."""

from __future__ import annotations

import ctypes
from typing import Callable

import torch

from suite.cases import Case, OwnFn, SkipCase, Work, make_case
from suite.cases.issuers import Issuers
from suite.cases.buffers import POISON, buffer, host_extra, host_side, on_streams, tie_to_streams, verify_copy
from suite.cases.common import require_host_bytes
from suite.devices import current_platform, synchronize
from suite.units import format_size

NAME = "copy"

# cudaDevAttrAsyncEngineCount in the CUDA runtime's cudaDeviceAttr enum: how many copy engines a GPU has.
_CUDA_ATTR_ASYNC_ENGINE_COUNT = 40
# Host<->device both ways at once overlaps only with a copy engine per direction.
BIDIRECTIONAL_ENGINES = 2
# A call of a copy whose one launch would take longer than its transfer (both ways at once, and one way between
# GPUs) holds a batch per direction: copies of at least this many bytes in all (~100 us on a 670 GB/s NVLink
# direction; one copy from this size on), so one launch of the batch (a graph's replay) is small against it ...
LEG_BATCH_BYTES = 64 * 2**20
# ... and at most this many copies (4 KiB: ~0.5 ms at 2 us a copy, against ~10 us to launch the graph).
MAX_LEG_COPIES = 256


def copy_engine_count(device: str) -> int | None:
    """How many copy engines a CUDA device has (cudaDeviceGetAttribute through the runtime torch loaded);
    None where that cannot be read (no CUDA runtime, another backend)."""
    if not device.startswith("cuda") or not torch.version.cuda:
        return None
    major = torch.version.cuda.split(".")[0]
    # CUDA 12's runtime is libcudart.so.12, CUDA 11's libcudart.so.11.0.
    for name in (f"libcudart.so.{major}", f"libcudart.so.{major}.0"):
        try:
            runtime = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return None
    try:
        value = ctypes.c_int()
        index = torch.device(device).index or 0
        status = runtime.cudaDeviceGetAttribute(ctypes.byref(value), _CUDA_ATTR_ASYNC_ENGINE_COUNT, index)
    except AttributeError:
        return None
    return int(value.value) if status == 0 else None


def path_of(src: str, dst: str) -> str:
    """host (CPU->CPU), h2d, d2h, local (within one accelerator) or peer (between accelerators)."""
    if src == dst == "cpu":
        return "host"
    if src == "cpu":
        return "h2d"
    if dst == "cpu":
        return "d2h"
    return "local" if src == dst else "peer"


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def _pairs(section, devices: list[str]) -> list[tuple[str, str]]:
    if section.pairs:
        return [tuple(p.split("->")) for p in _unique(section.pairs)]  # type: ignore[misc]
    return [(s, d) for s in devices for d in devices]


def link_kind(src: str, dst: str) -> tuple[bool | None, str | None]:
    """The link kind of a GPU pair as the device seam tells it: (peer access, link). Peer access: True with a
    direct path, False when torch stages the copy through host memory, None for a device this machine lacks.
    Link: 'NVLink' for any number of NVLinks (a GPU with a link down adds no kind, so a run after its repair
    selects the same cases), else the PCIe path as `nvidia-smi topo -m` names it ('PIX', 'SYS'); None where
    NVML cannot tell, and then NVLink and PCIe peer pairs count as one kind."""
    link = _link(src, dst)
    return _peer_access(src, dst), ("NVLink" if link and link.startswith("NV") else link)


def sweep_pairs(pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The ordered pairs that run the whole size sweep when `matrix_sizes` is set: where size tells something
    the large sizes do not. Host<->each device both ways and the host copy (each GPU's host link differs:
    NUMA node, PCIe switch); one same-device copy (the first: a node's GPUs are alike); one peer pair per link
    kind, both ways (the first of each kind in pair order). The other pairs run matrix_sizes only."""
    chosen: set[tuple[str, str]] = set()
    local_done = False
    kinds_done: set = set()
    listed = set(pairs)
    for src, dst in pairs:
        path = path_of(src, dst)
        if path in ("host", "h2d", "d2h"):
            chosen.add((src, dst))
        elif path == "local" and not local_done:
            chosen.add((src, dst))
            local_done = True
        elif path == "peer" and link_kind(src, dst) not in kinds_done:
            both = [(src, dst)] + ([(dst, src)] if (dst, src) in listed else [])
            chosen.update(both)
            kinds_done.update(link_kind(a, b) for a, b in both)
    return chosen


def _case(src: str, dst: str, size: int, memory: str, non_blocking: bool, direction: str) -> Case:
    path = path_of(src, dst)
    arrow = "<->" if direction == "bi" else "->"
    parts = [f"{src}{arrow}{dst}", memory] + (["non_blocking"] if non_blocking else []) + [format_size(size)]
    params = {
        "src": src,
        "dst": dst,
        "path": path,
        "memory": memory,
        "non_blocking": non_blocking,
        "direction": direction,
        "size": size,
    }
    if path == "peer":
        # Recorded with every peer result: without peer access, torch stages the copy through host memory.
        params["peer_access"] = _peer_access(src, dst)
        # And what joins them (NVLink or the PCIe path), where NVML tells: pairs over different links differ.
        params["link"] = _link(src, dst)
    return make_case(NAME, tuple(_unique((src, dst))), parts, **params)


def _peer_access(src: str, dst: str) -> bool | None:
    from suite.devices import missing_reason

    if missing_reason(src) or missing_reason(dst):
        return None  # the plugin skips the case; asking torch about a missing device would raise
    return current_platform().can_access_peer(torch.device(src), torch.device(dst))


def _link(src: str, dst: str) -> str | None:
    from suite.devices import missing_reason

    if missing_reason(src) or missing_reason(dst):
        return None
    return current_platform().link(torch.device(src), torch.device(dst))


def _sizes(s, swept: bool) -> list[int]:
    """The sizes a pair runs: the sweep pairs both lists (in size order), the rest the matrix only."""
    sizes = _unique(s.sizes)
    if s.matrix_sizes is None:
        return sizes
    return sorted({*sizes, *s.matrix_sizes}) if swept else _unique(s.matrix_sizes)


def _pair_cases(s, src: str, dst: str, path: str, sizes: list[int], bi: bool) -> list[Case]:
    """One pair's cases: one way in each kind of memory, then both directions at once where `bi`."""
    if path == "host":
        return [_case(src, dst, n, "pageable", False, "uni") for n in sizes]
    if path in ("local", "peer"):
        kinds = [("device", False)]
    else:
        kinds = [(m, nb) for m in _unique(s.memory) for nb in _unique(s.non_blocking)]
    cases = []
    if "uni" in s.directions:
        cases += [_case(src, dst, n, m, nb, "uni") for n in sizes for (m, nb) in kinds]
    # Pinned host memory only, since a pageable copy is staged by the host and cannot overlap with the other
    # direction.
    memory = "device" if path == "peer" else "pinned"
    if bi and (memory == "device" or "pinned" in s.memory):
        cases += [_case(src, dst, n, memory, True, "bi") for n in sizes]
    return cases


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.copy
    if not section.enabled:
        return []
    cases: list[Case] = []
    bi_done: set[frozenset] = set()
    pairs = _pairs(section, devices)
    swept = sweep_pairs(pairs)
    for src, dst in pairs:
        path = path_of(src, dst)
        s = section.for_device("cpu" if path == "host" else dst if src == "cpu" else src)
        # Both directions at once, once per unordered pair of distinct devices.
        pair = frozenset((src, dst))
        bi = "bi" in s.directions and path not in ("local", "host") and pair not in bi_done
        if bi:
            bi_done.add(pair)
        cases += _pair_cases(s, src, dst, path, _sizes(s, (src, dst) in swept), bi)
    return cases


def skip_reason(case: Case) -> str | None:
    """Why this case cannot run on this machine (its devices exist), or None. Asks nothing of real devices
    beyond the platform seam, so it can be tested with a fake machine."""
    p = case.info
    accel = p["dst"] if p["src"] == "cpu" else p["src"]
    if p["memory"] == "pinned" and not current_platform().supports_pinned_memory():
        return (
            f"pinned host memory needs a CUDA or XPU device (torch.Tensor.pin_memory); not available for "
            f"{accel} with torch {torch.__version__}"
        )
    if p["direction"] == "bi":
        others = [d for d in (p["src"], p["dst"]) if d != "cpu" and not d.startswith("cuda")]
        if others:
            return f"bidirectional copies use CUDA streams; {others[0]} is not a CUDA device"
        if p["path"] in ("h2d", "d2h"):
            engines = copy_engine_count(accel)
            if engines is not None and engines < BIDIRECTIONAL_ENGINES:
                return (
                    f"host<->{accel} both ways at once needs {BIDIRECTIONAL_ENGINES} copy engines; {accel} "
                    f"has {engines}, so the directions would run one after the other"
                )
    return None


def copies_per_leg(size: int) -> int:
    """Copies each direction of a batched call issues (copies_per_call) at `size` bytes a copy."""
    return max(1, min(MAX_LEG_COPIES, -(-LEG_BATCH_BYTES // size)))


def copies_per_call(params: dict) -> int:
    """Copies each direction issues per call: a batch both ways at once and one way between GPUs (where one
    launch per copy would be timed, not the link), else one."""
    batched = params["direction"] == "bi" or params["path"] == "peer"
    return copies_per_leg(params["size"]) if batched else 1


def moved_bytes(case: Case) -> int:
    """Bytes one copy moves, each counted once (nvbandwidth; bandwidthTest's host<->device tests, though its
    device-to-device test counts 2N, as traffic_bytes does); 'bi' moves the size each way, and a call of it
    copies_per_call times that."""
    return case.info["size"] * (2 if case.info["direction"] == "bi" else 1)


def traffic_bytes(case: Case) -> int | None:
    """Memory traffic of a same-device copy (each byte read and written); None for a copy between devices."""
    return 2 * case.info["size"] if case.info["path"] in ("host", "local") else None


def host_bytes(case: Case) -> int:
    """Host memory the case's buffers take: the size for each end on the host, per direction."""
    p = case.info
    ends = (p["src"] == "cpu") + (p["dst"] == "cpu")
    return p["size"] * ends * (2 if p["direction"] == "bi" else 1)


def issue_copies(legs: list, streams: list, copies: int) -> Callable[[], None]:
    """Each direction's `copies` copies (b <- a) on its streams (one per device: torch runs a device copy on the
    source device's current stream and joins the destination's), one direction after the other."""
    def run() -> None:
        for (a, b), leg_streams in zip(legs, streams):
            with on_streams(leg_streams):
                for _ in range(copies):
                    b.copy_(a, non_blocking=True)
    return run


def _graphs_for(case: Case) -> bool:
    """Whether the case's batch is captured into a CUDA graph: a batched copy (copies_per_call) on CUDA, not
    ROCm, from pinned or device memory (a pageable copy waits for the host and cannot be captured)."""
    p = case.info
    return ((p["direction"] == "bi" or p["path"] == "peer") and p["memory"] != "pageable"
            and all(d == "cpu" or d.startswith("cuda") for d in case.devices)
            and not torch.version.hip)


def _captured(issue: Callable[[], None], streams: list, device: str) -> Callable[[], None] | None:
    """`issue` captured once into a CUDA graph, and its replay: one launch for the whole batch, the directions'
    streams forked from the capture stream and joined back to it, so both directions run at once on the
    device. None where this torch has no CUDA graphs or the driver refuses the capture (a peer copy it
    cannot capture as a memcpy node)."""
    side = [stream for leg in streams for stream in leg]
    # Run once uncaptured first: the first copy between two GPUs enables peer access, which a capture may not.
    issue()
    try:
        graph = torch.cuda.CUDAGraph()  # a torch without CUDA raises RuntimeError here
        capture = torch.cuda.Stream(device=device)
        with torch.cuda.graph(graph, stream=capture):
            for stream in side:
                stream.wait_stream(capture)
            issue()
            for stream in side:
                capture.wait_stream(stream)
    except RuntimeError:  # torch's CUDA errors (AcceleratorError is one); the calls path stands in
        return None
    return graph.replay


def _timed_call(case: Case, legs: list, copies: int) -> tuple[Callable[[], object], str | None]:
    """The call timed, and how it issues a batch of copies: 'graph' (one replay launches them all) or 'calls'
    (a launch per copy: no CUDA graphs here, or the capture failed); None for an unbatched copy."""
    p = case.info
    graphs, bi = _graphs_for(case), p["direction"] == "bi"
    devices = [d for d in case.devices if d != "cpu"]
    if bi or graphs:
        # Streams of its own per device per direction (issue_copies), which the buffers are used on.
        streams = [[torch.cuda.Stream(device=d) for d in devices] for _ in legs]
        for leg, leg_streams in zip(legs, streams):
            tie_to_streams(leg, leg_streams)
        # A launch per copy timed the host (4 KiB both ways: 35.8 us on an H200, against 4-6 us one way).
        replay = _captured(issue_copies(legs, streams, copies), streams, devices[0]) if graphs else None
        if replay:
            return replay, "graph"
        if bi:
            # A thread per direction, each entering its streams once per batch: issuing one direction's batch
            # after the other would start the second late.
            return Issuers([issue_copies([leg], [s], copies) for leg, s in zip(legs, streams)]), "calls"
    ((a, b),) = legs

    def run() -> None:
        for _ in range(copies):
            b.copy_(a, non_blocking=p["non_blocking"])
    return run, "calls" if p["path"] == "peer" else None


def build(case: Case, config) -> Work:
    reason = skip_reason(case)
    if reason:
        raise SkipCase(reason)
    require_host_bytes(host_bytes(case), case.id)
    p = case.info
    src, dst, n = p["src"], p["dst"], p["size"]
    pinned = p["memory"] == "pinned"
    # (source, destination) buffers per direction; 'bi' adds dst->src beside src->dst.
    legs = [(buffer(src, n, pinned, data=True), buffer(dst, n, pinned))]
    if p["direction"] == "bi":
        legs.append((buffer(dst, n, pinned, data=True), buffer(src, n, pinned)))
    copies = copies_per_call(p)
    synchronize(*case.devices)  # side streams must not start before the buffers are filled ...
    run, issued = _timed_call(case, legs, copies)
    synchronize(*case.devices)  # ... nor a copy before the capture end after the check's poison fill
    own = OwnFn()

    def check() -> None:
        for _, b in legs:
            b.fill_(POISON)
        synchronize(*case.devices)
        own()  # the timed call itself: a graph replays into the buffers it captured
        synchronize(*case.devices)
        for a, b in legs:
            verify_copy(b, a, f"copy {case.id}")

    extra: dict = host_extra()
    if p["direction"] == "bi" and p["path"] != "peer":
        extra["copy_engines"] = copy_engine_count(src if src != "cpu" else dst)
    if issued:
        extra["issue"] = issued
    return own.bind(Work(
        fn=run,
        check=check,
        bytes=copies * moved_bytes(case),
        traffic_bytes=traffic_bytes(case),
        extra=extra,
    ))


__all__ = [
    "NAME",
    "build",
    "copies_per_call",
    "enumerate_cases",
    "host_bytes",
    "host_side",
    "issue_copies",
    "link_kind",
    "moved_bytes",
    "skip_reason",
    "sweep_pairs",
    "traffic_bytes",
]
