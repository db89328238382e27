"""The Device interface: every difference between processors lives behind it.

Nothing outside ``torchmark.devices`` compares device strings; code asks a Device
(``is_accelerator``, ``supports(dtype)``, ``timer()``, ``synchronize()``) instead.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from torchmark.errors import CaseSkipped

TimingMode = Literal["device", "e2e"]


@dataclass(frozen=True)
class MemoryStats:
    """The device allocator's peaks since ``reset_peak_memory``: bytes handed to tensors
    (allocated) and bytes the caching allocator holds from the driver (reserved, >= allocated:
    what other processes cannot have)."""

    allocated_bytes: int
    reserved_bytes: int | None


class SampleTimer(ABC):
    """Times one sample: ``start()``, the calls, then ``stop()`` -> seconds.

    ``stop()`` always waits for the device: a timed region never ends with work queued.
    """

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> float: ...


class HostTimer(SampleTimer):
    """Host clock around the calls, then a device synchronize before reading it again.

    This is end-to-end time: what a user waiting on the result sees.
    """

    def __init__(self, sync: Callable[[], None], clock: Callable[[], float] = time.perf_counter):
        self._sync, self._clock, self._t0 = sync, clock, 0.0

    def start(self) -> None:
        self._sync()  # nothing earlier may leak into this sample
        self._t0 = self._clock()

    def stop(self) -> float:
        self._sync()
        return self._clock() - self._t0


class Streams(ABC):
    """A copy stream beside the compute stream, and marks (events) on either: what a
    side-stream prefetcher needs. A mark is recorded on the stream current where it is
    made and read only after a synchronize, so marking never stalls the host."""

    @abstractmethod
    def mark(self) -> Any: ...

    @abstractmethod
    def elapsed_s(self, start: Any, end: Any) -> float: ...

    @abstractmethod
    def side(self) -> Any:
        """Context manager: work issued inside runs on the copy stream."""

    @abstractmethod
    def wait_side(self) -> None:
        """The compute stream waits for the copy stream's work issued so far."""

    @abstractmethod
    def keep(self, t: torch.Tensor) -> None:
        """``t`` (made on the copy stream) is used on the compute stream: its memory must
        not be reused before that work ends."""


class Device(ABC):
    """One processor torchmark can measure."""

    kind: ClassVar[str]
    is_accelerator: ClassVar[bool] = False
    # METHOD.md §2.5: one sample must be long enough that timer and sync overhead are < 1 %.
    min_sample_s: ClassVar[float] = 0.010

    def __init__(self, index: int | None = None) -> None:
        self.index = index

    @property
    def name(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @abstractmethod
    def synchronize(self) -> None: ...

    def timer(self, mode: TimingMode = "device") -> SampleTimer:
        """Device time where the device has its own clock (CUDA events), else end-to-end."""
        return HostTimer(self.synchronize)

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Static description: name, memory, cores, caches, capability."""

    def label(self) -> str:
        """Short human name for tables, e.g. 'NVIDIA H100 80GB HBM3' or 'AMD EPYC (2 cores)'."""
        return str(self.info().get("model") or self.name)

    def supports(self, dtype: torch.dtype) -> str | None:
        """None when ``dtype`` runs here, else the reason it does not."""
        return None

    def supports_tf32(self) -> str | None:
        """None when fp32 matmuls/convolutions can run in TF32 here, else the reason."""
        return "TF32 needs an NVIDIA GPU with compute capability >= 8.0"

    def profiler_activities(self) -> list[Any]:
        """``torch.profiler`` activities beyond the CPU's that record this device's work."""
        return []

    def supports_graphs(self) -> str | None:
        """None when whole steps can be captured and replayed as a graph (CUDA graphs)."""
        return "CUDA graphs need CUDA"

    def capture_graph(self, step: Callable[[], Any]) -> Callable[[], Any]:
        """``step`` (already warmed up) captured once as a graph; the replay it returns is
        the new step. Raises CaseSkipped with the reason where graphs cannot be captured."""
        reason = self.supports_graphs() or "it cannot capture graphs"
        raise CaseSkipped(f"graph capture is not available on {self.name}: {reason}")

    def supports_async_copy(self) -> str | None:
        """None where batches can be copied from pinned host memory without blocking the
        host, on a side stream beside the compute (``streams()``); else why not."""
        return "not available: no CUDA"

    def streams(self) -> Streams:
        raise CaseSkipped(self.supports_async_copy() or "no copy stream on this device")

    def supports_compile(self) -> str | None:
        """None when ``torch.compile`` (inductor) can generate code for this device."""
        return None

    def total_memory_bytes(self) -> int | None:
        return None

    def cache_bytes(self) -> int | None:
        """Size of the last-level cache as the device reports it (``devices.cache`` bounds
        it), to size buffers that must not fit in it."""
        return None

    def available_memory_bytes(self) -> int | None:
        """Memory free for new buffers now (host: what the OS can give without swapping)."""
        return None

    # The reading of available memory a plan sized this device's buffers from (a 1-tuple:
    # its None is "unknown"); None before one was taken. Taken at the plan's first use only:
    # reading a GPU's memory starts its CUDA context.
    _planned_memory: tuple[int | None] | None = None
    _planning = False

    def plan_memory_bytes(self) -> int | None:
        """The memory available that sizes this device's buffers: the one reading the plan
        took (``run.plan.make_plan``: every size of one plan, and every note a case gives of
        it, from one figure; a resumed run takes its first part's, so its parts plan the
        same sizes), else the memory available now."""
        if self._planned_memory is None:
            reading = self.available_memory_bytes()
            if not self._planning:
                return reading
            self._planned_memory = (reading,)
        return self._planned_memory[0]

    def plan_from(self, reading: tuple[int | None] | None = None) -> None:
        """A plan starts: the first reading it takes is kept (``reading``: a resumed run's
        stored one, kept as it is)."""
        self._planning, self._planned_memory = True, reading

    @property
    def planned_memory(self) -> tuple[int | None] | None:
        """The reading the plan took (a 1-tuple), or None where it took none."""
        return self._planned_memory

    def cores(self) -> int | None:
        """Logical CPUs sharing the last-level cache this device reports (hosts only)."""
        return None

    def reset_peak_memory(self) -> None:
        return None

    def peak_memory_bytes(self) -> int | None:
        """Peak memory used since ``reset_peak_memory``: the allocator's peak
        (``memory_stats``) where the device has one, else the device's own figure (host RSS,
        MPS driver memory)."""
        stats = self.memory_stats()
        return None if stats is None else stats.allocated_bytes

    def memory_stats(self) -> MemoryStats | None:
        """Allocator peaks since ``reset_peak_memory``; None where the device has no allocator
        statistics (the CPU: its only figure is the process's host RSS)."""
        return None

    def empty_cache(self) -> None:
        return None

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, torch.OutOfMemoryError) or (
            isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
        )

    def set_threads(self, n: int) -> None:
        """Only the CPU has threads to set."""
        return None

    def telemetry_sources(self) -> list[Any]:
        """The telemetry ``Source``s that describe this device while it is measured: the
        host (psutil) for every device; accelerators add their own (NVML on NVIDIA)."""
        from torchmark.telemetry.host import HostSource

        return [HostSource()]

    def energy_counter(self) -> Any:
        """An ``EnergyCounter`` read around a measured region, or ``Unavailable`` with the
        reason (the CPU has RAPL; an NVIDIA GPU's energy is in its NVML telemetry)."""
        from torchmark.telemetry.energy import Unavailable

        return Unavailable(f"no separate energy counter for {self.label()}")


class TorchAccelerator(Device):
    """A GPU that torch drives through a module named after its kind (``torch.cuda``,
    ``torch.xpu``): the same calls for sync, properties and the caching allocator's peaks."""

    is_accelerator: ClassVar[bool] = True

    def __init__(self, index: int | None = 0) -> None:
        super().__init__(0 if index is None else index)

    @property
    def api(self) -> Any:
        """``torch.cuda`` or ``torch.xpu``."""
        return getattr(torch, self.kind)

    def synchronize(self) -> None:
        self.api.synchronize(self.torch_device)

    def info(self) -> dict[str, Any]:
        return self.described(self.api.get_device_properties(self.torch_device))

    def described(self, p: Any) -> dict[str, Any]:
        """What every such GPU's properties say: its kind, model and memory."""
        return {"kind": self.kind, "model": p.name, "memory_bytes": int(p.total_memory)}

    def total_memory_bytes(self) -> int | None:
        return int(self.api.get_device_properties(self.torch_device).total_memory)

    def reset_peak_memory(self) -> None:
        self.api.reset_peak_memory_stats(self.torch_device)

    def memory_stats(self) -> MemoryStats | None:
        return MemoryStats(
            int(self.api.max_memory_allocated(self.torch_device)),
            int(self.api.max_memory_reserved(self.torch_device)),
        )

    def empty_cache(self) -> None:
        self.api.empty_cache()
