"""tune's numbers on fixed samples: the speedup is the ratio of the latencies shown, a slower
candidate is never "faster", a noisy baseline stops the search, an over-budget baseline
still searches inside the budget. Timing is faked; the candidates are built for real."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from torchmark.errors import InputError
from torchmark.kinds.tune import search
from torchmark.kinds.tune.kind import tune
from torchmark.kinds.tune.search import Tuner
from torchmark.stats.measurement import Measurement

Timing = Callable[[dict[str, Any]], list[float]]


def fake_timing(monkeypatch: pytest.MonkeyPatch, per_config: Timing) -> None:
    """Tuner._sample returns the next value of a fixed cycle for the candidate's config."""
    cycles: dict[str, Iterator[float]] = {}

    def sample(self: Tuner, prep: Any, threads: int | None) -> list[float]:
        config = prep.extra["config"]
        key = repr(sorted(config.items()))
        if key not in cycles:
            cycles[key] = itertools.cycle(per_config(config))
        return [next(cycles[key])]

    monkeypatch.setattr(Tuner, "_sample", sample)


def run(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "devices": "cpu",
        "batch": 1,
        "budget_s": 60,
        "per_candidate_s": 0.0,  # the fewest rounds each: the samples are fixed anyway
        "try_compile": False,
    }
    args.update(kw)
    return tune(torch.nn.Linear(8, 4), lambda b: torch.randn(b, 8), **args)


# Like a loaded 2-core machine: samples now and then snap to 1.4 ms or 20 ms.
BASELINE = [7.5e-3, 20e-3, 7.4e-3, 7.6e-3, 1.4e-3, 7.5e-3]


def issue_like(config: dict[str, Any]) -> list[float]:
    if config["grad"] == "no_grad" and not config["threads"]:
        return BASELINE
    if config["variant"] == "int8-dynamic":
        return [1.4e-3, 1.4e-3, 1.3e-3, 20e-3, 1.5e-3, 1.4e-3]  # 5.4x by the medians
    if config["variant"] == "amp-fp16":
        return [19.5e-3, 19.0e-3, 20.0e-3, 19.5e-3, 19.6e-3, 19.4e-3]  # slower than 7.5 ms
    return [x * 1.001 for x in BASELINE]


def test_speedup_is_the_ratio_of_the_latencies_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_timing(monkeypatch, issue_like)
    monkeypatch.setattr(search, "MIN_ROUNDS", 60)  # 10 cycles of the fixed samples
    monkeypatch.setattr(search, "BASELINE_MIN_ROUNDS", 60)
    rec = run()
    rows = [c for c in rec.payload.candidates if c.latency_ms is not None]
    assert len(rows) >= 4, rec.payload.candidates
    for c in rows:
        shown = c.items_ratio * c.baseline_ms / c.latency_ms
        assert c.speedup == pytest.approx(shown, rel=1e-12), c
        if c.latency_ms > c.baseline_ms:
            assert c.status != "faster", c
        if c.status == "same":
            assert abs(c.speedup - 1) < 0.02, c
    by_variant = {c.config["variant"]: c for c in rows if c.stage == "variant"}
    fp16 = by_variant["amp-fp16"]
    assert fp16.speedup < 1 and fp16.status == "slower"
    cl = by_variant["int8-dynamic"]
    assert cl.speedup == pytest.approx(7.5 / 1.4) and cl.status == "faster"
    assert cl.baseline_ms == pytest.approx(7.5) and cl.latency_ms == pytest.approx(1.4)
    assert rec.payload.recommendation["cpu"].baseline_rel_iqr > 0  # the spread is shown
    assert any(n.startswith("cpu: baseline 7.5 ms, spread (IQR) ") for n in rec.payload.notes)


def test_a_baseline_too_noisy_stops_the_search_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wild = [1e-3, 9e-3, 2e-3, 30e-3, 1.5e-3, 12e-3]
    assert Measurement(tuple(wild)).rel_iqr > search.BASELINE_MAX_REL_IQR
    fake_timing(monkeypatch, lambda config: wild)
    rec = run(max_latency_ms=5.0)
    assert [c.stage for c in rec.payload.candidates] == ["baseline"]
    best = rec.payload.recommendation["cpu"]
    assert best.name == "no recommendation" and "too noisy to compare against" in best.reason
    assert best.speedup is None


def test_an_over_budget_baseline_still_searches_inside_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every configuration takes 10 ms per item: batch 4 is 40 ms, over a 25 ms budget
    fake_timing(monkeypatch, lambda config: [10e-3 * config["batch"] * f for f in (1, 1.01, 0.99)])
    rec = run(batch=4, max_latency_ms=25.0)
    best = rec.payload.recommendation["cpu"]
    assert best.name != "keep the baseline"
    assert best.config["batch"] == 2, best
    chosen = next(c for c in rec.payload.candidates if c.name == best.name)
    assert chosen.latency_ms <= 25.0


def test_nothing_inside_the_budget_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_timing(monkeypatch, lambda config: [50e-3, 50.5e-3, 49.5e-3])
    rec = run(batch=1, max_latency_ms=25.0)
    best = rec.payload.recommendation["cpu"]
    assert best.name == "nothing fits the budget" and "25 ms" in best.reason


def test_each_candidate_is_judged_like_every_other_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.judge.validity import judge

    fake_timing(monkeypatch, issue_like)
    rec = run()
    ok = [r for r in rec.results if r.ok]
    assert ok
    for r in ok:  # built by session.measured, as run/model/soak results are
        assert r.verdict is not None and r.verdict == judge(r), r.variant
        assert r.stop_reason == f"{len(r.samples_s)} interleaved rounds"
        assert len(r.extra["baseline_samples_s"]) == len(r.samples_s)


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom in forward")


def test_a_forward_that_raises_is_the_users_to_fix_not_a_kept_baseline() -> None:
    # Before: tune exited 0 saying "keep the baseline, 1.00x"; model and serving exit 2.
    with pytest.raises(InputError, match=r"the model failed on inputs .*boom in forward"):
        tune(Raises(), lambda b: torch.randn(b, 8), devices="cpu", budget_s=60)


@pytest.mark.parametrize("budget", [-5.0, 0.0])
def test_a_budget_of_no_time_is_refused(budget: float) -> None:
    with pytest.raises(InputError, match="the time budget must be more than 0 s"):
        run(budget_s=budget)
