"""Telemetry contract used by the runner: watch a device while it is measured.

``watch(device)`` yields a Trace; the measuring loop tells it the host-clock span of each
sample (``mark``) so every sample can be matched with the telemetry nearest to it.

A ``Source`` is one thing that can be read (NVML for one GPU, psutil for the host). A source
that cannot be opened, or fails mid-run, is reported absent with the reason; it is never
replaced by made-up values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

Reading = dict[str, Any]  # one source's values at one instant; None = not readable


class Trace(Protocol):
    def mark(self, index: int, t_start: float, t_end: float) -> None: ...

    def summary(self) -> dict[str, Any] | None:
        """What the result stores: sources (present/absent), per-sample tags, timeline."""

    def throttled_samples(self) -> list[int]:
        """Indices of samples taken while throttled: kept, but out of the headline."""


class NullTrace:
    """No telemetry asked for (``--no-telemetry``): records nothing and says so."""

    def mark(self, index: int, t_start: float, t_end: float) -> None:
        return None

    def summary(self) -> dict[str, Any] | None:
        return None

    def throttled_samples(self) -> list[int]:
        return []


class SourceUnavailable(Exception):
    """A source cannot be read (library missing, permission denied, device lost)."""


class Source(ABC):
    """One telemetry source. ``open`` reads static facts once; ``read`` is called per tick.

    ``role`` says what the source describes: "device" (the measured accelerator: its
    clocks and throttle reasons tag samples) or "host" (CPU clocks, competing load).
    """

    name: str
    role: str = "host"

    @abstractmethod
    def open(self) -> dict[str, Any]:
        """Static facts (max/base clocks, power limit); raises SourceUnavailable."""

    @abstractmethod
    def read(self) -> Reading:
        """Current values; raises SourceUnavailable when the source died mid-run."""

    def close(self) -> None:
        return None
