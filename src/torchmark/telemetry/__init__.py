"""Telemetry: samplers (NVML, host) running during measurements.

with watch(device) as trace:          # starts a sampler thread (~every 100 ms)
    measure(fn, device, on_sample=trace.mark)
result.excluded = trace.throttled_samples()
result.telemetry = trace.summary()    # sources, per-sample tags, timeline
result.verdict = judge(result)        # ok / warn / invalid: ``judge.validity``
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from torchmark.telemetry.base import NullTrace, Source, SourceUnavailable, Trace
from torchmark.telemetry.trace import Recording, Sampler, summarize

__all__ = [
    "Kept",
    "NullTrace",
    "Recording",
    "Source",
    "SourceUnavailable",
    "TelemetryTrace",
    "Trace",
    "sources_for",
    "watch",
]


class Device(Protocol):
    """A ``devices.Device``, typed by what telemetry uses of it: devices choose their own
    sources here, so this package sits below them and does not import them."""

    @property
    def name(self) -> str: ...

    @property
    def is_accelerator(self) -> bool: ...

    def telemetry_sources(self) -> list[Any]: ...


class Kept(Source):
    """A source opened once for a whole run (NVML init and its static queries once per
    device, not once per case): ``open`` answers from the first opening, ``close`` waits for
    ``shutdown`` at the end of the run. A source that failed stays failed, saying when."""

    def __init__(self, inner: Source) -> None:
        self.inner, self.name, self.role = inner, inner.name, inner.role
        self._static: dict[str, Any] | None = None
        self._error: str | None = None

    def open(self) -> dict[str, Any]:
        if self._error is not None:
            raise SourceUnavailable(self._error)
        if self._static is None:
            try:
                self._static = self.inner.open()
            except SourceUnavailable as e:
                self._error = str(e)
                raise
        return self._static

    def read(self) -> dict[str, Any]:
        try:
            return self.inner.read()
        except Exception as e:
            self._error = f"stopped in an earlier case: {e}"
            raise

    def close(self) -> None:
        return None  # kept open for the next case; see shutdown

    def shutdown(self) -> None:
        if self._static is not None:
            self._static = None
            self.inner.close()


def sources_for(device: Device) -> list[Source]:
    """The device's own choice (``Device.telemetry_sources``): the host always, NVML on an
    NVIDIA GPU."""
    return list(device.telemetry_sources())


class TelemetryTrace:
    """A live trace: the sampler fills a Recording; ``summary`` is computed from it."""

    def __init__(self, device: Device, sources: Sequence[Source], interval_s: float = 0.1) -> None:
        import torch  # here: `doctor` reads the load through this package before torch

        self.recording = Recording(
            device=device.name,
            accelerator=device.is_accelerator,
            torch_threads=torch.get_num_threads(),
            interval_s=interval_s,
        )
        self.sampler = Sampler(sources, self.recording, interval_s)
        self._summary: dict[str, Any] | None = None

    def mark(self, index: int, t_start: float, t_end: float) -> None:
        self.recording.marks.append((index, t_start, t_end))
        self._summary = None

    def summary(self) -> dict[str, Any] | None:
        if self._summary is None:
            self._summary = summarize(self.recording)
        return self._summary

    def throttled_samples(self) -> list[int]:
        """Throttled samples to set aside from the headline median: all of them while at
        least 5 unthrottled ones remain, else none (the verdict then says the median is
        the throttled speed)."""
        s = self.summary()
        return list(s["excluded"]) if s else []


@contextlib.contextmanager
def watch(
    device: Device,
    enabled: bool = True,
    sources: Sequence[Source] | None = None,
    interval_s: float = 0.1,
) -> Iterator[Trace]:
    """Sample telemetry in a background thread while the block runs."""
    if not enabled:
        yield NullTrace()
        return
    trace = TelemetryTrace(device, sources_for(device) if sources is None else sources, interval_s)
    trace.sampler.start()
    try:
        yield trace
    finally:
        trace.sampler.stop()
