"""The clock the serving loop runs on: the host's (tests and simulations run it on
``torchmark.testing.FakeClock``, whose time only moves when told to).

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
