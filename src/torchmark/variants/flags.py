"""The global state a variant sets: TF32 flags, autocast and grad mode."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from torchmark.devices.base import Device
from torchmark.variants.spec import Variant, is_training, parse


def set_matmul_precision(tf32: bool) -> Callable[[], None]:
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
def matmul_precision(tf32: bool) -> Iterator[None]:
    restore = set_matmul_precision(tf32)
    try:
        yield
    finally:
        restore()


def call_contexts(
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
    amp, grad = call_contexts(v, device, scenario, cache_enabled)
    with matmul_precision(v.precision == "tf32"), amp(), grad():
        yield
