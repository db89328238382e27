"""Measurement: raw samples kept, statistics derived lazily (numpy)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchmark.stats.order import ci_of_sorted, numpy_sorted, quantile_ci, quantile_ranks

if TYPE_CHECKING:
    import numpy as np

# METHOD.md §2.7: relative IQR thresholds for the noise flags.
NOISY_REL_IQR = 0.10
UNRELIABLE_REL_IQR = 0.25
# METHOD.md §2.4: at least 3 warm-up calls; a call slower than the rule's time-out gets fewer.
MIN_WARMUP_CALLS = 3
# Below 6 samples the 95 % CI of the median does not exist (2 * 0.5**5 = 6.25 % > 5 %).
FEW_SAMPLES = 5


def median_ci(
    samples: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics
    (``stats.order``); with too few samples for the requested confidence (n < 6 at 95 %)
    a bound is NaN, never a guess."""
    return quantile_ci(samples, 0.5, confidence)


def _lerp_quantile(x: Sequence[float], q: float) -> float:
    """``np.quantile(x, q)`` (its default, linear method) of sorted ``x``, computed as numpy
    computes it, so a stored run reads the same figures with or without numpy: the readers
    of stored results (``show``, ``export``, ``report``) start without importing it."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q!r}: a quantile lies in [0, 1]")
    n = len(x)
    if math.isnan(x[-1]):  # a NaN sample (sorted last): numpy's quantile is NaN
        return math.nan
    virtual = (n - 1) * q  # numpy's virtual index for its linear method
    if virtual >= n - 1:  # numpy: lerp(x[-1], x[-1], virtual + 1), NaN where x[-1] is inf
        last = x[-1]
        return last - (last - last) * -virtual
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = x[below], x[below + 1]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def rel_ci_halfwidth(samples: Sequence[float] | np.ndarray, confidence: float = 0.95) -> float:
    """Half-width of the median's confidence interval relative to the median.

    The stopping rule calls this after samples, so the median and both bounds come from one
    O(n) partition, as ``np.median`` and :func:`median_ci` pick them (a test checks they are
    equal): np.median alone costs ~8 µs of an ~11 µs check at n = 64.
    """
    import numpy as np  # the stopping rule's hot path; the readers never call it

    x = np.asarray(samples, dtype=float)
    n = x.size
    if n == 0:
        return math.inf
    lo, hi = quantile_ranks(n, 0.5, confidence)
    if lo < 0 or hi >= n:
        return math.inf
    mid_lo, mid_hi = (n - 1) // 2, n // 2
    part = np.partition(x, sorted({lo, mid_lo, mid_hi, hi}))
    med = (part[mid_lo] + part[mid_hi]) / 2
    if not med > 0:
        return math.inf
    return float((part[hi] - part[lo]) / 2 / med)


# A timer reads the interval between its start and stop, both inside the host clock's span
# of the sample: reading longer than that span is a timer fault, not the device. The margin
# covers clock-rate drift between device and host (ppm) and CUDA events' ~0.5 us resolution.
TIMER_OVER_HOST = 1.01
TIMER_SLACK_S = 20e-6


def timer_excess(timer_s: float, host_s: float) -> float:
    """How far a sample's timer read past what the host clock around it allows (> 0: a
    timer fault; ``telemetry.verdict`` judges it, ``timing.loop`` keeps the worst)."""
    return timer_s - (TIMER_OVER_HOST * host_s + TIMER_SLACK_S)


@dataclass(frozen=True)
class Measurement:
    """Timings of one callable: per-call seconds, one value per sample of ``calls_per_sample``.

    ``excluded`` holds indices of samples set aside (e.g. taken while the GPU throttled):
    they are kept, but the headline statistics use only the others (all of them, flagged
    ``all_excluded``, if none is left).

    Flags: ``noisy`` (rel. IQR >= 10 %), ``unreliable`` (>= 25 %), ``timed_out`` (the rule
    hit its time-out before its target), ``out_of_reach`` (it stopped early: its target could
    not be met by the time-out), ``few_samples`` (n < 5), ``short_warmup`` (fewer
    than 3 warm-up calls: one call was too slow for the time budget).
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
    # what the machine did meanwhile (``torchmark.measure``: competing_load, stalled) and
    # why, in words: the CLI keeps these on its Result (telemetry, verdict) instead
    extra_flags: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    # (timer, host clock) seconds of the sample whose timer read furthest past the host
    # clock around it (``timer_excess``); None where no sample's read past it at all (a
    # timer measures an interval inside the host's span, so a correct one never does)
    timer_over_host: tuple[float, float] | None = None

    @functools.cached_property
    def kept(self) -> tuple[float, ...]:
        """The samples the statistics use, in the order taken (a tuple: numpy is imported
        by the callers that need an array, not by every reader of a stored result)."""
        drop = set(self.excluded)
        kept = [float(s) for i, s in enumerate(self.samples_s) if i not in drop]
        return tuple(kept or map(float, self.samples_s))

    @functools.cached_property
    def _sorted(self) -> tuple[float, ...]:
        return numpy_sorted(self.kept)

    @property
    def _has_nan(self) -> bool:
        return bool(self.n) and math.isnan(self._sorted[-1])

    @property
    def n(self) -> int:
        return len(self.kept)

    @functools.cached_property
    def median(self) -> float:
        """As ``np.median``: the middle sample, or the mean of the middle two; NaN where a
        sample is NaN."""
        x, n = self._sorted, self.n
        if not n or self._has_nan:
            return math.nan
        return x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2

    @functools.cached_property
    def quartiles(self) -> tuple[float, float]:
        if not self.n:
            return (math.nan, math.nan)
        return (_lerp_quantile(self._sorted, 0.25), _lerp_quantile(self._sorted, 0.75))

    @property
    def iqr(self) -> float:
        q1, q3 = self.quartiles
        return q3 - q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def spread_known(self) -> bool:
        """Whether the IQR estimates a spread: under ``FEW_SAMPLES`` the quartiles are
        neighbouring samples, and the verdict says "the spread is not known"; no reader
        prints a spread figure beside that."""
        return self.n >= FEW_SAMPLES

    @property
    def min(self) -> float:
        return self._sorted[0] if self.n and not self._has_nan else math.nan

    @property
    def mean(self) -> float:
        if not self.n:
            return math.nan
        try:
            return math.fsum(self.kept) / self.n
        except (ValueError, OverflowError):  # inf - inf, or a sum past the largest float
            return sum(self.kept) / self.n  # numpy's NaN or inf

    def quantile(self, q: float) -> float:
        return _lerp_quantile(self._sorted, q) if self.n else math.nan

    @functools.cached_property
    def ci(self) -> tuple[float, float]:
        """95 % confidence interval of the median (order statistics)."""
        return ci_of_sorted(self._sorted, 0.5)

    @property
    def flags(self) -> list[str]:
        out = []
        if self.rel_iqr >= UNRELIABLE_REL_IQR:
            out.append("unreliable")
        elif self.rel_iqr >= NOISY_REL_IQR:
            out.append("noisy")
        if self.stop_reason == "time_out":
            out.append("timed_out")
        elif self.stop_reason == "out_of_reach":
            out.append("out_of_reach")
        if self.n < FEW_SAMPLES:
            out.append("few_samples")
        if 0 < self.warmup_calls < MIN_WARMUP_CALLS:
            out.append("short_warmup")
        if self.samples_s and set(range(len(self.samples_s))) <= set(self.excluded):
            out.append("all_excluded")
        return out + [f for f in self.extra_flags if f not in out]

    def __repr__(self) -> str:
        warn = f"  WARNING: {', '.join(self.flags)}" if self.flags else ""
        warn += "".join(f"; {n}" for n in self.notes)
        return (
            f"<Measurement median {self.median * 1e3:.4g} ms  IQR {self.iqr * 1e3:.3g} ms "
            f"({self.rel_iqr:.1%})  n={self.n} x {self.calls_per_sample} calls  "
            f"stop={self.stop_reason}>{warn}"
        )
