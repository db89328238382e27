"""``transfer``: host -> device and device -> host copies, pinned and pageable, over sizes.

On a device with no host-device link (the CPU) the one planned case is skipped with the
reason, so the user sees why there is no row rather than silence.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from torchmark.ceilings.transfer import DIRECTIONS, buffers, copier
from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, OutOfMemory, WrongResultError
from torchmark.results import Work, link_ceiling
from torchmark.workloads.base import (
    WORKLOADS,
    Case,
    PlanOptions,
    Prepared,
    Workload,
    swept,
    table_suite,
)
from torchmark.workloads.micro._common import KiB, MiB, fits, geometric, rule_for, sizes_or

# 64 KiB (latency-bound: ~10 µs of set-up is most of it) to 1 GiB (bandwidth-bound).
SIZES = {
    "quick": [MiB, 64 * MiB],
    "standard": geometric(64 * KiB, 1024 * MiB, 4),
    "full": geometric(4 * KiB, 1024 * MiB, 2),
}


@WORKLOADS.register("transfer")
class Transfer(Workload):
    name: ClassVar[str] = "transfer"
    summary: ClassVar[str] = (
        "host<->device copy_ GB/s, pinned and pageable, 64 KiB to 1 GiB (accelerators only); "
        "--size sets bytes"
    )
    in_quick: ClassVar[bool] = False

    def describe(self) -> dict[str, Any]:
        return {"variants": [d.key.replace(":", "-") for d in DIRECTIONS]}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = rule_for(opts.suite)
        if not device.is_accelerator:
            return [Case(self.name, "h2d/d2h", device, rule=rule)]
        return [
            Case(
                self.name,
                d.key.replace(":", "-"),
                device,
                (("bytes", nbytes),),
                sweep=f"{self.name}/{d.key}/{device.name}",
                rule=rule,
            )
            for d in DIRECTIONS
            for nbytes in self.sizes(device, opts)
        ]

    @staticmethod
    def sizes(device: Device, opts: PlanOptions) -> list[int]:
        # a GPU's standard suite: 4x steps
        return sizes_or(opts, list(swept(SIZES[table_suite(opts.suite)], opts.suite, device)))

    def memory_bytes(self, case: Case) -> int | None:
        return 2 * int(case.param_dict.get("bytes", 0))  # source and destination

    def prepare(self, case: Case) -> Prepared:
        device = case.device
        if not device.is_accelerator:
            raise CaseSkipped(f"not available: {device.name} has no host-device transfer")
        direction = next(d for d in DIRECTIONS if d.key == case.variant.replace("-", ":"))
        nbytes = int(case.param_dict["bytes"]) // 4 * 4
        if nbytes < 4:
            raise CaseSkipped(f"bytes must be >= 4, got {case.param_dict['bytes']}")
        if not fits(device, nbytes, 1):
            raise OutOfMemory(f"out of memory at {nbytes} bytes")
        src, dst = buffers(device, nbytes, direction.to_device, direction.pinned)
        fn = copier(src, dst, direction.pinned)

        def check() -> list[str]:
            fn()
            device.synchronize()
            if not torch.equal(src.cpu(), dst.cpu()):
                raise WrongResultError(f"{case.variant} copy does not match its source")
            return []

        return Prepared(
            fn=fn,
            work=Work(bytes=nbytes, items=1, item_unit="copy"),
            headline="bytes",
            ceiling=link_ceiling(direction.key),
            notes=[] if direction.pinned else [PAGEABLE_NOTE],
            check=check,
            timing="e2e",  # the copy is the work; a pageable copy is staged by the host
            rule=case.rule or "micro",
        )


PAGEABLE_NOTE = (
    "pageable: % of ceiling is against the pinned rate of the same direction, the link's "
    "limit; the gap is what pinning the host buffer would win"
)
