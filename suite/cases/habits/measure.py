"""Transfer habits as slow/fast pairs doing equal work: many small vs one batched transfer, a scalar read every
step vs once at the end, a copy overlapped with compute vs serialised."""

from __future__ import annotations

import io
import math

import torch

from suite.cases import Case, OwnFn, SkipCase, Work, make_case
from suite.cases.common import float64_reference, randn, require_host_bytes
from suite.cases.buffers import buffer, host_extra, host_side, on_streams, tie_to_streams, verify_copy
from suite.devices import current_platform, synchronize
from suite.units import format_size

NAME = "habits"

# variant names per habit, (slow, fast): the report divides the slow median by the fast one of the same `pair`.
VARIANTS = {"small_vs_batched": ("many_small", "one_batched"), "sync_per_step": ("every_step", "once"),
            "overlap": ("serialised", "overlapped")}
# Relative error allowed for the float32 results the habits compute, against float64 (a mean of squares and a
# matmul slice; IEEE float32, as benchmarks/test_habits.py switches TF32 off). A wrong result is off by ~100%.
TOLERANCE = 1e-2
# Rows of the overlap matmul recomputed in float64 by the check.
CHECK_ROWS = 64

SYNC_ON_CPU = ("the CPU runs torch ops synchronously, so a scalar read has no queue of device work to wait for: "
               "reading every step costs only the read itself, and the habit (an implicit synchronisation) does not "
               "exist there")


class _Discard(io.TextIOBase):
    """A stream that drops what is printed: `print(loss)` still formats the tensor (and so synchronises)."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discard()


def _read(reader: str, value: torch.Tensor) -> float:
    """Read a device scalar the way a training loop does; each of these waits for the device."""
    if reader == "item":
        return value.item()
    if reader == "float":
        return float(value)
    if reader == "print":
        print(value, file=_DISCARD)
        return 0.0
    return float(value.cpu().numpy())


def _pair_cases(habit: str, pair: str, devices: tuple[str, ...], id_head: list[str], id_tail: dict[str, str],
                **params) -> list[Case]:
    slow, fast = VARIANTS[habit]
    return [make_case(NAME, devices, [*id_head, variant, id_tail[variant]], habit=habit, variant=variant, role=role,
                      pair=pair, **params)
            for variant, role in ((slow, "slow"), (fast, "fast"))]


def enumerate_cases(config, devices: list[str]) -> list[Case]:
    section = config.cases.habits
    if not section.enabled:
        return []
    cases: list[Case] = []
    for dev in devices:
        s = section.for_device(dev)
        for habit in dict.fromkeys(s.habits):
            with_cpu = tuple(dict.fromkeys(("cpu", dev)))
            if habit == "small_vs_batched":
                tails = {"many_small": f"{s.chunks}x{format_size(s.chunk)}",
                         "one_batched": f"1x{format_size(s.chunk * s.chunks)}"}
                cases += _pair_cases(habit, f"{habit}:cpu->{dev}", with_cpu, [f"cpu->{dev}", habit], tails, src="cpu",
                                     dst=dev, device=dev, memory=s.memory if dev != "cpu" else "pageable",
                                     chunk=s.chunk, chunks=s.chunks)
            elif habit == "sync_per_step":
                tails = dict.fromkeys(VARIANTS[habit], f"{s.steps}steps")
                for reader in dict.fromkeys(s.readers):
                    cases += _pair_cases(habit, f"{habit}:{dev}:{reader}", (dev,), [dev, habit, reader], tails,
                                         device=dev, reader=reader, steps=s.steps, n=s.step_matmul)
            else:
                tails = dict.fromkeys(VARIANTS[habit], f"{format_size(s.overlap_bytes)}-{s.overlap_matmul}")
                cases += _pair_cases(habit, f"{habit}:{dev}", with_cpu, [dev, habit], tails, device=dev,
                                     size=s.overlap_bytes, n=s.overlap_matmul)
    return cases


def skip_reason(case: Case) -> str | None:
    """Why this habit means nothing or cannot run on this machine, or None (platform seam only: testable)."""
    p = case.info
    dev = p["device"]
    if p["habit"] == "sync_per_step" and dev == "cpu":
        return SYNC_ON_CPU
    if p["habit"] == "overlap":
        if dev == "cpu":
            return "overlap needs an accelerator: the CPU has no copy engine or streams to run a copy beside compute"
        if not dev.startswith("cuda"):
            return f"overlap uses CUDA streams; {dev} is not a CUDA device"
    pinned = p["habit"] == "overlap" or p.get("memory") == "pinned"
    if pinned and dev != "cpu" and not current_platform().supports_pinned_memory():
        return (f"pinned host memory needs a CUDA or XPU device (torch.Tensor.pin_memory); not available for {dev}; "
                "set habits.memory: pageable to measure pageable transfers")
    return None


def host_bytes(case: Case) -> int:
    """Host memory the case takes beside its inputs' draws: the host buffers, and the float64 matrices its
    check computes on the CPU (every device but CUDA for sync_per_step; one operand for overlap)."""
    p = case.info
    if p["habit"] == "small_vs_batched":
        return p["chunk"] * p["chunks"] * (1 + (p["dst"] == "cpu"))
    float64_matrix = 8 * p["n"] ** 2
    if p["habit"] == "sync_per_step":
        return 0 if p["device"].startswith("cuda") else 3 * float64_matrix  # a, w and their product
    return p["size"] + float64_matrix


def build(case: Case, config) -> Work:
    if reason := skip_reason(case):
        raise SkipCase(reason)
    require_host_bytes(host_bytes(case), case.id)
    builders = {"small_vs_batched": _small_vs_batched, "sync_per_step": _sync_per_step, "overlap": _overlap}
    return builders[case.info["habit"]](case)


def _small_vs_batched(case: Case) -> Work:
    p = case.info
    pinned = p["memory"] == "pinned"
    total = p["chunk"] * p["chunks"]
    non_blocking = pinned  # the habit as recommended: pinned memory, asynchronous copies
    src = buffer("cpu", total, pinned, data=True)
    dst = buffer(p["dst"], total)
    if p["variant"] == "many_small":
        legs = list(zip(dst.view(p["chunks"], p["chunk"]).unbind(), src.view(p["chunks"], p["chunk"]).unbind()))

        def run() -> None:
            for d, s in legs:
                d.copy_(s, non_blocking=non_blocking)
    else:

        def run() -> None:
            dst.copy_(src, non_blocking=non_blocking)

    own = OwnFn()

    def check() -> None:
        dst.fill_(0)
        synchronize(*case.devices)
        own()
        synchronize(*case.devices)
        verify_copy(dst, src, f"habits {case.id}")

    # A copy within the CPU also reports its memory traffic (read + write), under its own key.
    traffic = 2 * total if p["dst"] == "cpu" else None
    return own.bind(Work(fn=run, check=check, bytes=total, traffic_bytes=traffic,
                         extra={"non_blocking": non_blocking, **host_extra()}))


def _sync_per_step(case: Case) -> Work:
    p = case.info
    dev, n, steps, reader = p["device"], p["n"], p["steps"], p["reader"]
    a = randn(n, n, dtype=torch.float32, device=dev, seed=1)
    # Scaled so each entry of a @ w has unit variance and the loss (mean of squares) stays near 1.
    w = randn(n, n, dtype=torch.float32, device=dev, seed=2) / math.sqrt(n)
    h = torch.empty(n, n, device=dev)
    total = torch.zeros((), device=dev)
    every_step = p["variant"] == "every_step"

    def run() -> None:
        # Equal device work in both variants: matmul, loss, accumulate; they differ only in how often the host
        # reads a scalar (every step and at the end, or only at the end).
        total.zero_()
        for _ in range(steps):
            loss = torch.mm(a, w, out=h).square().mean()
            total.add_(loss)
            if every_step:
                _read(reader, loss)
        _read(reader, total)

    own = OwnFn()

    def check() -> None:
        total.fill_(0)  # poisoned: a loop that computed nothing reads zero
        own()
        got = float(total)
        # float64 on the device only on CUDA: MPS and many XPUs have none, so elsewhere on the CPU.
        expected = steps * float((float64_reference(a) @ float64_reference(w)).square().mean())
        err = abs(got - expected) / expected
        assert err <= TOLERANCE, f"habits {case.id}: loss sum {got:.6g} vs float64 {expected:.6g} (error {err:.2g})"

    return own.bind(Work(fn=run, check=check, flops=steps * 2 * n**3))


def _overlap(case: Case) -> Work:
    p = case.info
    dev, size, n = p["device"], p["size"], p["n"]
    src = buffer("cpu", size, pinned=True, data=True)
    dst = buffer(dev, size)
    a = randn(n, n, dtype=torch.float32, device=dev, seed=1)
    b = randn(n, n, dtype=torch.float32, device=dev, seed=2)
    out = torch.empty(n, n, device=dev)
    side = torch.cuda.Stream(device=dev)
    main = torch.cuda.current_stream(dev)
    tie_to_streams((dst,), [side])  # dst is written on the side stream

    if p["variant"] == "overlapped":

        def run() -> None:
            # The next batch arrives on a side stream while this step computes; the step then waits for it.
            with on_streams([side]):
                dst.copy_(src, non_blocking=True)
            torch.mm(a, b, out=out)
            main.wait_stream(side)
    else:

        def run() -> None:
            # The same copy and matmul queued on one stream: the matmul waits for the copy.
            dst.copy_(src, non_blocking=True)
            torch.mm(a, b, out=out)

    own = OwnFn()

    def check() -> None:
        dst.fill_(0)
        out.fill_(0)
        synchronize(dev)
        own()
        synchronize(dev)
        verify_copy(dst, src, f"habits {case.id}")
        reference = a[:CHECK_ROWS].double().cpu() @ b.double().cpu()
        got = out[:CHECK_ROWS].double().cpu()
        err = float((got - reference).norm() / reference.norm())
        assert err <= TOLERANCE, f"habits {case.id}: matmul relative error {err:.2g} against float64"

    synchronize(dev)  # the side stream must not read src/dst before they are filled
    return own.bind(Work(fn=run, check=check, bytes=size, flops=2 * n**3, extra={"non_blocking": True, **host_extra()}))


__all__ = ["NAME", "VARIANTS", "build", "enumerate_cases", "host_bytes", "host_side", "skip_reason"]
