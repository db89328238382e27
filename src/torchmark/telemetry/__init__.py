"""Telemetry: samplers (NVML, host) running during measurements, and validity verdicts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torchmark.devices.base import Device
from torchmark.results import Result, Verdict
from torchmark.telemetry.base import NullTrace, Trace

__all__ = ["NullTrace", "Trace", "judge", "watch"]


@contextlib.contextmanager
def watch(device: Device, enabled: bool = True) -> Iterator[Trace]:
    yield NullTrace()


def judge(result: Result) -> Verdict:
    """Validity verdict of one result from its flags (telemetry adds reasons of its own)."""
    reasons: list[str] = []
    level = "ok"
    flags = result.flags if result.ok else []
    if "above_ceiling" in flags:
        level = "invalid"
        reasons.append(f"{result.pct_of_ceiling:.0f} % of the measured ceiling: measurement error")
    if "unreliable" in flags:
        level = "invalid" if level == "invalid" else "warn"
        reasons.append(f"spread {result.measurement.rel_iqr:.0%} of the median (unreliable)")
    elif "noisy" in flags:
        level = "invalid" if level == "invalid" else "warn"
        reasons.append(f"spread {result.measurement.rel_iqr:.0%} of the median (noisy)")
    if "timed_out" in flags:
        level = "invalid" if level == "invalid" else "warn"
        reasons.append("stopped on time-out before the median converged")
    return Verdict(level=level, reasons=reasons)  # type: ignore[arg-type]
