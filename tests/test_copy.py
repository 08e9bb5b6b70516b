"""The copy matrix: pair enumeration on fake machines, skip reasons, byte accounting, verification, config."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from suite.cases import SkipCase, buffers
from suite.cases.copy import measure as copy_case
from suite.config import load_config, parse_config
from suite.devices import memory, missing_reason, use_platform
from suite.errors import UserError
from suite.units import gbps
from tests.fakes import FakePlatform

SIZES = ["4KiB", "1MiB"]


class PinnedFakePlatform(FakePlatform):
    """A fake CUDA machine whose host memory can be pinned (as a real CUDA machine's can)."""

    def supports_pinned_memory(self) -> bool:
        return True


def config(**copy) -> object:
    return parse_config({"cases": {"copy": {"sizes": SIZES, **copy}}}, "test.yaml")


def cases_of(gpus: int, peer=True, devices: list[str] | None = None, links=None, **copy) -> list:
    with use_platform(FakePlatform(gpus=gpus, peer=peer, links=links)):
        names = devices if devices is not None else ["cpu", *(f"cuda:{i}" for i in range(gpus))]
        return copy_case.enumerate_cases(config(**copy), names)


def by_path(cases) -> dict[str, int]:
    out: dict[str, int] = {}
    for case in cases:
        key = f"{case.info['path']}-{case.info['direction']}"
        out[key] = out.get(key, 0) + 1
    return out


# --- enumeration -------------------------------------------------------------------------------------------


def test_no_gpu_gives_host_copies_only():
    cases = cases_of(0)
    assert [c.id for c in cases] == ["cpu->cpu-pageable-4KiB", "cpu->cpu-pageable-1MiB"]
    assert all(c.devices == ("cpu",) and c.info["memory"] == "pageable" for c in cases)


def test_one_gpu_matrix_and_ids():
    cases = cases_of(1)
    ids = [c.id for c in cases]
    n = len(SIZES)
    # host; h2d and d2h x (pinned, pageable) x non_blocking (off, on); local; bi once for the pair (pinned).
    assert by_path(cases) == {"host-uni": n, "h2d-uni": 4 * n, "d2h-uni": 4 * n, "h2d-bi": n, "local-uni": n}
    assert len(set(ids)) == len(ids)
    for expected in (
        "cpu->cuda:0-pinned-1MiB",
        "cpu->cuda:0-pageable-non_blocking-4KiB",
        "cuda:0->cpu-pinned-non_blocking-1MiB",
        "cuda:0->cuda:0-device-4KiB",
        "cpu<->cuda:0-pinned-non_blocking-1MiB",
    ):
        assert expected in ids
    local = next(c for c in cases if c.info["path"] == "local")
    assert (
        local.devices == ("cuda:0",)
        and local.info["memory"] == "device"
        and local.info["non_blocking"] is False
    )
    h2d = next(c for c in cases if c.id == "cpu->cuda:0-pinned-1MiB")
    assert h2d.devices == ("cpu", "cuda:0") and h2d.info["size"] == 2**20


@pytest.mark.parametrize("peer", [True, False])
def test_two_gpus_record_peer_access(peer):
    cases = cases_of(2, peer=peer)
    peers = [c for c in cases if c.info["path"] == "peer"]
    n = len(SIZES)
    assert by_path(peers) == {"peer-uni": 2 * n, "peer-bi": n}
    assert all(c.info["peer_access"] is peer for c in peers)
    assert all("peer_access" not in c.info for c in cases if c.info["path"] != "peer")
    bi = [c for c in peers if c.info["direction"] == "bi"]
    assert {c.id for c in bi} == {
        "cuda:0<->cuda:1-device-non_blocking-4KiB",
        "cuda:0<->cuda:1-device-non_blocking-1MiB",
    }


def test_four_gpus_partial_peer_access():
    cases = cases_of(4, peer={(0, 1), (1, 0), (2, 3)})
    peers = [c for c in cases if c.info["path"] == "peer" and c.info["direction"] == "uni"]
    assert len(peers) == 12 * len(SIZES)  # 4 x 3 ordered pairs
    access = {(c.info["src"], c.info["dst"]): c.info["peer_access"] for c in peers}
    assert access[("cuda:0", "cuda:1")] and access[("cuda:1", "cuda:0")] and access[("cuda:2", "cuda:3")]
    assert not access[("cuda:3", "cuda:2")] and not access[("cuda:0", "cuda:3")]
    # bi: once per unordered pair of distinct devices with an accelerator: 4 host<->gpu + 6 gpu pairs.
    assert sum(c.info["direction"] == "bi" for c in cases) == 10 * len(SIZES)


def test_missing_device_is_enumerated_and_skipped_with_reason():
    cases = cases_of(0, devices=["cpu", "cuda:1"])
    assert any(c.id == "cpu->cuda:1-pinned-4KiB" for c in cases)
    peerless = [c for c in cases if "cuda:1" in c.devices]
    assert peerless
    with use_platform(FakePlatform(gpus=0)):
        reasons = {missing_reason(d) for c in peerless for d in c.devices} - {None}
    assert reasons and all("cuda:1 is not available on this machine" in r for r in reasons)


def test_pairs_option_restricts_and_keeps_missing_devices():
    cases = cases_of(
        1,
        pairs=["cpu->cuda:0", "cuda:0->cuda:7"],
        memory=["pinned"],
        non_blocking=[False],
        directions=["uni"],
    )
    assert [c.id for c in cases] == [
        "cpu->cuda:0-pinned-4KiB",
        "cpu->cuda:0-pinned-1MiB",
        "cuda:0->cuda:7-device-4KiB",
        "cuda:0->cuda:7-device-1MiB",
    ]
    assert cases[-1].info["peer_access"] is None  # not asked of a device that does not exist
    with use_platform(FakePlatform(gpus=1)):
        assert "cuda:7 is not available" in missing_reason("cuda:7")


def test_cpu_override_applies_to_host_copies_only():
    cfg = parse_config({"cases": {"copy": {"sizes": ["64MiB"], "cpu": {"sizes": ["4KiB"]}}}})
    with use_platform(FakePlatform(gpus=1)):
        cases = copy_case.enumerate_cases(cfg, ["cpu", "cuda:0"])
    sizes = {c.info["path"]: c.info["size"] for c in cases}
    assert sizes == {"host": 4096, "h2d": 64 * 2**20, "d2h": 64 * 2**20, "local": 64 * 2**20}


def test_disabled_section_has_no_cases():
    assert cases_of(1, enabled=False) == []


# --- sweep where size matters, the matrix at large sizes (matrix_sizes) ----------------------------------

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB = 2**10, 2**20


def _sizes_by_pair(cases, direction="uni") -> dict[tuple[str, str], set[int]]:
    out: dict[tuple[str, str], set[int]] = {}
    for c in cases:
        if c.info["direction"] == direction:
            out.setdefault((c.info["src"], c.info["dst"]), set()).add(c.info["size"])
    return out


def _node_cases(path: str, gpus: int, peer=True) -> list:
    cfg = load_config(ROOT / path)
    with use_platform(FakePlatform(gpus=gpus, peer=peer)):
        return copy_case.enumerate_cases(cfg, ["cpu", *(f"cuda:{i}" for i in range(gpus))])


def test_default_config_on_8_gpus_sweeps_the_chosen_pairs_and_runs_the_matrix_at_large_sizes():
    cfg = load_config(ROOT / "configs/default.yaml").cases.copy
    sweep, matrix = set(cfg.sizes), set(cfg.matrix_sizes)
    assert len(sweep) >= 5 and matrix and max(matrix) == max(sweep) and min(matrix) >= 64 * MiB
    cases = _node_cases("configs/default.yaml", 8)
    uni, bi = _sizes_by_pair(cases), _sizes_by_pair(cases, "bi")
    gpus = [f"cuda:{i}" for i in range(8)]
    assert len(uni) == 1 + 2 * 8 + 8 + 8 * 7  # every ordered pair still: host copy, host<->GPU, local, peer
    for g in gpus:  # host<->each GPU: the whole sweep both ways, pinned and pageable, and both ways at once
        for pair in (("cpu", g), (g, "cpu")):
            assert uni[pair] == sweep | matrix
            assert {c.info["memory"] for c in cases if (c.info["src"], c.info["dst"]) == pair} == {
                "pinned", "pageable"}
        assert bi[("cpu", g)] == sweep | matrix
    # One same-device copy and one peer pair (every pair has peer access here: one link kind) get the sweep.
    swept = {pair for pair, sizes in uni.items() if sizes == sweep | matrix and "cpu" not in pair}
    assert swept == {("cuda:0", "cuda:0"), ("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")}
    assert bi[("cuda:0", "cuda:1")] == sweep | matrix
    # Every other GPU pair: the src x dst matrix at the large sizes only, each way and both ways at once.
    rest = {pair: sizes for pair, sizes in uni.items() if "cpu" not in pair and pair not in swept}
    assert len(rest) == 8 * 8 - 3 and all(sizes == matrix for sizes in rest.values())
    assert all(bi[pair] == matrix for pair in bi if "cpu" not in pair and pair != ("cuda:0", "cuda:1"))
    assert uni[("cpu", "cpu")] == set(cfg.cpu.sizes) | set(cfg.cpu.matrix_sizes)
    ids = {c.id for c in cases}
    assert len(ids) == len(cases)
    # The ids are those every-pair-every-size gives: only which cases are selected changed.
    every_size = {**cfg.model_dump(exclude={"matrix_sizes", "cpu", "timing"}),
                  "sizes": sorted(sweep | matrix)}
    with use_platform(FakePlatform(gpus=8)):
        everything = copy_case.enumerate_cases(parse_config({"cases": {"copy": every_size}}), ["cpu", *gpus])
    assert ids < {c.id for c in everything}
    for expected in ("cpu->cuda:7-pageable-4KiB", "cuda:7->cpu-pinned-64MiB", "cuda:0->cuda:1-device-16KiB",
                     "cuda:3->cuda:5-device-64MiB", "cuda:2<->cuda:6-device-non_blocking-64MiB",
                     "cuda:0->cuda:0-device-4KiB", "cuda:4->cuda:4-device-64MiB"):
        assert expected in ids
    assert "cuda:3->cuda:5-device-4KiB" not in ids and "cuda:4->cuda:4-device-4KiB" not in ids
    assert not any(i.endswith("256MiB") for i in ids)  # the default sweeps to 64 MiB; full.yaml adds 256 MiB


def _peer_pairs_swept(uni: dict) -> set:
    """The GPU pairs (src != dst) that ran both sizes of a two-size sweep."""
    return {pair for pair, sizes in uni.items()
            if len(sizes) == 2 and "cpu" not in pair and pair[0] != pair[1]}


def test_one_peer_pair_per_link_kind_gets_the_sweep():
    # cuda:0<->cuda:1 and cuda:2<->cuda:3 have peer access; the pairs across them are staged through the host.
    access = {(0, 1), (1, 0), (2, 3), (3, 2)}
    cases = cases_of(4, peer=access, sizes=["4KiB", "1MiB"], matrix_sizes=["1MiB"])
    uni = _sizes_by_pair(cases)
    peer_swept = _peer_pairs_swept(uni)
    # The first pair of each kind, both ways: cuda:0<->cuda:1 (peer access), cuda:0<->cuda:2 (none).
    assert peer_swept == {("cuda:0", "cuda:1"), ("cuda:1", "cuda:0"),
                          ("cuda:0", "cuda:2"), ("cuda:2", "cuda:0")}
    assert uni[("cuda:2", "cuda:3")] == {MiB} and uni[("cuda:1", "cuda:3")] == {MiB}
    kinds = {c.info["peer_access"] for c in cases if (c.info["src"], c.info["dst"]) in peer_swept}
    assert kinds == {True, False}


def test_one_peer_pair_per_link_gets_the_sweep_where_nvml_tells_the_links():
    # Four GPUs with peer access everywhere: 0<->1 and 2<->3 over NVLink bridges, the rest across the sockets.
    pairs = [(i, j) for i in range(4) for j in range(4) if i != j]
    links = {(i, j): "NV4" if {i, j} in ({0, 1}, {2, 3}) else "SYS" for i, j in pairs}
    cases = cases_of(4, links=links, sizes=["4KiB", "1MiB"], matrix_sizes=["1MiB"])
    assert _peer_pairs_swept(_sizes_by_pair(cases)) == {("cuda:0", "cuda:1"), ("cuda:1", "cuda:0"),
                          ("cuda:0", "cuda:2"), ("cuda:2", "cuda:0")}
    peer = [c for c in cases if c.info["path"] == "peer"]
    assert all(c.info["link"] == links[(int(c.info["src"][-1]), int(c.info["dst"][-1]))] for c in peer)
    # The link is a figure of the machine, not of the benchmark: the ids are those every pair at every size
    # has without NVML.
    assert {c.id for c in cases_of(4, sizes=["4KiB", "1MiB"])} >= {c.id for c in peer}
    assert all(c.info["link"] is None for c in cases_of(2, sizes=["4KiB"]) if c.info["path"] == "peer")


def test_pairs_option_and_matrix_sizes_together():
    cases = cases_of(2, pairs=["cuda:0->cuda:1", "cuda:1->cuda:1", "cuda:0->cuda:0", "cpu->cuda:1"],
                     matrix_sizes=["1MiB", "64MiB"], directions=["uni"], memory=["pinned"],
                     non_blocking=[False])
    assert _sizes_by_pair(cases) == {
        ("cuda:0", "cuda:1"): {4 * KiB, MiB, 64 * MiB},  # the only peer pair listed: the sweep, one way
        ("cuda:1", "cuda:1"): {4 * KiB, MiB, 64 * MiB},  # the first same-device pair listed
        ("cuda:0", "cuda:0"): {MiB, 64 * MiB},
        ("cpu", "cuda:1"): {4 * KiB, MiB, 64 * MiB},
    }
    # The sweep pairs run the sizes in size order whatever order the lists give.
    assert [c.info["size"] for c in cases if c.info["src"] == "cpu"] == [4 * KiB, MiB, 64 * MiB]


def test_without_matrix_sizes_every_pair_runs_every_size_as_full_yaml_does():
    full = load_config(ROOT / "configs/full.yaml").cases.copy
    assert full.matrix_sizes is None
    cases = _node_cases("configs/full.yaml", 8)
    uni = _sizes_by_pair(cases)
    assert len(uni) == 1 + 2 * 8 + 8 + 8 * 7
    assert all(sizes == set(full.sizes) for pair, sizes in uni.items() if pair != ("cpu", "cpu"))
    assert all(sizes == set(full.sizes) for pair, sizes in _sizes_by_pair(cases, "bi").items())
    assert len(cases) > 2 * len(_node_cases("configs/default.yaml", 8))


# --- skip reasons -------------------------------------------------------------------------------------------


def test_pinned_needs_an_accelerator_that_can_pin():
    case = next(c for c in cases_of(1) if c.info["memory"] == "pinned")
    with use_platform(FakePlatform(gpus=1)):
        reason = copy_case.skip_reason(case)
        with pytest.raises(SkipCase, match="pinned host memory needs a CUDA or XPU device"):
            copy_case.build(case, config())
    assert "pinned host memory" in reason
    with use_platform(PinnedFakePlatform(gpus=1)):
        assert copy_case.skip_reason(case) is None


def test_bidirectional_needs_two_copy_engines(monkeypatch):
    bi = next(c for c in cases_of(1) if c.info["direction"] == "bi")
    with use_platform(PinnedFakePlatform(gpus=1)):
        monkeypatch.setattr(copy_case, "copy_engine_count", lambda device: 1)
        assert "needs 2 copy engines; cuda:0 has 1" in copy_case.skip_reason(bi)
        monkeypatch.setattr(copy_case, "copy_engine_count", lambda device: 2)
        assert copy_case.skip_reason(bi) is None
        monkeypatch.setattr(copy_case, "copy_engine_count", lambda device: None)  # unknown: run and record
        assert copy_case.skip_reason(bi) is None


def test_bidirectional_on_a_non_cuda_device_is_skipped():
    with use_platform(FakePlatform(gpus=0)):
        cases = copy_case.enumerate_cases(config(memory=["pageable"]), ["cpu", "mps"])
    assert not any(
        c.info["direction"] == "bi" for c in cases
    )  # pageable only: no overlap possible, no bi case
    with use_platform(PinnedFakePlatform(gpus=0)):
        cases = copy_case.enumerate_cases(config(), ["cpu", "mps"])
        (bi, *_) = [c for c in cases if c.info["direction"] == "bi"]
        assert copy_case.skip_reason(bi) == "bidirectional copies use CUDA streams; mps is not a CUDA device"


def test_copy_engine_count_is_none_off_cuda():
    assert copy_case.copy_engine_count("cpu") is None
    assert copy_case.copy_engine_count("mps") is None


# --- bytes and units ------------------------------------------------------------------------------------------


def test_bytes_counted_once_and_traffic_kept_separate():
    cases = {c.id: c for c in cases_of(2)}
    mib = 2**20
    assert copy_case.moved_bytes(cases["cpu->cuda:0-pinned-1MiB"]) == mib
    assert copy_case.traffic_bytes(cases["cpu->cuda:0-pinned-1MiB"]) is None
    assert copy_case.moved_bytes(cases["cuda:0->cuda:1-device-1MiB"]) == mib
    assert copy_case.traffic_bytes(cases["cuda:0->cuda:1-device-1MiB"]) is None
    assert copy_case.moved_bytes(cases["cuda:1->cuda:1-device-1MiB"]) == mib
    assert copy_case.traffic_bytes(cases["cuda:1->cuda:1-device-1MiB"]) == 2 * mib
    assert copy_case.moved_bytes(cases["cpu->cpu-pageable-1MiB"]) == mib
    assert copy_case.traffic_bytes(cases["cpu->cpu-pageable-1MiB"]) == 2 * mib
    assert copy_case.moved_bytes(cases["cpu<->cuda:0-pinned-non_blocking-1MiB"]) == 2 * mib
    assert copy_case.moved_bytes(cases["cuda:0<->cuda:1-device-non_blocking-1MiB"]) == 2 * mib


def test_gbps_is_decimal_bytes_per_second():
    assert gbps(2**30, 0.5) == pytest.approx(2 * 2**30 / 1e9)
    assert gbps(4096, 1e-6) == pytest.approx(4.096)


def test_host_copy_build_counts():
    case = cases_of(0)[1]
    work = copy_case.build(case, config())
    assert (work.bytes, work.traffic_bytes) == (2**20, 2 * 2**20)


# --- data and verification ------------------------------------------------------------------------------------


def test_pattern_has_no_zero_byte_and_is_reproducible():
    data = buffers.pattern_bytes(3 * 2**20 + 3)
    assert data.numel() == 3 * 2**20 + 3 and data.dtype == torch.uint8
    assert int((data == 0).sum()) == 0
    assert torch.equal(data, buffers.pattern_bytes(3 * 2**20 + 3))
    assert not torch.equal(data[: 2**20], data[2**20 : 2 * 2**20])  # no period at the chunk size
    assert len(torch.unique(data)) > 100


def test_host_copy_check_passes_and_catches_a_copy_that_did_nothing():
    case = cases_of(0)[1]
    work = copy_case.build(case, config())
    work.check()
    work.fn = lambda: None
    with pytest.raises(
        AssertionError, match=r"1048576 of 1048576 bytes differ from the source \(first at byte 0\)"
    ):
        work.check()


def test_check_catches_a_partial_copy(monkeypatch):
    work = copy_case.build(cases_of(0)[0], config())
    real_copy = torch.Tensor.copy_

    def copy_all_but_last_byte(self, src, non_blocking=False):
        return real_copy(self[:-1], src[:-1], non_blocking=non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_all_but_last_byte)
    with pytest.raises(
        AssertionError, match=r"1 of 4096 bytes differ from the source \(first at byte 4095\)"
    ):
        work.check()


class RecordedGraph:
    """torch.cuda.CUDAGraph on the CPU: the copies made inside `recording(graph)` are kept, and replayed."""

    def __init__(self) -> None:
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []

    def replay(self) -> None:
        for dst, src in self.copies:
            REAL_COPY(dst, src)


REAL_COPY = torch.Tensor.copy_


@contextlib.contextmanager
def recording(graph: RecordedGraph, stream=None):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "copy_", lambda dst, src, non_blocking=False: graph.copies.append((dst, src)))
        yield


def gpu_as_cpu(monkeypatch) -> list[torch.Tensor]:
    """The GPU is the CPU in disguise: its buffers (returned as made, in order), streams and synchronisation."""
    real_buffer = copy_case.buffer
    made: list[torch.Tensor] = []
    monkeypatch.setattr(copy_case, "buffer", lambda device, n, pinned=False, data=False: made.append(real_buffer(
        "cpu", n, False, data)) or made[-1])
    monkeypatch.setattr(copy_case, "synchronize", lambda *devices: None)
    monkeypatch.setattr(copy_case, "on_streams", lambda streams: contextlib.nullcontext())
    monkeypatch.setattr(copy_case.torch.cuda, "Stream", lambda device: SimpleNamespace(
        wait_stream=lambda other: None), raising=False)
    return made


@pytest.mark.parametrize("memory", ["pageable", "pinned"])
def test_a_bidirectional_copy_checks_both_directions(monkeypatch, memory):
    # Bidirectional copies run only on CUDA, so the CPU tests never built one: a check of the first direction
    # alone passed every test. Here the GPU is the CPU in disguise (its buffers, streams, graphs and
    # synchronisation stand-ins), and the second direction's copy does nothing. Pinned memory: the timed call
    # replays a graph, and the check replays that same graph; pageable memory cannot be captured: a thread per
    # direction launches each copy.
    made = gpu_as_cpu(monkeypatch)
    graphs: list[RecordedGraph] = []
    monkeypatch.setattr(copy_case, "copy_engine_count", lambda device: 2)
    monkeypatch.setattr(copy_case.torch.cuda, "CUDAGraph", lambda: graphs.append(RecordedGraph()) or graphs[-1],
                        raising=False)
    monkeypatch.setattr(copy_case.torch.cuda, "graph", recording, raising=False)
    with use_platform(PinnedFakePlatform(gpus=1)):
        case = copy_case._case("cpu", "cuda:0", 4096, memory, False, "bi")
        work = copy_case.build(case, config())
    assert work.extra["issue"] == ("graph" if memory == "pinned" else "calls")
    assert len(graphs) == (memory == "pinned")
    work.check()  # both directions copied
    # The second direction (built last: made[3] <- made[2]) copies nothing, however many copies a call makes.
    if graphs:
        graphs[0].copies = [(dst, src) for dst, src in graphs[0].copies if dst is not made[3]]
    else:
        def only_the_first_direction(self, src, non_blocking=False):
            return self if self is made[3] else REAL_COPY(self, src, non_blocking=non_blocking)

        monkeypatch.setattr(torch.Tensor, "copy_", only_the_first_direction)
    with pytest.raises(AssertionError, match=r"4096 of 4096 bytes differ from the source"):
        work.check()


def test_a_refused_capture_falls_back_to_a_launch_per_copy(monkeypatch):
    # A driver that cannot capture the copies (a peer copy it cannot make a memcpy node of): the per-call path
    # times them, says so, and its check still sees every byte.
    gpu_as_cpu(monkeypatch)

    def refused(graph, stream=None):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(copy_case.torch.cuda, "CUDAGraph", RecordedGraph, raising=False)
    monkeypatch.setattr(copy_case.torch.cuda, "graph", refused, raising=False)
    with use_platform(FakePlatform(gpus=2)):
        case = copy_case._case("cuda:0", "cuda:1", 4096, "device", False, "uni")
        work = copy_case.build(case, config())
    assert work.extra["issue"] == "calls"
    assert work.bytes == copy_case.copies_per_call(case.info) * 4096 == copy_case.MAX_LEG_COPIES * 4096
    work.check()


def test_verify_copy_compares_shapes_and_every_byte():
    src = buffers.pattern_bytes(1001)
    buffers.verify_copy(src.clone(), src, "ok")
    wrong = src.clone()
    wrong[500] ^= 0x80
    with pytest.raises(AssertionError, match=r"x: 1 of 1001 bytes differ .*first at byte 500"):
        buffers.verify_copy(wrong, src, "x")
    with pytest.raises(AssertionError, match="does not match source"):
        buffers.verify_copy(src[:-1].clone(), src, "x")


# --- config -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sizes": ["4KiB", "3XB"]}, "test.yaml: cases.copy.sizes[1]: '3XB' is not a size; expected"),
        ({"sizes": []}, "test.yaml: cases.copy.sizes: [] is invalid: List should have at least 1 item"),
        (
            {"pairs": ["cpu=>cuda:0"]},
            "cases.copy.pairs[0]: 'cpu=>cuda:0' is not a device pair; expected 'SRC->DST'",
        ),
        ({"pairs": ["cpu->tpu:0"]}, "cases.copy.pairs[0]: 'cpu->tpu:0' is not a device pair"),
        (
            {"memory": ["pined"]},
            "cases.copy.memory[0]: 'pined' is not a host memory kind; allowed: pinned, pageable",
        ),
        (
            {"directions": ["both"]},
            "cases.copy.directions[0]: 'both' is not a copy direction; allowed: uni, bi",
        ),
        ({"cpu": {"sizes": ["1QB"]}}, "cases.copy.cpu.sizes[0]: '1QB' is not a size"),
        ({"matrix_sizes": []}, "cases.copy.matrix_sizes: [] is invalid: List should have at least 1 item"),
        ({"cpu": {"matrix_sizes": ["big"]}}, "cases.copy.cpu.matrix_sizes[0]: 'big' is not a size"),
        (
            {"size": ["4KiB"]},
            ("cases.copy.size: unknown key 'size'; allowed keys here: enabled, timing, sizes, matrix_sizes, "
             "memory"),
        ),
    ],
)
def test_config_errors_are_one_line(section, message):
    with pytest.raises(UserError) as err:
        parse_config({"cases": {"copy": section}}, "test.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_config_defaults_and_pair_spelling():
    cfg = parse_config({"cases": {"copy": {"pairs": ["CPU -> cuda", "cuda:0->cuda:1"], "sizes": ["1GiB"]}}})
    assert cfg.cases.copy.pairs == ["cpu->cuda:0", "cuda:0->cuda:1"]
    assert cfg.cases.copy.sizes == [2**30]
    default = parse_config({}).cases.copy
    assert default.sizes[0] == 4 * 2**10 and default.sizes[-1] == 256 * 2**20
    assert all(b == 4 * a for a, b in zip(default.sizes, default.sizes[1:]))


# --- end to end ---------------------------------------------------------------------------------------------------


def test_data_movement_end_to_end(run_benchmarks):
    tiny = {
        "devices": ["cpu"],
        "timing": {"warmup_s": 0.0, "max_time": 0.02, "min_rounds": 2},
        "cases": {
            "copy": {
                "sizes": ["64KiB"],
                "memory": ["pinned"],
                "non_blocking": [False],
                "directions": ["uni"],
            },
            "placement": {"sizes": ["64KiB"], "ops": ["to_same", "clone"]},
            "habits": {
                "habits": ["small_vs_batched", "sync_per_step"],
                "chunk": "4KiB",
                "chunks": 16,
                "readers": ["item"],
            },
        },
    }
    result, data = run_benchmarks(tiny, "-k", "test_copy or test_placement or test_habits")
    result.assert_outcomes(passed=5, skipped=2)
    result.stdout.fnmatch_lines(["*the CPU runs torch ops synchronously*"])
    bench = {b["name"]: b for b in data["benchmarks"]}
    host = bench["test_copy[cpu->cpu-pageable-64KiB]"]
    info, median = host["extra_info"], host["stats"]["median"]
    assert (info["case"], info["src"], info["dst"], info["memory"]) == ("copy", "cpu", "cpu", "pageable")
    assert (info["direction"], info["non_blocking"], info["bytes"]) == ("uni", False, 65536)
    assert info["gbps"] == pytest.approx(65536 / median / 1e9)
    assert info["traffic_bytes"] == 2 * 65536
    assert info["traffic_gbps"] == pytest.approx(2 * 65536 / median / 1e9)
    same = bench["test_placement[cpu-to_same-64KiB]"]["extra_info"]
    assert same["copies"] is False and "gbps" not in same and "bytes" not in same and same["op"] == "to_same"
    clone = bench["test_placement[cpu-clone-64KiB]"]["extra_info"]
    assert clone["copies"] is True and clone["gbps"] > 0 and clone["device"] == "cpu"
    pair = [b["extra_info"] for b in data["benchmarks"] if b["extra_info"]["case"] == "habits"]
    assert {p["variant"] for p in pair} == {"many_small", "one_batched"}
    assert {p["role"] for p in pair} == {"slow", "fast"}
    assert {p["pair"] for p in pair} == {"small_vs_batched:cpu->cpu"} and {p["bytes"] for p in pair} == {
        65536
    }


# --- on a real GPU ---------------------------------------------------------------------------------------------------


def _real_cases(**copy) -> list:
    return copy_case.enumerate_cases(config(**copy), ["cpu", "cuda:0"])


@pytest.mark.gpu
def test_gpu_every_path_copies_correctly_and_fails_when_not():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    for case in _real_cases(sizes=["64KiB"]):
        try:
            work = copy_case.build(case, config())
        except SkipCase:
            continue
        work.check()
        assert work.bytes == copy_case.copies_per_call(case.info) * copy_case.moved_bytes(case)
        # Both ways at once from pinned memory: one CUDA graph per call, which the check replays too.
        assert work.extra.get("issue") == ("graph" if case.info["direction"] == "bi" else None)
        work.fn = lambda: None
        with pytest.raises(AssertionError, match="bytes differ from the source"):
            work.check()


@pytest.mark.gpu
def test_gpu_peer_copies_record_peer_access():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    cases = copy_case.enumerate_cases(config(sizes=["1MiB"]), ["cuda:0", "cuda:1"])
    peer = next(c for c in cases if c.info["path"] == "peer")
    assert peer.info["peer_access"] == torch.cuda.can_device_access_peer(0, 1)
    for case in (c for c in cases if c.info["path"] == "peer"):
        copy_case.build(case, config()).check()


def test_a_gpu_with_a_link_down_adds_no_sweep_kind():
    # An NVSwitch node whose GPU 2 has 17 of 18 links up: its pairs read NV17, the others NV18. One kind
    # still: the swept pairs are those of a healthy node, so a run after the repair compares case by case.
    pairs = [(i, j) for i in range(4) for j in range(4) if i != j]
    down = {(i, j): "NV17" if 2 in (i, j) else "NV18" for i, j in pairs}
    healthy = {pair: "NV18" for pair in pairs}
    ids = [{c.id for c in cases_of(4, links=links, sizes=["4KiB", "1MiB"], matrix_sizes=["1MiB"])}
           for links in (down, healthy)]
    assert ids[0] == ids[1]


# --- host memory ------------------------------------------------------------------------------------------------


def small_host(monkeypatch, free_gib: float = 8, total_gib: float = 16) -> None:
    host = memory.HostMemory(free=int(free_gib * 2**30), total=int(total_gib * 2**30), source="MemAvailable")
    monkeypatch.setattr(memory, "host_memory_free", lambda: host)


def test_host_bytes_count_each_end_on_the_host():
    cases = {c.id: copy_case.host_bytes(c) for c in cases_of(2, sizes=["1MiB"], directions=["uni", "bi"])}
    assert cases["cpu->cpu-pageable-1MiB"] == 2 * 2**20
    assert cases["cpu->cuda:0-pinned-1MiB"] == cases["cuda:0->cpu-pageable-1MiB"] == 2**20
    assert cases["cpu<->cuda:0-pinned-non_blocking-1MiB"] == 2 * 2**20
    assert cases["cuda:0->cuda:1-device-1MiB"] == 0


def test_a_host_copy_larger_than_free_memory_is_a_skip_naming_both(monkeypatch):
    small_host(monkeypatch)
    case = next(c for c in cases_of(0, sizes=["12GiB"]) if c.info["path"] == "host")
    with pytest.raises(SkipCase) as skip:
        copy_case.build(case, config(sizes=["12GiB"]))
    assert str(skip.value) == (
        "out of host memory for cpu->cpu-pageable-12GiB (needs 24.0 GiB; the host has 8.0 GiB free of 16.0 GiB "
        "(MemAvailable; 1.0 GiB of it kept spare)): use smaller sizes for this host"
    )


def test_a_host_buffer_larger_than_free_memory_is_a_skip(monkeypatch):
    small_host(monkeypatch)
    with pytest.raises(SkipCase, match=r"out of host memory for a 12GiB pinned host buffer \(needs 12.0 GiB"):
        buffers.buffer("cpu", 12 * 2**30, pinned=True)


def test_a_buffer_is_filled_with_the_pattern_a_chunk_at_a_time():
    n = 2 * 4 * buffers.PATTERN_CHUNK_WORDS + 3  # two whole chunks and a ragged end
    assert torch.equal(buffers.buffer("cpu", n, data=True), buffers.pattern_bytes(n))


def test_copy_engine_count_finds_cuda_11s_runtime(monkeypatch):
    # CUDA 11's runtime is libcudart.so.11.0: a lookup of libcudart.so.11 alone found none.
    tried = []

    class Runtime:
        @staticmethod
        def cudaDeviceGetAttribute(ref, attribute, index):
            ref._obj.value = 2
            return 0

    def load(name):
        tried.append(name)
        if name != "libcudart.so.11.0":
            raise OSError(f"{name}: cannot open shared object file")
        return Runtime()

    monkeypatch.setattr(copy_case.torch.version, "cuda", "11.8")
    monkeypatch.setattr(copy_case.ctypes, "CDLL", load)
    assert copy_case.copy_engine_count("cuda:1") == 2
    assert tried == ["libcudart.so.11", "libcudart.so.11.0"]
    monkeypatch.setattr(copy_case.torch.version, "cuda", "12.8")
    assert copy_case.copy_engine_count("cuda:0") is None  # no runtime found: unknown, not an error
