"""benchmarks/measure_vs_timer.py's second line: Timer's own calls read as torchmark reads
its samples (means of k consecutive calls), so a gap from the calls' skew is told apart
from a gap in how each tool times."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


def test_k_call_means_of_skewed_calls_sit_above_their_single_call_median() -> None:
    torch = pytest.importorskip("torch")  # the script imports torch at its top
    del torch
    from measure_vs_timer import grouped_median

    calls = [1.0, 1.0, 1.0, 1.6] * 25  # one slow call in four: right-skewed
    assert statistics.median(calls) == 1.0
    assert grouped_median(calls, 1, 4) == pytest.approx(1.15)  # every group holds a slow one
    assert grouped_median(calls, 1, 1) == 1.0  # one call a sample: the same statistic
    assert grouped_median(calls, 2, 4) == pytest.approx(1.15)  # blocks of 2, two per group
    assert grouped_median(calls[:8], 1, 4) is None  # too few groups for a median
