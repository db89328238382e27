"""Helpers the micro-benchmarks share: stopping preset per suite, cache-aware sizes."""

from __future__ import annotations

from torchmark.ceilings.base import MiB
from torchmark.devices.base import Device
from torchmark.workloads.base import PlanOptions, Suite

KiB = 2**10


def rule_for(suite: Suite) -> str:
    """--quick keeps each case to ~1-2 s (timing/stopping.py: "quick"); the rest want 0.5 %."""
    return "quick" if suite == "quick" else "micro"


def room_bytes(device: Device) -> int | None:
    """What a case may hold on the device: half the memory, and half of what is available
    now (the smaller); None where neither is known."""
    room = [m for m in (device.total_memory_bytes(), device.plan_memory_bytes()) if m]
    return min(room) // 2 if room else None


# A quick run's promise: the whole process within 2 GB resident, on any machine,
# so a quick run fits a CI runner or a loaded box beside other jobs. What the process holds
# besides one case's buffers comes off it: torch's own pages (0.28 GB, `python -c "import
# torch"`) and the run's heap (0.26-0.32 GB at plan time, more by its end). A constant, not
# the process's size now: a resumed run plans the same sizes as its first part (its stored
# results match no case otherwise), whatever its process holds when it plans.
QUICK_PEAK_BYTES = 2_000_000_000
QUICK_HELD_BYTES = 450 * MiB
QUICK_CASE_BYTES = QUICK_PEAK_BYTES - QUICK_HELD_BYTES  # what one case may hold on the host


def fits(device: Device, nbytes: int, buffers: int) -> bool:
    """Whether ``buffers`` buffers of ``nbytes`` leave room (``room_bytes``) on the device."""
    room = room_bytes(device)
    return room is None or buffers * nbytes <= room


def geometric(lo: int, hi: int, step: int) -> list[int]:
    """lo, lo*step, ... up to the first value >= hi."""
    out = [lo]
    while out[-1] < hi:
        out.append(out[-1] * step)
    return out


def sizes_or(opts: PlanOptions, default: list[int]) -> list[int]:
    return list(opts.sizes) if opts.sizes else default


__all__ = [
    "QUICK_CASE_BYTES",
    "QUICK_HELD_BYTES",
    "QUICK_PEAK_BYTES",
    "KiB",
    "MiB",
    "fits",
    "geometric",
    "room_bytes",
    "rule_for",
    "sizes_or",
]
