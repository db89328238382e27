"""Order statistics: the distribution-free confidence interval of any quantile.

The number of samples below the true q-quantile is Bin(n, q), so two order statistics
bound it with known coverage whatever the distribution: the interval of
``scipy.stats.quantile_test(...).confidence_interval()``. The ranks are summed here rather
than asked of scipy.stats, which costs ~0.8 s to import: every command that shows a stored
result's interval (``export``, ``report``, the leaderboard) would pay it. Tests check the
ranks against scipy's for every n to 3,000 (the median) and for the tail quantiles.

A bound the samples cannot give (too few of them) is NaN, never a guess.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

# Up to this many samples the median's binomial sums are exact integers (~0.1 ms at the
# limit); above, floats, where an exact tie with the tail probability cannot occur.
EXACT_RANKS_UP_TO = 1024
# The sums start this many standard deviations below the mean: the mass left out is under
# 1e-32, far below a float's resolution of the tail probability.
SKIP_SD = 12

T = TypeVar("T", int, float)


def _binom_terms(n: int, i: int, first: T, step: Callable[[T, int, int], T]) -> Iterator[T]:
    """Bin(n, q) masses (scaled as ``first`` is) from k = i up; ``step(term, n - k, k + 1)``
    is the next one."""
    term = first
    for k in range(i, n + 1):
        yield term
        term = step(term, n - k, k + 1)


def quantile_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bounding the q-quantile of n samples,
    exactly as ``quantile_test`` picks them: ``binom.ppf(a, n, q) - 1`` and
    ``binom.isf(a, n, q)`` with ``a = (1 - confidence) / 2``. A rank outside 0 .. n - 1
    means that bound does not exist."""
    if not (0 < q < 1 and 0 < confidence < 1):
        raise ValueError(f"quantile {q!r}, confidence {confidence!r}: both lie in (0, 1)")
    if q == 0.5:
        return _median_ranks(n, confidence)
    return _ranks(n, float(q), float(confidence))


@functools.lru_cache(maxsize=1024)
def _ranks(n: int, q: float, confidence: float) -> tuple[int, int]:
    a = (1 - confidence) / 2
    if n == 0:
        return (-1, 0)
    sd = math.sqrt(n * q * (1 - q))
    i = max(0, math.floor(n * q - SKIP_SD * sd))
    ratio = q / (1 - q)
    first = math.exp(
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * math.log(q)
        + (n - i) * math.log1p(-q)
    )
    cdf = 0.0
    ppf = isf = n  # ppf: first k with CDF(k) >= a; isf: first k with CDF(k) >= 1 - a
    found = False
    for k, term in enumerate(_binom_terms(n, i, first, lambda t, a_, b_: t * a_ / b_ * ratio), i):
        cdf += term
        if not found and cdf >= a:
            ppf, found = k, True
        if cdf >= 1 - a:
            isf = k
            break
    return ppf - 1, isf


@functools.lru_cache(maxsize=1024)
def _median_ranks(n: int, confidence: float) -> tuple[int, int]:
    """The median's ranks, summed exactly (integers) up to ``EXACT_RANKS_UP_TO`` samples:
    Bin(n, 1/2) is symmetric, and a tail probability such as 0.025 can tie a CDF exactly."""
    a = (1 - confidence) / 2
    i = max(0, math.floor(n / 2 - SKIP_SD / 2 * math.sqrt(n)))
    terms: Iterator[int] | Iterator[float]
    if n <= EXACT_RANKS_UP_TO:
        # CDF(k) <= a as integers: sum of C(n, j) * den <= num * 2**n, a = num / den exactly
        num, den = Fraction(a).as_integer_ratio()
        limit: float = num << n
        terms = _binom_terms(
            n, i, math.comb(n, i) * den, lambda t, a_, b_: operator.floordiv(t * a_, b_)
        )
    else:
        limit = a
        terms = _binom_terms(
            n,
            i,
            math.exp(
                math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
            ),
            lambda t, a_, b_: operator.truediv(t * a_, b_),
        )
    cdf: float = 0
    below, first = -1, n  # below: last k with CDF(k) <= a; first: CDF(k) >= a
    for k, term in enumerate(terms, start=i):
        cdf += term
        if cdf <= limit:
            below = k
        if cdf >= limit:
            first = k
            break
    # X ~ Bin(n, 1/2) is symmetric: P(X > k) = CDF(n - k - 1), so isf(a) = n - 1 - below
    return first - 1, n - 1 - below


def ci_of_sorted(
    x: Sequence[float] | np.ndarray, q: float, confidence: float = 0.95
) -> tuple[float, float]:
    """The q-quantile's interval from samples sorted as ``np.sort`` sorts (NaN last)."""
    n = len(x)
    if n == 0:
        return (math.nan, math.nan)
    lo, hi = quantile_ranks(n, q, confidence)
    low = float(x[lo]) if 0 <= lo < n else math.nan
    high = float(x[hi]) if 0 <= hi < n else math.nan
    return (low, high)


def numpy_sorted(x: Iterable[float]) -> tuple[float, ...]:
    """``np.sort``'s order: NaN last (``sorted`` alone leaves a NaN anywhere, and every
    order statistic after it wrong)."""
    values = list(x)
    numbers = [v for v in values if v == v]  # NaN alone is not equal to itself
    return (*sorted(numbers), *[math.nan] * (len(values) - len(numbers)))


def quantile_ci(
    samples: Iterable[float], q: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Distribution-free confidence interval of the q-quantile (see the module)."""
    return ci_of_sorted(numpy_sorted(map(float, samples)), q, confidence)
