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


def test_kernels_get_short_names_and_each_step_counts_once() -> None:
    from torchmark.profile.names import short_name

    x = torch.randn(8, 64, 32, 32, device="cuda")
    bn = torch.nn.BatchNorm2d(64).cuda()

    def step() -> None:
        bn(x).clamp_(min=0.0).add_(1.0)  # batch norm, a clamp lambda, an add functor

    got = capture(step, CUDADevice(0), active=4)
    # Kineto's copy of each ProfilerStep on the GPU timeline is not a step of its own
    assert got.breakdown.steps == 4
    names = {short_name(n): n for n in got.breakdown.ops}
    assert not any(s.startswith("void ") or ("(" in s and "<" in s) for s in names), names
    assert all(len(s) <= 60 for s in names), names
