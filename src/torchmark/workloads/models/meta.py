"""A model on the ``meta`` device: built with shapes only (no memory, no random init), to
count its parameters and its FLOPs per call (``FlopCounterMode``) before anything runs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from torchmark.devices.base import Device

__all__ = ["OnMeta", "_MetaDevice", "_build_on_meta", "_count_flops", "_meta_model"]


class OnMeta(Protocol):
    """What a model workload offers to be built and run on the meta device."""

    def make_model(self, sizes: Any) -> nn.Module: ...

    def runnable(
        self, model: nn.Module, scenario: str, sizes: Any, device: Device, g: torch.Generator
    ) -> tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor] | None]: ...


class Stepwise(Protocol):
    """What ``runnable`` returns for decode: ``m(prompt, cont)`` prefills ``prompt`` once,
    then generates one token per ``m.step(token, position)``."""

    def __call__(self, prompt: torch.Tensor, cont: torch.Tensor) -> Any: ...

    def step(self, token: torch.Tensor, pos: int) -> torch.Tensor: ...


class _MetaDevice(Device):
    """A device whose tensors live on ``meta``; never runs anything. As an accelerator it
    stands in for 'a GPU' when describing the default sizes; as a CPU it counts FLOPs."""

    kind: ClassVar[str] = "meta"

    def __init__(self, is_accelerator: bool = True) -> None:
        super().__init__()
        self.is_accelerator = is_accelerator  # type: ignore[misc]

    @property
    def torch_device(self) -> torch.device:
        return torch.device("meta")

    def synchronize(self) -> None:
        return None

    def info(self) -> dict[str, Any]:
        return {"kind": "meta"}


class _NoInitOnMeta(TorchFunctionMode):
    """Skip random initialisers on meta tensors while a model is built there: only shapes
    matter, and normal_ / erfinv_ / clamp_ have no meta kernel, so their Python fallback
    imported torch._dynamo (~1.2 s CPU) just to plan a run."""

    # nn.init's own functions dispatch as torch functions too, and a mode handling one does
    # not see the tensor methods it calls: both are listed.
    SKIP = frozenset(
        [
            getattr(torch.Tensor, name)
            for name in ("normal_", "erfinv_", "clamp_", "exponential_", "log_normal_", "cauchy_")
        ]
        + [
            getattr(nn.init, name)
            for name in ("normal_", "trunc_normal_", "kaiming_normal_", "xavier_normal_")
        ]
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in self.SKIP:
            t = args[0] if args else kwargs.get("tensor")  # nn.init passes tensor=
            if getattr(t, "is_meta", False):
                return t
        return func(*args, **kwargs)


def _build_on_meta(w: OnMeta, sizes: Any) -> nn.Module:
    with torch.device("meta"), _NoInitOnMeta():
        return w.make_model(sizes)


@functools.cache
def _meta_model(cls: Callable[[], OnMeta], sizes: Any) -> nn.Module:
    return _build_on_meta(cls(), sizes)


@functools.cache
def _count_flops(cls: Callable[[], OnMeta], scenario: str, sizes: Any) -> float:
    """Counted on the meta device: shapes only, no memory; under a second even for GPT-2."""
    w = cls()
    meta = _MetaDevice(is_accelerator=False)
    model = _build_on_meta(w, sizes)
    module, inputs, loss_fn = w.runnable(model, scenario, sizes, meta, torch.Generator())
    inputs = tuple(t.to("meta") for t in inputs)
    train = scenario == "train"
    module.train(train)
    if scenario == "decode":
        return float(_count_decode(cast(Stepwise, module), *inputs))
    with FlopCounterMode(display=False) as counter:
        if train:
            out = module(*inputs)
            assert loss_fn is not None
            loss_fn(out).backward()
        else:
            with torch.no_grad():
                module(*inputs)
    return float(counter.get_total_flops())


def _counted(call: Callable[[], Any]) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        call()
    return int(counter.get_total_flops())


def _count_decode(module: Stepwise, prompt: torch.Tensor, cont: torch.Tensor) -> int:
    """The FLOPs of generating ``cont``'s tokens after ``prompt`` (its prefill not counted)
    without counting every step: on meta a step of GPT-2 small takes ~0.3 s, as long as a
    whole forward, so 128 tokens took 37 s (2-core VM) of each run that plans the case.
    ``module(prompt, cont)`` prefills once, then calls ``module.step(token, position)``.

    A step's count depends on shapes alone: its one token's and the cache's length, one more
    per step. Each operator counts a product of its dimensions, and in a one-token step the
    length is one dimension of attention's two products (scores, then values): the count is
    affine in the position. Checked, not assumed: the first two steps and the last are
    counted, and where they lie on one line the line's sum is exact (a count quadratic in
    the position, the length in two dimensions of one product, cannot put three steps on
    one line); else every step is counted."""
    with torch.no_grad():
        module(prompt, cont[:, :0])  # the prefill alone

    def at(i: int) -> int:
        return _counted(lambda: module.step(cont[:, i : i + 1], prompt.shape[1] + i))

    n = cont.shape[1]
    if n >= 3:
        first, second, last = at(0), at(1), at(n - 1)
        slope = second - first
        if last == first + (n - 1) * slope:
            return n * first + slope * n * (n - 1) // 2
    return sum(at(i) for i in range(n))
