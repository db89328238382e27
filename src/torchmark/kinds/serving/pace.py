"""The host's pace, measured (``judge.pace`` says what it means and judges it): a fixed
piece of pure-Python work of about a millisecond, timed ``REPEATS`` times."""

from __future__ import annotations

import time
from collections.abc import Callable

REPEATS = 60  # ~60 ms: a fleet's search is tens of seconds


def _unit() -> int:
    x = 0
    for i in range(20_000):
        x += i * i % 7
    return x


def measure(repeats: int = REPEATS, timer: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds each of ``repeats`` runs of the fixed work took."""
    out = []
    for _ in range(repeats):
        t = timer()
        _unit()
        out.append(timer() - t)
    return out
