"""The work of one step, op by op: each op's name, family, dtype, FLOPs, bytes and whether it
launches a kernel, recorded as the step runs here.

Recorded with a ``TorchDispatchMode`` below autograd, so a training step's backward and
optimizer ops are seen too. FLOPs per op come from ``torch.utils.flop_counter``'s own
formulas (the ones ``FlopCounterMode`` applies, composite ops decomposed as it does, so the
total is its total); bytes per op are its tensor inputs plus outputs, each storage once: the
traffic of a kernel that keeps nothing in cache, an upper bound for a fused sequence. An op
that is not a view or an allocation counts as one kernel launch on an accelerator (a
cuBLAS split-K or a cuDNN layout change launches more: on an H200 the small models ran
1.3-2x the count recorded on the CPU, the count exact at large shapes).

``model`` reads the dtype most of a model's FLOPs run in from it (its MFU's peak);
``predict`` prices each op on a machine it was not recorded on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from torchmark.hardware.kernels import dtype_name, family

# Ops that allocate or re-describe memory and launch no kernel.
NO_KERNEL = frozenset(
    {
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach",
        "alias", "lift_fresh", "_unsafe_view", "view", "t", "transpose", "permute", "expand",
        "as_strided", "reshape", "unsqueeze", "squeeze", "select", "slice", "split",
        "split_with_sizes", "unbind", "_reshape_alias", "view_as", "flatten", "set_",
        "resize_", "is_same_size", "_has_compatible_shallow_copy_type", "sym_size",
        "_local_scalar_dense", "record_stream", "_to_copy_",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Op:
    """One op call of the step."""

    name: str  # aten overload packet name: "addmm"
    family: str  # hardware.kernels.family
    dtype: str | None  # its inputs' (a GEMM's output may be wider: int8 -> int32)
    flops: float
    bytes: float  # tensor inputs plus outputs, each storage once
    kernel: bool  # launches device work (not a view or an allocation)


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _nbytes(ts: list[torch.Tensor]) -> float:
    seen: set[tuple[int, Any]] = set()
    total = 0
    for t in ts:
        try:
            key = (t.untyped_storage().data_ptr(), t.storage_offset())
        except (RuntimeError, NotImplementedError):  # no storage (a meta or sparse tensor)
            continue
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return float(total)


class Recorder(TorchDispatchMode):
    """Every op dispatched while it is active, as ``Op`` rows in ``ops``."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.fused: list[list[Any]] = []  # the ops of each attention call under way

    def attention(self, name: str, call: Callable[[], Any], inputs: Any) -> Any:
        """An attention call as one op of family ``attention``: a GPU runs it as one fused
        kernel (flash, memory-efficient), the CPU as the math it decomposes into here."""
        self.fused.append([])
        try:
            out = call()
        finally:
            parts = self.fused.pop()
        flops = 0.0
        for func, args, kwargs, result in parts:
            formula = flop_registry.get(func.overloadpacket)
            if formula is not None:
                with contextlib.suppress(Exception):
                    flops += float(formula(*args, **kwargs, out_val=result))
        ins = _tensors(inputs)
        self.ops.append(
            Op(name, "attention", dtype_name(ins[0].dtype) if ins else None, flops,
               _nbytes(ins + _tensors(out)), True)
        )  # fmt: skip
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        # a composite op that reaches the mode whole (aten.linear under inference_mode) is
        # decomposed as FlopCounterMode does, so its GEMM is seen and counted
        composite = torch._C.DispatchKey.CompositeImplicitAutograd
        attention = family(func.overloadpacket.__name__) == "attention"
        # ... but never attention: a GPU runs it as one fused kernel, not as the CPU's math
        if (
            not attention
            and func.overloadpacket not in flop_registry
            and func.has_kernel_for_dispatch_key(composite)
        ):
            with self:
                r = func.decompose(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = func(*args, **kwargs)
        if self.fused:  # inside an attention call: its pieces are one fused kernel there
            self.fused[-1].append((func, args, kwargs, out))
            return out
        packet = func.overloadpacket
        name = packet.__name__
        ins, outs = _tensors((args, kwargs)), _tensors(out)
        flops = 0.0
        if packet in flop_registry:
            try:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            except Exception:  # a formula that does not fit the call counts nothing
                flops = 0.0
        # an op of another namespace (a custom or library op) is no family a run teaches
        fam = family(name) if getattr(func, "namespace", "aten") in ("aten", "prims") else "custom"
        ref = ins if ins and fam in ("gemm", "conv", "attention") else (outs or ins)
        kernel = not (getattr(func, "is_view", False) or name in NO_KERNEL)
        self.ops.append(
            Op(
                name=name,
                family=fam,
                dtype=dtype_name(ref[0].dtype) if ref else None,
                flops=flops,
                bytes=_nbytes(ins + outs) if kernel else 0.0,
                kernel=kernel,
            )
        )
        return out


class _Attention(TorchFunctionMode):
    """Sees ``scaled_dot_product_attention`` before it is decomposed (below autograd only
    its math is left) and has the recorder keep it as one op."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "scaled_dot_product_attention":
            return self.rec.attention(func.__name__, lambda: func(*args, **kwargs), (args, kwargs))
        return func(*args, **kwargs)


def record(call: Callable[[], Any]) -> tuple[Any, list[Op]]:
    """``call()`` once, its ops recorded: (its output, the ops in order)."""
    rec = Recorder()
    with _Attention(rec), rec:
        out = call()
    return out, rec.ops


def dense_flops(ops: list[Op]) -> list[tuple[str, str | None, float]]:
    """(family, dtype, FLOPs) of each op that counted FLOPs: what ``kernels.dominant_key``
    reads."""
    return [(o.family, o.dtype, o.flops) for o in ops if o.flops]


@contextlib.contextmanager
def accelerator_optimizers() -> Iterator[None]:
    """Optimizers built inside take the implementation a CUDA run gets: ``foreach`` (torch
    picks the foreach SGD/Adam for CUDA tensors and the per-parameter loop for CPU ones), so
    a training step recorded on the CPU launches the ops a GPU would."""
    classes = [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW]
    saved = {cls: vars(cls)["__init__"] for cls in classes}

    def patched(init: Callable[..., None]) -> Callable[..., None]:
        def __init__(self: Any, *a: Any, **kw: Any) -> None:
            kw.setdefault("foreach", True)
            init(self, *a, **kw)

        return __init__

    for cls, init in saved.items():
        cls.__init__ = patched(init)  # type: ignore[misc]
    try:
        yield
    finally:
        for cls, init in saved.items():
            cls.__init__ = init  # type: ignore[misc]
