"""The load generator's own limit on this host: the highest arrival rate the serving loop
can issue on time, with its timing error.

The loop of ``server.Server`` is run with a device that takes no time: each request's wait
(due -> served) is then the loop's own delay, for every arrival, whether it woke for it or
caught up on it after falling behind, and the loop's bookkeeping per request is paid as in a
real point. A rate is kept up with when the p99 lateness is within ``BEHIND_SHARE`` of the
run's bound (the share at which a load point is marked ``generator_behind``: a median on
time beside a p99 past that share said "keeps time" of a loop whose tail was the host's);
without a bound (the benchmark) when the median is within ``ON_TIME_S``. The limit is the
highest such rate tried. A load point above it is marked ``generator_behind``, never read
as the device's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchmark.kinds.serving import stats
from torchmark.kinds.serving.clock import Clock, RealClock
from torchmark.kinds.serving.fleet import open_loop
from torchmark.kinds.serving.server import Batching
from torchmark.results.serving import BEHIND_SHARE, GeneratorDoc

RATES = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
ON_TIME_S = 50e-6  # the goal: median lateness under 50 µs
PER_RATE_S = 0.25  # per rate: 2,500 arrivals at 10,000/s


def _nothing(first: int, n: int) -> None:
    return None


@dataclass(frozen=True)
class RateCheck:
    rate: float
    arrivals: int
    median_s: float
    p99_s: float
    max_s: float
    p99_max_s: float | None = None  # BEHIND_SHARE of the bound (None: the median decides)

    @property
    def on_time(self) -> bool:
        if self.p99_max_s is not None:
            return self.p99_s <= self.p99_max_s
        return self.median_s <= ON_TIME_S


@dataclass(frozen=True)
class GeneratorLimit:
    checks: tuple[RateCheck, ...]
    load: tuple[float, float, float] | None  # load average (1, 5, 15 min) at the start
    p99_max_s: float | None = None

    @property
    def limit(self) -> float:
        """The highest rate tried that kept time (``RateCheck.on_time``; 0: none did)."""
        return max((c.rate for c in self.checks if c.on_time), default=0.0)

    def doc(self) -> GeneratorDoc:
        """As the run stores it, with its limit in words (``said()``)."""
        doc = GeneratorDoc(
            limit=self.limit,
            rates=[{"rate": c.rate, "median_s": c.median_s, "p99_s": c.p99_s} for c in self.checks],
            load=self.load[0] if self.load else None,
            p99_max_s=self.p99_max_s,
        )
        doc.sentence = doc.said()
        return doc

    def sentence(self) -> str:
        return self.doc().sentence


def check_rate(
    rate: float,
    seconds: float | None = None,
    clock: Clock | None = None,
    p99_max_s: float | None = None,
) -> RateCheck:
    clock = clock or RealClock()
    seconds = seconds or PER_RATE_S
    source = open_loop(_nothing, clock, rate, Batching(1, 0.0), seconds, math.inf, seed=7)
    window = next(source)
    source.close()
    # the device takes no time, so a request's wait (due -> served) is the loop's own
    # delay, counted for every arrival: the ones it woke for and the ones it caught up on
    late = window.requests.wait
    if not late.size:
        return RateCheck(rate, 0, math.nan, math.nan, math.nan, p99_max_s)
    return RateCheck(
        rate,
        int(late.size),
        float(np.median(late)),
        stats.percentile(late, 0.99),
        float(late.max()),
        p99_max_s,
    )


def measure(
    rates: Sequence[float] | None = None,
    seconds: float | None = None,
    clock: Clock | None = None,
    bound_s: float | None = None,
) -> GeneratorLimit:
    """Rates in increasing order, stopping after the first two that miss (the next would
    too); defaults: ``RATES``, ``PER_RATE_S`` seconds each; with ``bound_s`` judged on the
    p99 lateness (the module docstring)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    p99_max = BEHIND_SHARE * bound_s if bound_s is not None else None
    checks: list[RateCheck] = []
    for r in rates or RATES:
        checks.append(check_rate(r, seconds, clock, p99_max))
        if len(checks) >= 2 and not checks[-1].on_time and not checks[-2].on_time:
            break
    return GeneratorLimit(tuple(checks), load, p99_max)
