"""torchmark.measure on a real tiny CPU op: the structure of what comes back, not its speed."""

from __future__ import annotations

import math

import torch

import torchmark
from torchmark.timing import Fixed, preset


def test_measure_a_real_cpu_add() -> None:
    x, y = torch.randn(1000), torch.randn(1000)
    m = torchmark.measure(lambda: x + y, "cpu", rule=preset("test"))
    assert isinstance(m, torchmark.Measurement)
    assert m.n >= 5 and len(m.samples_s) == m.n
    assert all(s > 0 for s in m.samples_s)
    assert m.median > 0 and m.min <= m.median
    assert m.first_call_s is not None and m.first_call_s > 0
    assert m.warmup_calls >= 3 and m.warmup_s >= 0.025
    assert m.calls_per_sample > 1  # a ~µs add is grouped to reach 10 ms samples
    assert m.timing == "e2e"  # the CPU has no clock of its own
    assert m.stop_reason in ("converged", "stalled", "time_out", "max_samples")
    assert m.rule.startswith("adaptive(min_samples=5")
    lo, hi = m.ci
    assert math.isnan(lo) or lo <= m.median <= hi


def test_measure_a_fixed_number_of_samples_of_a_real_op() -> None:
    a = torch.randn(64, 64)
    m = torchmark.measure(lambda: a @ a, "cpu", rule=Fixed(samples=6), min_sample_s=0.002)
    assert (m.n, m.stop_reason) == (6, "fixed")
    assert m.calls_per_sample >= 1
    assert "few_samples" not in m.flags
