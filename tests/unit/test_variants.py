"""Variants: names, applicability reasons on CPU, tolerances, NaN detection, build on CPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from torchmark import variants
from torchmark.devices import CPUDevice, Device
from torchmark.errors import CaseSkipped, UnknownNameError, WrongResultError
from torchmark.testing import FakeClock, FakeDevice
from torchmark.variants import builder, flags


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("fp32", "fp32"),
        ("compile", "compile"),
        ("fp32+compile", "compile"),
        ("compile+amp-bf16", "amp-bf16+compile"),
        ("AMP-FP16+cuda-graphs", "amp-fp16+cuda-graphs"),
        ("channels-last+amp-bf16", "amp-bf16+channels-last"),
        ("bf16", "amp-bf16"),
        ("fp16+compile", "amp-fp16+compile"),
        ("int8", "int8-dynamic"),
    ],
)
def test_parse_canonical_names(name: str, canonical: str) -> None:
    assert variants.parse(name).name == canonical


@pytest.mark.parametrize(
    "bad",
    [
        "fp64",
        "",
        "amp-bf16+amp-fp16",
        "compile+compile",
        "compile+cuda-graphs",
        "int8-dynamic+compile",
    ],
)
def test_parse_rejects_with_choices(bad: str) -> None:
    with pytest.raises(UnknownNameError) as e:
        variants.parse(bad)
    assert "amp-bf16" in str(e.value) and "valid precisions" in str(e.value)


def test_every_named_variant_parses_to_itself() -> None:
    for name in variants.NAMED:
        assert variants.parse(name).name == name


def test_ceiling_and_tolerance_follow_precision() -> None:
    assert variants.parse("fp32").ceiling == "matmul:float32"
    assert variants.parse("tf32").ceiling == "matmul:tf32"
    assert variants.parse("amp-bf16+compile").ceiling == "matmul:bfloat16"
    assert variants.parse("amp-fp16").ceiling == "matmul:float16"
    assert variants.parse("fp32").tolerance == 1e-4
    assert variants.parse("compile").tolerance == variants.COMPILE_TOLERANCE
    assert variants.parse("amp-bf16+compile").tolerance == 5e-2


def test_applicability_reasons_on_cpu() -> None:
    cpu = CPUDevice()
    m, c = mlp(), cnn()
    assert variants.applies("fp32", cpu, m, "infer") is None
    assert "compute capability >= 8.0" in (variants.applies("tf32", cpu, m, "infer") or "")
    assert variants.applies("cuda-graphs", cpu, m, "infer") == "CUDA graphs need CUDA"
    assert variants.applies("int8-dynamic", cpu, m, "infer") is None
    assert "inference only" in (variants.applies("int8-dynamic", cpu, m, "train") or "")
    assert "nn.Linear" in (variants.applies("int8-dynamic", cpu, c, "infer") or "")
    assert "4-D" in (
        variants.applies("channels-last", cpu, m, "infer", (torch.randn(2, 16),)) or ""
    )
    assert "Conv2d" in (variants.applies("channels-last", cpu, m, "infer") or "")
    assert variants.applies("channels-last", cpu, c, "train", (torch.randn(2, 3, 8, 8),)) is None


def test_int8_is_cpu_only_and_fake_accelerator_lacks_graphs() -> None:
    fake = FakeDevice(FakeClock())
    assert variants.applies("int8-dynamic", fake, mlp(), "infer") == (
        "int8 dynamic quantization runs on CPU only"
    )
    assert variants.applies("cuda-graphs", fake, mlp(), "infer") == "CUDA graphs need CUDA"


def test_max_error_nested_and_relative_to_scale() -> None:
    ref = {"a": torch.tensor([10.0, -20.0]), "b": (torch.tensor([1.0]), [torch.tensor([2])])}
    out = {"a": torch.tensor([10.0, -19.0]), "b": (torch.tensor([1.5]), [torch.tensor([2])])}
    assert variants.max_error(out, ref) == pytest.approx(1.0 / 20.0)
    assert variants.max_error(ref, ref) == 0.0


def test_check_tolerances() -> None:
    ref = torch.tensor([100.0, 1.0])
    assert variants.check(ref + 1e-3, ref, "fp32") == pytest.approx(1e-5, rel=1e-3)
    with pytest.raises(WrongResultError, match=r"max error 0\.001 > tolerance 0\.0001"):
        variants.check(ref + 0.1, ref, "fp32")
    assert variants.check(ref + 4.0, ref, "amp-bf16") == pytest.approx(0.04)
    with pytest.raises(WrongResultError):
        variants.check(ref + 6.0, ref, "amp-bf16")
    assert variants.check(ref + 9.0, ref, "int8-dynamic") == pytest.approx(0.09)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_check_flags_nan_and_inf(bad: float) -> None:
    ref = torch.ones(3)
    with pytest.raises(WrongResultError, match="NaN or inf"):
        variants.check((torch.tensor([1.0, bad, 1.0]),), (ref,), "int8-dynamic")


def test_check_structure_mismatch_is_wrong() -> None:
    with pytest.raises(WrongResultError, match="shape"):
        variants.max_error(torch.ones(2), torch.ones(3))
    with pytest.raises(WrongResultError, match="tensors"):
        variants.max_error((torch.ones(2),), (torch.ones(2), torch.ones(2)))


@pytest.mark.parametrize("name", ["fp32", "amp-bf16", "int8-dynamic"])
def test_build_inference_matches_reference_on_cpu(name: str) -> None:
    cpu = CPUDevice()
    x = (torch.randn(8, 16, generator=torch.Generator().manual_seed(1)),)
    m = mlp()
    ref = variants.reference(m, x, cpu, "infer")
    built = variants.build(name, m, x, cpu, "infer")
    err = variants.check(built.output, ref, name)
    assert err <= variants.parse(name).tolerance
    again = built.step()
    assert again is not built.output and torch.is_inference(again)
    built.teardown()


def test_build_train_updates_weights_and_first_output_is_pre_update() -> None:
    cpu = CPUDevice()
    x = (torch.randn(8, 16, generator=torch.Generator().manual_seed(1)),)
    m = mlp()
    ref = variants.reference(m, x, cpu, "train")
    w0 = m[0].weight.detach().clone()
    built = variants.build("fp32", m, x, cpu, "train", optimizer="adamw")
    assert variants.check(built.output, ref, "fp32") == 0.0
    assert not torch.equal(w0, m[0].weight)
    assert all(p.grad is None for p in m.parameters())  # zero_grad(set_to_none) ran
    built.teardown()


def test_build_refuses_variant_that_does_not_apply() -> None:
    with pytest.raises(CaseSkipped, match="CUDA graphs need CUDA"):
        variants.build("cuda-graphs", mlp(), (torch.randn(2, 16),), CPUDevice(), "infer")


@pytest.mark.parametrize("device", [CPUDevice(), FakeDevice(FakeClock())], ids=["cpu", "fake"])
def test_graph_capture_is_not_available_without_cuda_and_says_why(device: Device) -> None:
    with pytest.raises(CaseSkipped, match=r"not available on (cpu|fake:0): CUDA graphs need CUDA"):
        device.capture_graph(lambda: None)


class GraphDevice(FakeDevice):
    """A fake accelerator that 'captures' by calling the step once and replaying its output."""

    captured = 0

    def supports_graphs(self) -> str | None:
        return None

    def capture_graph(self, step: Callable[[], Any]) -> Callable[[], Any]:
        self.captured += 1
        static_out = step()
        return lambda: static_out


def test_cuda_graphs_variant_captures_through_the_device() -> None:
    dev = GraphDevice(FakeClock())
    built = variants.build("cuda-graphs", mlp(), (torch.randn(2, 16),), dev, "infer")
    assert dev.captured == 1
    assert built.step() is built.step()  # the replay's static output, as a CUDA graph's
    assert any("CUDA graph replay" in n for n in built.notes)
    built.teardown()


def test_fp32_context_turns_tf32_off_and_restores() -> None:
    before = torch.backends.cudnn.allow_tf32
    with variants.context("fp32", CPUDevice(), "train"):
        assert torch.backends.cudnn.allow_tf32 is False
        assert not torch.is_inference_mode_enabled()
    with variants.context("tf32", CPUDevice(), "infer"):
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.is_inference_mode_enabled()
    assert torch.backends.cudnn.allow_tf32 is before


def tf32_flags() -> tuple[bool, bool]:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


@pytest.mark.parametrize(("name", "scenario"), [("fp32", "infer"), ("amp-bf16", "train")])
def test_build_sets_flags_once_and_teardown_restores(
    name: str, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = tf32_flags()
    x = (torch.randn(8, 16, generator=torch.Generator().manual_seed(1)),)
    built = variants.build(name, mlp(), x, CPUDevice(), scenario)
    assert tf32_flags() == (False, False)  # fp32 / AMP: IEEE fp32 matmuls, cuDNN included

    def no_per_call_work(*_: object, **__: object) -> None:
        raise AssertionError("step re-entered the variant's setup")

    # the timed call must not parse the variant again nor write the TF32 flags
    with monkeypatch.context() as mp:
        for module in (builder, flags):  # where build()'s step would look them up
            mp.setattr(module, "parse", no_per_call_work)
        mp.setattr(builder, "set_matmul_precision", no_per_call_work)
        mp.setattr(flags, "set_matmul_precision", no_per_call_work)
        mp.setattr(builder, "context", no_per_call_work)
        out = built.step()
    assert torch.is_inference(out) == (scenario == "infer")
    with built.context():  # the full context still works standalone
        assert torch.is_autocast_enabled("cpu") == (name == "amp-bf16")
    built.teardown()
    assert tf32_flags() == before
    built.teardown()  # a second teardown changes nothing
    assert tf32_flags() == before


def test_amp_step_runs_under_autocast_each_call() -> None:
    x = (torch.randn(8, 16, generator=torch.Generator().manual_seed(1)),)
    built = variants.build("amp-bf16", mlp(), x, CPUDevice(), "infer")
    try:
        assert built.step().dtype == built.step().dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")  # nothing leaks out of a call
    finally:
        built.teardown()


def test_tf32_flags_restored_when_build_raises() -> None:
    original = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True  # a state fp32's build must change
    try:
        before = tf32_flags()

        def bad_loss(_: object) -> torch.Tensor:
            raise ValueError("loss failed")

        x = (torch.randn(8, 16),)
        with pytest.raises(ValueError, match="loss failed"):
            variants.build("fp32", mlp(), x, CPUDevice(), "train", loss_fn=bad_loss)
        assert tf32_flags() == before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = original


def test_the_package_keeps_the_names_the_module_had() -> None:
    # variants.py became a package; tune, bench and the model workloads import these names
    before = [
        "ALIASES",
        "AMP_DTYPE",
        "CEILING",
        "COMPILE_TOLERANCE",
        "NAMED",
        "OPTIMISATIONS",
        "PRECISIONS",
        "TOLERANCE",
        "TRAIN_SCENARIOS",
        "Built",
        "Variant",
        "applies",
        "build",
        "check",
        "context",
        "default_loss",
        "is_training",
        "max_error",
        "parse",
        "preserved_flags",
        "reference",
    ]
    assert sorted(variants.__all__) == sorted(before)
    assert all(hasattr(variants, n) for n in before)
