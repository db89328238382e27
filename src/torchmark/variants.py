"""Precision and optimisation variants, as data and pure functions, for any ``nn.Module``.

A variant name is a base precision with optional ``+``-joined optimisations::

    fp32 | tf32 | amp-fp16 | amp-bf16 | int8-dynamic   [+compile] [+channels-last] [+cuda-graphs]

``compile``, ``channels-last`` and ``cuda-graphs`` alone mean fp32 with that optimisation.
The model workloads and ``torchmark tune`` share this module:

    v = parse("amp-bf16+compile")
    reason = applies(v, device, model, "train", inputs)     # None, or why it cannot run
    ref = reference(model, inputs, device, "train")         # fp32 output, same mode
    built = build(v, model, inputs, device, "train")        # compiles/captures here, untimed
    max_err = check(built.output, ref, v)                   # WrongResultError past tolerance
    measure(built.step, device)                             # only steady-state calls are timed

``build`` takes ownership of ``model`` (it may convert it in place and training updates its
weights): compute the reference first, or pass a copy.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchmark.devices.base import Device
from torchmark.errors import UnknownNameError, WrongResultError

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "int8-dynamic")
OPTIMISATIONS = ("compile", "channels-last", "cuda-graphs")
TRAIN_SCENARIOS = frozenset({"train"})  # every other scenario is inference

# Max |built - reference| / max |reference|, per base precision. Why these numbers:
# fp32 kernels differ only in summation order (~1e-6 relative per reduction);
# TF32 keeps a 10-bit mantissa (5e-4 per product), accumulated over ~50 layers;
# fp16 / bf16 keep 10 / 7 mantissa bits: bf16 rounding is 4e-3 per op, ~2e-2 after a deep net;
# int8 dynamic quantisation has 256 levels per tensor: ~1 % per layer, ~1e-1 through an MLP.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "amp-fp16": 5e-2, "amp-bf16": 5e-2, "int8-dynamic": 1e-1}
# Inductor fuses and reorders reductions and picks other matmul kernels: 1e-3 at fp32.
COMPILE_TOLERANCE = 1e-3
CEILING = {
    "fp32": "matmul:float32",
    "tf32": "matmul:tf32",
    "amp-fp16": "matmul:float16",
    "amp-bf16": "matmul:bfloat16",
    "int8-dynamic": "matmul:int8",
}
AMP_DTYPE = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}
# The named variants suites and ``--precision`` choose from; any other valid combination
# can still be parsed.
NAMED = (
    "fp32",
    "tf32",
    "amp-fp16",
    "amp-bf16",
    "int8-dynamic",
    "compile",
    "channels-last",
    "cuda-graphs",
    "tf32+compile",
    "amp-bf16+compile",
    "amp-fp16+compile",
    "amp-bf16+channels-last",
    "amp-bf16+cuda-graphs",
    "amp-fp16+cuda-graphs",
)


# What people type for the same thing (the issue's own example says ``--precision bf16``).
ALIASES = {
    "float32": "fp32",
    "bf16": "amp-bf16",
    "bfloat16": "amp-bf16",
    "fp16": "amp-fp16",
    "float16": "amp-fp16",
    "int8": "int8-dynamic",
    "channels_last": "channels-last",
    "cuda_graphs": "cuda-graphs",
}


@dataclass(frozen=True)
class Variant:
    """One precision with its optimisations; ``name`` is its canonical spelling."""

    precision: str = "fp32"
    compile: bool = False
    channels_last: bool = False
    cuda_graphs: bool = False

    @property
    def name(self) -> str:
        opts = [
            o
            for o, on in zip(
                OPTIMISATIONS, (self.compile, self.channels_last, self.cuda_graphs), strict=True
            )
            if on
        ]
        if opts and self.precision == "fp32":
            return "+".join(opts)
        return "+".join([self.precision, *opts])

    @property
    def tolerance(self) -> float:
        tol = TOLERANCE[self.precision]
        return max(tol, COMPILE_TOLERANCE) if self.compile else tol

    @property
    def ceiling(self) -> str:
        """Key of the matmul ceiling this variant's FLOPs are a fraction of (MFU)."""
        return CEILING[self.precision]

    @property
    def amp_dtype(self) -> torch.dtype | None:
        return AMP_DTYPE.get(self.precision)

    def __str__(self) -> str:
        return self.name


def parse(name: str | Variant) -> Variant:
    """'amp-bf16+compile' -> Variant; an unknown part names the valid choices."""
    if isinstance(name, Variant):
        return name
    parts = [ALIASES.get(p, p) for p in (q.strip().lower() for q in name.split("+")) if p]
    precs = [p for p in parts if p in PRECISIONS]
    opts = [p for p in parts if p in OPTIMISATIONS]
    if (
        not parts
        or len(precs) > 1
        or len(set(opts)) != len(opts)
        or len(precs) + len(opts) != len(parts)
    ):
        raise UnknownNameError("precision", name, NAMED)
    precision = precs[0] if precs else "fp32"
    v = Variant(precision, "compile" in opts, "channels-last" in opts, "cuda-graphs" in opts)
    # Combinations that make no sense are not variants: graphs capture a compiled model only
    # through compile's own mode="reduce-overhead"; quantized modules are CPU eager kernels.
    if (v.compile and v.cuda_graphs) or (v.precision == "int8-dynamic" and opts):
        raise UnknownNameError("precision", name, NAMED)
    return v


def is_training(scenario: str) -> bool:
    return scenario in TRAIN_SCENARIOS


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, Mapping):
        for k in sorted(x, key=str):
            yield from _tensors(x[k])
    elif isinstance(x, (list, tuple)):
        for item in x:
            yield from _tensors(item)


def applies(
    variant: str | Variant,
    device: Device,
    model: nn.Module,
    scenario: str,
    inputs: Sequence[Any] | None = None,
) -> str | None:
    """None when ``variant`` can run ``model`` on ``device`` for ``scenario``, else why not."""
    v = parse(variant)
    train = is_training(scenario)
    if v.precision == "tf32":
        reason = device.supports_tf32()
        if reason:
            return reason
    if v.amp_dtype is not None:
        reason = device.supports(v.amp_dtype)
        if reason:
            return f"{v.precision}: {reason}"
    if v.precision == "int8-dynamic":
        if device.is_accelerator:
            return "int8 dynamic quantization runs on CPU only"
        if train:
            return "int8 dynamic quantization is for inference only"
        if not _has_quantize_dynamic():
            return "int8 dynamic quantization is not in this torch build"
        if not any(isinstance(m, nn.Linear) for m in model.modules()):
            return "int8 dynamic quantization needs nn.Linear layers; the model has none"
    if v.compile:
        reason = device.supports_compile()
        if reason:
            return reason
    if v.cuda_graphs:
        reason = device.supports_graphs()
        if reason:
            return reason
        if train:
            return "CUDA graphs are applied to inference here (training steps run eagerly)"
    if v.channels_last:
        if inputs is not None and not any(t.dim() == 4 for t in _tensors(inputs)):
            return "channels_last is for 4-D (image) inputs"
        if not any(isinstance(m, nn.Conv2d) for m in model.modules()):
            return "channels_last is for convolutional models; the model has no Conv2d"
    return None


def _has_quantize_dynamic() -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization warns it is deprecated
        try:
            from torch.ao.quantization import quantize_dynamic  # noqa: F401
        except ImportError:
            return False
    return True


def _set_matmul_precision(tf32: bool) -> Callable[[], None]:
    """Set the TF32 flags; returns the (idempotent) function that restores the old values.

    fp32 means IEEE fp32 everywhere: cuDNN allows TF32 by default, so set both flags.
    """
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    restored = False

    def restore() -> None:
        nonlocal restored
        if not restored:
            restored = True
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before

    return restore


@contextlib.contextmanager
def preserved_flags() -> Iterator[None]:
    """Leave the TF32 flags as found, whatever builds inside set (tune keeps many alive)."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@contextlib.contextmanager
def _matmul_precision(tf32: bool) -> Iterator[None]:
    restore = _set_matmul_precision(tf32)
    try:
        yield
    finally:
        restore()


def _call_contexts(
    v: Variant, device: Device, scenario: str, cache_enabled: bool = True
) -> tuple[Callable[[], AbstractContextManager[Any]], Callable[[], AbstractContextManager[Any]]]:
    """(autocast, grad mode) factories each call enters; the TF32 flags are not in them.

    Resolved once per build, not per call: parse + an ExitStack + four flag writes per call
    cost ~5 us (a Linear(10, 10) step took 10.6 us against 6.1 us bare on this CPU).
    """
    grad: Callable[[], AbstractContextManager[Any]] = (
        contextlib.nullcontext if is_training(scenario) else torch.inference_mode
    )
    dtype, kind = v.amp_dtype, device.torch_device.type
    if dtype is None:
        return contextlib.nullcontext, grad
    return functools.partial(torch.autocast, kind, dtype=dtype, cache_enabled=cache_enabled), grad


@contextlib.contextmanager
def context(
    variant: str | Variant, device: Device, scenario: str, cache_enabled: bool = True
) -> Iterator[None]:
    """The context one call runs under: TF32 flags, autocast, inference_mode.

    ``build`` sets the flags once instead and its steps enter only the rest.
    """
    v = parse(variant)
    amp, grad = _call_contexts(v, device, scenario, cache_enabled)
    with _matmul_precision(v.precision == "tf32"), amp(), grad():
        yield


def default_loss(output: Any) -> torch.Tensor:
    """A loss that touches every floating output: mean of squares, summed over outputs."""
    parts = [t.float().pow(2).mean() for t in _tensors(output) if t.is_floating_point()]
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
        from torchmark.errors import CaseSkipped

        raise CaseSkipped(reason)
    restore = _set_matmul_precision(v.precision == "tf32")
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
    amp, grad = _call_contexts(v, device, scenario, cache_enabled=not v.cuda_graphs)

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
        step, capture_s = _capture(step, device)
        compile_s += capture_s
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


def _capture(step: Callable[[], Any], device: Device) -> tuple[Callable[[], Any], float]:
    """Capture ``step`` (already warmed up) into a CUDA graph; replay is the new step."""
    t0 = time.perf_counter()
    stream = torch.cuda.Stream(device.torch_device)
    stream.wait_stream(torch.cuda.current_stream(device.torch_device))
    with torch.cuda.stream(stream):  # warm-up on a side stream, as capture requires
        for _ in range(3):
            step()
    torch.cuda.current_stream(device.torch_device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    device.synchronize()

    def replay() -> Any:
        graph.replay()
        return static_out

    return replay, time.perf_counter() - t0


def reference(model: nn.Module, inputs: Sequence[Any], device: Device, scenario: str) -> Any:
    """The fp32 (IEEE, no TF32) output of ``model`` in the scenario's mode, for ``check``."""
    model.train(is_training(scenario))
    with _matmul_precision(False), torch.no_grad():
        return _call(model, tuple(inputs))


def max_error(output: Any, ref: Any) -> float:
    """Max |output - ref| over all tensors, relative to the largest |ref| (the output scale).

    NaN or inf in ``output`` (or ``ref``) raises WrongResultError.
    """
    outs, refs = list(_tensors(output)), list(_tensors(ref))
    if len(outs) != len(refs):
        raise WrongResultError(f"output has {len(outs)} tensors, the reference {len(refs)}")
    worst_abs, scale = 0.0, 0.0
    for o, r in zip(outs, refs, strict=True):
        if o.shape != r.shape:
            raise WrongResultError(f"output shape {tuple(o.shape)} != reference {tuple(r.shape)}")
        if not o.is_floating_point():
            if not torch.equal(o.cpu(), r.cpu()):
                raise WrongResultError("integer output differs from the reference")
            continue
        of, rf = o.detach().float(), r.detach().to(o.device).float()
        if not bool(torch.isfinite(rf).all()):
            raise WrongResultError("the fp32 reference output has NaN or inf")
        if not bool(torch.isfinite(of).all()):
            raise WrongResultError("output has NaN or inf")
        if of.numel():
            worst_abs = max(worst_abs, float((of - rf).abs().max()))
            scale = max(scale, float(rf.abs().max()))
    if scale == 0.0:
        return 0.0 if worst_abs == 0.0 else math.inf
    return worst_abs / scale


def check(output: Any, ref: Any, variant: str | Variant) -> float:
    """``max_error`` of ``output`` against the fp32 ``ref``; past the variant's tolerance
    raises WrongResultError("max error X > tolerance Y")."""
    v = parse(variant)
    err = max_error(output, ref)
    if err > v.tolerance:
        raise WrongResultError(
            f"{v.name}: max error {err:.3g} > tolerance {v.tolerance:.3g} "
            "(relative to the fp32 output scale)"
        )
    return err
