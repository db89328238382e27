"""How much one caller may ask of the server: a per-minute rate per key, in one process."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class Limiter:
    """At most ``per_minute`` requests a minute per key (a token's name, else the client's
    address), in this process: a sliding window of each key's recent request times."""

    KEYS = 10_000  # keys remembered: the oldest is forgotten past it (bounded memory)

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute, self.clock = per_minute, clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait_s(self, key: str) -> float:
        """0 when a request of ``key`` may go now (and counts it), else the seconds until
        one may."""
        now = self.clock()
        with self._lock:
            times = self._seen.pop(key, None) or deque()
            while times and times[0] <= now - 60:
                times.popleft()
            self._seen[key] = times
            while len(self._seen) > self.KEYS:
                self._seen.popitem(last=False)
            if len(times) >= self.per_minute:
                return times[0] + 60 - now
            times.append(now)
            return 0.0
