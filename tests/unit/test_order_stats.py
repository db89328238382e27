"""The one order-statistics module: any quantile's interval, as scipy's quantile_test
gives it, used by the timing loop (the median) and serving (the p99)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from torchmark.kinds.serving import stats as serving_stats
from torchmark.stats import measurement, order


@pytest.mark.parametrize("q", [0.9, 0.99, 0.999, 0.1])
@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_quantile_ranks_are_scipys_binomial_quantiles(q: float, confidence: float) -> None:
    from scipy import stats

    a = (1 - confidence) / 2
    for n in [*range(1, 1500, 7), 5_003, 20_011, 100_003]:
        want = (int(stats.binom.ppf(a, n, q)) - 1, int(stats.binom.isf(a, n, q)))
        assert order.quantile_ranks(n, q, confidence) == want, n


def test_the_tail_interval_is_quantile_tests() -> None:
    from scipy import stats

    x = np.random.default_rng(3).lognormal(size=4_000)
    want = stats.quantile_test(x, q=float(np.median(x)), p=0.99).confidence_interval(0.95)
    assert order.quantile_ci(x, 0.99) == (want.low, want.high)
    assert serving_stats.quantile_ci(x, 0.99) == (want.low, want.high)


def test_serving_and_the_timing_loop_use_the_same_intervals() -> None:
    x = np.random.default_rng(4).exponential(size=301)
    assert measurement.median_ci(x) == order.quantile_ci(x, 0.5)
    assert serving_stats.quantile_ci(x, 0.5) == order.quantile_ci(x, 0.5)


def test_a_bound_too_few_samples_cannot_give_is_nan() -> None:
    low, high = order.quantile_ci(range(100), 0.99)
    assert low == low and math.isnan(high)  # 0.99**100 > 2.5 %: nothing bounds it above


def test_the_tail_lower_bound_alone_is_the_intervals() -> None:
    x = np.random.default_rng(5).exponential(size=2_000)
    assert serving_stats.tail_low(x) == order.quantile_ci(x, 0.99)[0]
    assert math.isnan(serving_stats.tail_low(np.array([])))
