"""Overhead cut from `torchmark run --quick`: planning imports no torch._dynamo, the bandwidth
buffers are random-valued and touched, the import-time objects are frozen for the gc."""

from __future__ import annotations

import subprocess
import sys

import torch

from torchmark.ceilings.base import TILE, random
from torchmark.devices import CPUDevice


def test_planning_model_cases_imports_no_dynamo() -> None:
    """Meta models skip their random initialisers (normal_ has no meta kernel: its Python
    fallback imported torch._dynamo, ~1.2 s of CPU, to plan a run)."""
    code = """
import sys
from torchmark.run.config import RunConfig
from torchmark.run.plan import planned
cases = planned(RunConfig(devices=("cpu",), workloads=("resnet50", "bert-base", "gpt2")))
assert cases, "no cases planned"
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_meta_model_keeps_shapes() -> None:
    from torchmark.workloads.models.meta import _build_on_meta
    from torchmark.workloads.models.resnet import ResNet50Workload

    w = ResNet50Workload()
    sizes = w.plan_sizes(w.plans["quick"], CPUDevice(), "infer")
    meta = _build_on_meta(w, sizes)
    with torch.device("cpu"):
        torch.manual_seed(0)
        real = w.make_model(sizes)
    shapes = [(n, p.shape) for n, p in real.named_parameters()]
    assert [(n, p.shape) for n, p in meta.named_parameters()] == shapes
    assert all(p.is_meta for p in meta.parameters())
    # outside the builder, initialisers on meta tensors still run as usual
    t = torch.empty(4, device="meta")
    assert t.normal_() is t


def test_bandwidth_buffers_are_random_and_full_length() -> None:
    n = 3 * TILE + 5
    x = random(n, CPUDevice())
    assert x.shape == (n,) and x.is_contiguous() and x.dtype == torch.float32
    assert bool((x > 0).any()) and float(x.std()) > 0.2  # uniform on [0, 1): std 0.29
    assert torch.equal(x[:TILE], x[TILE : 2 * TILE])  # one random block, tiled
    small = random(10, CPUDevice())
    assert small.shape == (10,) and len(set(small.tolist())) == 10


def test_command_load_freezes_import_time_objects() -> None:
    code = """
import gc
from torchmark.cli import main
assert gc.get_freeze_count() == 0
main(["history", "--db", "sqlite://"])
print(gc.get_freeze_count() > 10000)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("True")
