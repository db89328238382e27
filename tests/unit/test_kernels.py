"""Which peak an op runs against (hardware/kernels.py) and the op list a step records
(workloads/oplist.py): the rule MFU, profile and predict share."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from torchmark.hardware.kernels import dominant_key, dtype_name, family, peak_key
from torchmark.workloads.oplist import accelerator_optimizers, dense_flops, record

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"


@pytest.mark.parametrize(
    ("op", "fam"),
    [
        ("aten::addmm", "gemm"),
        ("mm", "gemm"),
        ("aten::mkldnn_convolution", "conv"),
        ("cudnn_convolution", "conv"),
        ("aten::copy_", "copy"),
        ("_foreach_add_", "foreach"),
        ("aten::relu", "elementwise"),
        ("native_batch_norm", "norm"),
    ],
)
def test_family_of_an_op_by_its_name(op: str, fam: str) -> None:
    assert family(op) == fam


def test_dtype_names_from_torch_and_from_the_profiler() -> None:
    assert dtype_name(torch.float32) == dtype_name("float") == "float32"
    assert dtype_name("c10::Half") == dtype_name(torch.float16) == "float16"
    assert dtype_name("c10::BFloat16") == "bfloat16"
    assert dtype_name(None) is None and dtype_name("c10::complex<float>") is None


def test_tf32_rule_on_an_accelerator_only() -> None:
    torch_default = {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": True}
    # cuDNN runs fp32 convolutions as TF32 by default, cuBLAS fp32 GEMMs not
    assert peak_key("conv", "float32", True, torch_default) == "matmul:tf32"
    assert peak_key("gemm", "float32", True, torch_default) == "matmul:float32"
    high = {"float32_matmul_precision": "high", "cudnn_allow_tf32": False}
    assert peak_key("gemm", "float32", True, high) == "matmul:tf32"
    assert peak_key("conv", "float32", True, high) == "matmul:float32"
    # a CPU has no TF32; a low precision is its own peak everywhere
    assert peak_key("conv", "float32", False, torch_default) == "matmul:float32"
    assert peak_key("gemm", "bfloat16", True, high) == "matmul:bfloat16"


def test_dominant_key_weighs_the_dense_flops_alone() -> None:
    flops = [("gemm", "float32", 1e9), ("conv", "float32", 3e9), ("elementwise", "float32", 9e9)]
    assert dominant_key(flops, True, {"cudnn_allow_tf32": True}) == ("matmul:tf32", 0.75)
    assert dominant_key(flops, False) == ("matmul:float32", 1.0)
    assert dominant_key([("elementwise", "float32", 5.0)], True) == (None, 0.0)


def _cnn() -> torch.nn.Module:
    from torchmark.user import spec

    return spec.load(f"{FIX}/cnn.py:make_model").model


@pytest.mark.parametrize("train", [False, True])
def test_recorded_flops_are_the_flop_counters(train: bool) -> None:
    torch.manual_seed(0)
    model = _cnn().train(train)
    x = torch.randn(2, 3, 16, 16)

    def step() -> object:
        if not train:
            with torch.no_grad():
                return model(x)
        out = model(x)
        out.sum().backward()
        return out

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    _, ops = record(step)
    assert sum(o.flops for o in ops) == counter.get_total_flops() > 0
    dense = dense_flops(ops)
    assert {f for f, _, _ in dense} <= {"conv", "gemm"}  # no copy_ credited with FLOPs
    assert all(d == "float32" for _, d, _ in dense)


def test_views_launch_nothing_and_bytes_count_inputs_and_outputs() -> None:
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    _, ops = record(lambda: (a @ b).t())
    by = {o.name: o for o in ops}
    assert by["mm"].kernel and by["mm"].bytes == 4 * (32 * 64 + 64 * 16 + 32 * 16)
    assert by["mm"].flops == 2 * 32 * 64 * 16 and by["mm"].family == "gemm"
    assert not by["t"].kernel and by["t"].bytes == 0


def test_accelerator_optimizers_take_the_foreach_step() -> None:
    p = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]
    for x in p:
        x.grad = torch.randn(4)
    with accelerator_optimizers():
        opt = torch.optim.SGD(p, lr=0.1, momentum=0.9)
    _, ops = record(opt.step)
    assert any(o.family == "foreach" for o in ops)
    assert torch.optim.SGD(p, lr=0.1).defaults.get("foreach") is None  # restored
