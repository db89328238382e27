"""tune's baseline under the reference's numerics and its two answers
without a latency bound (case 6): best latency at --batch, best throughput over batches with
the latency it costs, drawn in its report. Timing is faked; candidates are built for real."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_tune_verdicts import fake_timing
from torch import nn

from torchmark.kinds.tune.kind import tune
from torchmark.report import html
from torchmark.report.tune import tune_view
from torchmark.variants.flags import matmul_precision

TF32_MANTISSA_DROP = 0x1FFF  # fp32 keeps 23 mantissa bits, TF32 10: the low 13 go


def tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to TF32 (10 mantissa bits), as a GPU's tensor cores read fp32 inputs."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~TF32_MANTISSA_DROP).view(torch.float32)


class FakeCudnnConv(nn.Module):
    """A conv + BatchNorm whose convolution behaves as cuDNN's does on a GPU: with
    ``torch.backends.cudnn.allow_tf32`` set (torch's default) its inputs are rounded to
    TF32. On the H200 the same model's fp32 baseline read 1.49e-4 from the reference (run
    with TF32 off), over the 1e-4 tolerance."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight
        if torch.backends.cudnn.allow_tf32:
            x, w = tf32(x), tf32(w)
        y = nn.functional.conv2d(x, w, self.conv.bias, padding=1)
        return self.bn(y)


def inputs(b: int) -> torch.Tensor:
    return torch.randn(b, 8, 12, 12, generator=torch.Generator().manual_seed(b))


def run_tune(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "devices": "cpu",
        "batch": 1,
        "budget_s": 60,
        "per_candidate_s": 0.0,
        "try_compile": False,
    }
    args.update(kw)
    return tune(FakeCudnnConv(), inputs, **args)


def flat(config: dict[str, Any]) -> list[float]:
    """Every configuration 1 ms a call plus 0.1 ms per item: more items/s at larger batches,
    each call longer."""
    t = 1e-3 + 1e-4 * config["batch"]
    return [t, t * 1.002, t * 0.998]


def test_the_fake_tf32_really_adds_error_like_the_h200s() -> None:
    from torchmark import variants

    model, x = FakeCudnnConv().eval(), inputs(1)
    with torch.no_grad():
        with matmul_precision(False):
            ref = model(x)
        with matmul_precision(True):
            err = variants.max_error(model(x), ref)
    assert 1e-4 < err < 1e-2  # past fp32's tolerance, inside tf32's


def test_the_fp32_baseline_is_never_wrong_against_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the baseline ran under torch's default cudnn.allow_tf32=True, was rejected as
    # WRONG (max error > 1e-4) and tune ended "keep the baseline" with no candidate tried.
    fake_timing(monkeypatch, flat)
    assert torch.backends.cudnn.allow_tf32  # torch's default, as the user has it
    rec = run_tune()
    rows = {c.name.split(", threads=")[0]: c for c in rec.payload.candidates}
    base = rows["baseline (fp32, no_grad)"]
    assert base.status == "baseline" and base.max_error < 1e-6, base
    # the search went on past the baseline: every fp32-valued setting checked and measured
    for name in ("inference_mode", "threads=1", "channels-last"):
        assert rows[name].status in ("faster", "same", "slower", "unclear"), rows[name]
        assert rows[name].max_error < 1e-4
    assert torch.backends.cudnn.allow_tf32  # the user's flags as found
    said = " ".join(str(n) for n in rec.payload.notes)
    assert "tolerances, as max error over the fp32 output's scale: fp32 0.0001 (IEEE" in said
    assert "amp-bf16 0.05 (the same ops in bf16 (7 mantissa bits) under autocast)" in said


def test_without_a_latency_bound_tune_answers_latency_and_throughput(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: without --max-latency-ms every candidate ran at batch 1 only, and tune said
    # "keep the baseline" for a model that moves 5x more items/s at batch 8.
    fake_timing(monkeypatch, flat)
    rec = run_tune()
    latency = rec.payload.recommendation["cpu"]
    assert latency.config is None or latency.config["batch"] == 1
    best = rec.payload.throughput["cpu"]
    assert best.batch > 1 and best.speedup > 2
    assert best.latency_ms > best.baseline_latency_ms  # the latency it costs
    batches = sorted({c.config["batch"] for c in rec.payload.candidates})
    assert batches[:3] == [1, 2, 4]
    from rich.console import Console

    console = Console(width=100, record=True, color_system=None)
    for part in tune_view(rec):
        console.print(part)
    text = " ".join(console.export_text().split())
    assert f"Best throughput on cpu: {best.name}," in text
    assert f"each call of batch {best.batch} then takes" in text
    # the report draws the batch sweep it measured, and never says there was none
    page = html.render([rec])
    assert "no workload in these runs swept a batch size" not in page
    assert "Throughput vs batch size" in page and "best throughput:" in page


def spread_at_16(config: dict[str, Any]) -> list[float]:
    """As ``flat``, but from batch 16 on the samples swing by half: faster per item in
    every round, with a spread of 40 % of the median (unreliable)."""
    t = 1e-3 + 1e-4 * config["batch"]
    if config["batch"] >= 16:
        return [t, 1.5 * t, t, 1.5 * t]
    return [t, t * 1.002, t * 0.998]


def test_best_throughput_is_never_a_batch_its_spread_makes_unreliable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: "best throughput" named batch 128 from a result whose spread was 227 % of
    # its median, and said nothing of it.
    fake_timing(monkeypatch, spread_at_16)
    rec = run_tune()
    best = rec.payload.throughput["cpu"]
    assert best.batch < 16
    assert best.passed_over and all("unreliable" in w for w in best.passed_over)
    assert len(best.passed_over) == 1 and "not picked" in best.passed_over[0]
    assert "the baseline's items/s, but unreliable: spread 40 %" in best.passed_over[0]
    from rich.console import Console

    console = Console(width=80, record=True, color_system=None)
    for part in tune_view(rec):
        console.print(part)
    text = " ".join(console.export_text().split())
    assert "not picked" in text


def test_the_batch_chart_draws_each_points_spread() -> None:
    from torchmark.report.charts.batch import _spread
    from torchmark.results import Result, Work

    r = Result(
        workload="w",
        variant="v",
        device="cpu",
        params={"batch": 4},
        samples_s=[1.0, 1.5, 2.0, 2.5, 3.0],
        work=Work(items=4),
    )
    rate = r.rate("items")
    assert rate == pytest.approx(2.0)
    slow, fast = _spread(r, rate)
    assert slow < rate < fast  # a bar around the median, from the quartiles
