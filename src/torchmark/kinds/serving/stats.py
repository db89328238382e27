"""Latency statistics of a load point: percentiles, a distribution-free confidence interval
of the tail, how many requests that interval needs, and when a percentile is stable.

A percentile here is the order statistic ``X(ceil(n q))`` (numpy's ``inverted_cdf``: a
latency some request really had). Its confidence interval comes from the binomial
(``torchmark.stats.order``, the one module for any quantile's interval): the number of
requests faster than the true q-quantile is Bin(n, q), so two order statistics bound it
with known coverage whatever the distribution.

How many requests: the p99's 95 % interval should lie between p98.5 and p99.5
(:func:`min_requests`, from the exact binomial), a count a 2-core machine meets in
seconds. MLPerf LoadGen's Server scenario asks something else of a run: a minimum
duration (600 s) and its early-stopping rule for the tail (``torchmark.stats.
early_stopping``: with t requests over the bound, at least h(t) + t requests, 459 with
none over at 99 % confidence); a load point here is judged VALID or INVALID by that rule
too (``point.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchmark.stats import order

QUANTILES = (0.5, 0.9, 0.99, 0.999)
TAIL = 0.99  # the percentile the bound is set on (--p99-ms)
CONFIDENCE = 0.95
MARGIN = 0.005  # the p99's interval within p98.5 .. p99.5
# Perf Analyzer's percentile mode: a load point is stable when 3 consecutive windows agree
# within 10 % (its --stability-percentage default), latency and throughput alike.
STABLE_WINDOWS = 3
STABILITY = 0.10


def percentile(x: np.ndarray | Sequence[float], q: float) -> float:
    """The latency ``X(ceil(n q))`` some request really had; NaN for no requests."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return math.nan
    return float(np.quantile(a, q, method="inverted_cdf"))


def quantile_ci(
    x: np.ndarray | Sequence[float], q: float = TAIL, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Distribution-free interval of the q-quantile (``stats.order``); a bound the
    requests cannot give (too few of them) is NaN, never a guess."""
    return order.ci_of_sorted(np.sort(np.asarray(x, dtype=float)), q, confidence)


def _ranks(n: np.ndarray, q: float, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks (l, u) of the order statistics bounding the q-quantile for each n, as
    ``stats.order.quantile_ranks`` picks them (plus one), vectorised over n for the scan
    below (scipy's binomial; a test checks the two agree)."""
    from scipy import stats

    a = (1 - confidence) / 2
    low = stats.binom.ppf(a, n, q)  # P(B <= low) >= a: X(low) lies below the quantile
    high = stats.binom.isf(a, n, q) + 1  # P(B >= high) <= a: X(high) lies above it
    return low, high


@functools.lru_cache(maxsize=64)
def min_requests(q: float = TAIL, confidence: float = CONFIDENCE, margin: float = MARGIN) -> int:
    """The fewest requests whose ``confidence`` interval of the q-quantile lies within the
    (q - margin) and (q + margin) sample quantiles, from the exact binomial.

    Scanned over n around the normal approximation z^2 q (1 - q) / margin^2 (discreteness
    makes the exact answer wiggle a few % about it): the smallest n from which the whole
    scanned range holds."""
    from scipy import stats

    if not (0 < q < 1 and 0 < confidence < 1 and 0 < margin < min(q, 1 - q)):
        raise ValueError(f"need 0 < q, confidence < 1 and 0 < margin < {min(q, 1 - q)}")
    z = float(stats.norm.isf((1 - confidence) / 2))
    guess = z * z * q * (1 - q) / (margin * margin)
    lo, hi = max(1, math.floor(0.7 * guess) - 10), math.ceil(1.4 * guess) + 50
    n = np.arange(lo, hi + 1)
    low, high = _ranks(n, q, confidence)
    ok = (low >= 1) & (high <= n) & (low >= n * (q - margin)) & (high <= n * (q + margin))
    bad = np.nonzero(~ok)[0]
    if bad.size == 0:
        return int(n[0])
    if bad[-1] == n.size - 1:
        raise ValueError(f"no request count up to {hi} gives that interval")
    return int(n[bad[-1] + 1])


def tail_low(x: np.ndarray, q: float = TAIL, confidence: float = CONFIDENCE) -> float:
    """The lower bound of the q-quantile's interval alone (one partition, no sort): cheap
    enough to run between windows; NaN where the requests cannot give it."""
    lo, _ = order.quantile_ranks(int(x.size), q, confidence)
    if not 0 <= lo < x.size:
        return math.nan
    return float(np.partition(x, lo)[lo])


@dataclass(frozen=True)
class Latencies:
    """Percentiles and the tail's interval of one set of request latencies (seconds)."""

    n: int
    p50: float
    p90: float
    p99: float
    p999: float
    p99_ci: tuple[float, float]
    mean: float

    @classmethod
    def of(cls, x: np.ndarray | Sequence[float], confidence: float = CONFIDENCE) -> Latencies:
        a = np.asarray(x, dtype=float)
        p = [percentile(a, q) for q in QUANTILES]
        mean = float(a.mean()) if a.size else math.nan
        return cls(a.size, p[0], p[1], p[2], p[3], quantile_ci(a, TAIL, confidence), mean)


def stable(values: Sequence[float], tolerance: float = STABILITY) -> bool:
    """The last ``STABLE_WINDOWS`` values agree: (max - min) <= tolerance x their mean."""
    last = [v for v in values[-STABLE_WINDOWS:] if math.isfinite(v)]
    if len(last) < STABLE_WINDOWS:
        return False
    mean = sum(last) / len(last)
    return mean > 0 and (max(last) - min(last)) <= tolerance * mean
