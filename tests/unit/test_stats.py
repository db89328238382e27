"""Measurement statistics and flags: against numpy/scipy on seeded data, exact on small data."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sps

from torchmark.stats.measurement import rel_ci_halfwidth
from torchmark.stats.order import quantile_ranks
from torchmark.timing import Measurement, median_ci


def seeded(n: int, seed: int = 0) -> np.ndarray:
    """Log-normal timings around 1 ms with ~5 % spread: the shape real samples have."""
    return 1e-3 * np.exp(0.05 * np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("n", [6, 7, 10, 11, 25, 100, 1001])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_median_ci_is_scipy_quantile_test_interval(n: int, confidence: float) -> None:
    x = seeded(n, seed=n)
    res = sps.quantile_test(x, q=float(np.median(x)), p=0.5)
    ci = res.confidence_interval(confidence_level=confidence)
    want = (float(ci.low), float(ci.high))
    got = median_ci(x, confidence)
    # NaN where scipy has no bound (n = 6 at 99 %), else the very same order statistics
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("confidence", [0.5, 0.75, 0.9, 0.95, 0.99])
def test_ci_ranks_are_scipys_binomial_quantiles(confidence: float) -> None:
    # every n to 3,000 (exact integer sums to 1,024, floats above), then large ones; 0.5
    # and 0.75 give dyadic tails (0.25, 0.125) where a CDF can equal the tail exactly
    a = (1 - confidence) / 2
    for n in [*range(3001), 4095, 10_000, 100_000]:
        want = (int(sps.binom.ppf(a, n, 0.5)) - 1, int(sps.binom.isf(a, n, 0.5)))
        assert quantile_ranks(n, 0.5, confidence) == want, n


def test_a_stored_results_ci_needs_no_scipy_stats() -> None:
    # scipy.stats costs ~0.8 s to import: export, report and the leaderboard show CIs
    code = (
        "import sys; from torchmark.timing import median_ci; median_ci(list(range(99)));"
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_median_ci_exact_on_small_data() -> None:
    # n = 10 at 95 %: binom(10, 0.5) puts 2.1 % below rank 2 and above rank 9 (1-based)
    assert median_ci([10.0, 2, 9, 4, 5, 6, 7, 8, 3, 1]) == (2.0, 9.0)
    assert rel_ci_halfwidth(list(range(1, 11))) == pytest.approx((9 - 2) / 2 / 5.5)


def test_median_ci_has_no_bound_below_six_samples() -> None:
    # 2 * 0.5**5 = 6.25 % > 5 %: five samples cannot bound the median at 95 %
    assert all(math.isnan(v) for v in median_ci([1.0, 2, 3, 4, 5]))
    assert all(math.isnan(v) for v in median_ci([]))
    assert rel_ci_halfwidth([1.0, 2, 3, 4, 5]) == math.inf
    assert not any(math.isnan(v) for v in median_ci([1.0, 2, 3, 4, 5, 6]))


@pytest.mark.parametrize("n", [6, 7, 64, 65, 1000, 1001])
def test_rel_ci_halfwidth_is_median_ci_over_np_median(n: int) -> None:
    # the stopping rule's one-partition shortcut must pick the very same order statistics
    x = seeded(n, seed=n)
    lo, hi = median_ci(x)
    assert rel_ci_halfwidth(list(x)) == (hi - lo) / 2 / float(np.median(x))


def test_statistics_match_numpy_on_seeded_data() -> None:
    x = seeded(257)
    m = Measurement(samples_s=tuple(x))
    q1, q3 = np.quantile(x, [0.25, 0.75])
    assert m.n == 257
    assert m.median == float(np.median(x))
    assert m.quartiles == (float(q1), float(q3))
    assert m.iqr == pytest.approx(q3 - q1, rel=1e-12)
    assert m.rel_iqr == pytest.approx((q3 - q1) / np.median(x), rel=1e-12)
    assert m.min == float(x.min())
    assert m.mean == pytest.approx(float(x.mean()), rel=1e-12)
    assert m.quantile(0.9) == float(np.quantile(x, 0.9))
    assert m.ci == median_ci(x)
    assert m.ci[0] < m.median < m.ci[1]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 64, 255, 1000])
def test_statistics_equal_numpys_bit_for_bit_without_numpy(n: int) -> None:
    """A stored run's figures are computed in pure Python (``show`` and ``export`` start
    without numpy) and equal numpy's exactly: odd and even counts, ties, set-aside
    samples, any quantile."""
    rng = np.random.default_rng(n)
    x = seeded(n, seed=n) * 10 ** rng.uniform(-6, 2)
    if n > 4:
        x[: n // 4] = np.round(x[: n // 4], 5)  # ties
    excluded = tuple(range(0, n, 7)) if n > 7 else ()
    kept = np.delete(x, excluded)
    m = Measurement(samples_s=tuple(x.tolist()), excluded=excluded)
    assert m.kept == tuple(kept.tolist()) and m.n == kept.size
    assert m.median == float(np.median(kept))
    for q in (0.0, 0.01, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0):
        assert m.quantile(q) == float(np.quantile(kept, q)), q
    assert m.quartiles == tuple(float(v) for v in np.quantile(kept, [0.25, 0.75]))
    assert m.min == float(kept.min())
    assert m.ci == median_ci(kept) == median_ci(kept.tolist())


NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    "samples",
    [
        [1.0, NAN, 3.0, 2.0],
        [NAN, 1.0, 3.0, 2.0, 5.0, 4.0, 6.0, 7.0, 8.0, 9.0],  # a NaN first: sorted() left it
        [2.0, 1.0, INF],
        [1.0, INF, 3.0, INF],
        [-INF, INF, 3.0],
        [1e308, 1e308, 1e308],
    ],
)
def test_statistics_equal_numpys_on_samples_that_are_not_finite(samples: list[float]) -> None:
    """The pure-Python statistics read NaN and inf as numpy does: a NaN sample makes the
    median, quartiles, quantiles and min NaN (``sorted`` alone left a NaN anywhere: a finite
    median of garbage order), the CI's order statistics are numpy's (NaN sorted last), the
    mean is NaN or inf where fsum raised."""
    m = Measurement(samples_s=tuple(samples))
    x = np.asarray(samples)
    same = lambda a, b: a == b or (math.isnan(a) and math.isnan(b))  # noqa: E731
    with np.errstate(all="ignore"):
        want = [float(np.median(x)), float(x.min()), float(x.mean())]
        want += [float(v) for v in np.quantile(x, [0.0, 0.25, 0.5, 0.75, 0.99, 1.0])]
    got = [m.median, m.min, m.mean]
    got += [m.quantile(q) for q in (0.0, 0.25, 0.5, 0.75, 0.99, 1.0)]
    assert all(same(a, b) for a, b in zip(got, want, strict=True)), (got, want)
    lo, hi = quantile_ranks(x.size, 0.5, 0.95)
    order = np.sort(x)  # the partition median_ci used: NaN last
    ci = tuple(float(order[r]) if 0 <= r < x.size else NAN for r in (lo, hi))
    assert all(same(a, b) for a, b in zip(m.ci, ci, strict=True))
    assert all(same(a, b) for a, b in zip(median_ci(samples), ci, strict=True))


def test_a_quantile_outside_0_1_is_refused_as_numpy_refuses_it() -> None:
    m = Measurement(samples_s=(1.0, 2.0, 3.0))
    for q in (-0.5, 1.5):
        with pytest.raises(ValueError, match="quantile"):
            m.quantile(q)  # -0.5 read x[-1] + ...: a figure from nowhere


def test_a_stored_measurements_statistics_need_no_numpy() -> None:
    code = (
        "import sys\n"
        "from torchmark.stats.measurement import Measurement\n"
        "m = Measurement(samples_s=(3.0, 1.0, 2.0, 5.0, 4.0, 6.0, 7.0))\n"
        "print(m.median, m.quartiles, m.ci, m.flags, m.mean)\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "4.0"


def test_statistics_exact_on_small_data() -> None:
    m = Measurement(samples_s=(5.0, 1.0, 4.0, 2.0, 3.0))
    assert (m.n, m.median, m.min, m.mean) == (5, 3.0, 1.0, 3.0)
    assert m.quartiles == (2.0, 4.0)  # linear interpolation, numpy's default
    assert m.iqr == 2.0
    assert m.rel_iqr == pytest.approx(2 / 3)
    even = Measurement(samples_s=(1.0, 2.0, 3.0, 10.0))
    assert even.median == 2.5
    assert even.quartiles == (1.75, 4.75)


def five(spread: float, median: float = 5.0) -> Measurement:
    """Five samples whose IQR is ``spread`` exactly (q1 = the 2nd, q3 = the 4th)."""
    lo, hi = median - spread / 2, median + spread / 2
    return Measurement(samples_s=(lo, lo, median, hi, hi))


def test_noise_flags_at_their_thresholds() -> None:
    # IQR / median: 0.5 / 5 is 0.1 exactly in floating point, 1.25 / 5 is 0.25
    assert five(0.49).flags == []
    assert five(0.5).rel_iqr == 0.10
    assert five(0.5).flags == ["noisy"]
    assert five(1.24).flags == ["noisy"]
    assert five(1.25).rel_iqr == 0.25
    assert five(1.25).flags == ["unreliable"]


def test_other_flags() -> None:
    base = (1.0, 1.0, 1.0, 1.0, 1.0)
    assert Measurement(samples_s=base).flags == []
    assert Measurement(samples_s=base, stop_reason="time_out").flags == ["timed_out"]
    assert Measurement(samples_s=base, stop_reason="stalled").flags == []
    assert Measurement(samples_s=base[:4]).flags == ["few_samples"]
    assert Measurement(samples_s=base, warmup_calls=2).flags == ["short_warmup"]
    assert Measurement(samples_s=base, warmup_calls=3).flags == []
    # 0: built from samples alone (no warm-up recorded), nothing to judge
    assert Measurement(samples_s=base, warmup_calls=0).flags == []
    assert Measurement(samples_s=()).flags == ["unreliable", "few_samples"]


def test_excluded_samples_leave_the_headline_but_stay_stored() -> None:
    samples = (1.0, 1.1, 0.9, 50.0, 1.0, 60.0)
    m = Measurement(samples_s=samples, excluded=(3, 5))
    assert m.samples_s == samples
    assert m.n == 4
    assert m.median == 1.0
    assert m.quartiles == (0.975, 1.025)
    assert max(m.kept) == 1.1
    assert m.flags == ["few_samples"]
    # nothing left: the headline falls back to every sample, and says so
    everything = Measurement(samples_s=(1.0, 2.0), excluded=(0, 1, 7))
    assert everything.n == 2
    assert "all_excluded" in everything.flags
    # an index beyond the samples excludes nothing
    assert Measurement(samples_s=samples, excluded=(99,)).n == 6


def test_repr_golden() -> None:
    m = Measurement(
        samples_s=(1.0e-3, 1.1e-3, 1.2e-3, 0.9e-3, 1.0e-3, 1.05e-3),
        calls_per_sample=10,
        stop_reason="converged",
    )
    # sorted 0.9 1.0 1.0 1.05 1.1 1.2 ms: median 1.025; q1 at rank 1.25 = 1.0,
    # q3 at rank 3.75 = 1.05 + 0.75 * 0.05 = 1.0875; IQR 0.0875 = 8.5 % of the median
    assert repr(m) == (
        "<Measurement median 1.025 ms  IQR 0.0875 ms (8.5%)  n=6 x 10 calls  stop=converged>"
    )
    bad = Measurement(
        samples_s=(1e-3, 1e-3, 1e-3, 2e-3), calls_per_sample=3, stop_reason="time_out"
    )
    # q3 at rank 2.25 = 1 + 0.25 * 1 ms: IQR 25 % of the median
    assert repr(bad) == (
        "<Measurement median 1 ms  IQR 0.25 ms (25.0%)  n=4 x 3 calls  stop=time_out>"
        "  WARNING: unreliable, timed_out, few_samples"
    )
    quiet = Measurement(samples_s=(2e-3,) * 5, calls_per_sample=1, stop_reason="fixed")
    assert repr(quiet) == "<Measurement median 2 ms  IQR 0 ms (0.0%)  n=5 x 1 calls  stop=fixed>"


def test_a_result_keeps_every_timing_of_its_measurement() -> None:
    from torchmark.results import Result
    from torchmark.results.record import SAMPLE_FIELDS, sample_fields

    m = Measurement(
        samples_s=(0.5, 0.25, 0.75),
        calls_per_sample=3,
        first_call_s=1.5,
        warmup_calls=2,
        stop_reason="target",
        rule="adaptive",
        timing="device",
        excluded=(1,),
    )
    r = Result(workload="w", variant="v", device="cpu", **sample_fields(m))
    assert r.samples_s == [0.5, 0.25, 0.75] and r.excluded == [1]
    assert {k: getattr(r.measurement, k) for k in SAMPLE_FIELDS} == {
        k: getattr(m, k) for k in SAMPLE_FIELDS
    }
