"""Memory bandwidth: the best of five streaming kernels over buffers far beyond the LLC.

Bytes follow the STREAM convention: each element read or written once counts once; copy
and ``mul_`` move 2N x 4 bytes, triad and ``add_`` 3N x 4 bytes.

Why in-place kernels too: on CPUs an out-of-place store first reads the destination cache
line (write-allocate), so copy really moves 3N, not the 2N it is credited with: 1.5x. On the
2-core machine this was written on, ``copy_`` showed 25 GB/s while ``mul_`` (read and write
the same line, no extra read) showed 45 GB/s and the seed benchmark's self-add 60 GB/s, all in
counted bytes. A ceiling from copy alone would put the seed benchmark above 100 % (METHOD.md
§3); the best of the four is the honest denominator. GPUs do not write-allocate from DRAM
(full-sector writes), so there the four land close together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchmark.ceilings.base import random, time_best
from torchmark.devices.base import Device
from torchmark.devices.cache import buffer_bytes, estimate
from torchmark.format import binary_bytes
from torchmark.results import Ceiling

# A scale factor with no exact representation near 1: values drift by 1e-7 per call, so
# nothing overflows or turns subnormal however long the rule runs.
SCALE = 1.0000001


@dataclass(frozen=True)
class Kernel:
    name: str
    elements_moved: int  # per element of one buffer: 2 (copy, mul_) or 3 (triad, add_)
    convention: str
    make: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Callable[[], object]]


KERNELS: tuple[Kernel, ...] = (
    Kernel("copy", 2, "2N: read a, write b", lambda a, b, c: lambda: b.copy_(a)),
    Kernel(
        "triad",
        3,
        "3N: read b and c, write a",
        lambda a, b, c: lambda: torch.add(b, c, alpha=SCALE, out=a),
    ),
    Kernel("mul_", 2, "2N: read and write a in place", lambda a, b, c: lambda: a.mul_(SCALE)),
    Kernel("add_", 3, "3N: read a and b, write a", lambda a, b, c: lambda: a.add_(b)),
    # The seed benchmark's own kernel (z0 += z0): read and write one buffer. Values double per
    # call and reach inf after ~128 calls; inf arithmetic runs at full speed on CPUs and GPUs
    # (unlike subnormals), so the timing is unaffected. Last in the list: it spoils ``c``.
    # On the 2-core machine this was written on it beat mul_ (66.9 vs 63.4 GB/s best sample),
    # so without it the seed benchmark itself read above 100 % of the ceiling.
    Kernel(
        "self_add_", 2, "2N: read and write c in place (c += c)", lambda a, b, c: lambda: c.add_(c)
    ),
)


def bytes_per_call(kernel: Kernel, n_elements: int, element_size: int = 4) -> int:
    return kernel.elements_moved * n_elements * element_size


def measure(device: Device, *, quick: bool) -> list[Ceiling]:
    """``bandwidth`` (best kernel, best sample) plus ``bandwidth:<kernel>`` for each."""
    size = buffer_bytes(device)
    n = size // 4
    a, b, c = (random(n, device) for _ in range(3))
    llc = device.cache_bytes() or None
    counted = estimate(device)
    where = (
        f"{size / counted.bytes:.0f}x the {binary_bytes(counted.bytes)} last-level cache"
        + ("" if counted.bytes == llc else f" counted of {binary_bytes(llc)} reported")
        if llc
        else "LLC size unknown"
    )
    per_kernel: dict[str, dict[str, float | str]] = {}
    out: list[Ceiling] = []
    for k in KERNELS:
        m = time_best(k.make(a, b, c), device, quick)
        moved = bytes_per_call(k, n)
        best, median = moved / m.min, moved / m.median
        per_kernel[k.name] = {
            "best_GBps": round(best / 1e9, 2),
            "median_GBps": round(median / 1e9, 2),
            "bytes_per_call": moved,
            "convention": k.convention,
            "samples": m.n,
        }
        out.append(
            Ceiling(
                device=device.name,
                key=f"bandwidth:{k.name}",
                value=best,
                unit="B/s",
                method=(
                    f"{k.name} over {binary_bytes(size)} float32 buffers ({where}); "
                    f"STREAM bytes {k.convention}; best sample"
                ),
                details=dict(per_kernel[k.name]),
            )
        )
    del a, b, c
    top = max(out, key=lambda c: c.value)
    winner = top.key.partition(":")[2]
    summary = Ceiling(
        device=device.name,
        key="bandwidth",
        value=top.value,
        unit="B/s",
        method=(
            f"best of {'/'.join(k.name for k in KERNELS)} over {binary_bytes(size)} float32 "
            f"buffers ({where}); "
            f"STREAM byte convention; best sample (here: {winner})"
        ),
        details={
            "kernels": per_kernel,
            "best_kernel": winner,
            "buffer_bytes": size,
            "llc_bytes": llc,
            "llc_counted_bytes": counted.bytes,
            # what bounds a cache-resident case's rate (ceilings.physical.cache_bound)
            "cores": device.cores(),
            "accelerator": device.is_accelerator,
            "quick": quick,
        },
    )
    return [summary, *out]
