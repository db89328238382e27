"""Model inputs: ``--input 3x224x224[:dtype]`` specs, factories ``batch -> inputs``, and the
small tree helpers that move nested tuples/lists/dicts of tensors between devices.

Inputs are made once per case, outside any timed region, from a seeded generator: floats
are standard normal (no zeros, no subnormals: METHOD.md §2.2), integers are ids in
``[0, INT_HIGH)`` so they index any embedding of at least that many rows.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from torchmark.errors import InputError
from torchmark.user.source import one_line

INT_HIGH = 100
SEED = 0

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "double": torch.float64,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


@dataclass(frozen=True)
class Inputs:
    """Positional and keyword arguments of one model call."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(obj: Any) -> Inputs:
        """A tensor, a tuple/list (positional arguments) or a dict (keyword arguments)."""
        if isinstance(obj, Inputs):
            return obj
        if isinstance(obj, Mapping):
            return Inputs((), dict(obj))
        if isinstance(obj, (tuple, list)):
            return Inputs(tuple(obj))
        return Inputs((obj,))

    def to(self, device: torch.device) -> Inputs:
        return Inputs(to_device(self.args, device), to_device(self.kwargs, device))

    def tensors(self) -> list[torch.Tensor]:
        return tensors_in((self.args, self.kwargs))

    def describe(self) -> str:
        """e.g. ``float32[8, 3, 32, 32], ids=int64[8, 128]``."""
        parts = [describe_tree(a) for a in self.args]
        parts += [f"{k}={describe_tree(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts) or "(no inputs)"

    def call(self, model: Callable[..., Any]) -> Any:
        return model(*self.args, **self.kwargs)


InputFactory = Callable[[int], Inputs]


@dataclass(frozen=True)
class InputSpec:
    """One ``--input``: a shape without the batch dimension and a dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    def make(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        shape = (batch, *self.shape)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=gen).bool()
        if self.dtype.is_floating_point:
            return torch.randn(shape, generator=gen).to(self.dtype)
        return torch.randint(0, INT_HIGH, shape, generator=gen, dtype=self.dtype)


def parse_input(text: str) -> InputSpec:
    """``3x224x224`` -> float32 (3, 224, 224); ``128:int64`` -> int64 (128,)."""
    shape_text, _, dtype_text = text.strip().partition(":")
    try:
        shape = tuple(int(s) for s in shape_text.lower().split("x")) if shape_text else ()
    except ValueError:
        shape = (-1,)
    if any(s < 1 for s in shape):
        raise InputError(
            f"--input {text!r}: give a shape without the batch dimension, "
            "e.g. --input 3x224x224 or --input 128:int64"
        )
    dtype_key = dtype_text.strip().lower().removeprefix("torch.") or "float32"
    if dtype_key not in DTYPES:
        raise InputError(
            f"--input {text!r}: unknown dtype {dtype_key!r}; valid: {', '.join(sorted(DTYPES))}"
        )
    return InputSpec(shape, DTYPES[dtype_key])


def from_specs(specs: Sequence[InputSpec]) -> InputFactory:
    """Random inputs of these shapes, one tensor per spec, the batch dimension first."""
    if not specs:
        raise InputError("the model needs inputs: give --input SHAPE (e.g. 3x224x224) or --inputs")

    def make(batch: int) -> Inputs:
        gen = torch.Generator().manual_seed(SEED + batch)
        return Inputs(tuple(s.make(batch, gen) for s in specs))

    return make


def from_examples(example: Any) -> tuple[InputFactory, int]:
    """Inputs of any batch size drawn from example inputs whose first dimension is the batch.

    Rows are resampled (seeded) from the examples, so real data keep their distribution and
    integer ids stay valid. Returns the factory and the examples' own batch size.
    """
    ex = Inputs.of(example)
    sizes = {t.shape[0] for t in ex.tensors() if t.dim() > 0}
    if len(sizes) != 1:
        raise InputError(
            "example inputs must be tensors sharing their first (batch) dimension, got "
            f"{ex.describe()}; pass a callable batch -> inputs instead"
        )
    (n,) = sizes

    def make(batch: int) -> Inputs:
        if batch == n:
            return ex
        gen = torch.Generator().manual_seed(SEED + batch)
        rows = torch.randint(0, n, (batch,), generator=gen)

        def pick(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                return x.index_select(0, rows.to(x.device)).contiguous()
            return x

        return Inputs(map_tree(pick, ex.args), map_tree(pick, ex.kwargs))

    return make, n


def from_callable(fn: Callable[..., Any], what: str) -> tuple[InputFactory, int | None]:
    """A user factory: ``fn(batch)`` -> inputs, or ``fn()`` -> example inputs with a batch."""
    try:
        takes_batch = bool(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        takes_batch = True
    if not takes_batch:
        return from_examples(_call_user(fn, (), what))

    def make(batch: int) -> Inputs:
        return Inputs.of(_call_user(fn, (batch,), what))

    return make, None


def per_batch(factory: InputFactory) -> InputFactory:
    """``factory`` made deterministic per batch: its first inputs at each batch, kept.

    A user factory such as ``lambda b: torch.randn(b, 16)`` draws new values on every call;
    a benchmark compares each device's output with a reference computed on the first
    device, so every device must see the same tensors (held in host memory for the run).
    """
    return functools.cache(factory)


def _call_user(fn: Callable[..., Any], args: tuple[Any, ...], what: str) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        raise InputError(f"{what} raised {one_line(e)}") from e


# -- nested tuples / lists / dicts of tensors -------------------------------------------------


def map_tree(fn: Callable[[Any], Any], obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):  # dict subclasses (e.g. HF ModelOutput) come back as dicts
        return {k: map_tree(fn, v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tree(fn, v) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tree(fn, v) for v in obj)
    return fn(obj)


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """Every tensor in a nested structure, in order (non-tensor leaves are skipped)."""
    out: list[torch.Tensor] = []

    def visit(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            out.append(x)
        return x

    map_tree(visit, obj)
    return out


def to_device(obj: Any, device: torch.device) -> Any:
    return map_tree(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, obj)


def describe_tree(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"{str(obj.dtype).removeprefix('torch.')}{list(obj.shape)}"
    if isinstance(obj, Mapping):
        return "{" + ", ".join(f"{k}: {describe_tree(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (tuple, list)):
        return "(" + ", ".join(describe_tree(v) for v in obj) + ")"
    return type(obj).__name__
