"""Whether a variant can run a model on a device, and if not, why not."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from torch import nn

from torchmark.devices.base import Device
from torchmark.variants.spec import Variant, is_training, parse, tensors


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
        if inputs is not None and not any(t.dim() == 4 for t in tensors(inputs)):
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
