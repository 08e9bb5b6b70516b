"""The end-of-run summary in the families' units, and the progress lines of long families."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from suite.summary import (
    GENERIC_MAX_ROWS,
    PROGRESS_INTERVAL_S,
    PROGRESS_MIN_S,
    Progress,
    render,
    shown_on_this_rank,
)

DATA = Path(__file__).resolve().parent / "data"


def _bench(median, **info):
    return {"stats": {"median": median}, "extra_info": info}


def test_compute_rows_show_tflops_and_percent_of_ceiling():
    lines = render(
        [
            _bench(
                0.01,
                case="matmul",
                device="cuda:0",
                precision="bfloat16",
                m=8192,
                n=8192,
                k=8192,
                tflops=790.0,
                pct_of_ceiling=100.0,
                pct_of_datasheet=79.9,
            ),
            _bench(
                0.01,
                case="matmul",
                device="cuda:0",
                precision="bfloat16",
                m=4096,
                n=4096,
                k=4096,
                tflops=650.0,
                pct_of_ceiling=82.3,
                pct_of_datasheet=65.7,
            ),
        ]
    )
    text = "\n".join(lines)
    assert "matmul: TFLOP/s" in text
    row = next(line for line in lines if line.strip().startswith("cuda:0 bfloat16"))
    assert "790" in row and "650" in row and "100%" in row and "80%" in row


def test_copy_matrix_at_the_largest_size_and_the_sweep():
    benches = []
    for src, dst, path in (("cpu", "cuda:0", "h2d"), ("cuda:0", "cpu", "d2h"), ("cuda:0", "cuda:1", "peer")):
        for size, gbps in ((4096, 1.5), (256 * 2**20, 55.0)):
            for memory in ("pinned", "pageable") if path != "peer" else ("device",):
                rate = gbps if memory != "pageable" else gbps / 2
                benches.append(
                    _bench(
                        size / rate / 1e9,
                        case="copy",
                        src=src,
                        dst=dst,
                        path=path,
                        size=size,
                        memory=memory,
                        non_blocking=False,
                        direction="uni",
                        gbps=rate,
                    )
                )
    lines = render(benches)
    text = "\n".join(lines)
    assert "copy: GB/s at 256MiB" in text
    row = next(line for line in lines if line.strip().startswith("cpu ") and "55" in line)
    assert "27.5" not in row  # the matrix shows pinned where both ran
    assert "copy: GB/s by size, cpu<->cuda:0" in text and "h2d pageable" in text and "4KiB" in text


def test_habits_as_times_slower_and_collectives_busbw():
    lines = render(
        [
            _bench(
                2e-3, case="habits", pair="sync_per_step:cuda:0:item", role="slow", variant="sync_every_step"
            ),
            _bench(5e-4, case="habits", pair="sync_per_step:cuda:0:item", role="fast", variant="sync_once"),
            _bench(
                1e-3,
                case="collectives",
                op="all_reduce",
                size=2**20,
                dtype="bfloat16",
                in_place=True,
                busbw=120.0,
            ),
        ]
    )
    text = "\n".join(lines)
    assert "sync_every_step 2 ms vs sync_once 500 us: 4.0x slower" in text
    assert "busbw GB/s" in text and "1MiB bfloat16" in text and "120" in text


def test_a_slow_habit_that_won_says_faster_and_unexpected():
    lines = render([
        _bench(2e-3, case="habits", pair="small_vs_batched:cuda:0", role="slow", variant="many_small"),
        _bench(8e-3, case="habits", pair="small_vs_batched:cuda:0", role="fast", variant="one_batched"),
    ])
    line = next(line for line in lines if "small_vs_batched" in line)
    assert line.endswith("one_batched 8 ms: 4.0x faster (unexpected: noise?)") and "slower" not in line


def test_a_family_without_a_section_of_its_own_still_shows():
    benches = [
        {**_bench(1e-3, case="fakefam", gbps=12.5), "param": "cpu-1MiB"},
        {**_bench(2e-3, case="fakefam", busbw=3.0), "param": "cuda:0-4KiB"},
        {**_bench(4e-6, case="fakefam"), "param": "cpu-latency"},
    ]
    lines = render(benches)
    start = lines.index("fakefam: rate, or median time per call")
    section = lines[start:lines.index("", start)]
    assert any("cpu-1MiB" in line and line.endswith("12.5 GB/s") for line in section)
    assert any("cuda:0-4KiB" in line and line.endswith("3 busbw GB/s") for line in section)
    assert any("cpu-latency" in line and line.endswith("4 us per call") for line in section)


def test_a_long_generic_section_is_cut_with_a_note():
    benches = [{**_bench(1e-3, case="fakefam", tflops=1.0 + n), "param": f"case-{n}"} for n in range(50)]
    lines = render(benches)
    assert sum(line.strip().startswith("case-") for line in lines) == GENERIC_MAX_ROWS
    assert f"  ({50 - GENERIC_MAX_ROWS} more in the JSON / report)" in lines


def test_an_old_results_file_with_missing_keys_renders():
    """tests/data/h200x2.json predates `size`, `path` and `precision`: its copy and collectives entries have no
    size. Each section skips what it cannot place; a family whose section then has nothing shows generically."""
    benchmarks = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))["benchmarks"]
    lines = render(benchmarks)
    # Older files name the precision `dtype`: float32 and bfloat16 are separate rows, not one row of "None".
    bf16 = next(line for line in lines if line.strip().startswith("cuda:0 bfloat16"))
    assert "754" in bf16 and any(line.strip().startswith("cuda:0 float32") for line in lines)
    for family in ("copy", "collectives", "latency"):
        assert f"{family}: rate, or median time per call" in lines
    assert any("cpu->cuda:0-pinned-262144KiB" in line and line.endswith("56.7 GB/s") for line in lines)
    assert any("all_reduce-262144KiB" in line and line.endswith("293 busbw GB/s") for line in lines)


def test_no_missing_key_crashes_the_summary():
    benchmarks = json.loads((DATA / "h200x2.json").read_text(encoding="utf-8"))["benchmarks"]
    benchmarks += [
        _bench(1e-3, case="copy", src="cpu", dst="cuda:0", path="h2d", size=4096, memory="pinned",
               direction="uni", gbps=1.0),
        _bench(1e-3, case="collectives", op="all_reduce", size=4096, dtype=None, busbw=1.0),
        _bench(1e-3, case="collectives", op="all_reduce", size=8192, dtype="float32", busbw=1.0),
        _bench(1e-3, case="placement", device="cuda:0", op="clone", size="4KiB"),
        {"name": "no extra_info at all", "stats": None},
    ]
    keys = {k for b in benchmarks for k in (b.get("extra_info") or {})} | {"stats", "extra_info", "param"}
    for key in sorted(keys):
        stripped = copy.deepcopy(benchmarks)
        for b in stripped:
            b.pop(key, None)
            (b.get("extra_info") or {}).pop(key, None)
        assert render(stripped)[-1].startswith("stopping: "), key


def test_only_rank_0_prints_the_summary():
    assert shown_on_this_rank({}) and shown_on_this_rank({"RANK": "0", "WORLD_SIZE": "2"})
    assert not shown_on_this_rank({"RANK": "1", "WORLD_SIZE": "2"})


def test_stopping_line_counts_how_benchmarks_stopped():
    lines = render(
        [
            _bench(1.0, case="other", stopped_on="precision", margin=0.005),
            _bench(1.0, case="other", stopped_on="time", margin=0.08),
        ]
    )
    assert lines[-1] == "stopping: 1 on precision, 1 on time; stopped on time, the widest margin was +-8.0%"


def test_machine_limits_that_held_the_clocks_are_named_at_the_end():
    lines = render(
        [
            _bench(1.0, case="other", clocks_held=0.9, clocks_held_power=0.9),  # a GPU's usual state: quiet
            # The power limit held it 90%, thermal slowdown 2%: thermal's own share is what counts.
            _bench(1.0, case="other", clocks_held=0.9, clocks_held_power=0.9, clocks_held_thermal=0.02),
            _bench(1.0, case="other", clocks_held=0.62, clocks_held_thermal=0.62, clocks_held_power=0.3),
            _bench(1.0, case="other", clocks_held=0.2, clocks_held_thermal=0.2),
            _bench(1.0, case="other", clocks_held=0.03, clocks_held_board_limit=0.03),  # under 5%: quiet
        ]
    )
    assert lines[-1] == ("clocks held back by thermal (NVML) in 2 benchmark(s), up to 62% of the time: see "
                         "clocks_held_thermal in the JSON, `python -m suite health`")
    assert lines[-2].startswith("stopping: ")


def test_progress_lines_only_for_long_families_and_not_too_often():
    now = [0.0]
    progress = Progress({"copy": 20, "conv": 2}, {"copy": 20 * 0.5, "conv": 2.0}, clock=lambda: now[0])
    assert progress.finished("conv", 1.0) is None  # a short family: no lines
    first = progress.finished("copy", 0.5)
    assert first.startswith("[suite] copy: 1/20 done, ETA")
    assert progress.finished("copy", 0.5) is None  # too soon for another
    now[0] = PROGRESS_INTERVAL_S + 1
    assert "3/" in progress.finished("copy", 0.5)
    for _ in range(20 - 4):
        progress.finished("copy", 0.5)
    assert progress.finished("copy", 0.5).endswith("done in 10s")


def test_a_family_of_few_benchmarks_that_runs_long_gets_lines():
    progress = Progress({"model": 3}, clock=lambda: 0.0)  # no plan figure: its own time decides
    assert progress.finished("model", PROGRESS_MIN_S / 2) is None
    assert progress.finished("model", PROGRESS_MIN_S) == ("[suite] model: 2/3 done, ETA 3.8s "
                                                        "(whole run: about 3.8s left)")
    assert progress.finished("model", 1.0) == "[suite] model: 3/3 done in 8.5s"


def test_the_run_eta_takes_families_not_begun_from_the_plan_and_corrects_as_families_finish():
    now = [0.0]
    planned = {"matmul": 100.0, "copy": 50.0, "habits": 40.0}
    progress = Progress({"matmul": 10, "copy": 10, "habits": 4}, planned, clock=lambda: now[0])
    # matmul runs at 1 s a benchmark, 10x under its plan: the families after it keep their plan figures
    # (50 + 40 s), never matmul's pace (10 + 4 s).
    assert progress.finished("matmul", 1.0) == ("[suite] matmul: 1/10 done, ETA 9.0s "
                                               "(whole run: about 1m39s left)")
    for _ in range(9):
        now[0] += PROGRESS_INTERVAL_S
        line = progress.finished("matmul", 1.0)
    assert line == "[suite] matmul: 10/10 done in 10s"
    # matmul finished: it counts what it took; copy, running, goes at its own pace; habits keeps its plan.
    assert progress.finished("copy", 2.0) == "[suite] copy: 1/10 done, ETA 18s (whole run: about 58s left)"


def test_host_bound_results_are_named_at_the_end():
    benches = [{**_bench(1e-3, case="model", bound="host", host_share=0.99), "name": f"test_model[cuda:0-b{b}]"}
               for b in (16, 32, 64, 256)]
    lines = render([*benches, _bench(1e-3, case="model", bound="device", host_share=0.1)])
    assert lines[-1] == ("host-bound: 4 benchmark(s) measured how fast Python issues the work, not the device "
                         "(bound=host in the JSON; health does not judge them): test_model[cuda:0-b16], "
                         "test_model[cuda:0-b32], test_model[cuda:0-b64] and 1 more")
    assert not any(line.startswith("host-bound") for line in render([_bench(1.0, case="model", bound="device")]))
