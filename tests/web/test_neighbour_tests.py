"""A ranking tests every pair of neighbouring machines with ``comparison.independent``; its
Mann-Whitney p-value is computed without scipy (``_mann_whitney_p``: no per-call overhead,
no 0.4 s import). It must be scipy's p within 1e-9 and give scipy's every judgement, so no
shared rank or order ever changes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from torchmark.judge import comparison
from torchmark.stats.measurement import Measurement


def pairs(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Sample pairs of every shape a leaderboard meets: continuous, heavily tied
    (quantised timers), overlapping, separated, and small (scipy's exact test)."""
    rng = np.random.default_rng(11)
    out = []
    for i in range(count):
        n1, n2 = (int(x) for x in rng.integers(2, 80, 2))
        if i % 5 == 4:
            n1, n2 = (int(x) for x in rng.integers(2, 10, 2))
        kind = i % 4
        if kind == 0:  # lognormal timings, medians a few % apart
            a = rng.lognormal(0, 0.1, n1)
            b = rng.lognormal(rng.normal(0, 0.05), 0.1, n2)
        elif kind == 1:  # a 1 ms timer: few distinct values, many ties
            a = rng.integers(1, 5, n1) * 1e-3
            b = rng.integers(1, 6, n2) * 1e-3
        elif kind == 2:  # rounded, 0.5 % apart
            a = np.round(rng.normal(1, 0.01, n1), 3)
            b = np.round(rng.normal(1.005, 0.01, n2), 3)
        else:  # shared values across the two sides, or fully separated
            a = rng.normal(1, 0.1, n1)
            shift = 0.0 if i % 8 == 3 else 2.0
            b = np.concatenate([a[: n2 // 2], rng.normal(1 + shift, 0.1, n2 - n2 // 2)])
        out.append((a, b))
    return out


def test_p_value_is_scipys() -> None:
    checked = exact = 0
    for a, b in pairs(3000):
        if a.min() == a.max() == b.min() == b.max():
            continue  # independent() never asks: Mann-Whitney is undefined there
        want = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
        got = comparison._mann_whitney_p(list(a), list(b))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (a, b)
        checked += 1
        exact += min(a.size, b.size) <= 8 and np.unique(np.concatenate((a, b))).size == (
            a.size + b.size
        )
    assert checked > 2900 and exact > 100  # scipy's exact test met too


def test_judgements_equal_scipys(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [(Measurement(tuple(a)), Measurement(tuple(b))) for a, b in pairs(1500)]
    fast = [comparison.independent(a, b) for a, b in cases]
    monkeypatch.setattr(
        comparison,
        "_mann_whitney_p",
        lambda a, b: float(mannwhitneyu(a, b, alternative="two-sided").pvalue),
    )
    slow = [comparison.independent(a, b) for a, b in cases]
    for f, s in zip(fast, slow, strict=True):  # verdict, speed, CI, p and the reason
        if isinstance(f, str) or isinstance(s, str):
            assert f == s
            continue
        assert (f.verdict, f.speed, f.ci, f.threshold, f.why) == (
            s.verdict,
            s.speed,
            s.ci,
            s.threshold,
            s.why,
        )
        assert f.p_value == pytest.approx(s.p_value, rel=1e-9, abs=1e-300)
    verdicts = {j.verdict for j in slow if not isinstance(j, str)}
    assert verdicts == {"FASTER", "SLOWER", "SAME", "UNCLEAR"}  # every branch was met


def test_p_value_with_ties_beyond_float_exactness() -> None:
    """Over 208,000 equal samples a tie count's cube passes 2**53 (scipy's tie term is no
    longer exact integer arithmetic, this one is): still scipy's p."""
    rng = np.random.default_rng(5)
    a = np.concatenate([np.full(250_000, 1.0), rng.normal(1, 0.1, 1000)])
    b = np.concatenate([np.full(240_000, 1.0), rng.normal(1.01, 0.1, 5000)])
    want = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert comparison._mann_whitney_p(list(a), list(b)) == pytest.approx(want, rel=1e-9)
