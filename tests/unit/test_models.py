"""Model architectures (exact parameter counts on the meta device), FLOP accounting, KV cache,
case planning and bad input. No timing here."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchmark.devices import CPUDevice
from torchmark.errors import UnknownNameError
from torchmark.stats.measurement import Measurement
from torchmark.testing import FakeClock, FakeDevice
from torchmark.workloads import WORKLOADS, PlanOptions, load_builtins
from torchmark.workloads.base import Suite
from torchmark.workloads.models.base import (
    Sizes,
    _MetaDevice,
    doubling,
    latency_quantiles,
)
from torchmark.workloads.models.gpt2 import GPT2, Decode, GPT2Config, KVCache, Prefill
from torchmark.workloads.models.meta import _count_decode, _counted
from torchmark.workloads.models.resnet import Bottleneck, ResNet50

load_builtins()


def params_of(name: str, **sizes: int) -> int:
    model = WORKLOADS.get(name)().meta_model(Sizes(**sizes))
    assert all(p.is_meta for p in model.parameters())
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("simplenet", 1000 * 512 + 512 + 512 * 256 + 256 + 256 * 2 + 2),
        ("linear10", 11),
        ("resnet50", 25_557_032),
        ("bert-base", 109_482_240),
        ("gpt2", 124_439_808),
        ("gpt2-padded", 124_439_808 + (50_304 - 50_257) * 768),  # 47 more embedding rows
    ],
)
def test_exact_parameter_counts(name: str, expected: int) -> None:
    assert params_of(name) == expected
    assert WORKLOADS.get(name)().describe()["parameters"] == expected


def test_resnet50_is_v1_5_stride_on_the_3x3_conv() -> None:
    with torch.device("meta"):
        net = ResNet50()
    first_of_stage2 = [m for m in net.modules() if isinstance(m, Bottleneck)][3]
    assert first_of_stage2.conv1.stride == (1, 1)
    assert first_of_stage2.conv2.stride == (2, 2)


def test_gpt2_embeddings_are_tied() -> None:
    with torch.device("meta"):
        gpt = GPT2()
    names = [n for n, _ in gpt.named_parameters()]
    assert "wte.weight" in names and not any("lm_head" in n for n in names)


def test_simplenet_forward_flops_per_item_exact() -> None:
    w = WORKLOADS.get("simplenet")()
    fwd = 2 * (1000 * 512 + 512 * 256 + 256 * 2)
    assert w.flops_per_call("infer", Sizes(batch=1)) == fwd
    assert w.flops_per_call("infer", Sizes(batch=64)) == 64 * fwd
    assert w.flops_per_call("infer-e2e", Sizes(batch=8)) == 8 * fwd
    assert w.describe()["flops_per_item"] == fwd
    # backward: weight gradients of all 3 layers, input gradients of layers 2 and 3 only
    bwd = fwd + 2 * (512 * 256 + 256 * 2)
    assert w.flops_per_call("train", Sizes(batch=4)) == 4 * (fwd + bwd)


def test_resnet50_forward_flops_are_4_1_gmac_per_image() -> None:
    flops = WORKLOADS.get("resnet50")().flops_per_call("infer", Sizes(batch=1))
    assert flops == pytest.approx(2 * 4.09e9, rel=0.01)


def tiny_gpt(layers: int = 2) -> GPT2:
    torch.manual_seed(0)
    return GPT2(GPT2Config(vocab=97, context=64, layers=layers, heads=4, hidden=32)).eval()


def test_kv_cache_decode_equals_full_sequence_logits() -> None:
    gpt = tiny_gpt()
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = gpt(ids)
        cache = KVCache(2, 12)
        steps = [gpt(ids[:, :8], cache, 0)]
        steps += [gpt(ids[:, i : i + 1], cache, i) for i in range(8, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_chunked_prefill_after_a_past_uses_the_shifted_causal_mask() -> None:
    gpt = tiny_gpt()
    ids = torch.randint(0, 97, (1, 10), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = gpt(ids)
        cache = KVCache(2, 10)
        a, b = gpt(ids[:, :4], cache, 0), gpt(ids[:, 4:], cache, 4)
    torch.testing.assert_close(torch.cat([a, b], dim=1), full, rtol=1e-5, atol=1e-5)


def test_decode_module_returns_last_step_logits_and_reuses_its_prefill() -> None:
    gpt = tiny_gpt()
    g = torch.Generator().manual_seed(5)
    prompt, cont = (
        torch.randint(0, 97, (2, 6), generator=g),
        torch.randint(0, 97, (2, 3), generator=g),
    )
    dec = Decode(gpt, 9)
    with torch.no_grad():
        first, second = dec(prompt, cont), dec(prompt, cont)
        full = gpt(torch.cat([prompt, cont], dim=1))
        last = Prefill(gpt, 6)(prompt)
    torch.testing.assert_close(first, full[:, -1:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second, first)
    torch.testing.assert_close(last, full[:, 5:6], rtol=1e-5, atol=1e-5)


def every_step_counted(module: nn.Module, prompt: torch.Tensor, cont: torch.Tensor) -> int:
    """What a decode case's count stands for: the whole call, its prefill done before."""
    with torch.no_grad():
        module(prompt, cont)
    return _counted(lambda: module(prompt, cont))


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_decode_flops_from_three_steps_equal_every_step_counted(n: int) -> None:
    # on meta, as cases are counted: there attention is plain matmuls, counted (a CPU's
    # fused kernel is not), so each step counts more than the one before
    with torch.device("meta"):
        gpt = tiny_gpt()
        prompt, cont = torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, n, dtype=torch.long)
    step = Decode(gpt, 7)
    with torch.no_grad():
        step(prompt, cont[:, :0])
    assert _counted(lambda: step.step(cont[:, :1], 6)) > _counted(lambda: step.step(cont[:, :1], 5))
    counted = every_step_counted(Decode(gpt, 5 + n), prompt, cont)
    assert _count_decode(Decode(gpt, 5 + n), prompt, cont) == counted


class Stepper(nn.Module):
    """A decode module whose step at position ``pos`` multiplies a (1, pos) row by a
    (pos, pos**power) matrix: 2 * pos**(1 + power) FLOPs; notes each step's position."""

    def __init__(self, power: int) -> None:
        super().__init__()
        self.power, self.steps = power, list[int]()

    def forward(self, prompt: torch.Tensor, cont: torch.Tensor) -> torch.Tensor:
        out = prompt
        for i in range(cont.shape[1]):
            out = self.step(cont[:, i : i + 1], prompt.shape[1] + i)
        return out

    def step(self, token: torch.Tensor, pos: int) -> torch.Tensor:
        self.steps.append(pos)
        return torch.ones(1, pos) @ torch.ones(pos, pos**self.power)


def test_decode_steps_on_one_line_are_counted_from_three() -> None:
    prompt, cont = torch.zeros(1, 4), torch.zeros(1, 9)
    affine = Stepper(power=0)
    assert _count_decode(affine, prompt, cont) == sum(2 * p for p in range(4, 13))
    assert affine.steps == [4, 5, 12]  # the first two and the last


def test_decode_steps_off_one_line_are_each_counted() -> None:
    prompt, cont = torch.zeros(1, 4), torch.zeros(1, 9)
    quadratic = Stepper(power=1)
    assert _count_decode(quadratic, prompt, cont) == sum(2 * p * p for p in range(4, 13))
    assert sorted(set(quadratic.steps)) == list(range(4, 13))


def test_decode_declares_weights_and_kv_cache_bytes() -> None:
    from torchmark import variants

    w = WORKLOADS.get("gpt2")()
    s = Sizes(batch=1, seq=128, new_tokens=2)
    weights = (124_439_808 - 1024 * 768) * 4
    kv = 2 * 12 * 768 * 4 * (129 + 130)
    assert w.bytes_per_call("decode", s, variants.parse("fp32")) == 2 * weights + kv
    bf16 = w.bytes_per_call("decode", s, variants.parse("amp-bf16"))
    assert bf16 == pytest.approx((2 * weights + kv) / 2)
    # int8: quantize_dynamic converts nn.Linear only, so their weights are 1 byte while the
    # tied embedding / LM head (50257 x 768), LayerNorms and Linear biases stay fp32.
    linear_w = 12 * (768 * 3 * 768 + 768 * 768 + 768 * 4 * 768 + 4 * 768 * 768)
    fp32_rest = 124_439_808 - 1024 * 768 - linear_w
    int8 = w.bytes_per_call("decode", s, variants.parse("int8-dynamic"))
    assert int8 == 2 * (linear_w * 1 + fp32_rest * 4) + kv
    assert w.ceiling("decode", s, variants.parse("amp-bf16")) == "bandwidth"
    assert w.ceiling("prefill", s, variants.parse("amp-bf16")) == "matmul:bfloat16"


def test_doubling_sweep() -> None:
    assert doubling(1) == (1,)
    assert doubling(8) == (1, 2, 4, 8)
    assert doubling(12) == (1, 2, 4, 8, 12)


def test_cases_follow_batches_scenarios_and_precisions() -> None:
    cpu = CPUDevice()
    w = WORKLOADS.get("resnet50")()
    cases = w.cases(
        cpu, PlanOptions(scenarios=("train",), precisions=("fp32",), batches=(1, 32, 256))
    )
    assert [c.param_dict["batch"] for c in cases] == [1, 32, 256]
    assert {c.param_dict["scenario"] for c in cases} == {"train"}
    assert len({c.sweep for c in cases}) == 1 and cases[0].sweep


def test_inapplicable_variant_is_planned_once_to_report_its_reason() -> None:
    w = WORKLOADS.get("simplenet")()
    cases = w.cases(CPUDevice(), PlanOptions(scenarios=("infer",), precisions=("tf32",)))
    assert len(cases) == 1
    fake = FakeDevice(FakeClock())  # an accelerator: full GPU sweep, TF32 still not supported
    assert len(w.cases(fake, PlanOptions(scenarios=("infer",), precisions=("fp32",)))) > 5


def test_scenario_of_another_model_plans_nothing_here() -> None:
    w = WORKLOADS.get("simplenet")()
    assert w.cases(CPUDevice(), PlanOptions(scenarios=("decode",))) == []
    gpt = WORKLOADS.get("gpt2")()
    decode = gpt.cases(CPUDevice(), PlanOptions(scenarios=("decode",), precisions=("fp32",)))
    assert [c.param_dict["batch"] for c in decode] == [1, 4]  # batch 1 and a larger one
    assert all(c.param_dict["new_tokens"] > 0 for c in decode)


@pytest.mark.parametrize(
    ("opts", "valid"),
    [
        (PlanOptions(scenarios=("inference",)), "decode"),
        (PlanOptions(precisions=("fp64",)), "amp-bf16"),
    ],
)
def test_unknown_scenario_or_precision_names_the_choices(opts: PlanOptions, valid: str) -> None:
    with pytest.raises(UnknownNameError) as e:
        WORKLOADS.get("gpt2")().cases(CPUDevice(), opts)
    assert valid in str(e.value)


def test_quick_suite_is_small_on_cpu() -> None:
    cpu = CPUDevice()
    quick = {
        n: WORKLOADS.get(n)().cases(cpu, PlanOptions(suite="quick"))
        for n in WORKLOADS.names()
        if WORKLOADS.get(n).group == "model" and WORKLOADS.get(n).in_quick
    }
    assert set(quick) == {"simplenet", "linear10", "resnet50"}
    assert sum(len(c) for c in quick.values()) <= 4
    assert [c.param_dict["batch"] for c in quick["resnet50"]] == [1]


def test_standard_cpu_caps_stay_small() -> None:
    cpu = CPUDevice()
    for n in ("resnet50", "bert-base", "gpt2", "gpt2-padded"):
        cases = WORKLOADS.get(n)().cases(cpu, PlanOptions(suite="standard"))
        assert max(c.param_dict["batch"] for c in cases) <= 4, n


def test_train_module_of_bert_adds_a_two_way_head() -> None:
    w = WORKLOADS.get("bert-base")()
    meta = w.meta_model(Sizes(seq=128))
    head = w.train_module(meta)
    assert isinstance(head, nn.Module)
    assert sum(p.numel() for p in head.parameters()) == 109_482_240 + 768 * 2 + 2


def measurement(n: int, calls_per_sample: int) -> Measurement:
    return Measurement(
        samples_s=tuple(1e-3 * (i + 1) for i in range(n)), calls_per_sample=calls_per_sample
    )


def test_latency_tails_only_for_enough_single_call_samples() -> None:
    out = latency_quantiles(measurement(100, 1))
    assert out["latency_p50_s"] == pytest.approx(50.5e-3)
    assert out["latency_p90_s"] == pytest.approx(90.1e-3)
    assert out["latency_p99_s"] == pytest.approx(99.01e-3)
    for n, calls in [(100, 4), (19, 1)]:  # means of several calls; too few samples
        out = latency_quantiles(measurement(n, calls))
        assert out["latency_p50_s"] == pytest.approx(1e-3 * (n + 1) / 2)
        assert "latency_p90_s" not in out and "latency_p99_s" not in out
        assert "no p90/p99" in out["latency_note"]
    assert latency_quantiles(measurement(0, 1)) == {}


def test_latency_quantiles_use_kept_samples_only() -> None:
    m = Measurement(samples_s=(1.0,) + (1e-3,) * 20, excluded=(0,))
    out = latency_quantiles(m)
    assert out["latency_p50_s"] == out["latency_p99_s"] == pytest.approx(1e-3)


def test_meta_device_stands_in_for_gpu_or_cpu() -> None:
    gpu, cpu = _MetaDevice(), _MetaDevice(is_accelerator=False)
    assert gpu.is_accelerator and not cpu.is_accelerator
    assert gpu.torch_device == cpu.torch_device == torch.device("meta")
    assert not _MetaDevice.is_accelerator  # the instance flag leaves the class alone


@pytest.mark.parametrize(("suite", "rule"), [("quick", "quick"), ("standard", "model")])
def test_the_suite_reaches_prepare_through_the_case(suite: Suite, rule: str) -> None:
    # planned by one object, prepared by another: no state kept between cases() and prepare()
    cls = WORKLOADS.get("linear10")
    case = cls().cases(CPUDevice(), PlanOptions(suite=suite, batches=(2,)))[0]
    assert case.rule == rule
    prepared = cls().prepare(case)
    try:
        assert prepared.rule == rule
    finally:
        if prepared.teardown is not None:
            prepared.teardown()


def test_padded_gpt2_pads_the_model_not_the_data() -> None:
    """nanoGPT's fix: the LM head over 50,304 (a multiple of 64) instead of 50,257; ids and
    targets stay below 50,257, so the extra logits are never a target."""
    w = WORKLOADS.get("gpt2-padded")()
    assert w.config(Sizes()).vocab == 50_304 and w.tokens(Sizes()) == 50_257
    assert WORKLOADS.get("gpt2")().config(Sizes()).vocab == 50_257
    sizes = Sizes(batch=4, seq=64, layers=1, vocab=500)  # a tiny model: 500 -> 512
    assert w.config(sizes).vocab == 512
    ids = w.make_inputs(sizes, torch.Generator().manual_seed(0))[0]
    labels = w.make_labels(sizes, torch.Generator().manual_seed(0))
    assert int(ids.max()) < 500 and int(labels.max()) < 500
    assert w.describe()["vocab"] == 50_304 and w.describe()["tokens_from"] == 50_257


def test_padded_gpt2_counts_the_padded_logits_as_flops() -> None:
    """FLOPs are what the padded model computes: the LM head's 47 extra columns, forward
    (2 x hidden per token) and backward (twice that), and nothing else changes."""
    plain, pad = WORKLOADS.get("gpt2")(), WORKLOADS.get("gpt2-padded")()
    sizes = Sizes(batch=1, seq=16, layers=1)
    extra = {"infer": 2, "train": 6}
    for scenario, per in extra.items():
        more = pad.flops_per_call(scenario, sizes) - plain.flops_per_call(scenario, sizes)
        assert more == per * 768 * (50_304 - 50_257) * 16, scenario


def test_padded_gpt2_plans_tensor_core_cases_on_a_gpu() -> None:
    w = WORKLOADS.get("gpt2-padded")()
    gpu = {
        (c.variant, c.param_dict["precision"])
        for c in w.cases(FakeDevice(FakeClock()), PlanOptions(suite="standard"))
    }
    assert gpu == {("train", "amp-bf16"), ("infer", "amp-bf16")}
    cpu = w.cases(CPUDevice(), PlanOptions(suite="standard"))
    assert [(c.variant, c.param_dict["batch"]) for c in cpu] == [("train", 1), ("infer", 1)]
