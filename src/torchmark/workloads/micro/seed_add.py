"""``seed-add``: the seed blog's benchmark, as published and as its author meant it.

``as-published`` reproduces the blog's TorchScript ``foo()`` and loop, so a machine can be
placed in the blog's 2023 table. TorchScript folds ``foo()`` into one cached tensor, so the
loop measures an in-place add of that tensor to itself (METHOD.md §1). That is *detected* at
run time, not assumed: a future torch that stops folding gets its real work counted.

``intended`` is what the author meant: two 12288 x 12288 float32 tensors made on the host,
moved to the device, added, synchronized; on a GPU it is bound by the host-to-device copy.

TorchScript is used here only to reproduce the blog; nothing else in torchmark uses it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, WrongResultError
from torchmark.results import Work, link_ceiling
from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload
from torchmark.workloads.micro._common import (
    QUICK_CASE_BYTES,
    QUICK_HELD_BYTES,
    QUICK_PEAK_BYTES,
    fits,
    room_bytes,
    rule_for,
    sizes_or,
)

BLOG_SIZE = 1024 * 12  # 12288: one 12288^2 float32 tensor is 604 MB
F32 = 4
# Both variants hold three tensors at once (TorchScript folds foo(): ones, ones, their sum).
TENSORS = 3

# The blog's function, verbatim but for the side (a parameter, so tests can run it tiny) and
# the move (``.cuda()`` in the blog, ``.cpu()`` for the CPU).
BLOG_SOURCE = """
def foo():
    x = torch.ones(({n}, {n}), dtype=torch.float32)
    y = torch.ones(({n}, {n}), dtype=torch.float32)
    x = x.{move}
    y = y.{move}
    z = x + y
    return z
"""


def move_expr(device: Device) -> str:
    """``cuda()`` / ``cpu()`` as the blog wrote it; ``to(...)`` where no such method exists."""
    dev = device.torch_device
    if dev.index in (None, 0) and callable(getattr(torch.Tensor, dev.type, None)):
        return f"{dev.type}()"
    return f'to(torch.device("{dev}"))'


@contextmanager
def quiet_torchscript() -> Iterator[None]:
    """TorchScript warns that it is deprecated; reproducing the blog needs it anyway."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning, UserWarning):
            warnings.simplefilter("ignore", category)
        yield


def script_blog(n: int, device: Device) -> tuple[Callable[[], torch.Tensor], str]:
    """The blog's ``@torch.jit.script`` function for ``device`` (compiled from its source)."""
    source = BLOG_SOURCE.format(n=n, move=move_expr(device))
    try:
        with quiet_torchscript():
            unit = torch.jit.CompilationUnit(source)
    except Exception as e:  # TorchScript removed or broken in this torch build
        raise CaseSkipped(f"torch.jit.script is unavailable here: {type(e).__name__}: {e}") from e
    # Called bare: a warning filter around each timed call cost ~4 µs (1 % of an H100's
    # predicted 400 µs iteration) and the compiled function warns only while compiling.
    foo: Callable[[], torch.Tensor] = unit.foo
    return foo, source


@dataclass(frozen=True)
class Finding:
    """What two calls of the scripted ``foo()`` showed."""

    aliased: bool  # both calls returned the same tensor (same storage)
    folded: bool | None  # the optimized graph is a bare constant (None: could not tell)


def inspect_foo(foo: Callable[[], torch.Tensor]) -> Finding:
    a, b = foo(), foo()
    aliased = a is b or a.data_ptr() == b.data_ptr()
    folded: bool | None
    try:
        graph = str(torch.jit.last_executed_optimized_graph())
        folded = "aten::add" not in graph and "prim::Constant" in graph
    except Exception:  # a private helper; its absence only loses the second piece of evidence
        folded = None
    return Finding(aliased, folded)


def unfolded_work(n: int, device: Device, extra_add: bool) -> tuple[Work, str, dict[str, int]]:
    """Compulsory traffic of allocate-fill-move-add (plus the loop's ``z0 += zz``).

    On an accelerator the bound is the host-to-device copy, so only the bytes that cross it
    are counted, against the link's limit (``link_ceiling``: the pinned rate, as every copy
    is judged); the rest is listed, not counted.
    """
    tensor = F32 * n * n
    parts = {
        "host_fill_write": 2 * tensor,
        "h2d_copy": 2 * tensor if device.is_accelerator else 0,
        "add_read_write": 3 * tensor,
        "accumulate_read_write": 3 * tensor if extra_add else 0,
    }
    if device.is_accelerator:
        work = Work(bytes=parts["h2d_copy"], items=1, item_unit="it")
        return work, link_ceiling("h2d:pageable"), parts
    counted = parts["host_fill_write"] + parts["add_read_write"] + parts["accumulate_read_write"]
    return Work(bytes=counted, items=1, item_unit="it"), "bandwidth", parts


# A quick run measures the blog's size where its three tensors fit this share of the memory
# available (1.81 GB of 7.25 GB; the process then peaks near 2.2 GB): the seed's table is
# the headline, and a machine with that much to spare is not crowded by it. Elsewhere it
# keeps within QUICK_PEAK_BYTES.
QUICK_BLOG_SHARE = 4


def blog_fits_quick(device: Device) -> bool:
    """Whether the blog's three tensors fit ``1/QUICK_BLOG_SHARE`` of the memory available
    (the plan's one reading) and half the total."""
    free = device.plan_memory_bytes()
    need = TENSORS * F32 * BLOG_SIZE**2
    return (
        bool(free)
        and need * QUICK_BLOG_SHARE <= (free or 0)
        and fits(device, F32 * BLOG_SIZE**2, TENSORS)
    )


def side_for(device: Device, quick: bool = False) -> int:
    """The blog's side where its three tensors fit (``fits``: half the memory available and
    of the total), else the largest multiple of 1024 that does: a machine with 3.6 GB or
    less to spare is not pushed out of memory by the blog (the result then says so and is
    not placed in the blog's table, which is of the blog's size only). ``quick`` (a case a quick
    run sizes on the host: ``Case.sized_for``): the blog's side where its tensors fit a
    quarter of the memory available (``blog_fits_quick``), else within the run's 2 GB
    (``QUICK_CASE_BYTES`` for one case), which the blog's 1.81 GB beside what the process
    holds does not keep: there the side is the largest that does, 11264."""
    n, room = BLOG_SIZE, room_bytes(device)  # read once, not once a step
    if quick and not blog_fits_quick(device):
        room = min(room, QUICK_CASE_BYTES) if room is not None else QUICK_CASE_BYTES
    while n > 1024 and room is not None and TENSORS * F32 * n * n > room:
        n -= 1024
    return n


def size_note(n: int, device: Device, quick: bool = False) -> list[str]:
    """Why a case is not at the blog's size, where it is not, and how to measure it there
    (``quick``: the case was sized for a quick run on the host, as in ``side_for``)."""
    if n == BLOG_SIZE:
        return []
    from torchmark.format import binary_bytes

    why = []
    blog = F32 * BLOG_SIZE**2
    if quick:
        why.append(
            f"--quick measures the blog's size only where its three {_mb(blog)} tensors "
            f"({_gb(TENSORS * blog)}) fit a quarter of the memory available, else keeps a run "
            f"within {QUICK_PEAK_BYTES / 1e9:g} GB (they and the "
            f"{QUICK_HELD_BYTES / 2**20:.0f} MiB a run holds besides them do not fit)"
        )
    if not fits(device, blog, TENSORS):
        free = device.plan_memory_bytes()
        why.append(
            f"the blog's three {_mb(blog)} tensors need more than half the memory available "
            f"({binary_bytes(free) if free else 'unknown'})"
        )
    place = (
        "; `torchmark run -w seed-add` measures it at the blog's size"
        if quick and len(why) == 1
        else ""
    )
    return [
        f"measured at {n}^2, not the blog's {BLOG_SIZE}^2"
        + (": " + "; ".join(why) if why else "")
        + f"; not placed in the blog's 2023 table, which is of its size only{place}"
    ]


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.0f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.1f} kB"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else _mb(nbytes)


@WORKLOADS.register("seed-add")
class SeedAdd(Workload):
    name: ClassVar[str] = "seed-add"
    summary: ClassVar[str] = (
        "the 2023 blog's 12288^2 add: as-published (TorchScript loop, it/s as the blog "
        "counted) and intended (host alloc, copy to device, add); --size sets the side"
    )
    in_quick: ClassVar[bool] = True
    VARIANTS: ClassVar[tuple[str, ...]] = ("as-published", "intended")

    def describe(self) -> dict[str, Any]:
        return {
            "variants": list(self.VARIANTS),
            "size": BLOG_SIZE,
            "tensor_MB": round(F32 * BLOG_SIZE**2 / 1e6),
        }

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = rule_for(opts.suite)
        # a quick run's 2 GB sizes the case on the host, not a --size given (its note says so)
        quick = opts.suite == "quick" and not opts.sizes and not device.is_accelerator
        return [
            Case(
                self.name,
                v,
                device,
                (("size", n),),
                f"{self.name}/{v}/{device.name}",
                rule,
                sized_for="quick" if quick else None,
            )
            for v in self.VARIANTS
            for n in sizes_or(opts, [side_for(device, quick=quick)])
        ]

    @classmethod
    def plan_note(cls, cases: Sequence[Case]) -> list[str]:
        sizes = {(c.device.name, int(c.param_dict.get("size", BLOG_SIZE))): c for c in cases}
        return [
            f"{cls.name} on {name}: {line}"
            for (name, n), c in sizes.items()
            for line in size_note(n, c.device, quick=c.sized_for == "quick")
        ]

    def memory_bytes(self, case: Case) -> int | None:
        # x, y and z of the step (as-published: while TorchScript folds it on the first call)
        return 3 * F32 * int(case.param_dict.get("size", BLOG_SIZE)) ** 2

    def prepare(self, case: Case) -> Prepared:
        n = int(case.param_dict.get("size", BLOG_SIZE))
        if case.variant == "as-published":
            prepared = self._published(case.device, n)
        else:
            prepared = self._intended(case.device, n)
        prepared.rule = case.rule or prepared.rule
        quick = case.sized_for == "quick"
        prepared.notes = [*size_note(n, case.device, quick=quick), *prepared.notes]
        return prepared

    def _published(self, device: Device, n: int) -> Prepared:
        foo, source = script_blog(n, device)
        try:
            with quiet_torchscript():
                found = inspect_foo(foo)
        except Exception as e:
            if device.is_out_of_memory(e):
                raise
            raise CaseSkipped(f"the blog's TorchScript foo() fails here: {e}") from e
        tensor = F32 * n * n
        state: dict[str, Any] = {"z0": None}

        def iteration() -> None:  # the blog's loop body, exactly
            zz = foo()
            if state["z0"] is None:
                state["z0"] = zz
            else:
                state["z0"] += zz

        if found.aliased:
            # one add per element (as the add workload counts), so it has a roofline place
            work = Work(flops=float(n * n), bytes=2 * tensor, items=1, item_unit="it")
            ceiling, parts = "bandwidth", {"self_add_read_write": 2 * tensor}
            notes = [
                f"every call returns the same constant-folded tensor, so one iteration is one "
                f"in-place add of a {_mb(tensor)} tensor to itself: {_gb(2 * tensor)} of "
                "memory traffic, no allocation, no host-device transfer (METHOD.md §1)",
                "values double each iteration and overflow to inf after ~128 iterations; "
                "inf arithmetic runs at full speed, so the timing is unchanged",
            ]
        else:
            work, ceiling, parts = unfolded_work(n, device, extra_add=True)
            notes = [
                "this torch does not fold foo(): each iteration allocates and fills two "
                f"{_mb(tensor)} host tensors, moves them, adds them and accumulates into z0; "
                + (
                    f"{_gb(work.bytes)} cross host-to-device per iteration "
                    "(counted against the link's h2d:pinned rate)"
                    if device.is_accelerator
                    else f"{_gb(work.bytes)} of memory traffic counted per iteration"
                )
            ]

        def check() -> list[str]:
            first = foo()
            before = float(first.flatten()[0])
            iteration()  # z0 = foo()
            iteration()  # z0 += foo()
            after = float(state["z0"].flatten()[0])
            again = float(foo().flatten()[0])
            state["z0"] = None  # the timed loop starts like the blog's, from z0 = None
            if found.aliased and not (after == 2 * before and again == after):
                raise WrongResultError(
                    f"foo() returned one tensor twice but z0 += zz gave {after} from {before} "
                    "(expected it to double, as an add of an aliased tensor does)"
                )
            if not found.aliased and not (before == 2.0 and after == 4.0 and again == 2.0):
                raise WrongResultError(
                    f"foo() should give 2 and z0 4 after one accumulation; got {before}, {after}"
                )
            graph = {True: "a single prim::Constant", False: "not a constant", None: "unknown"}
            return [
                "detected: two calls of foo() "
                + ("returned the same tensor" if found.aliased else "returned distinct tensors")
                + f"; the optimized graph is {graph[found.folded]}"
            ]

        return Prepared(
            fn=iteration,
            work=work,
            headline="items",
            ceiling=ceiling,
            check=check,
            timing="e2e",  # the blog timed wall-clock iterations
            notes=notes,
            extra={
                # the tensor added to itself; unfolded: x, y, their sum and z0
                "working_set_bytes": tensor if found.aliased else 4 * tensor,
                "aliased": found.aliased,
                "constant_folded": found.folded,
                "bytes_breakdown": parts,
                "source": source.strip(),
            },
        )

    def _intended(self, device: Device, n: int) -> Prepared:
        dev = device.torch_device

        # torch.ones as the author wrote: filling the host tensors is part of the work here,
        # and a sum of 2 everywhere is what the guard checks.
        def step() -> torch.Tensor:
            x = torch.ones((n, n), dtype=torch.float32)
            y = torch.ones((n, n), dtype=torch.float32)
            x = x.to(dev)
            y = y.to(dev)
            z = x + y
            device.synchronize()
            return z

        work, ceiling, parts = unfolded_work(n, device, extra_add=False)
        tensor = F32 * n * n
        if device.is_accelerator:
            notes = [
                f"PCIe-bound: each call copies x and y ({_gb(2 * tensor)}) from pageable "
                "host memory to the device; % of ceiling counts those bytes against the "
                "link's measured limit, h2d:pinned, as every copy is judged (pageable memory "
                "is staged by the host: pinning is what would approach it; host fill and "
                "device add listed, not counted)"
            ]
        else:
            notes = [
                "on the CPU the move is a no-op: each call fills two fresh host tensors and "
                f"adds them into a third, {_gb(work.bytes)} of compulsory traffic counted "
                "(fresh allocations also pay page faults, which this count leaves out)"
            ]

        def twos(t: torch.Tensor) -> bool:
            return bool(t.min() == 2) and bool(t.max() == 2)  # no 151 MB mask as t == 2 made

        def check() -> list[str]:
            # One result alive at a time (holding the first while making the second cost
            # 604 MB on top of the step's 1.8 GB at the blog's size): the first is marked
            # in place, so a cached tensor returned again reads 3, a fresh one 2.
            first = step()
            if not twos(first):
                raise WrongResultError("x + y is not 2 everywhere")
            first.add_(1)
            del first
            if not twos(step()):
                raise WrongResultError("two calls returned the same tensor")
            return ["detected: every call returns a fresh tensor equal to 2 everywhere"]

        return Prepared(
            fn=step,
            work=work,
            headline="items",
            ceiling=ceiling,
            check=check,
            timing="e2e",
            notes=notes,
            extra={"working_set_bytes": 3 * tensor, "aliased": False, "bytes_breakdown": parts},
        )
