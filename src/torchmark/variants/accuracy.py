"""How far a variant's output is from the fp32 reference, against its tolerance."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torchmark.devices.base import Device
from torchmark.errors import WrongResultError
from torchmark.variants.flags import matmul_precision
from torchmark.variants.spec import Variant, is_training, parse, tensors


def reference(model: nn.Module, inputs: Sequence[Any], device: Device, scenario: str) -> Any:
    """The fp32 (IEEE, no TF32) output of ``model`` in the scenario's mode, for ``check``."""
    model.train(is_training(scenario))
    with matmul_precision(False), torch.no_grad():
        return model(*inputs)


def max_error(output: Any, ref: Any) -> float:
    """Max |output - ref| over all tensors, relative to the largest |ref| (the output scale).

    NaN or inf in ``output`` (or ``ref``) raises WrongResultError.
    """
    outs, refs = list(tensors(output)), list(tensors(ref))
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
