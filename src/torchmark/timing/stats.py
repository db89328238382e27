"""Measurement: raw samples kept, statistics derived lazily (numpy / scipy)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

# METHOD.md §2.7: relative IQR thresholds for the noise flags.
NOISY_REL_IQR = 0.10
UNRELIABLE_REL_IQR = 0.25


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    Uses scipy's quantile test (binomial order statistics); with too few samples for the
    requested confidence a bound is ±inf, never a guess.
    """
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    res = sps.quantile_test(x, q=float(np.median(x)), p=0.5)
    ci = res.confidence_interval(confidence_level=confidence)
    return (float(ci.low), float(ci.high))


def rel_ci_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the median's confidence interval relative to the median."""
    lo, hi = median_ci(samples, confidence)
    med = float(np.median(samples))
    if not (math.isfinite(lo) and math.isfinite(hi)) or med <= 0:
        return math.inf
    return (hi - lo) / 2 / med


@dataclass(frozen=True)
class Measurement:
    """Timings of one callable: per-call seconds, one value per sample of ``calls_per_sample``.

    ``excluded`` holds indices of samples set aside (e.g. taken while the GPU throttled):
    they are kept, but the headline statistics use only the others.
    """

    samples_s: tuple[float, ...]
    calls_per_sample: int = 1
    first_call_s: float | None = None
    warmup_calls: int = 0
    warmup_s: float = 0.0
    stop_reason: str = "fixed"
    rule: str = ""
    timing: str = "e2e"
    excluded: tuple[int, ...] = field(default=())

    @functools.cached_property
    def kept(self) -> np.ndarray:
        drop = set(self.excluded)
        kept = [s for i, s in enumerate(self.samples_s) if i not in drop]
        return np.asarray(kept or self.samples_s, dtype=float)

    @property
    def n(self) -> int:
        return int(self.kept.size)

    @functools.cached_property
    def median(self) -> float:
        return float(np.median(self.kept)) if self.n else math.nan

    @functools.cached_property
    def quartiles(self) -> tuple[float, float]:
        if not self.n:
            return (math.nan, math.nan)
        q1, q3 = np.quantile(self.kept, [0.25, 0.75])
        return (float(q1), float(q3))

    @property
    def iqr(self) -> float:
        q1, q3 = self.quartiles
        return q3 - q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def min(self) -> float:
        return float(self.kept.min()) if self.n else math.nan

    @property
    def mean(self) -> float:
        return float(self.kept.mean()) if self.n else math.nan

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.kept, q)) if self.n else math.nan

    @functools.cached_property
    def ci(self) -> tuple[float, float]:
        """95 % confidence interval of the median (order statistics)."""
        return median_ci(self.kept.tolist())

    @property
    def flags(self) -> list[str]:
        out = []
        if self.rel_iqr >= UNRELIABLE_REL_IQR:
            out.append("unreliable")
        elif self.rel_iqr >= NOISY_REL_IQR:
            out.append("noisy")
        if self.stop_reason == "time_out":
            out.append("timed_out")
        if self.n < 5:
            out.append("few_samples")
        return out

    def __repr__(self) -> str:
        warn = f"  WARNING: {', '.join(self.flags)}" if self.flags else ""
        return (
            f"<Measurement median {self.median * 1e3:.4g} ms  IQR {self.iqr * 1e3:.3g} ms "
            f"({self.rel_iqr:.1%})  n={self.n} x {self.calls_per_sample} calls  "
            f"stop={self.stop_reason}>{warn}"
        )
