"""``collectives``: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all and
send/recv across the ranks of a distributed run, over a sweep of message sizes.

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md): ``size`` is the whole
buffer (all_gather: its output, reduce_scatter and all_to_all: their input), algbw =
size / time, and busbw = algbw x a factor that makes the figure comparable with the
link's own speed whatever the rank count n: all_reduce 2(n-1)/n; all_gather,
reduce_scatter and all_to_all (n-1)/n; broadcast and send/recv 1. The time is the slowest
rank's (kinds/ranks/rank.py reads every sample as the all_reduce MAX of the ranks' times).

Each case checks its result once before timing (rank-dependent values, every element
compared): a wrong element makes the case WRONG. Timed calls reduce zeros, so sums do
not grow to inf over thousands of calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, WrongResultError, first_line
from torchmark.format import round_up
from torchmark.results import Work
from torchmark.stats.measurement import Measurement
from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload
from torchmark.workloads.micro._common import KiB, MiB, fits, geometric, sizes_or

F32 = 4
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv")
# Buffers alive at once per op (input and output): the memory cap of the sweep.
BUFFERS = 2
TOP = {"quick": 1 * MiB, "standard": 64 * MiB, "full": 1024 * MiB}
STEP = {"quick": 32, "standard": 4, "full": 2}
NEEDS_RANKS = "needs >= 2 ranks: start it with torchmark run -w collectives --nproc-per-node 2"


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for ``op`` on ``n`` ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def world() -> tuple[int, int]:
    """(rank, world size) of the process group, (0, 1) outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# The world size `run --nproc-per-node N --dry-run` plans for: no process group exists in
# the launching process, and its plan must show what the ranks will measure (every op and
# size), not the one skipped row of a single process.
_planned_ranks: int | None = None


@contextlib.contextmanager
def planned_world(n: int) -> Iterator[None]:
    """Plan as a rank of an ``n``-rank job would (its cases only: nothing is prepared)."""
    global _planned_ranks
    before, _planned_ranks = _planned_ranks, n
    try:
        yield
    finally:
        _planned_ranks = before


def default_sizes(device: Device, suite: str, n: int) -> list[int]:
    """Bytes per buffer, 1 KiB upward, rounded to a multiple of 4n bytes (each rank's
    chunk a whole float32), while 2 buffers leave half the device's memory free."""
    sizes = geometric(KiB, TOP.get(suite, TOP["standard"]), STEP.get(suite, 4))
    sizes = [round_up(s, F32 * n) for s in sizes]
    return [s for s in dict.fromkeys(sizes) if fits(device, s, BUFFERS)]


@WORKLOADS.register("collectives")
class Collectives(Workload):
    name = "collectives"
    summary = "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send/recv: busbw"

    def describe(self) -> dict[str, Any]:
        return {"ops": list(OPS), "busbw": "nccl-tests factors"}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        n = _planned_ranks or world()[1]
        if n < 2:  # one row that says why, not a skipped row per op and size
            return [Case(self.name, "all", device, (("ranks", n),))]
        ops = [p for p in opts.precisions if p in OPS] or list(OPS)
        sizes = sizes_or(opts, default_sizes(device, opts.suite, n))
        return [
            Case(
                self.name,
                op,
                device,
                (("bytes", s), ("ranks", n)),
                sweep=f"{self.name}/{op}/{device.name}",
                rule="quick" if opts.suite == "quick" else "micro",
            )
            for op in ops
            for s in sizes
        ]

    def prepare(self, case: Case) -> Prepared:
        import torch.distributed as dist

        rank, n = world()
        if n < 2:
            raise CaseSkipped(NEEDS_RANKS)
        op, size = case.variant, int(case.param_dict["bytes"])
        if size % (F32 * n):
            raise CaseSkipped(f"{size} bytes do not split into {n} whole float32 chunks")
        dev = case.device.torch_device
        count = size // F32
        fn, check = OP_BUILDERS[op](dist, rank, n, count, dev)
        factor = bus_factor(op, n)
        link = link_type(dist.get_backend(), case.device)

        def summarize(m: Measurement) -> dict[str, Any]:
            algbw = size / m.median
            return {"algbw_Bps": algbw, "busbw_Bps": algbw * factor, "bus_factor": factor}

        def guarded_check() -> list[str]:
            # Every rank must leave the check the same way: a rank that measured on while
            # another stopped would wait in the next collective forever.
            mine: BaseException | None = None
            try:
                check()
            except RuntimeError as e:  # the backend lacks this collective
                mine = CaseSkipped(f"{dist.get_backend()} cannot {op}: {first_line(e, 160)}")
            except WrongResultError as e:
                mine = e
            said: list[Any] = [None] * n
            dist.all_gather_object(said, None if mine is None else (type(mine).__name__, str(mine)))
            if mine is not None:
                raise mine
            for r, s in enumerate(said):
                if s is not None:
                    kind = WrongResultError if s[0] == "WrongResultError" else CaseSkipped
                    raise kind(f"rank {r}: {s[1]}")
            return []

        return Prepared(
            fn=fn,
            work=Work(bytes=size, items=1, item_unit="call"),
            headline="bytes",
            check=guarded_check,
            timing="device",
            rule=case.rule or "micro",
            notes=[
                # the size is each case's own: a note the same for every size is said once
                f"over {n} ranks, busbw = algbw x {factor:.3g}",
                f"link: {link}; no ceiling measured for it, so busbw has no % of ceiling",
            ],
            extra={
                "op": op,
                "backend": dist.get_backend(),
                "ranks": n,
                "link": link,
            },
            summarize=summarize,
            repeatable=False,
        )


def link_type(backend: str, device: Device) -> str:
    """What carries the collective between the ranks: several hosts (torchrun's
    LOCAL_WORLD_SIZE below WORLD_SIZE) use the network; gloo on one host goes through the
    kernel's TCP loopback (it has no shared-memory transport); NCCL on one host uses NVLink
    where this GPU has an active link (NVML says), else PCIe through the host bridge."""
    import os

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    if local < world_size:
        return "network (ranks on several hosts)"
    if backend != "nccl":
        return f"loopback TCP ({backend} between processes on one host)"
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        active = 0
        for i in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                active += pynvml.nvmlDeviceGetNvLinkState(handle, i) == pynvml.NVML_FEATURE_ENABLED
            except pynvml.NVMLError:
                break  # past this GPU's last link, or no NVLink at all
    except Exception as e:  # no NVML: say so rather than guess
        return f"unknown (NVML could not say: {first_line(e, 160)})"
    if active:
        return f"NVLink ({active} active links on this GPU)"
    return "PCIe (no active NVLink on this GPU)"


def _expect(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if not torch.equal(got, want):
        bad = int((got != want).nonzero()[0, 0])
        raise WrongResultError(
            f"{what}: element {bad} is {got.flatten()[bad].item()}, "
            f"expected {want.flatten()[bad].item()}"
        )


Built = tuple[Callable[[], object], Callable[[], None]]


def _all_reduce(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    t = torch.empty(count, device=dev)

    def check() -> None:
        t.fill_(rank + 1)
        dist.all_reduce(t)
        _expect(t, torch.full_like(t, n * (n + 1) / 2), "all_reduce sum")
        t.zero_()

    return (lambda: dist.all_reduce(t)), check


def _single(dist: Any, name: str, old: str) -> Callable[..., Any]:
    """torch >= 2.13 names the flat-tensor collectives ``*_single`` (the old names warn)."""
    return getattr(dist, name, None) or getattr(dist, old)


def _all_gather(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    out, inp = torch.empty(count, device=dev), torch.empty(count // n, device=dev)
    gather = _single(dist, "all_gather_single", "all_gather_into_tensor")

    def check() -> None:
        inp.fill_(rank + 1)
        gather(out, inp)
        want = torch.arange(1, n + 1, device=dev, dtype=out.dtype).repeat_interleave(count // n)
        _expect(out, want, "all_gather")

    return (lambda: gather(out, inp)), check


def _reduce_scatter(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    inp, out = torch.empty(count, device=dev), torch.empty(count // n, device=dev)
    scatter = _single(dist, "reduce_scatter_single", "reduce_scatter_tensor")

    def check() -> None:
        inp.copy_(torch.arange(n, device=dev, dtype=inp.dtype).repeat_interleave(count // n))
        inp.add_(rank)
        scatter(out, inp)
        _expect(out, torch.full_like(out, n * rank + n * (n - 1) / 2), "reduce_scatter sum")
        inp.zero_()

    return (lambda: scatter(out, inp)), check


def _broadcast(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    t = torch.empty(count, device=dev)

    def check() -> None:
        t.fill_(7.0 if rank == 0 else 0.0)
        dist.broadcast(t, src=0)
        _expect(t, torch.full_like(t, 7.0), "broadcast from rank 0")

    return (lambda: dist.broadcast(t, src=0)), check


def _all_to_all(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    inp, out = torch.empty(count, device=dev), torch.empty(count, device=dev)

    def check() -> None:
        inp.fill_(rank + 1)
        dist.all_to_all_single(out, inp)
        want = torch.arange(1, n + 1, device=dev, dtype=out.dtype).repeat_interleave(count // n)
        _expect(out, want, "all_to_all")

    return (lambda: dist.all_to_all_single(out, inp)), check


def _send_recv(dist: Any, rank: int, n: int, count: int, dev: torch.device) -> Built:
    """Pairs (0, 1), (2, 3), ...: the even rank sends, the odd one receives; with an odd
    rank count the last rank waits out each sample at the barrier."""
    t = torch.empty(count, device=dev)
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    paired = peer < n

    def step() -> None:
        if not paired:
            return
        if rank % 2 == 0:
            dist.send(t, dst=peer)
        else:
            dist.recv(t, src=peer)

    def check() -> None:
        t.fill_(rank + 1)
        step()
        if paired and rank % 2 == 1:
            _expect(t, torch.full_like(t, peer + 1), f"recv from rank {peer}")

    return step, check


OP_BUILDERS: dict[str, Callable[..., Built]] = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "broadcast": _broadcast,
    "all_to_all": _all_to_all,
    "send_recv": _send_recv,
}
