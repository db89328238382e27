"""The input pipeline's copy paths on a real CUDA GPU (skipped without one): batches land
intact through each path, the side stream hides the copy behind the compute, pinned
copies beat pageable ones."""

from __future__ import annotations

import pytest
import torch

from torchmark.devices import CUDADevice
from torchmark.workloads.pipeline.feed import FedEpoch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

SHAPE = (64, 3, 224, 224)  # one resnet50 batch: 38.5 MB of float32


def batches(n: int, pin: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        x, y = torch.randn(SHAPE, generator=g), torch.full((SHAPE[0],), i)
        out.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
    return out


def busy(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    torch.cuda._sleep(5_000_000)  # ~2-3 ms of device time at ~2 GHz: longer than the copy
    return x.sum() + y.sum()


@pytest.mark.parametrize(
    ("pin", "nb", "side"), [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 1, 1)]
)
def test_every_copy_path_delivers_the_batches(pin: int, nb: int, side: int) -> None:
    device = CUDADevice(0)
    want = batches(3, bool(pin))
    e = FedEpoch(want, busy, device, non_blocking=bool(nb), side_stream=bool(side))
    got = e.copied(want)
    assert all(
        torch.equal(x, wx) and torch.equal(y, wy)
        for (x, y), (wx, wy) in zip(got, want, strict=True)
    )
    e()
    assert e.steps_per_epoch == 3


def test_side_stream_hides_the_copy_and_pinned_beats_pageable() -> None:
    device = CUDADevice(0)
    side = FedEpoch(batches(8, True), busy, device, side_stream=True)
    for _ in range(3):
        side()
    b = side.breakdown(skip_epochs=1)
    assert b["overlap_ideal"] > 0.5  # 7 of 8 copies have a compute beside them
    assert b["overlap"] > 0.5 * b["overlap_ideal"], b
    rates = {}
    for pin in (True, False):
        e = FedEpoch(batches(4, pin), busy, device, non_blocking=pin)
        for _ in range(3):
            e()
        br = e.breakdown(skip_epochs=1)
        rates[pin] = br["batch_bytes"] / br["copy_device_s"]
    assert rates[True] > rates[False], rates
    print(f"overlap {b['overlap']:.2f} of ideal {b['overlap_ideal']:.2f}; H2D GB/s", rates)
