"""Named, parameterised stopping rules (METHOD.md §2.6).

A rule looks at the samples so far and the elapsed time and returns a stop reason or None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from torchmark.registry import Registry
from torchmark.timing.stats import rel_ci_halfwidth


class StoppingRule(Protocol):
    name: str
    max_time_s: float

    def decide(self, samples: Sequence[float], elapsed_s: float) -> str | None: ...

    def describe(self) -> str: ...


RULES: Registry[type] = Registry("stopping rule")


@RULES.register("adaptive")
@dataclass(frozen=True)
class Adaptive:
    """Stop once the median is known to ``target`` (relative CI half-width), or the noise
    estimate stopped improving, or at ``max_time_s``; never before ``min_samples`` and
    ``min_time_s``.

    The noise estimate is the 95 % CI half-width of the median relative to the median: unlike
    the IQR it shrinks as samples accrue, so "converged" means the headline number is pinned.
    "Stalled": the estimate has not improved by 10 % while the sample count doubled.
    """

    min_samples: int = 10
    min_time_s: float = 0.5
    target: float = 0.005
    max_time_s: float = 10.0
    max_samples: int = 10_000
    name: str = "adaptive"

    def decide(self, samples: Sequence[float], elapsed_s: float) -> str | None:
        n = len(samples)
        if n >= self.max_samples:
            return "max_samples"
        if elapsed_s >= self.max_time_s and n >= 1:
            return (
                "time_out"
                if n < self.min_samples or self._noise(samples) > self.target
                else "converged"
            )
        if n < self.min_samples or elapsed_s < self.min_time_s:
            return None
        noise = self._noise(samples)
        if noise <= self.target:
            return "converged"
        half = n // 2
        if half >= self.min_samples:
            before = self._noise(samples[:half])
            if math.isfinite(before) and noise > 0.9 * before:
                return "stalled"
        return None

    @staticmethod
    def _noise(samples: Sequence[float]) -> float:
        return rel_ci_halfwidth(samples)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in asdict(self).items() if k != "name")
        return f"adaptive({args})"


@RULES.register("fixed")
@dataclass(frozen=True)
class Fixed:
    """Exactly ``samples`` samples (or ``max_time_s``, whichever comes first)."""

    samples: int = 10
    max_time_s: float = 600.0
    name: str = "fixed"

    def decide(self, samples: Sequence[float], elapsed_s: float) -> str | None:
        if len(samples) >= self.samples:
            return "fixed"
        if elapsed_s >= self.max_time_s and samples:
            return "time_out"
        return None

    def describe(self) -> str:
        return f"fixed(samples={self.samples})"


def preset(name: str) -> StoppingRule:
    """Rules for the suites: micro-benchmarks want 0.5 %, models 1–2 % (METHOD.md §2.6)."""
    presets: dict[str, StoppingRule] = {
        "micro": Adaptive(target=0.005, max_time_s=10.0),
        "model": Adaptive(target=0.015, max_time_s=20.0),
        # --quick: fewer seconds per case, still >= 10 samples; noise is reported, not hidden
        "quick": Adaptive(min_samples=10, min_time_s=0.2, target=0.01, max_time_s=2.0),
        "test": Adaptive(min_samples=5, min_time_s=0.0, target=0.05, max_time_s=0.5),
    }
    return presets[name]
