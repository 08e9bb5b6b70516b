"""The end-of-run summary in the families' units, and the progress lines of long families."""

from __future__ import annotations

from suite.summary import PROGRESS_INTERVAL_S, PROGRESS_MIN_BENCHMARKS, Progress, render


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


def test_stopping_line_counts_how_benchmarks_stopped():
    lines = render(
        [
            _bench(1.0, case="other", stopped_on="precision", margin=0.005),
            _bench(1.0, case="other", stopped_on="time", margin=0.08),
        ]
    )
    assert lines[-1] == "stopping: 1 on precision, 1 on time; stopped on time, the widest margin was +-8.0%"


def test_progress_lines_only_for_long_families_and_not_too_often():
    now = [0.0]
    progress = Progress({"copy": PROGRESS_MIN_BENCHMARKS, "conv": 2}, clock=lambda: now[0])
    assert progress.finished("conv", 1.0) is None  # a short family: no lines
    first = progress.finished("copy", 0.5)
    assert first.startswith(f"[suite] copy: 1/{PROGRESS_MIN_BENCHMARKS} done, ETA")
    assert progress.finished("copy", 0.5) is None  # too soon for another
    now[0] = PROGRESS_INTERVAL_S + 1
    assert "3/" in progress.finished("copy", 0.5)
    for _ in range(PROGRESS_MIN_BENCHMARKS - 4):
        progress.finished("copy", 0.5)
    assert progress.finished("copy", 0.5).endswith("done in 10s")
