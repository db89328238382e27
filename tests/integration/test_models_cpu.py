"""Real CPU runs of every model scenario at tiny sizes, through ``case.run_case``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchmark import variants
from torchmark.devices import CPUDevice
from torchmark.results import Ceiling, Result
from torchmark.run.case import run_case
from torchmark.run.config import RunConfig
from torchmark.workloads import WORKLOADS, Case, load_builtins
from torchmark.workloads.models.base import Sizes

load_builtins()
CFG = RunConfig(rule="test", ceilings=False, telemetry=False)
FAKE_PEAK = {
    key: Ceiling(device="cpu", key=key, value=v, unit=u, method="test")  # type: ignore[arg-type]
    for key, v, u in [
        ("matmul:float32", 1e12, "FLOP/s"),
        ("matmul:bfloat16", 1e12, "FLOP/s"),
        ("matmul:int8", 1e12, "FLOP/s"),
        ("bandwidth", 1e11, "B/s"),
    ]
}


pytestmark = pytest.mark.usefixtures("one_thread")


def run(name: str, **params: Any) -> Result:
    case = Case(name, str(params["scenario"]), CPUDevice(), tuple(params.items()))
    return run_case(WORKLOADS.get(name)(), case, FAKE_PEAK, CFG)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("simplenet", {"scenario": "infer", "precision": "fp32", "batch": 16}),
        ("simplenet", {"scenario": "train", "precision": "fp32", "batch": 16}),
        ("simplenet", {"scenario": "infer", "precision": "int8-dynamic", "batch": 16}),
        ("simplenet", {"scenario": "train", "precision": "amp-bf16", "batch": 16}),
        ("linear10", {"scenario": "infer-e2e", "precision": "fp32", "batch": 1000}),
        ("resnet50", {"scenario": "infer", "precision": "channels-last", "batch": 1, "image": 32}),
        (
            "bert-base",
            {
                "scenario": "infer",
                "precision": "fp32",
                "batch": 2,
                "seq": 8,
                "layers": 1,
                "vocab": 512,
            },
        ),
        (
            "gpt2",
            {
                "scenario": "prefill",
                "precision": "fp32",
                "batch": 1,
                "seq": 8,
                "layers": 1,
                "vocab": 512,
            },
        ),
    ],
)
def test_tiny_case_runs_and_is_checked(name: str, params: dict[str, Any]) -> None:
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    r = run(name, **params)
    # build set the variant's TF32 flags once; the Prepared's teardown put them back
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags
    assert r.status == "ok", r.reason
    assert r.extra["max_error"] <= r.extra["tolerance"]
    assert r.work.flops > 0 and r.work.items >= params["batch"]
    assert r.throughput is not None and r.throughput.value > 0
    assert r.ceiling is not None
    assert r.ceiling.key == variants.parse(params["precision"]).ceiling
    m = r.measurement
    assert r.extra["latency_p50_s"] == m.median > 0
    if m.calls_per_sample == 1 and m.n >= 20:
        assert r.extra["latency_p99_s"] >= r.extra["latency_p90_s"] > 0
    else:  # tails of multi-call means, or of a handful of samples, are not reported
        assert "latency_p90_s" not in r.extra and "latency_p99_s" not in r.extra
    assert any("max error vs fp32" in n for n in r.notes)


def test_simplenet_train_reports_the_seed_training_time_as_derived() -> None:
    r = run("simplenet", scenario="train", precision="fp32", batch=100)
    assert r.status == "ok", r.reason
    assert r.extra["seed_training_steps"] == 10 * 100
    assert "derived" in r.extra["seed_training_note"]


def test_gpt2_train_and_decode_tiny() -> None:
    train = run("gpt2", scenario="train", precision="fp32", batch=1, seq=8, layers=1, vocab=512)
    assert train.status == "ok", train.reason
    assert train.work.items == 8 and train.work.item_unit == "tokens"
    dec = run(
        "gpt2",
        scenario="decode",
        precision="fp32",
        batch=2,
        seq=8,
        new_tokens=3,
        layers=1,
        vocab=512,
    )
    assert dec.status == "ok", dec.reason
    assert dec.work.items == 2 * 3 and dec.work.bytes > 0
    assert dec.ceiling is not None and dec.ceiling.key == "bandwidth"
    assert dec.pct_of_ceiling is not None
    median = dec.median_s
    assert median is not None
    assert dec.extra["per_token_latency_s"] == pytest.approx(median / 3)
    assert any("in total across the batch" in n for n in dec.notes)


def test_padded_gpt2_trains_and_says_what_is_padded() -> None:
    r = run("gpt2-padded", scenario="train", precision="fp32", batch=1, seq=8, layers=1, vocab=500)
    assert r.status == "ok", r.reason
    note = "vocabulary padded from 500 to 512 (a multiple of 64); the 12 extra logits"
    assert any(n.startswith(note) for n in r.notes), r.notes
    plain = WORKLOADS.get("gpt2")().flops_per_call  # the same case, unpadded
    assert r.work.flops > plain("train", Sizes(batch=1, seq=8, layers=1, vocab=500))


def test_variant_that_does_not_apply_is_skipped_with_reason() -> None:
    r = run("simplenet", scenario="infer", precision="cuda-graphs", batch=4)
    assert r.status == "skipped" and r.reason == "CUDA graphs need CUDA"
    r = run("resnet50", scenario="train", precision="int8-dynamic", batch=1, image=32)
    assert r.status == "skipped" and "inference only" in (r.reason or "")


def test_nan_in_outputs_is_reported_wrong_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchmark.workloads.models.mlp import SimpleNetWorkload

    def poisoned(self: Any, sizes: Any, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(sizes.batch, 1000, generator=g)
        x[0, 0] = float("nan")
        return (x,)

    monkeypatch.setattr(SimpleNetWorkload, "make_inputs", poisoned)
    r = run("simplenet", scenario="infer", precision="fp32", batch=4)
    assert r.status == "wrong" and "NaN or inf" in (r.reason or "")
