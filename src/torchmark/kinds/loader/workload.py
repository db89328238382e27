"""The user's own loader feeding the user's model (``torchmark model SPEC --loader
file.py:make_loader``, ``benchmark_model(..., loader=...)``): the ``input`` workload's
breakdown and advice on the user's batches. The run around it is ``kinds.loader``.

``make_loader()`` returns a DataLoader or any iterable of batches. A batch is a tensor, a
dict of keyword inputs, or a tuple / list whose first item is the model's input (a tensor,
a tuple of positional inputs or a dict), the rest (labels) travelling with it. The step is
the model's forward in eval mode under ``no_grad``, as ``torchmark model`` measures it.
A DataLoader is also rebuilt with the sweep's settings (workers, pinned memory, copies)
over its own dataset, batch sampler and collate function."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from torchmark.devices.base import Device
from torchmark.devices.host import available_cores
from torchmark.errors import CaseSkipped, InputError, WrongResultError
from torchmark.loaders import LOADER, RESIDENT, YOURS, LoaderConfig, config_of, params
from torchmark.results import Work
from torchmark.stats.measurement import Measurement
from torchmark.workloads.base import Case, PlanOptions, Prepared, Workload
from torchmark.workloads.pipeline.feed import (
    Batch,
    FedEpoch,
    first_batches,
    quiet_stop_and,
    shut,
    tensors,
    to_device,
)
from torchmark.workloads.pipeline.workload import worker_counts

USER_INPUT = "user-input"
MAX_STEPS = 32  # batches per call: a real epoch (20k steps) would be one call of hours
MIN_STEPS = 2


def call_factory(make_loader: Callable[[], Any], what: str) -> Iterable[Any]:
    """The user's loader, or one line saying why there is none."""
    from torchmark.user.source import one_line

    try:
        loader = make_loader()
    except Exception as e:
        raise InputError(f"{what}: make_loader() raised {one_line(e)}") from None
    # iter() would say the same, but on a DataLoader with workers it starts them only to
    # drop them: the first batches are read right after
    if not isinstance(loader, Iterable) and not hasattr(type(loader), "__getitem__"):
        raise InputError(
            f"{what}: make_loader() returned {type(loader).__name__}, not a DataLoader or an "
            "iterable of batches"
        )
    return loader


def model_call(batch: Batch) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The model's arguments in a batch (see the module's docstring)."""
    if isinstance(batch, dict):
        return (), batch
    if isinstance(batch, tuple | list):
        if not batch:
            raise InputError("an empty batch")
        first = batch[0]
        if isinstance(first, dict):
            return (), first
        return (tuple(first) if isinstance(first, tuple | list) else (first,)), {}
    return (batch,), {}


def samples(batch: Batch) -> int:
    leaves = tensors(batch)
    return int(leaves[0].shape[0]) if leaves and leaves[0].dim() else 1


def rebuilt(loader: DataLoader[Any], cfg: LoaderConfig, timeout_s: float) -> DataLoader[Any]:
    """The user's DataLoader with the sweep's settings: the same dataset, batches (its own
    batch sampler), collate function, and with workers its own worker_init_fn (a dataset
    may open its files or seed per worker there) and multiprocessing context."""
    workers = (
        {
            "worker_init_fn": quiet_stop_and(loader.worker_init_fn),
            "multiprocessing_context": loader.multiprocessing_context,
        }
        if cfg.workers
        else {}
    )
    return DataLoader(
        loader.dataset,
        batch_sampler=loader.batch_sampler,
        collate_fn=loader.collate_fn,
        timeout=timeout_s if cfg.workers else 0,
        **workers,
        **cfg.kwargs(),
    )


class Capped:
    """The first ``n`` batches of each pass over ``loader``."""

    def __init__(self, loader: Iterable[Any], n: int) -> None:
        self.loader, self.n = loader, n

    def __iter__(self) -> Any:
        return CappedIter(self.loader, self.n)

    @property
    def _iterator(self) -> Any:  # persistent workers, for FedEpoch.close()
        return getattr(self.loader, "_iterator", None)


class CappedIter:
    """``islice`` that keeps the DataLoader iterator reachable: a pass that ends early
    stops its workers (a persistent loader keeps them for the next pass), as does
    ``shut`` when the case fails."""

    def __init__(self, loader: Iterable[Any], n: int) -> None:
        self.inner = iter(loader)
        self.left = itertools.count(n, -1)
        self.persistent = getattr(loader, "persistent_workers", False)

    def __next__(self) -> Any:
        if next(self.left) <= 0:
            if not self.persistent:
                shut(self.inner)
            raise StopIteration
        return next(self.inner)

    def _shutdown_workers(self) -> None:
        stop = getattr(self.inner, "_shutdown_workers", None)
        if stop is not None:
            stop()


class UserPipeline(Workload):
    """The user's model fed by the user's loader, as given and rebuilt per setting."""

    name: ClassVar[str] = USER_INPUT
    summary: ClassVar[str] = "your model fed by your loader: wait / copy / compute per step"
    group: ClassVar[str] = "user"
    batch_timeout_s: ClassVar[float] = 8.0

    def __init__(self, model: nn.Module, make_loader: Callable[[], Any], what: str) -> None:
        self.model, self.make_loader, self.what = model, make_loader, what
        self.loader = call_factory(make_loader, what)
        self._read_twice = False  # _reference's: your loader read once per run
        self._want: list[Batch] | None = None
        try:
            self.first = first_batches(Capped(self.loader, MIN_STEPS), MIN_STEPS)[0]
        except CaseSkipped as e:
            raise InputError(f"{what}: {e}; the breakdown needs {MIN_STEPS} or more") from None
        self.batch = samples(self.first)
        try:
            args, kwargs = model_call(self.first)
            with torch.no_grad():
                self.model(*args, **kwargs)
        except Exception as e:
            from torchmark.user.source import one_line

            raise InputError(
                f"{what}: the model cannot take your loader's batches: {one_line(e)}"
            ) from None

    def _reference(self) -> list[Batch] | None:
        """Your loader's first batches, read twice, once per run (not per configuration:
        each pass may start your workers); None when the two passes differ."""
        if not self._read_twice:
            self._read_twice = True
            want = first_batches(Capped(self.loader, MIN_STEPS), MIN_STEPS)
            again = first_batches(Capped(self.loader, MIN_STEPS), MIN_STEPS)
            self._want = want if _same(want, again) else None
        return self._want

    def configs(self) -> list[LoaderConfig]:
        if not isinstance(self.loader, DataLoader) or isinstance(
            self.loader.dataset, IterableDataset
        ):
            return []  # not rebuilt: an iterable's settings are its own
        top = worker_counts(available_cores(), quick=False)
        w = top[-1]
        return [
            *(LoaderConfig(n) for n in top),
            LoaderConfig(w, persistent=True),
            LoaderConfig(w, pin=True, non_blocking=True),
            LoaderConfig(w, pin=True, non_blocking=True, side_stream=True),
        ]

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = opts.suite if opts.suite == "quick" else "epoch"
        b = (("batch", self.batch),)
        sweep = f"{self.name}/{device.name}"
        out = [
            Case(self.name, RESIDENT, device, b, sweep, rule),
            Case(self.name, LOADER, device, ((YOURS, 1), *b), sweep, rule),
        ]
        return out + [
            Case(self.name, LOADER, device, params(c, self.batch), sweep, rule)
            for c in self.configs()
        ]

    def prepare(self, case: Case) -> Prepared:
        from torchmark.user.workload import place

        device, p = case.device, case.param_dict
        model = place(self.model, device)

        def step(batch: Batch) -> object:
            args, kwargs = model_call(batch)
            with torch.no_grad():
                return model(*args, **kwargs)

        rule = case.rule or "epoch"
        if case.variant == RESIDENT:
            on = to_device(self.first, device.torch_device, False)

            def resident() -> object:
                out = step(on)
                device.synchronize()
                return out

            note = "resident: your model fed your first batch, already in device memory"
            work = Work(items=self.batch, item_unit="samples")
            return Prepared(fn=resident, work=work, timing="e2e", rule=rule, notes=[note])
        cfg = config_of(p)
        if cfg.copies_async and (why := device.supports_async_copy()) is not None:
            raise CaseSkipped(why)
        loader: Iterable[Any] = (
            self.loader if YOURS in p else rebuilt(self.loader, cfg, self.batch_timeout_s)  # type: ignore[arg-type]
        )
        steps = min(_length(loader) or MAX_STEPS, MAX_STEPS)
        capped = Capped(loader, steps)
        epoch = FedEpoch(
            capped, step, device, non_blocking=cfg.non_blocking, side_stream=cfg.side_stream
        )
        # teardown, last in first out: the epoch's workers shut, then your loader as it was
        # (also when shutting them raises)
        teardown = contextlib.ExitStack()
        if YOURS in p and isinstance(loader, DataLoader) and loader.num_workers:
            # its workers, too, exit quietly on the group's SIGTERM; its own init still runs
            teardown.callback(setattr, loader, "worker_init_fn", loader.worker_init_fn)
            loader.worker_init_fn = quiet_stop_and(loader.worker_init_fn)
        teardown.callback(epoch.close)

        def check() -> list[str]:
            if YOURS in p:
                return []
            fresh = rebuilt(self.loader, cfg, self.batch_timeout_s)  # type: ignore[arg-type]
            got = first_batches(Capped(fresh, MIN_STEPS), MIN_STEPS)
            want = self._reference()
            if want is None:
                return ["your loader's order changes between passes: batches not compared"]
            if not _same(epoch.copied(got), want):
                raise WrongResultError(f"{cfg.label()}: batches differ from your loader's")
            return []

        def summarize(m: Measurement) -> dict[str, Any]:
            return {"input": epoch.breakdown(skip_epochs=1 + m.warmup_calls)}

        label = "your loader, as given" if YOURS in p else cfg.label()
        return Prepared(
            fn=epoch,
            work=Work(items=steps * self.batch, item_unit="samples"),
            check=check,
            timing="e2e",
            rule=rule,
            notes=[f"loader: one call is {steps} batches of your loader"],
            extra={"loader": label, "steps_per_epoch": steps},
            teardown=teardown.close,
            summarize=summarize,
            repeatable=False,
        )


def _length(loader: Iterable[Any]) -> int | None:
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


def _same(a: Sequence[Batch], b: Sequence[Batch]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        tx, ty = tensors(x), tensors(y)
        if len(tx) != len(ty) or not all(
            u.shape == v.shape and torch.equal(u, v) for u, v in zip(tx, ty, strict=True)
        ):
            return False
    return True
