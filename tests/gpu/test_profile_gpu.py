"""The GPU breakdown on a real CUDA trace (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from torchmark.devices import CUDADevice
from torchmark.profile import categories as c
from torchmark.profile.capture import capture

pytestmark = pytest.mark.gpu


def test_a_real_gpu_capture_adds_up_and_sees_kernels_and_launches() -> None:
    a = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, 256, device="cuda")

    def step() -> None:
        (a @ b).relu_()

    got = capture(step, CUDADevice(0), active=3)
    bd = got.breakdown
    assert bd.kind == "gpu" and bd.steps == 3
    assert sum(bd.categories.values()) == pytest.approx(bd.wall_us)
    assert bd.categories[c.COMPUTE] > 0
    # a small matmul and a relu per step: the GPU mostly waits for the host to launch
    assert bd.categories[c.HOST_WAIT] > bd.categories[c.IDLE_UNKNOWN]
    assert not any(c._SYNC.search(name) for name in bd.ops)
