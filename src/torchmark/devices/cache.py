"""The last-level cache: its size (bounded, one fallback when unreadable), the "beyond cache"
rule, and how big a buffer the machine can spare.

One rule for every bandwidth figure (METHOD.md §3): a working set counts as memory traffic
only at >= 8x the LLC. At 4x the 32 MiB LLC of the 2-core machine this was written on,
in-place ``mul_`` (working set = one buffer) read 60-90 GB/s against 50-60 GB/s at 8x
(counted bytes): a sign the smaller buffer was still partly cached. Ceilings and the
elementwise sweep size and classify their buffers here and nowhere else.

What a device reports is not what a process can use: a 2-vCPU VM reports its host's whole
480 MiB L3 (the lent GPU hosts 300 MiB), and 8x that sized three 2.9 GiB ceiling buffers and
three 2 GiB add/triad buffers (a quick run peaked at 9.5 GB RSS; two at once, one was killed
for memory). So the host's figure is bounded by what its cores can hold (``LLC_PER_CORE``
per logical CPU, at most ``LLC_MAX``), and each buffer by a share of the memory available
when the run is planned. On that VM ``mul_`` read the same at 256 MiB and at 2 GiB buffers
(12.2 vs 12.3 GB/s best of 8, load 5): the 480 MiB were never the process's to use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchmark.devices.base import Device

MiB = 2**20
BEYOND = 8  # working set / LLC from which no cache helps (METHOD.md §3)
# When a device cannot say (cache_bytes() is None). 32 MiB is the LLC of the machine this
# was written on; 8x it is the 256 MiB floor below, so an unknown LLC sizes at the floor.
FALLBACK_LLC = 32 * MiB
# Buffers for bandwidth ceilings are this big at the least, whatever the LLC (unless the
# memory available cannot spare it: ``buffer_cap`` wins).
MIN_BUFFER = 256 * MiB
# Physical bounds on a host's LLC. Per logical CPU: the most any shipping server part gives
# a core is ~12 MiB (AMD's 3D V-Cache: 96 MiB per 8-core die); Intel Xeon 6 has ~4, EPYC
# Genoa 4. Absolute: 512 MiB, a whole socket of the largest parts; 8x it is 4 GiB a buffer.
LLC_PER_CORE = 16 * MiB
LLC_MAX = 512 * MiB
# One buffer may take this share of the memory available: ceilings and add/triad hold three
# at a time (3/16, 19 % of what is free), so four runs started together on one machine
# still fit (the probe: four quick runs on a 24 GB VM, two were killed).
BUFFER_SHARE = 16
# ... and of the device's total memory, three buffers within 3/8 of it (a small GPU is not
# pushed out of memory by its own ceiling).
TOTAL_SHARE = 8


@dataclass(frozen=True)
class LLC:
    """The LLC estimate buffers are sized from: ``bytes`` (the figure used), what the device
    ``reported`` (None: it could not say), and ``why`` in words."""

    bytes: int
    reported: int | None
    why: str


def estimate(device: Device) -> LLC:
    """The device's last-level cache, bounded as the module docstring says."""
    from torchmark.format import binary_bytes

    reported = device.cache_bytes()
    if not reported:
        return LLC(FALLBACK_LLC, None, f"LLC unknown: {binary_bytes(FALLBACK_LLC)} assumed")
    bounds: list[tuple[int, str]] = [(LLC_MAX, f"at most {binary_bytes(LLC_MAX)}")]
    cores = device.cores()
    if cores and not device.is_accelerator:
        bounds.append(
            (LLC_PER_CORE * cores, f"{binary_bytes(LLC_PER_CORE)} x {cores} logical CPUs")
        )
    bound, how = min(bounds)
    if reported <= bound:
        return LLC(reported, reported, f"LLC {binary_bytes(reported)}")
    return LLC(
        bound,
        reported,
        f"LLC reported {binary_bytes(reported)}, counted as {binary_bytes(bound)} ({how}: a "
        "VM reports its host's cache)",
    )


def llc(device: Device) -> int:
    """The device's last-level cache in bytes, bounded (``estimate``)."""
    return estimate(device).bytes


def buffer_cap(device: Device) -> tuple[int | None, str]:
    """The largest one buffer may be, and why (None: nothing known bounds it)."""
    from torchmark.format import binary_bytes

    caps: list[tuple[int, str]] = []
    free = device.plan_memory_bytes()  # the plan's one reading (run.plan.make_plan)
    if free:
        caps.append((free // BUFFER_SHARE, f"1/{BUFFER_SHARE} of {binary_bytes(free)} available"))
    total = device.total_memory_bytes()
    if total:
        caps.append((total // TOTAL_SHARE, f"1/{TOTAL_SHARE} of {binary_bytes(total)} memory"))
    if not caps:
        return None, "memory unknown"
    cap, why = min(caps)
    return cap // MiB * MiB or cap, why


def beyond_cache(device: Device) -> int:
    """Bytes per buffer that no cache can help: BEYOND x the LLC, >= MIN_BUFFER."""
    return max(BEYOND * llc(device), MIN_BUFFER)


def is_beyond_cache(working_set: int, device: Device) -> bool:
    """Whether ``working_set`` bytes are memory traffic, not (partly) cache traffic."""
    return working_set >= BEYOND * llc(device)


def buffer_bytes(device: Device) -> int:
    """Bytes per buffer for the bandwidth ceiling's kernels: ``beyond_cache``, in quick mode
    too, so that every kernel's working set (one to three buffers) is beyond the cache, but
    no more than ``buffer_cap``."""
    want = beyond_cache(device)
    cap, _ = buffer_cap(device)
    if cap:
        want = min(want, cap)
    return int(want // 4 * 4)


def sizing(device: Device) -> str:
    """One line for ``--dry-run``: the LLC counted, the bound on a buffer, and the size."""
    from torchmark.format import binary_bytes

    cap, why = buffer_cap(device)
    size = buffer_bytes(device)
    limit = f"<= {binary_bytes(cap)} ({why})" if cap else f"unbounded ({why})"
    bound = "the memory bound" if cap is not None and size >= cap else f"{BEYOND}x the LLC"
    return (
        f"{device.name}: {estimate(device).why}; a buffer {limit}; ceiling buffers "
        f"{binary_bytes(size)} ({bound})"
    )
