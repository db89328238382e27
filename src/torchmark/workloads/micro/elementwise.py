"""``add`` and ``triad``: device-resident elementwise bandwidth over a sweep of sizes.

Bytes follow the STREAM convention (3N x 4 for both: two reads, one write). The sweep runs
from sizes that live in the last-level cache to sizes far beyond it, which shows the cache
effect; only sizes whose working set is beyond the cache (>= 8x the LLC, the rule the
bandwidth ceiling is measured by: devices/cache.py) are compared with the memory bandwidth
ceiling (a cache-resident size would read above 100 % of it, which is no error).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from torchmark.ceilings.base import random
from torchmark.devices.base import Device
from torchmark.devices.cache import BEYOND, beyond_cache, buffer_cap, is_beyond_cache, llc
from torchmark.errors import CaseSkipped, WrongResultError
from torchmark.format import binary_bytes
from torchmark.results import Work
from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload
from torchmark.workloads.micro._common import (
    KiB,
    MiB,
    fits,
    geometric,
    rule_for,
    sizes_or,
)

F32 = 4
BUFFERS = 3  # a, b, c
SCALE = 1.5  # triad's scalar: exact in binary, so the reference check can be exact too


def default_sizes(device: Device, suite: str) -> list[int]:
    """Elements per buffer. Quick: one size whose working set (3 buffers) is >= 8x the LLC.
    Standard: 256 KiB to >= 8x the LLC per buffer in 4x steps. Full: 64 KiB to >= 16x the
    LLC in 2x steps."""
    top = beyond_cache(device)
    if suite == "quick":
        # 3 x 128 MiB = 12x a 32 MiB LLC: no cache help, and half the random fill of 8x
        # per buffer (~1.5 s on 2 loaded cores).
        per_buffer = [geometric(MiB, BEYOND * llc(device) // BUFFERS, 2)[-1]]
    elif suite == "full":
        per_buffer = geometric(64 * KiB, 2 * top, 2)
    else:
        per_buffer = geometric(256 * KiB, top, 4)
    cap, _ = buffer_cap(device)
    if cap:  # what the memory available can spare: the largest size that fits, once
        ladder = geometric(MiB, cap, 2)
        largest = ladder[-2] if len(ladder) > 1 and ladder[-1] > cap else ladder[-1]
        per_buffer = list(dict.fromkeys(min(b, largest) for b in per_buffer))
    return [b // F32 for b in per_buffer if fits(device, b, BUFFERS)]


class Elementwise(Workload):
    """One streaming kernel over random float32 buffers a, b, c of n elements each."""

    flops_per_element: ClassVar[int]
    formula: ClassVar[str]
    in_quick: ClassVar[bool] = True

    def describe(self) -> dict[str, Any]:
        return {"formula": self.formula, "bytes_per_element": BUFFERS * F32}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = rule_for(opts.suite)
        return [
            Case(
                self.name,
                "float32",
                device,
                (("n", n),),
                sweep=f"{self.name}/{device.name}",
                rule=rule,
            )
            for n in sizes_or(opts, default_sizes(device, opts.suite))
        ]

    def memory_bytes(self, case: Case) -> int | None:
        return BUFFERS * F32 * int(case.param_dict["n"])

    @abstractmethod
    def kernel(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Callable[[], object]: ...

    @abstractmethod
    def expected(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def output(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor: ...

    @staticmethod
    def work(n: int, flops_per_element: int) -> Work:
        return Work(
            flops=flops_per_element * n,
            bytes=BUFFERS * F32 * n,
            items=n,
            item_unit="elem",
        )

    def prepare(self, case: Case) -> Prepared:
        n = int(case.param_dict["n"])
        if n < 1:
            raise CaseSkipped(f"n must be >= 1, got {n}")
        device = case.device
        a, b, c = (random(n, device) for _ in range(BUFFERS))
        fn = self.kernel(a, b, c)
        working_set = BUFFERS * F32 * n
        cache = llc(device)
        notes: list[str] = []
        # A working set that fits the cache keeps the memory's ceiling: the result then reads
        # "in cache" (results.cache, its verdict), as every in-cache result does, and is never
        # ranked among results that measured memory.
        # With no size reported (an assumed cache) nothing can say it fits: no % is given.
        ceiling: str | None = "bandwidth"
        if working_set <= cache and device.cache_bytes() is None:
            notes.append(
                f"working set {binary_bytes(working_set)} fits in the {binary_bytes(cache)} "
                "last-level cache assumed (the device reports none): cache bandwidth, so no % "
                "of the memory ceiling"
            )
            ceiling = None
        elif working_set > cache and not is_beyond_cache(working_set, device):
            notes.append(
                f"working set {binary_bytes(working_set)} is {working_set / cache:.1f}x the "
                f"{binary_bytes(cache)} last-level cache (< {BEYOND}x): partly cache-resident, "
                "no % of the memory ceiling"
            )
            ceiling = None

        def check() -> list[str]:
            want = self.expected(a, b, c)  # computed before the kernel may overwrite an input
            fn()
            if not torch.equal(self.output(a, b, c), want):
                raise WrongResultError(f"{self.name} result differs from {self.formula}")
            return []

        return Prepared(
            fn=fn,
            work=self.work(n, self.flops_per_element),
            headline="bytes",
            ceiling=ceiling,
            check=check,
            timing="device",
            rule=case.rule or "micro",
            notes=notes,
            extra={
                "working_set_bytes": working_set,
                "llc_bytes": device.cache_bytes(),
                "llc_counted_bytes": cache,
                "byte_convention": "STREAM 3N: read two buffers, write one",
            },
        )


@WORKLOADS.register("add")
class Add(Elementwise):
    name: ClassVar[str] = "add"
    summary: ClassVar[str] = (
        "c = a + b over float32 sizes from in-cache to >> LLC (STREAM 3N bytes); GB/s"
    )
    flops_per_element: ClassVar[int] = 1
    formula: ClassVar[str] = "a + b"

    def kernel(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Callable[[], object]:
        return lambda: torch.add(a, b, out=c)

    def expected(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a + b

    def output(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return c


@WORKLOADS.register("triad")
class Triad(Elementwise):
    name: ClassVar[str] = "triad"
    summary: ClassVar[str] = (
        "STREAM triad a = b + s*c over float32 sizes from in-cache to >> LLC (3N bytes); GB/s"
    )
    flops_per_element: ClassVar[int] = 2
    formula: ClassVar[str] = "b + 1.5 * c"

    def kernel(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Callable[[], object]:
        return lambda: torch.add(b, c, alpha=SCALE, out=a)

    def expected(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.add(b, c, alpha=SCALE)

    def output(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a
