"""Host <-> device copies, pinned and pageable, per direction (accelerators only).

Timed end to end (host clock + synchronize): the copy is the work, and a pageable copy is
staged through a driver buffer by the host, so device events would miss part of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchmark.ceilings.base import MiB, time_best
from torchmark.devices.base import Device
from torchmark.format import binary_bytes
from torchmark.results import Ceiling

# 256 MiB: far past the ~1-8 MiB where per-copy set-up stops mattering (PCIe latency ~10 µs
# is 0.1 % of a 256 MiB copy at 25 GB/s); quick mode halves it.
SIZE = {True: 128 * MiB, False: 256 * MiB}


@dataclass(frozen=True)
class Direction:
    key: str  # "h2d:pinned", ...
    to_device: bool
    pinned: bool


DIRECTIONS: tuple[Direction, ...] = tuple(
    Direction(f"{d}:{mem}", d == "h2d", mem == "pinned")
    for d in ("h2d", "d2h")
    for mem in ("pinned", "pageable")
)


def buffers(
    device: Device, nbytes: int, to_device: bool, pinned: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination): both filled with random data, so no page is untouched."""
    n = nbytes // 4
    host = torch.rand(n)
    if pinned:
        host = host.pin_memory()
    dev = torch.rand(n, device=device.torch_device)
    return (host, dev) if to_device else (dev, host)


def copier(src: torch.Tensor, dst: torch.Tensor, pinned: bool) -> Callable[[], object]:
    # non_blocking only changes anything for pinned memory; the timer's sync waits for it.
    return lambda: dst.copy_(src, non_blocking=pinned)


def measure(device: Device, *, quick: bool) -> list[Ceiling]:
    if not device.is_accelerator:
        return []
    nbytes = SIZE[quick]
    out = []
    for d in DIRECTIONS:
        src, dst = buffers(device, nbytes, d.to_device, d.pinned)
        m = time_best(copier(src, dst, d.pinned), device, quick, timing="e2e")
        del src, dst
        out.append(
            Ceiling(
                device=device.name,
                key=d.key,
                value=nbytes / m.min,
                unit="B/s",
                method=(
                    f"{'host to device' if d.to_device else 'device to host'} copy_ of "
                    f"{binary_bytes(nbytes)} float32 from/to "
                    f"{'pinned' if d.pinned else 'pageable'} host memory; end to end "
                    "(host clock + synchronize); best sample"
                ),
                details={
                    "bytes_per_copy": nbytes,
                    "best_GBps": round(nbytes / m.min / 1e9, 2),
                    "median_GBps": round(nbytes / m.median / 1e9, 2),
                    "samples": m.n,
                },
            )
        )
    return out
