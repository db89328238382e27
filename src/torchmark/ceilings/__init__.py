"""Ceilings: each device's physical limits, measured (METHOD.md §3).

``measure(device, quick=...)`` returns them all: memory bandwidth (``bandwidth`` and one
``bandwidth:<kernel>`` each), matmul peak per dtype (``matmul:<dtype>``), host <-> device
transfer (``h2d:pinned`` ... accelerators only) and the dispatch floor (``dispatch``).

A workload's % of ceiling divides by the *measured* value (best sample); the datasheet
figure, where the device is in ``datasheet.SPECS``, rides along as ``theoretical`` with its
source, so a report can show both denominators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchmark.hardware import datasheet  # torch-free; the measuring modules load in measure()
from torchmark.results import Ceiling

if TYPE_CHECKING:
    from torchmark.devices.base import Device

__all__ = ["measure", "planned", "with_theoretical"]


def measure(device: Device, *, quick: bool) -> list[Ceiling]:
    """Every ceiling of ``device``; quick mode uses smaller buffers and shorter rules."""
    from torchmark.ceilings import bandwidth, dispatch, matmul, transfer

    found: list[Ceiling] = []
    for part in (bandwidth, matmul, transfer, dispatch):
        found += part.measure(device, quick=quick)
    device.empty_cache()
    return with_theoretical(found, device)


def planned(device: Device, *, quick: bool) -> tuple[int, int]:
    """What ``measure`` will do, for a plan's estimate: (timed measurements at most, bytes
    of the largest buffers held at once)."""
    from torchmark.ceilings import bandwidth, matmul, transfer
    from torchmark.devices.cache import buffer_bytes

    precisions = [p for p in matmul.PRECISIONS if device.is_accelerator or not p.accelerator_only]
    sizes = matmul.sizes(device, quick)
    timed = (
        len(bandwidth.KERNELS)
        + len(precisions) * (len(sizes) + len(matmul.CONV_SHAPES))
        + (len(transfer.DIRECTIONS) if device.is_accelerator else 0)
        + 1  # dispatch
    )
    largest = max(3 * buffer_bytes(device), 3 * 4 * max(sizes) ** 2)
    return timed, largest


def with_theoretical(ceilings: list[Ceiling], device: Device) -> list[Ceiling]:
    """Attach the datasheet peak to each ceiling the table has a figure for."""
    spec = datasheet.lookup(str(device.info().get("model") or ""), device.total_memory_bytes())
    if spec is None:
        return ceilings
    out = []
    for c in ceilings:
        peak = spec.peak(c.key)
        if peak is not None and c.theoretical is None:
            c = c.model_copy(
                update={"theoretical": peak, "theoretical_source": f"{spec.model}: {spec.source}"}
            )
        out.append(c)
    return out
