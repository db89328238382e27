"""Telemetry: samplers (NVML, host) running during measurements, and validity verdicts.

with watch(device) as trace:          # starts a sampler thread (~every 100 ms)
    measure(fn, device, on_sample=trace.mark)
result.excluded = trace.throttled_samples()
result.telemetry = trace.summary()    # sources, per-sample tags, timeline
result.verdict = judge(result)        # ok / warn / invalid, with reasons in words
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from torchmark.devices.base import Device
from torchmark.devices.cuda import CUDADevice
from torchmark.telemetry.base import NullTrace, Source, SourceUnavailable, Trace
from torchmark.telemetry.host import HostSource
from torchmark.telemetry.nvml import NVMLSource
from torchmark.telemetry.trace import Recording, Sampler, summarize
from torchmark.telemetry.verdict import judge, judge_run

__all__ = [
    "NullTrace",
    "Recording",
    "Source",
    "SourceUnavailable",
    "TelemetryTrace",
    "Trace",
    "judge",
    "judge_run",
    "sources_for",
    "watch",
]


def sources_for(device: Device) -> list[Source]:
    """The host always; NVML for an NVIDIA GPU (ROCm GPUs have no NVML)."""
    sources: list[Source] = [HostSource()]
    if isinstance(device, CUDADevice) and not getattr(torch.version, "hip", None):
        sources.insert(0, NVMLSource(device.index or 0, device.info().get("uuid")))
    return sources


class TelemetryTrace:
    """A live trace: the sampler fills a Recording; ``summary`` is computed from it."""

    def __init__(self, device: Device, sources: Sequence[Source], interval_s: float = 0.1) -> None:
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
