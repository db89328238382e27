"""Stopping rules as pure functions of (samples, elapsed): crafted sample series, no timing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from torchmark.errors import UnknownNameError
from torchmark.stats.measurement import rel_ci_halfwidth
from torchmark.timing import RULES, Adaptive, Fixed, preset
from torchmark.timing.stopping import StoppingRule


def first_stop(rule: StoppingRule, series: Sequence[float], elapsed_per_sample: float) -> tuple:
    """Feed ``series`` one sample at a time; (n, reason) of the first stop."""
    for n in range(1, len(series) + 1):
        reason = rule.decide(series[:n], n * elapsed_per_sample)
        if reason:
            return n, reason
    return len(series), None


def steady(n: int, spread: float = 0.05, seed: int = 0) -> list[float]:
    return list(1e-3 * np.exp(spread * np.random.default_rng(seed).standard_normal(n)))


def test_waits_for_min_samples_and_min_time() -> None:
    rule = Adaptive(min_samples=10, min_time_s=0.5)
    flat = [1e-3] * 100
    assert rule.decide(flat[:9], 5.0) is None  # time enough, too few samples
    assert rule.decide(flat[:50], 0.49) is None  # samples enough, too little time
    assert rule.decide(flat[:10], 0.5) == "converged"


def test_converges_when_the_median_is_pinned() -> None:
    # 5 % log-normal noise: the CI half-width ~ 1.96 * 1.25 * 5 % / sqrt(n) reaches 0.5 %
    # near n = 600; the check runs every n/32 samples there, so it stops within ~3 %
    n, reason = first_stop(Adaptive(min_time_s=0.0), steady(3000), 1e-3)
    assert reason == "converged"
    assert 300 < n < 1200
    assert rel_ci_halfwidth(steady(3000)[:n]) <= 0.005
    assert rel_ci_halfwidth(steady(3000)[: n - 32]) > 0.005


@pytest.mark.parametrize("seed", range(5))
def test_steady_noise_does_not_stall(seed: int) -> None:
    _, reason = first_stop(Adaptive(min_time_s=0.0), steady(3000, seed=seed), 1e-3)
    assert reason == "converged"


def test_drift_stalls_at_the_first_power_of_two() -> None:
    # +0.5 % per sample: the median's CI widens as samples accrue, it never narrows
    drift = [1e-3 * (1 + 0.005 * i) for i in range(500)]
    n, reason = first_stop(Adaptive(min_time_s=0.0), drift, 1e-3)
    # judged at n = 2^k with n/4 >= min_samples = 10: the first is 64
    assert (n, reason) == (64, "stalled")


def test_a_step_stalls() -> None:
    # the machine got 20 % slower after 30 samples (another job started)
    step = [1e-3 * (1.2 if i >= 30 else 1.0) * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(500)]
    # (the stall alone: out of reach, it stops sooner, test_out_of_reach_*)
    rule = Adaptive(min_time_s=0.0, reach=0)
    assert first_stop(rule, step, 1e-3) == (64, "stalled")


def test_time_out_carries_its_reason() -> None:
    rule = Adaptive(max_time_s=1.0, reach=0)  # the time-out alone
    noisy = steady(40, spread=0.2)
    assert rule.decide(noisy, 0.99) is None
    assert rule.decide(noisy, 1.0) == "time_out"
    assert rule.decide(noisy[:3], 1.0) == "time_out"  # too few samples to judge
    assert rule.decide([1e-3], 1.0) == "time_out"  # one very slow sample still ends
    assert rule.decide([], 99.0) is None  # never without a sample
    assert rule.decide([1e-3] * 20, 1.0) == "converged"  # pinned by the time it ran out


def test_max_samples() -> None:
    rule = Adaptive(max_samples=20, min_time_s=0.0)
    noisy = steady(40, spread=0.2)
    assert first_stop(rule, noisy, 1e-3) == (20, "max_samples")


def test_noise_is_checked_every_n_over_32_samples_beyond_64() -> None:
    # the check costs O(n): beyond 64 samples only every n/32-th is judged
    rule = Adaptive(min_time_s=0.0)
    flat = [1e-3] * 200
    assert rule.decide(flat[:63], 1.0) == "converged"
    assert rule.decide(flat[:65], 1.0) is None  # 65 % 2
    assert rule.decide(flat[:66], 1.0) == "converged"
    assert rule.decide(flat[:131], 1.0) is None  # 131 % 4
    assert rule.decide(flat[:132], 1.0) == "converged"
    # limits are never skipped
    assert Adaptive(max_samples=131).decide(flat[:131], 0.0) == "max_samples"
    assert rule.decide(flat[:131], 10.0) == "converged"


def test_the_noise_checks_over_a_run_read_a_bounded_number_of_samples_per_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each check reads all n samples: checked every n/64-th to n/32-th, a run pays the same
    # per sample at any length; a step of n // 32 checks every 32nd sample (n = 32 * (n // 32)
    # comes round each time), ~160 samples read per sample at 10,000 and ~1,560 at 100,000
    read = [0]

    def counted(samples: Sequence[float]) -> float:
        read[0] += len(samples)
        return len(samples) ** -0.5  # steady noise, never pinned to the target below

    monkeypatch.setattr("torchmark.timing.stopping.rel_ci_halfwidth", counted)
    rule = Adaptive(min_time_s=0.0, target=1e-9, max_samples=10**9, reach=0.0)
    per_sample = {}
    grown: list[float] = []
    for n in range(1, 100_001):
        grown.append(1e-3)
        assert rule.decide(grown, 1.0) is None
        if n in (10_000, 100_000):
            per_sample[n] = read[0] / n
    assert per_sample[10_000] < 64 and per_sample[100_000] < 64, per_sample


def test_fixed() -> None:
    rule = Fixed(samples=7, max_time_s=1.0)
    assert rule.decide([1e-3] * 6, 0.5) is None
    assert rule.decide([1e-3] * 7, 0.5) == "fixed"
    assert rule.decide([1e-3] * 3, 1.0) == "time_out"
    assert rule.decide([], 5.0) is None


def test_describe_names_every_parameter() -> None:
    assert Adaptive().describe() == (
        "adaptive(min_samples=10, min_time_s=0.5, target=0.005, max_time_s=10.0, "
        "max_samples=10000, reach=1.5)"  # out of reach, named too
    )
    assert Fixed(samples=3).describe() == "fixed(samples=3, max_time_s=600.0)"


def test_presets_and_registry() -> None:
    assert preset("micro") == Adaptive(target=0.005, max_time_s=10.0)
    assert preset("model").target == 0.015  # type: ignore[attr-defined]
    for name in ("micro", "model", "quick", "test", "epoch"):
        rule = preset(name)
        assert rule.max_time_s > 0
        assert rule.decide([1e-3] * 20, 100.0) is not None  # every preset ends
    with pytest.raises(UnknownNameError, match="valid stopping presets: epoch, micro, model"):
        preset("mikro")
    assert RULES.get("adaptive") is Adaptive
    assert RULES.get("fixed") is Fixed


def test_stopping_when_the_spread_is_low_does_not_bias_the_median() -> None:
    """Optional stopping on i.i.d. skewed noise (fake clock): the mean headline stays within
    0.1 % of the distribution's median, as a fixed sample count does (benchmarks/
    stopping_bias.py has the study, with correlated noise too)."""
    rule = preset("quick")
    truth = 1.0 + 0.02 * float(np.exp(0.0))  # median of 1 + 0.02 * lognormal(0, 1)
    heads = []
    for i in range(300):
        rng = np.random.default_rng([7, i])
        samples: list[float] = []
        while not rule.decide(samples, 0.01 * len(samples)):
            samples.append(1.0 + 0.02 * float(rng.lognormal(0.0, 1.0)))
        heads.append(float(np.median(samples)))
    assert abs(float(np.mean(heads)) / truth - 1) < 0.001


def test_out_of_reach_stops_once_the_time_out_could_not_meet_the_target() -> None:
    # 20 % noise: at n = 256 the CI is ~3 % wide; shrinking as 1/sqrt(n), by the 10 s
    # time-out it would still be ~1.6 % > 1.5 x 0.5 %. The verdict must hold on the first
    # half as well, that half >= min_samples (no fixed wait).
    rule = Adaptive(min_samples=10, min_time_s=0.5, target=0.005, max_time_s=10.0)
    noisy = steady(300, spread=0.2)
    assert rule.decide(noisy[:19], 5.0) is None  # the half under min_samples: no judgement
    assert rule.decide(noisy[:256], 0.49) is None  # under min_time_s
    assert rule.decide(noisy[:256], 1.0) == "out_of_reach"
    noise = rel_ci_halfwidth(noisy[:256])
    assert noise * (1.0 / 10.0) ** 0.5 > 1.5 * 0.005  # the projection the rule made
    half_noise = rel_ci_halfwidth(noisy[:128])
    half_s = 1.0 * sum(noisy[:128]) / sum(noisy[:256])
    assert half_noise * (half_s / 10.0) ** 0.5 > 1.5 * 0.005  # and held on the first half
    # steady 5 % noise reaches 0.5 % well inside 10 s: it measures on and converges
    n, reason = first_stop(rule, steady(3000), 1e-2)  # 10 ms samples: 3000 would be 30 s
    assert reason == "converged" and n * 1e-2 < 10.0
    assert Adaptive(reach=0).decide(noisy[:256], 9.9) is None  # off: only the time-out


def test_out_of_reach_needs_the_verdict_on_the_first_half_too() -> None:
    # 5 % noise for 128 samples (on course to converge by the time-out), then 80 %: the
    # whole run projects out of reach but its first half did not, so the noise is new and
    # the projection not yet the noise level: measure on (stalled, or out of reach later)
    quiet = steady(128, spread=0.05)
    noisy = steady(128, spread=0.8, seed=3)
    rule = Adaptive(min_samples=10, min_time_s=0.5, target=0.005, max_time_s=10.0)
    both = quiet + noisy
    assert rel_ci_halfwidth(both) * (2.56 / 10.0) ** 0.5 > 1.5 * 0.005
    assert rule._beyond_reach(rel_ci_halfwidth(both), 2.56)
    assert not rule._beyond_reach(rel_ci_halfwidth(quiet), 1.28)
    assert rule.decide(both, 2.56) != "out_of_reach"
    assert rule.decide(noisy + noisy, 2.56) == "out_of_reach"  # noisy throughout: it is


def test_out_of_reach_on_a_fake_clock_ends_long_before_the_time_out() -> None:
    from torchmark.testing import FakeClock, FakeDevice, scripted
    from torchmark.timing import measure

    clock = FakeClock()
    durations = list(1e-2 * np.exp(0.2 * np.random.default_rng(1).standard_normal(5000)))
    rule = Adaptive()  # the default: target 0.5 %, time-out 10 s
    m = measure(scripted(clock, durations), FakeDevice(clock), clock=clock, rule=rule)
    assert m.stop_reason == "out_of_reach" and "out_of_reach" in m.flags
    spent = sum(m.samples_s) * m.calls_per_sample
    # at the rule's minimum time (the verdict held on the first half of the samples too); it
    # ran a quarter of the time-out (2.5 s) before, and all 10 s before that
    assert 0.5 <= spent < 1.0
    off = Adaptive(reach=0)
    clock2 = FakeClock()
    m2 = measure(scripted(clock2, durations), FakeDevice(clock2), clock=clock2, rule=off)
    assert m2.stop_reason == "time_out" and sum(m2.samples_s) * m2.calls_per_sample >= 9.9
