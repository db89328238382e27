"""Building a variant of a model: convert, compile, quantize, capture; then the timed step."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, UnknownNameError, WrongResultError
from torchmark.variants.flags import call_contexts, context, set_matmul_precision
from torchmark.variants.spec import Variant, is_training, parse, tensors
from torchmark.variants.support import applies


def default_loss(output: Any) -> torch.Tensor:
    """A loss that touches every floating output: mean of squares, summed over outputs."""
    parts = [t.float().pow(2).mean() for t in tensors(output) if t.is_floating_point()]
    if not parts:
        raise WrongResultError("the model returned no floating-point tensor to train on")
    return torch.stack(parts).sum()


def _call(model: Callable[..., Any], inputs: Sequence[Any]) -> Any:
    return model(*inputs)


@dataclass
class Built:
    """A variant ready to time. ``step()`` is one call (inference forward or training step),
    run under ``context``; compile, trace, quantize and capture already happened in build().

    build() set the TF32 flags for the variant and left them set, so that ``step`` does not
    write them per call: call ``teardown()`` when done timing to restore the previous flags.
    """

    variant: Variant
    step: Callable[[], Any]
    model: Any
    inputs: tuple[Any, ...]
    output: Any  # model output of the first call, before any optimiser update (for check)
    compile_s: float = 0.0  # compile / quantize / capture time, outside any timed region
    first_call_s: float = 0.0  # the very first call (with compile: includes compiling)
    context: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    optimizer: torch.optim.Optimizer | None = None
    notes: list[str] = field(default_factory=list)
    teardown: Callable[[], None] = lambda: None


def _make_optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    raise UnknownNameError("optimizer", name, ("sgd", "adamw"))


def _to_channels_last(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        t.contiguous(memory_format=torch.channels_last)
        if isinstance(t, torch.Tensor) and t.dim() == 4
        else t
        for t in inputs
    )


def build(
    variant: str | Variant,
    model: nn.Module,
    inputs: Sequence[Any],
    device: Device,
    scenario: str,
    *,
    loss_fn: Callable[[Any], torch.Tensor] = default_loss,
    optimizer: str = "sgd",
    compile_mode: str | None = None,
    warmup_calls: int = 2,
) -> Built:
    """Prepare ``model`` for ``variant`` and run the untimed warm-up calls.

    The TF32 flags stay set for the variant until ``Built.teardown()`` (restored here if
    build raises).

    Inference: ``step()`` returns the forward output under inference_mode. Training: one
    step is forward, ``loss_fn(output)``, backward (scaled by a GradScaler for fp16), optimiser
    step, zero_grad; it returns the output. ``compile_mode`` is torch.compile's ``mode``.
    """
    v = parse(variant)
    reason = applies(v, device, model, scenario, inputs)
    if reason:
        raise CaseSkipped(reason)
    restore = set_matmul_precision(v.precision == "tf32")
    try:
        built = _build(
            v, model, inputs, device, scenario, loss_fn, optimizer, compile_mode, warmup_calls
        )
    except BaseException:
        restore()
        raise
    built.teardown = restore
    return built


def _build(
    v: Variant,
    model: nn.Module,
    inputs: Sequence[Any],
    device: Device,
    scenario: str,
    loss_fn: Callable[[Any], torch.Tensor],
    optimizer: str,
    compile_mode: str | None,
    warmup_calls: int,
) -> Built:
    train = is_training(scenario)
    model.train(train)
    args = tuple(inputs)
    notes: list[str] = []
    t0 = time.perf_counter()
    if v.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        args = _to_channels_last(args)
    fn: Callable[..., Any] = model
    if v.precision == "int8-dynamic":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch.ao, still the CPU int8 path
            from torch.ao.quantization import quantize_dynamic

            model = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        fn = model
        notes.append("int8 dynamic: nn.Linear weights int8, activations quantized per call")
    if v.compile:
        fn = torch.compile(model, mode=compile_mode)
    prep_s = time.perf_counter() - t0

    def ctx() -> AbstractContextManager[None]:
        return context(v, device, scenario, cache_enabled=not v.cuda_graphs)

    # graph capture must not keep autocast's cast cache: its tensors die after capture
    amp, grad = call_contexts(v, device, scenario, cache_enabled=not v.cuda_graphs)

    opt = None
    if train:
        opt = _make_optimizer(optimizer, model.parameters())
        scaler = torch.amp.GradScaler(device.torch_device.type, enabled=v.precision == "amp-fp16")
        if scaler.is_enabled():
            notes.append("fp16 training uses a GradScaler (loss scaling, inf check per step)")

        def step() -> Any:
            with amp():
                out = _call(fn, args)
                loss = loss_fn(out)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            return out

    else:

        def step() -> Any:
            with amp(), grad():
                return _call(fn, args)

    def timed(call: Callable[[], Any]) -> tuple[Any, float]:
        device.synchronize()
        s = time.perf_counter()
        out = call()
        device.synchronize()
        return out, time.perf_counter() - s

    output, first_call_s = timed(step)
    warm_s = 0.0
    for _ in range(max(warmup_calls - 1, 0)):
        warm_s += timed(step)[1]
    compile_s = prep_s + (first_call_s + warm_s if v.compile else 0.0)
    if v.compile:
        notes.append(
            f"compile_s = time of the {max(warmup_calls, 1)} warm-up calls that compile "
            f"(mode={compile_mode or 'default'}), never inside the timed region"
        )

    if v.cuda_graphs:
        t0 = time.perf_counter()
        step = device.capture_graph(step)
        compile_s += time.perf_counter() - t0
        notes.append("CUDA graph replay: every call returns the same static output tensor")

    return Built(
        variant=v,
        step=step,
        model=model,
        inputs=args,
        output=output,
        compile_s=compile_s,
        first_call_s=first_call_s,
        context=ctx,
        optimizer=opt,
        notes=notes,
    )
