"""One training step fed by a loader, split into three host-clock segments that add up to
the step: **wait** (blocked in ``next()`` for the batch), **copy** (host to device) and
**compute** (forward, loss, backward, optimizer step, ending in a device sync, as a loop
that reads its loss does). On a device with no host link the copy is a no-op and is said
to be none; on an accelerator it is also timed with the device's own timer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped
from torchmark.loaders import LoaderConfig

Batch = tuple[torch.Tensor, torch.Tensor]


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
        **cfg.kwargs(),
    )


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
    terminates it."""
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        stop()


class FedEpoch:
    """``epoch()``: every batch of the loader fed to the step, each step's three segments
    kept. One call is one epoch so that what happens once per epoch (non-persistent
    workers start again, the first batches' latency) is in the timed calls, not hidden
    between them: the median of single steps would leave it out."""

    def __init__(
        self,
        loader: Iterable[Batch],
        train: Callable[[torch.Tensor, torch.Tensor], object],
        device: Device,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.loader, self.train, self.device, self.clock = loader, train, device, clock
        self.it: Iterator[Batch] | None = None
        self.segments: list[tuple[float, float, float]] = []
        self.copy_device_s: list[float] = []
        self.ends: list[float] = []  # per epoch: the last, empty next()
        self.steps_per_epoch = 0

    def _next(self) -> Batch | None:
        assert self.it is not None
        try:
            return next(self.it)
        except StopIteration:
            return None  # DataLoader stops non-persistent workers itself at the epoch's end
        except (CaseSkipped, KeyboardInterrupt):
            raise
        except Exception as e:
            self.close()
            raise failed(e) from e

    def __call__(self) -> object:
        dev = self.device.torch_device
        steps, out = 0, None
        t0 = self.clock()
        self.it = iter(self.loader)  # starting workers is part of the first step's wait
        while True:
            batch = self._next()
            if batch is None:  # joining the workers at the epoch's end: the loop waits
                self.ends.append(self.clock() - t0)
                break
            x, y = batch
            t1 = self.clock()
            if self.device.is_accelerator:
                timer = self.device.timer("device")
                timer.start()
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
                self.copy_device_s.append(timer.stop())
            t2 = self.clock()
            out = self.train(x, y)
            self.device.synchronize()
            t3 = self.clock()
            self.segments.append((t1 - t0, t2 - t1, t3 - t2))
            steps, t0 = steps + 1, t3
        self.it = None
        if not steps:
            raise CaseSkipped("the loader yielded no batches")
        self.steps_per_epoch = steps
        return out

    def close(self) -> None:
        shut(self.it)
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
        if self.copy_device_s:  # the copy alone on the device's timer (it syncs after it)
            out["copy_device_s"] = float(np.mean(self.copy_device_s[skip:] or self.copy_device_s))
        if not self.device.is_accelerator:
            out["copy_note"] = "no copy: the batch is already in the CPU's memory"
        return out
