"""The open loop's arrival schedule: Poisson arrivals at a target rate, drawn before any
request is served (never paced by the server's answers: a closed loop would slow its own
load down exactly when the server falls behind, and hide the queue).

Seeded, so a load point is repeatable; drawn a window at a time, so a point can run for as
long as its percentiles take to settle.
"""

from __future__ import annotations

import numpy as np


class Arrivals:
    """Poisson arrivals at ``rate`` per second from time ``t0``: exponential gaps."""

    def __init__(self, rate: float, t0: float = 0.0, seed: int | tuple[int, ...] = 0) -> None:
        if not rate > 0:
            raise ValueError(f"arrival rate must be > 0, got {rate!r}")
        self.rate, self.last = rate, t0
        self.rng = np.random.default_rng(seed)

    def until(self, t_end: float) -> np.ndarray:
        """The arrivals after the last one drawn, up to ``t_end`` (absolute times)."""
        out: list[np.ndarray] = []
        t = self.last
        while True:
            # enough gaps to pass t_end in one draw, most of the time
            k = max(16, int((t_end - t) * self.rate * 1.1) + 16)
            times = t + np.cumsum(self.rng.exponential(1.0 / self.rate, k))
            inside = times[times <= t_end]
            out.append(inside)
            if inside.size < k:
                # the draws past t_end are dropped: the next window starts afresh at t_end,
                # which a Poisson process allows (the gaps are memoryless)
                break
            t = float(times[-1])
        self.last = t_end
        return np.concatenate(out) if out else np.empty(0)
