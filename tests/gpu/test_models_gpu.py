"""Model workloads on a CUDA GPU: every GPU-only variant runs and passes its fp32 check."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchmark.results import Result
from torchmark.run.case import run_case
from torchmark.run.config import RunConfig
from torchmark.workloads import WORKLOADS, Case, load_builtins

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CFG = RunConfig(rule="test", ceilings=False, telemetry=False)


def run(name: str, **params: Any) -> Result:
    from torchmark.devices import CUDADevice

    load_builtins()
    case = Case(name, str(params["scenario"]), CUDADevice(0), tuple(params.items()))
    return run_case(WORKLOADS.get(name)(), case, {}, CFG)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("resnet50", {"scenario": "train", "precision": "amp-bf16+channels-last", "batch": 8}),
        ("resnet50", {"scenario": "infer", "precision": "amp-bf16+cuda-graphs", "batch": 1}),
        ("resnet50", {"scenario": "infer-e2e", "precision": "fp32", "batch": 4}),
        ("bert-base", {"scenario": "infer", "precision": "tf32", "batch": 8, "seq": 128}),
        ("bert-base", {"scenario": "train", "precision": "amp-fp16", "batch": 4, "seq": 128}),
        ("gpt2", {"scenario": "train", "precision": "amp-bf16", "batch": 2, "seq": 256}),
        ("gpt2", {"scenario": "decode", "precision": "amp-bf16", "batch": 1, "seq": 64,
                  "new_tokens": 16}),
        ("simplenet", {"scenario": "infer", "precision": "cuda-graphs", "batch": 64}),
    ],
)  # fmt: skip
def test_gpu_variant_runs_and_matches_fp32(name: str, params: dict[str, Any]) -> None:
    r = run(name, **params)
    assert r.status == "ok", r.reason
    assert r.timing == ("e2e" if params["scenario"] == "infer-e2e" else "device")
    assert 0 <= r.extra["max_error"] <= r.extra["tolerance"]
    assert r.extra["peak_memory_bytes"] > 0


def test_int8_dynamic_is_skipped_on_the_gpu() -> None:
    r = run("simplenet", scenario="infer", precision="int8-dynamic", batch=8)
    assert r.status == "skipped" and "CPU only" in (r.reason or "")


def test_out_of_memory_batch_is_skipped_not_crashed() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    # fp32 ResNet-50 training keeps ~100-150 MB of activations per 224x224 image, so one
    # image per 50 MB of GPU memory needs 2-3x the memory there is
    batch = int(total // 50_000_000)
    r = run("resnet50", scenario="train", precision="fp32", batch=batch)
    assert r.status == "skipped" and "out of memory" in (r.reason or "")
