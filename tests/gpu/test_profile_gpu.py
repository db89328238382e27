"""The GPU breakdown on a real CUDA trace (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from torchmark.devices import CUDADevice
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.capture import capture

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
    from torchmark.kinds.profile.names import short_name

    x = torch.randn(8, 64, 32, 32, device="cuda")
    bn = torch.nn.BatchNorm2d(64).cuda()

    def step() -> None:
        bn(x).clamp_(min=0.0).add_(1.0)  # batch norm, a clamp lambda, an add functor

    got = capture(step, CUDADevice(0), active=4)
    # Kineto's copy of each ProfilerStep on the GPU timeline is not a step of its own
    assert got.breakdown.steps == 4
    names = {short_name(n): n for n in got.breakdown.ops}
    assert not any(s.startswith("void ") or ("(" in s and "<" in s) for s in names), names
    assert all(len(s) <= 90 for s in names), names  # the H100 trace's longest: 88


def test_a_gemm_kernel_takes_its_matmul_flops_and_memory_is_split_by_role() -> None:
    from torchmark.kinds.profile.memory import capture_memory
    from torchmark.kinds.profile.ops import top_ops

    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    got = capture(lambda: a @ b, CUDADevice(0), active=3)
    rows = top_ops(got.breakdown, got.flops, {}, None, flops_by_call=got.flops_by_call)
    gemm = rows[0]  # the one kernel of aten::mm, by far the longest
    assert gemm.flops == pytest.approx(2 * 2048**3, rel=1e-6), rows
    assert gemm.bytes == 2 * 2048 * 2048 * 4 and gemm.flop_rate

    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 1024, device="cuda")

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    mem = capture_memory(train, CUDADevice(0))
    held = {m["name"]: m["bytes"] for m in mem["categories"]}
    assert sum(held.values()) == mem["peak_bytes"]
    params = 4 * (1024 * 1024 + 1024)
    assert held["parameters"] >= params and held["optimizer state"] >= 2 * params


def test_allocator_peaks_are_read_per_step_allocated_within_reserved() -> None:
    a = torch.randn(256, 256, device="cuda")

    def step() -> None:
        torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda").fill_(1)  # 64 MiB, freed
        a.relu()

    got = capture(step, CUDADevice(0), active=2)
    assert len(got.step_memory) == 2
    for m in got.step_memory:
        assert m.reserved_bytes is not None
        assert 64 * 2**20 <= m.allocated_bytes <= m.reserved_bytes
