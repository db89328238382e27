"""Dispatch floor: the end-to-end time of a tiny op, synchronize included.

The median, not the best sample: this is a floor every small step pays, typically, not a
limit the hardware can be pushed to (on a CPU ~2-5 µs of framework overhead; on a GPU a
launch plus a sync, ~10-20 µs).
"""

from __future__ import annotations

import torch

from torchmark.ceilings.base import time_best
from torchmark.devices.base import Device
from torchmark.results import Ceiling


def measure(device: Device, *, quick: bool) -> list[Ceiling]:
    a = torch.rand(1, device=device.torch_device)
    b = torch.rand(1, device=device.torch_device)

    def tiny() -> None:
        torch.add(a, b)
        device.synchronize()

    m = time_best(tiny, device, quick, timing="e2e")
    return [
        Ceiling(
            device=device.name,
            key="dispatch",
            value=m.median,
            unit="s",
            method=(
                "torch.add of two 1-element float32 tensors, then synchronize; end to end "
                "(host clock); median"
            ),
            details={
                "best_s": m.min,
                "iqr_s": m.iqr,
                "samples": m.n,
                "calls_per_sample": m.calls_per_sample,
            },
        )
    ]
