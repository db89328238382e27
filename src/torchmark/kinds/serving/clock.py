"""Clocks the serving loop runs on: the host's, and a fake one whose time only moves when
told to (tests and simulations: a queue of known service time, no real waiting).

The real clock wakes on time by sleeping until shortly before the target and spinning the
rest: Linux's default timer slack (50 µs) made a plain ``time.sleep`` wake 70 µs late at
the median here (2 cores), which at 10,000 arrivals/s is most of the gap between two.
With the slack set to 1 ns for the thread (``prctl(PR_SET_TIMERSLACK)``) and a 50 µs spin,
the median lateness measured here was under 1 µs (``benchmarks/serving_generator.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from typing import Protocol

PR_SET_TIMERSLACK = 29
SPIN_S = 50e-6  # the last stretch before a target is spun, not slept


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None:
        """Return at ``t`` or after (never before)."""


def tight_timer_slack() -> bool:
    """Ask Linux to wake this thread's sleeps within 1 ns of the target (default 50 µs).
    False where it cannot (not Linux): sleeps then wake up to ~the default slack late."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)) == 0
    return False


class RealClock:
    """``time.perf_counter`` (CLOCK_MONOTONIC on Linux: one clock for every process, so
    worker processes' timestamps compare with the parent's)."""

    def __init__(self, spin_s: float = SPIN_S) -> None:
        self.spin_s = spin_s
        self.tight = tight_timer_slack()
        self.now = time.perf_counter  # no wrapper: the serving loop reads it per request

    def sleep_until(self, t: float) -> None:
        pc = time.perf_counter
        left = t - pc()
        if left > self.spin_s:
            time.sleep(left - self.spin_s)
        while pc() < t:
            pass


class FakeClock:
    """Time that moves only by ``advance`` or ``sleep_until``. ``wake_late_s``: every sleep
    wakes this much after its target (a host whose timer cannot keep up); ``read_s``: every
    reading costs this much (a loop whose own work takes time)."""

    def __init__(self, t: float = 0.0, wake_late_s: float = 0.0, read_s: float = 0.0) -> None:
        self.t = t
        self.wake_late_s, self.read_s = wake_late_s, read_s

    def now(self) -> float:
        self.t += self.read_s
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t + self.wake_late_s)

    def advance(self, dt: float) -> None:
        self.t += dt
