"""MLPerf LoadGen's early-stopping rule for a latency percentile, ported from its source
(``loadgen/early_stopping.cc`` and ``results.cc``, mlcommons/inference) so a load point is
judged as LoadGen would judge the same requests.

With t of n requests over the latency bound, the run may claim its p-quantile is within the
bound at confidence c once n >= h(t) + t, where h(t) is the fewest requests under the bound
such that t or fewer over-bound requests among h + t would happen with probability under
1 - c if the true quantile sat at the bound:

    odds(h, t) = P(Bin(h + t, 1 - p) <= t) = I_p(h, 1 + t)      (regularised beta)
    h(t)       = min h with odds(h, t) < 1 - c                   (a binary search)

At LoadGen's defaults (p = 0.99, c = 0.99, tolerance 0) h(t) for t = 0, 1, 2, 3 is 459,
661, 836 and 998: a point needs 459, 662, 838 and 1,001 requests with that many over.

LoadGen's Server scenario calls a run VALID when its p99 (``sorted[floor(n p)]``) is within
the bound, early stopping is met, and the arrivals span the minimum duration. Its
single-stream early-stopping *estimate* of a percentile (a latency the true percentile lies
under at confidence c) is the t-th slowest request for the largest t with n >= h(t) + t.

The arithmetic is LoadGen's own (its lgamma, its hypergeometric series for the regularised
beta, its search bounds), in the same double precision, so the counts agree with it
exactly rather than to a library's rounding. Its series alternates in sign with terms up
to 99^t: beyond ``SERIES_MAX_T`` over-bound requests it loses its digits, and scipy's
regularised beta (the same function, summed stably) stands in.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

PERCENTILE = 0.99
CONFIDENCE = 0.99  # LoadGen's, hard-coded in results.cc
TOLERANCE = 0.0
_SERIES_TOLERANCE = 1.0 / (1 << 33)
# Checked against scipy.special.betainc: 1e-10 relative at t = 1,000, no digit at 5,000.
SERIES_MAX_T = 1000


def _lbeta(x: int, y: int) -> float:
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def _hypergeometric_2f1_a1(b: int, c: int, x: float) -> float:
    """Gauss's 2F1(1, b; c; x) as LoadGen sums it (DLMF 15.2.E1); with b = -t <= 0 the
    series ends after t + 1 terms."""
    term = result = 1.0
    i = 0
    while abs(term) > _SERIES_TOLERANCE:
        term *= (b + i) * x / (c + i)
        result += term
        i += 1
    return result


def _beta_regularized(x: float, a: int, b: int) -> float:
    return (
        math.exp(a * math.log(x) + (b - 1) * math.log(1 - x) - _lbeta(a, b))
        / a
        * _hypergeometric_2f1_a1(1 - b, 1 + a, x / (x - 1))
    )


def odds(h: int, t: int, p: float = PERCENTILE, d: float = TOLERANCE) -> float:
    """The chance of t or fewer over-bound requests in h + t if the true p-quantile sat at
    the bound."""
    if t > SERIES_MAX_T:
        from scipy import special

        return float(special.betainc(h, 1 + t, p - d))
    return _beta_regularized(p - d, h, 1 + t)


def _find_min_passing(min_h: int, max_h: int, t: int, p: float, d: float, c: float) -> int:
    count = max_h - min_h
    while count > 0:
        step = count // 2
        h = min_h + step
        if odds(h, t, p, d) < 1 - c:
            count = step
        else:
            min_h = h + 1
            count -= step + 1
    return min_h


@functools.lru_cache(maxsize=4096)
def min_passing(t: int, p: float = PERCENTILE, d: float = TOLERANCE, c: float = CONFIDENCE) -> int:
    """h(t): the fewest requests under the bound that, beside t over it, show the
    p-quantile within the bound at confidence c (LoadGen's ``MinPassingQueriesFinder``
    with an empty cache, as its Server scenario calls it)."""
    if t < 0:
        raise ValueError(f"t = {t}: a count of over-bound requests is >= 0")
    x1, y1 = 0, math.ceil(math.log(1 - c) / math.log(p - d))
    x0, y0 = -1, 0
    min_slope = (p - d) / (1 - p + d)
    max_slope = (y1 - y0) * (x1 - x0)
    min_h = int((t - x1) * min_slope + y1)  # C++: a double converted to int64 truncates
    max_h = int((t - x1) * max_slope + y1 + 1)
    return _find_min_passing(min_h, max_h, t, p, d, c)


def min_queries(over: int, p: float = PERCENTILE, c: float = CONFIDENCE) -> int:
    """The fewest requests a point needs, with ``over`` of them over the bound."""
    return min_passing(over, p, TOLERANCE, c) + over


def met(n: int, over: int, p: float = PERCENTILE, c: float = CONFIDENCE) -> bool:
    """LoadGen's Server-scenario early-stopping condition: n >= h(over) + over."""
    return n >= min_queries(over, p, c)


def most_over(n: int, p: float = PERCENTILE, c: float = CONFIDENCE) -> int:
    """The largest t with n >= h(t) + t (-1: not even t = 0 holds); h(t) + t grows with t,
    so a binary search finds it."""
    if n < min_queries(0, p, c):
        return -1
    lo, hi = 0, 1
    while n >= min_queries(hi, p, c):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # n >= h(lo) + lo and n < h(hi) + hi
        mid = (lo + hi) // 2
        if n >= min_queries(mid, p, c):
            lo = mid
        else:
            hi = mid
    return lo


def estimate(
    sorted_latencies: Sequence[float], p: float = PERCENTILE, c: float = CONFIDENCE
) -> float:
    """LoadGen's early-stopping estimate of the p-quantile: the t-th slowest latency for
    the largest t >= 1 with n >= h(t) + t, a value the true quantile lies under at
    confidence c; NaN where n < h(1) + 1 (too few requests for any estimate)."""
    n = len(sorted_latencies)
    t = most_over(n, p, c)
    if t < 1:
        return math.nan
    return float(sorted_latencies[n - t])


def loadgen_percentile(sorted_latencies: Sequence[float], p: float = PERCENTILE) -> float:
    """The percentile as LoadGen reports it: ``sorted[floor(n p)]`` (0-based)."""
    n = len(sorted_latencies)
    return float(sorted_latencies[int(n * p)]) if n else math.nan
