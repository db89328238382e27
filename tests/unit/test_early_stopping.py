"""LoadGen's early-stopping rule, ported: the counts LoadGen itself gives
(``benchmarks/loadgen_early_stopping.py`` runs mlcommons-loadgen 6.0 for them)."""

from __future__ import annotations

import math

import pytest

from torchmark.stats import early_stopping as es

# LoadGen's Server scenario: N + "would need to run at least X more queries", by the
# number of queries over the bound (benchmarks/loadgen_early_stopping.py).
LOADGEN_MIN_QUERIES = {0: 459, 1: 662, 2: 838, 3: 1001, 10: 2010, 50: 6898}


@pytest.mark.parametrize(("over", "want"), sorted(LOADGEN_MIN_QUERIES.items()))
def test_the_minimum_counts_are_loadgens(over: int, want: int) -> None:
    assert es.min_queries(over) == want
    assert es.met(want, over) and not es.met(want - 1, over)


@pytest.mark.parametrize("t", [0, 1, 7, 100, 1000, 1001, 3000])
def test_odds_are_the_regularised_beta(t: int) -> None:
    from scipy import special

    h = es.min_passing(t)
    assert es.odds(h, t) == pytest.approx(float(special.betainc(h, 1 + t, 0.99)), rel=1e-8)
    assert es.odds(h, t) < 0.01 <= es.odds(h - 1, t)


def test_the_most_over_bound_requests_a_count_allows() -> None:
    assert es.most_over(458) == -1
    assert es.most_over(459) == 0 and es.most_over(661) == 0
    assert es.most_over(662) == 1 and es.most_over(2010) == 10
    assert es.most_over(2009) == 9


def test_the_estimate_is_the_t_th_slowest_for_the_largest_t_allowed() -> None:
    lat = [float(i) for i in range(1, 2011)]  # 2,010 requests: t = 10
    assert es.estimate(lat) == lat[-10]
    assert math.isnan(es.estimate(lat[:661]))  # not even t = 1
    assert es.loadgen_percentile(lat) == lat[int(2010 * 0.99)]
    assert math.isnan(es.loadgen_percentile([]))


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        es.min_passing(-1)
