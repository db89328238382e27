"""Precision and optimisation variants, as data and pure functions, for any ``nn.Module``.

A variant name is a base precision with optional ``+``-joined optimisations::

    fp32 | tf32 | amp-fp16 | amp-bf16 | int8-dynamic   [+compile] [+channels-last] [+cuda-graphs]

``compile``, ``channels-last`` and ``cuda-graphs`` alone mean fp32 with that optimisation.
The model workloads and ``torchmark tune`` share this package:

    v = parse("amp-bf16+compile")
    reason = applies(v, device, model, "train", inputs)     # None, or why it cannot run
    ref = reference(model, inputs, device, "train")         # fp32 output, same mode
    built = build(v, model, inputs, device, "train")        # compiles/captures here, untimed
    max_err = check(built.output, ref, v)                   # WrongResultError past tolerance
    measure(built.step, device)                             # only steady-state calls are timed

``build`` takes ownership of ``model`` (it may convert it in place and training updates its
weights): compute the reference first, or pass a copy.

One noun per module: ``spec`` (names, parts, tolerances), ``support`` (``applies``),
``flags`` (TF32, autocast, grad mode), ``builder`` (``build``), ``accuracy`` (``check``).
"""

from torchmark.variants.accuracy import check, max_error, reference
from torchmark.variants.builder import Built, build, default_loss
from torchmark.variants.flags import context, preserved_flags
from torchmark.variants.spec import (
    ALIASES,
    AMP_DTYPE,
    CEILING,
    COMPILE_TOLERANCE,
    NAMED,
    OPTIMISATIONS,
    PRECISIONS,
    TOLERANCE,
    TRAIN_SCENARIOS,
    Variant,
    is_training,
    parse,
)
from torchmark.variants.support import applies

__all__ = [
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
