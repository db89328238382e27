"""What a variant is: its name, parts, tolerance and ceiling, as data and pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from torchmark.errors import UnknownNameError

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "int8-dynamic")
OPTIMISATIONS = ("compile", "channels-last", "cuda-graphs")
TRAIN_SCENARIOS = frozenset({"train"})  # every other scenario is inference
# fp32 and its faster float forms, in the order the model plans try them; of those, a CPU
# plan trains at two: AMP fp16 has no CPU hardware path (see models.base.Plan.cpu_scenarios).
FLOATS = ("fp32", "tf32", "amp-bf16", "amp-fp16")
CPU_TRAIN = ("fp32", "amp-bf16")

# Max |built - reference| / max |reference|, per base precision. Why these numbers:
# fp32 kernels differ only in summation order (~1e-6 relative per reduction);
# TF32 keeps a 10-bit mantissa (5e-4 per product), accumulated over ~50 layers;
# fp16 / bf16 keep 10 / 7 mantissa bits: bf16 rounding is 4e-3 per op, ~2e-2 after a deep net;
# int8 dynamic quantisation has 256 levels per tensor: ~1 % per layer, ~1e-1 through an MLP.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "amp-fp16": 5e-2, "amp-bf16": 5e-2, "int8-dynamic": 1e-1}
# Inductor fuses and reorders reductions and picks other matmul kernels: 1e-3 at fp32.
COMPILE_TOLERANCE = 1e-3
# What each precision changes, by op family: what its tolerance has to absorb (said beside
# every check, so that a rejection can be read against it).
TOLERANCE_COVERS = {
    "fp32": "IEEE fp32 in every op (cuBLAS and cuDNN TF32 off, as the reference)",
    "tf32": "matmul and convolution inputs rounded to 10 mantissa bits",
    "amp-fp16": "matmul, convolution and linear layers in fp16 under autocast; reductions, "
    "softmax and norms stay fp32",
    "amp-bf16": "the same ops in bf16 (7 mantissa bits) under autocast",
    "int8-dynamic": "Linear weights and activations quantised to int8 per tensor",
}


def tolerance_line(names: Iterable[str]) -> str:
    """The tolerances of the variants ``names`` (max error relative to the fp32 output's
    scale) with the op families each covers: one line for a run's notes."""
    seen = [parse(n) for n in dict.fromkeys(names)]
    parts = {
        v.precision: f"{v.precision} {TOLERANCE[v.precision]:g} ({TOLERANCE_COVERS[v.precision]})"
        for v in seen
    }
    line = "tolerances, as max error over the fp32 output's scale: " + "; ".join(parts.values())
    if any(v.compile for v in seen):
        line += f"; +compile at least {COMPILE_TOLERANCE:g} (inductor reorders reductions)"
    return line


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
    "half": "amp-fp16",
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


def tensors(x: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nest of tensors, lists, tuples and mappings, in a fixed order."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, Mapping):
        for k in sorted(x, key=str):
            yield from tensors(x[k])
    elif isinstance(x, (list, tuple)):
        for item in x:
            yield from tensors(item)
