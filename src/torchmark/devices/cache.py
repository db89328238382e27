"""The last-level cache: its size (one fallback when unreadable) and the "beyond cache" rule.

One rule for every bandwidth figure (METHOD.md §3): a working set counts as memory traffic
only at >= 8x the LLC. At 4x the 32 MiB LLC of the 2-core machine this was written on,
in-place ``mul_`` (working set = one buffer) read 60-90 GB/s against 50-60 GB/s at 8x
(counted bytes): a sign the smaller buffer was still partly cached. Ceilings and the
elementwise sweep size and classify their buffers here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchmark.devices.base import Device

MiB = 2**20
BEYOND = 8  # working set / LLC from which no cache helps (METHOD.md §3)
# When a device cannot say (cache_bytes() is None). 32 MiB is the LLC of the machine this
# was written on; 8x it is the 256 MiB floor below, so an unknown LLC sizes at the floor.
FALLBACK_LLC = 32 * MiB
# Buffers for bandwidth ceilings are this big at the least, whatever the LLC.
MIN_BUFFER = 256 * MiB


def llc(device: Device) -> int:
    """The device's last-level cache in bytes, or FALLBACK_LLC when it cannot be read."""
    return device.cache_bytes() or FALLBACK_LLC


def beyond_cache(device: Device) -> int:
    """Bytes per buffer that no cache can help: BEYOND x the LLC, >= MIN_BUFFER."""
    return max(BEYOND * llc(device), MIN_BUFFER)


def is_beyond_cache(working_set: int, device: Device) -> bool:
    """Whether ``working_set`` bytes are memory traffic, not (partly) cache traffic."""
    return working_set >= BEYOND * llc(device)


def buffer_bytes(device: Device) -> int:
    """Bytes per buffer for the bandwidth ceiling's kernels: ``beyond_cache``, in quick mode
    too, so that every kernel's working set (one to three buffers) is beyond the cache.
    Three buffers must fit in 3/8 of the device's memory, so a small GPU is not pushed out
    of memory by its own ceiling.
    """
    want = beyond_cache(device)
    total = device.total_memory_bytes()
    if total:
        want = min(want, total // 8)
    return int(want // 4 * 4)
