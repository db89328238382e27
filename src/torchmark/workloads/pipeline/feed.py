"""One training step fed by a loader, split into three host-clock segments that add up to
the step: **wait** (blocked in ``next()`` for the batch), **copy** (host to device) and
**compute** (forward, loss, backward, optimizer step, ending in a device sync, as a loop
that reads its loss does). On a device with no host link the copy is a no-op and is said
to be none; on an accelerator it is also timed with the device's own timer.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.data import DataLoader, Dataset

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped
from torchmark.loaders import LoaderConfig

Batch = Any  # a tensor, or a tuple / list / dict of them (as the model's inputs or (x, y))


def _flat(batch: Batch) -> bool:
    """A plain tuple of tensors, (x, y), every built-in pipeline's batch: read without
    pytree, which took 10-35 us a step in the timed loop here against ~1 us."""
    return type(batch) is tuple and all(isinstance(t, torch.Tensor) for t in batch)


def to_device(batch: Batch, device: torch.device, non_blocking: bool) -> Batch:
    if _flat(batch):
        return tuple(t.to(device, non_blocking=non_blocking) for t in batch)
    return tree_map(
        lambda t: t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t,
        batch,
    )


def tensors(batch: Batch) -> list[torch.Tensor]:
    if _flat(batch):
        return list(batch)
    return [t for t in tree_leaves(batch) if isinstance(t, torch.Tensor)]


def nbytes(batch: Batch) -> int:
    return sum(t.nbytes for t in tensors(batch))


def make_loader(
    dataset: Dataset[Any], batch: int, cfg: LoaderConfig, timeout_s: float, seed: int = 0
) -> DataLoader[Any]:
    """A shuffled loader whose order depends only on ``seed``: every configuration sees the
    same batches. ``timeout_s`` bounds one batch's wait on a worker (a hung worker)."""
    return DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(seed),
        timeout=timeout_s if cfg.workers else 0,
        worker_init_fn=stop_quietly if cfg.workers else None,
        **cfg.kwargs(),
    )


# The signals that stop a run (session.STOP_SIGNALS) reach the workers too when they are
# sent to the process group, as `timeout`, Slurm and a closed terminal send them.
GROUP_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def stop_quietly(worker_id: int) -> None:
    """``worker_init_fn``: a worker stopped by the group's SIGTERM / SIGHUP exits 0, as it
    does on Ctrl-C. Killed by it instead, it made DataLoader's SIGCHLD handler raise "worker
    killed by signal" in the main process wherever that was, over the run's own stop (seen
    on an H100 under `timeout 90`: a traceback instead of "interrupted", exit 1, not 143).
    The main process still finds a worker that left early: "exited unexpectedly"."""
    del worker_id
    for s in GROUP_STOP_SIGNALS:
        signal.signal(s, _exit_now)
    sys.excepthook = _quiet_hangup


def quiet_stop_and(user_init: Callable[[int], None] | None) -> Callable[[int], None]:
    """``worker_init_fn`` for a loader that has its own: ``stop_quietly``, then the user's
    (a dataset may open its files or seed its generator per worker there)."""
    return stop_quietly if user_init is None else functools.partial(_both, user_init)


def _both(user_init: Callable[[int], None], worker_id: int) -> None:
    stop_quietly(worker_id)
    user_init(worker_id)


def _exit_now(signum: int, frame: object) -> None:
    os._exit(0)


def _quiet_hangup(
    exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None
) -> None:
    """``sys.excepthook`` of a worker. A main process stopped while it fetched a batch's
    shared-memory handle leaves the worker's resource-sharer mid-handshake: its thread
    (``multiprocessing.resource_sharer._serve``) catches the BrokenPipeError / EOFError and
    prints it through ``sys.excepthook``, a traceback under the run's "interrupted" line
    though nothing failed but the stop. Any other error is printed as before."""
    sharer = tb is not None and tb.tb_frame.f_code.co_filename.endswith("resource_sharer.py")
    if not (sharer and issubclass(exc_type, ConnectionError | EOFError)):
        sys.__excepthook__(exc_type, exc, tb)


def first_batches(loader: Iterable[Batch], n: int) -> list[Batch]:
    it = iter(loader)
    try:
        return [next(it) for _ in range(n)]
    except StopIteration:
        raise CaseSkipped(f"the loader yielded fewer than {n} batches") from None
    except Exception as e:
        raise failed(e) from e
    finally:
        shut(it)


def failed(e: Exception) -> CaseSkipped:
    """A worker that raised, died or timed out, as the reason its case ends: the last line
    of DataLoader's message is the dataset's own error ("ValueError: corrupt image 5")."""
    why = str(e).strip().splitlines()
    return CaseSkipped(f"the loader failed: {why[-1] if why else type(e).__name__}")


def shut(it: Iterator[Any] | None) -> None:
    """Stop the iterator's worker processes now (not whenever it is collected): a crashed or
    hung worker must not outlive its case. DataLoader joins each for up to 5 s, then
    terminates it; one still alive after that is killed.

    Never raises for workers already dead: DataLoader's SIGCHLD handler raises "DataLoader
    worker (pid N) is killed by signal" for each registered worker that died of a signal,
    at whatever line the main process runs, shutting down included; a case that is ending
    has no use for it, and raising it here would hide why the case ended (a stop, a
    failure). One raise per dead worker at most: the loop ends."""
    if getattr(it, "_shutdown_workers", None) is None:
        return
    workers = list(getattr(it, "_workers", []))
    for attempt in range(len(workers) + 2):
        try:
            if attempt:  # unwatched first: no dead worker can raise again
                _forget_workers(it, workers)
            it._shutdown_workers()  # type: ignore[union-attr]
            _forget_workers(it, workers)
            return
        except RuntimeError as e:
            if not dead_worker(e):
                raise


def dead_worker(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and str(e).startswith("DataLoader worker")


def _forget_workers(it: Any, workers: list[Any]) -> None:
    """What ``_shutdown_workers`` leaves undone when a worker's death interrupted it: the
    pids still watched by the SIGCHLD handler, a worker still alive."""
    from torch.utils.data._utils import signal_handling

    if getattr(it, "_worker_pids_set", False):
        it._worker_pids_set = False
        with contextlib.suppress(ValueError, RuntimeError):
            signal_handling._remove_worker_pids(id(it))
    for w in workers:
        if w.is_alive():
            w.kill()
            w.join(timeout=1.0)


class FedEpoch:
    """``epoch()``: every batch of the loader fed to the step, each step's three segments
    kept. One call is one epoch so that what happens once per epoch (non-persistent
    workers start again, the first batches' latency) is in the timed calls, not hidden
    between them: the median of single steps would leave it out.

    The copy, where the device has a copy stream (CUDA), is one of:

    * in line: ``x.to(device, non_blocking=nb)`` then the step, on one stream;
    * ``side_stream``: batch i+1 is fetched and its copy issued on a side stream before
      batch i's step is issued, so the copy runs beside the compute::

          wait_side(); keep(x_i)                   # compute waits for copy i, owns x_i
          b = next(loader)                         # wait   (host)
          with side(): x_next = b.to(dev, nb=True) # copy   (issued: host time is ~0)
          train(x_i); synchronize()                # compute (and copy i+1 beside it)

    Device marks (events) time each copy and each compute without a sync between them;
    the overlap is the device time the copy of batch i+1 and the compute of batch i ran
    together, against the ideal (the shorter of the two)."""

    def __init__(
        self,
        loader: Iterable[Batch],
        train: Callable[[Batch], object],
        device: Device,
        clock: Callable[[], float] = time.perf_counter,
        non_blocking: bool = False,
        side_stream: bool = False,
    ) -> None:
        self.loader, self.train, self.device, self.clock = loader, train, device, clock
        self.non_blocking, self.side_stream = non_blocking or side_stream, side_stream
        self.marks = device.streams() if device.supports_async_copy() is None else None
        if side_stream and self.marks is None:
            raise CaseSkipped(device.supports_async_copy() or "no copy stream")
        self.it: Iterator[Batch] | None = None
        self.segments: list[tuple[float, float, float]] = []
        self.copy_device_s: list[float] = []
        # per step, device seconds: (copy, compute, copy hidden behind compute, hideable)
        self.device_s: list[tuple[float, float, float, float]] = []
        self.ends: list[float] = []  # per epoch: the last, empty next()
        self.steps_per_epoch = 0
        self.batch_bytes = 0
        self.out: object = None

    def _next(self) -> Batch | None:
        assert self.it is not None
        try:
            return next(self.it)
        except StopIteration:
            return None  # DataLoader stops non-persistent workers itself at the epoch's end
        except (CaseSkipped, KeyboardInterrupt):
            raise
        except Exception as e:
            for _ in range(4):  # inline: a dead worker's error can be raised on entering close()
                try:
                    self.close()
                    break
                except RuntimeError as again:
                    if not dead_worker(again):
                        break
            raise failed(e) from e

    def __call__(self) -> object:
        t0 = self.clock()
        self.it = iter(self.loader)  # starting workers is part of the first step's wait
        try:
            steps = self._epoch_side(t0) if self.side_stream else self._epoch_in_line(t0)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the workers go before the stop goes on
            for _ in range(4):  # as in _next: a dead worker's error here is not news
                try:
                    self.close()
                    break
                except RuntimeError as e:
                    if not dead_worker(e):
                        break
            raise
        self.it = None
        if not steps:
            raise CaseSkipped("the loader yielded no batches")
        self.steps_per_epoch = steps
        return self.out

    def _epoch_in_line(self, t0: float) -> int:
        dev, m = self.device.torch_device, self.marks
        steps, first = 0, None  # the host batch sized once the epoch is over
        while True:
            batch = self._next()
            if batch is None:  # joining the workers at the epoch's end: the loop waits
                self.ends.append(self.clock() - t0)
                break
            first = batch if first is None else first
            t1 = self.clock()
            marks = []
            if m is not None:
                marks.append(m.mark())
                batch = to_device(batch, dev, self.non_blocking)
                marks.append(m.mark())
            elif self.device.is_accelerator:  # no marks: the copy timed alone, with a sync
                timer = self.device.timer("device")
                timer.start()
                batch = to_device(batch, dev, self.non_blocking)
                self.copy_device_s.append(timer.stop())
            t2 = self.clock()
            self.out = self.train(batch)
            if m is not None:
                marks.append(m.mark())
            self.device.synchronize()
            t3 = self.clock()
            self.segments.append((t1 - t0, t2 - t1, t3 - t2))
            if m is not None:
                copy, compute = m.elapsed_s(marks[0], marks[1]), m.elapsed_s(marks[1], marks[2])
                self.copy_device_s.append(copy)
                self.device_s.append((copy, compute, 0.0, 0.0))  # one stream: in series
            steps, t0 = steps + 1, t3
        self._sized(first)
        return steps

    def _sized(self, batch: Batch | None) -> None:
        """The epoch's first batch sized after its last segment: summing the tensors' bytes
        each step took ~3 us (an (x, y) batch, here) inside the timed wait (in line) or the
        copy (side stream). The first, not the last: with drop_last=False the last batch can
        be short, and the copy rate divides this size by the mean copy time."""
        if batch is not None:
            self.batch_bytes = nbytes(batch)

    def _issue(self, batch: Batch) -> tuple[Batch, Any, Any]:
        """The batch's copy issued on the side stream, between two marks on it."""
        assert self.marks is not None
        dev, m = self.device.torch_device, self.marks
        with m.side():
            c0 = m.mark()
            batch = to_device(batch, dev, True)
            c1 = m.mark()
        return batch, c0, c1

    def _epoch_side(self, t0: float) -> int:
        m = self.marks
        assert m is not None
        batch = self._next()  # batch 0: fetched and copied in step 0's wait and copy
        if batch is None:
            self.ends.append(self.clock() - t0)
            return 0
        batch0 = batch  # the host batch, sized once the epoch is over
        t_fetched = self.clock()
        pending: tuple[Batch, Any, Any] | None = self._issue(batch)
        first = (t_fetched - t0, self.clock() - t_fetched)
        t0 = self.clock()
        steps = 0
        while pending is not None:
            mine_batch, c0, c1 = pending
            m.wait_side()
            for t in tensors(mine_batch):
                m.keep(t)
            batch = self._next()
            t1 = self.clock()
            pending = self._issue(batch) if batch is not None else None
            t2 = self.clock()
            a = m.mark()
            self.out = self.train(mine_batch)
            z = m.mark()
            self.device.synchronize()
            t3 = self.clock()
            wait, copy = t1 - t0, t2 - t1
            if not steps:
                wait, copy = wait + first[0], copy + first[1]
            self.segments.append((wait, copy, t3 - t2))
            compute = m.elapsed_s(a, z)
            mine = m.elapsed_s(c0, c1)  # this batch's copy (issued a step ago)
            if pending is None:
                hidden, hideable = 0.0, 0.0
            else:  # the next batch's copy, beside this compute
                n0, n1 = pending[1], pending[2]
                nxt = m.elapsed_s(n0, n1)
                start, end = max(m.elapsed_s(a, n0), 0.0), max(m.elapsed_s(a, n1), 0.0)
                hidden = max(0.0, min(end, compute) - min(start, compute))
                hideable = min(nxt, compute)
            self.copy_device_s.append(mine)
            self.device_s.append((mine, compute, hidden, hideable))
            steps, t0 = steps + 1, t3
        self._sized(batch0)
        return steps

    def copied(self, batches: list[Batch]) -> list[Batch]:
        """``batches`` through this epoch's copy path and back to the host: a copy that
        reads a batch before it has landed would give other values."""
        if self.marks is None:
            return batches
        out = []
        for batch in batches:
            if self.side_stream:
                on, _, _ = self._issue(batch)
                self.marks.wait_side()
                for t in tensors(on):
                    self.marks.keep(t)
            else:
                on = to_device(batch, self.device.torch_device, self.non_blocking)
            out.append(to_device(on, torch.device("cpu"), False))
        self.device.synchronize()
        return out

    def close(self) -> None:
        shut(self.it)
        # persistent workers outlive the epoch in the DataLoader's own iterator
        shut(getattr(self.loader, "_iterator", None))
        self.it = None

    def breakdown(self, skip_epochs: int = 0) -> dict[str, Any]:
        """Mean seconds per step of each segment over the epochs after the first
        ``skip_epochs`` (first call, warm-up), and the input-bound fraction (wait / step)."""
        skip = skip_epochs * self.steps_per_epoch
        seg = np.array(self.segments[skip:] or self.segments, dtype=float).reshape(-1, 3)
        if not len(seg):
            return {}
        wait, copy, compute = seg.mean(axis=0)
        ends = self.ends[skip_epochs:] or self.ends
        wait += float(np.mean(ends)) / self.steps_per_epoch if ends else 0.0
        step = wait + copy + compute
        out: dict[str, Any] = {
            "steps_timed": len(seg),
            "steps_per_epoch": self.steps_per_epoch,
            "wait_s": float(wait),
            "copy_s": float(copy) if self.device.is_accelerator else None,
            "compute_s": float(compute),
            "step_s": float(step),
            "input_bound": float(wait / step) if step > 0 else None,
        }
        if self.copy_device_s:  # the copy on the device's own clock
            out["copy_device_s"] = float(np.mean(self.copy_device_s[skip:] or self.copy_device_s))
            out["batch_bytes"] = self.batch_bytes
        dev = np.array(self.device_s[skip:] or self.device_s, dtype=float).reshape(-1, 4)
        if len(dev):
            copy_s, compute_s, hidden, hideable = dev.sum(axis=0)
            out["compute_device_s"] = float(compute_s / len(dev))
            if self.side_stream and copy_s > 0:
                out["overlap"] = float(hidden / copy_s)  # share of the copy time hidden
                out["overlap_ideal"] = float(hideable / copy_s)  # at most the compute's
        if not self.device.is_accelerator:
            out["copy_note"] = "no copy: the batch is already in the CPU's memory"
        return out
