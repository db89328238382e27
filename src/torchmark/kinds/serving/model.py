"""The model as served: what to serve (a picklable recipe, rebuilt in each worker process),
the requests (host tensors of one item each) and the executor that serves a batch of them.

    recipe() -> Served(model, factory, name)       built-in model or the user's SPEC
    requests = factory(POOL) split into POOL host requests of one item each
    executor(first, n):                            one batch, timed by the server loop
        inputs = cat(requests first .. first+n-1)  on the host, as a server batches them
        out = model(inputs.to(device))             under inference_mode
        out.to(host), split per request            the copy back is the request's latency
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from torchmark.devices import Device
from torchmark.errors import InputError, WrongResultError
from torchmark.user.inputs import InputFactory, Inputs, tensors_in, to_device
from torchmark.user.workload import nonfinite, place

# Distinct request inputs cycled through: enough that a batch never repeats one, few
# enough to make in a blink (64 images of 224x224 are 38 MB).
POOL = 64


@dataclass
class Served:
    model: nn.Module
    factory: InputFactory  # batch -> host inputs
    name: str


Recipe = Callable[[], Served]  # picklable (module-level function or functools.partial)


def builtin(name: str, sizes: Mapping[str, int] | None = None) -> Recipe:
    """A recipe for a built-in model (``simplenet``, ``resnet50``, ``bert-base``...) at its
    default sizes, or smaller ones (tests: ``{"image": 32}``, ``{"layers": 1, "seq": 16}``)."""
    return functools.partial(_builtin, name, dict(sizes or {}))


def _builtin(name: str, sizes: dict[str, int]) -> Served:
    from torchmark.workloads import WORKLOADS, load_builtins
    from torchmark.workloads.models.base import ModelWorkload, Sizes

    load_builtins()
    workload = WORKLOADS.get(name)()  # an unknown name lists the valid ones
    if not isinstance(workload, ModelWorkload):
        models = [n for n in WORKLOADS.names() if issubclass(WORKLOADS.get(n), ModelWorkload)]
        raise InputError(f"{name!r} is not a model; serve one of: {', '.join(models)}")
    base = Sizes.from_params(sizes)
    torch.manual_seed(0)
    model = workload.make_model(base)

    def factory(batch: int) -> Inputs:
        g = torch.Generator().manual_seed(1 + batch)
        s = Sizes.from_params({**sizes, "batch": batch})
        return Inputs(workload.make_inputs(s, g))

    return Served(model, factory, name)


def is_builtin(recipe: Recipe) -> bool:
    """Whether ``recipe`` makes one of torchmark's own models (not the user's SPEC)."""
    return isinstance(recipe, functools.partial) and recipe.func is _builtin


def split_requests(host: Inputs, n: int) -> list[Inputs]:
    """``n`` requests of one item each from inputs of batch ``n``, each its own memory."""
    from torchmark.user.inputs import map_tree

    out = []
    for i in range(n):

        def row(x: Any, i: int = i) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == n:
                return x[i : i + 1].clone()
            return x

        out.append(Inputs(map_tree(row, host.args), map_tree(row, host.kwargs)))
    return out


def batch_of(requests: Sequence[Inputs]) -> Inputs:
    """One batch from requests of one item each: every tensor concatenated on dim 0."""
    if len(requests) == 1:
        return requests[0]
    return Inputs(_cat([r.args for r in requests]), _cat([r.kwargs for r in requests]))


def _cat(items: list[Any]) -> Any:
    first = items[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(items) if first.dim() > 0 else first
    if isinstance(first, Mapping):
        return {k: _cat([it[k] for it in items]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_cat(list(col)) for col in zip(*items, strict=True))
    return first


class ModelExecutor:
    """Serves batches of pooled host requests with the model on ``device``.

    ``since`` (a shared ``RawValue("d")``, or None): set to ``time.perf_counter()`` as each
    forward starts and to 0 as it ends, so that another process can bound a forward that
    never returns, even one that holds the GIL (``workers.Processes`` does)."""

    def __init__(
        self, served: Served, device: Device, max_batch: int = 1, since: Any = None
    ) -> None:
        self.device, self.since = device, since
        self.host = torch.device("cpu")
        self.model = place(served.model, device)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            self.model.eval()  # served for inference (exported programs refuse the switch)
        try:
            self.requests = split_requests(served.factory(POOL), POOL)
        except InputError:
            raise
        except Exception as e:
            from torchmark.user.source import one_line

            raise InputError(f"making {POOL} requests' inputs raised {one_line(e)}") from e
        self.warm(max_batch)

    def warm(self, max_batch: int) -> None:
        """One call at each power of two up to ``max_batch`` (first calls at a new shape
        build kernels and grow allocators: not what a request in a warm server pays); the
        first output is checked to be finite."""
        sizes = sorted({min(1 << i, max_batch) for i in range(max_batch.bit_length() + 1)})
        for b in sizes:
            try:
                out = self._forward(0, b)
            except Exception as e:
                from torchmark.user.source import one_line

                raise InputError(
                    f"the model does not run on {self.device.name} at batch {b}: {one_line(e)}"
                ) from e
            bad = nonfinite(out)
            if bad:
                raise WrongResultError(f"{bad} on {self.device.name} at batch {b}")

    def _forward(self, first: int, n: int) -> Any:
        reqs = [self.requests[(first + i) % POOL] for i in range(n)]
        inputs = batch_of(reqs).to(self.device.torch_device)
        if self.since is not None:
            self.since.value = time.perf_counter()
        try:
            with torch.inference_mode():
                out = inputs.call(self.model)
            return to_device(out, self.host)  # .cpu() waits for the device
        finally:
            if self.since is not None:
                self.since.value = 0.0

    def __call__(self, first: int, n: int) -> None:
        out = self._forward(first, n)
        for t in tensors_in(out):  # one result per request, as a server sends them
            if t.dim() > 0 and t.shape[0] == n:
                t.split(1)
