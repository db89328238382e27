"""Telemetry contract used by the runner: watch a device while it is measured.

``watch(device)`` yields a Trace; the measuring loop tells it the host-clock span of each
sample (``mark``) so every sample can be matched with the telemetry nearest to it.
"""

from __future__ import annotations

from typing import Any, Protocol


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
