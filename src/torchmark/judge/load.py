"""What counts as other processes' load on a result: the one threshold every reader uses
(the judge, the ceilings, the reports), read from a stored telemetry summary."""

from __future__ import annotations

import math
from typing import Any

# Competing CPU load worth a flag: half a core of other work already slowed a 2-thread add
# on a 2-core machine by more than its 0.5 % noise target (one busy process: 50x). The same
# load while ceilings are measured may leave them low.
COMPETING_CORES = 0.5
# Throttled samples leave the headline median only if this many unthrottled ones remain;
# a median of fewer would be noisier than the bias it removes.
MIN_KEPT_SAMPLES = 5


def free_cores(other: float, cores: int | None) -> int:
    """The cores other processes' load leaves free for torch's threads (at least one):
    1.1 of 2 cores used leaves one; 0.2 leaves both."""
    if not cores:
        return 1
    return max(1, int(cores - math.ceil(other - 0.25)))


def load_words(t: dict[str, Any]) -> str:
    """``other processes used 1.8 of 2 cores`` (``3 other processes used ...`` where the
    summary counted them): the one way a result's competing load is said."""
    other = float(t.get("other_cores") or 0.0)
    cores, n = t.get("logical_cores"), t.get("other_processes")
    who = f"{n} other process{'' if n == 1 else 'es'}" if n else "other processes"
    return f"{who} used {other:.1f}{f' of {cores}' if cores else ''} cores"


def under_load(summary: dict[str, Any] | None) -> bool:
    """Whether a result's stored telemetry summary shows competing load on its device."""
    t = summary or {}
    return competing(t, bool(t.get("accelerator")))


def competing(summary: dict[str, Any], accelerator: bool) -> bool:
    """Other processes' CPU load worth flagging for this kind of device."""
    other = summary.get("other_cores")
    if other is None:
        return False
    if not accelerator:
        return bool(other >= COMPETING_CORES)
    # A GPU result needs one free host core for the thread that launches kernels.
    cores = summary.get("logical_cores") or 1
    return bool(other >= max(COMPETING_CORES, cores - 1.5))


def flags_of(summary: dict[str, Any], accelerator: bool) -> list[str]:
    """The flags a telemetry summary gives its result: throttled, competing_load."""
    flags = []
    if summary.get("throttled_samples"):
        flags.append("throttled")
    if competing(summary, accelerator):
        flags.append("competing_load")
    return flags
