"""How a suite script hands its figures to the runner (``python -m benchmarks``).

A script prints its figures beside their goals as it always has; it also calls ``timed`` for
a figure that is a time with its samples (stored as a result: ``torchmark compare`` judges
it against the run before, within its noise) and ``figure`` for any other (a ratio, a bias:
stored with its goal). Run alone, outside the runner, both do nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

ENV = "TORCHMARK_BENCH_FIGURES"  # the file the runner reads back, one JSON object a line


def _write(doc: dict[str, object]) -> None:
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(doc) + "\n")


def timed(name: str, samples_s: Sequence[float], goal: str = "", met: bool | None = None) -> None:
    """A time, every sample kept (seconds)."""
    kept = [float(x) for x in samples_s if x == x and x > 0]  # NaN: a failed try
    if kept:
        _write({"name": name, "samples_s": kept, "goal": goal, "met": met})


def figure(
    name: str, value: float, unit: str = "", goal: str = "", met: bool | None = None
) -> None:
    """A figure that is not a time."""
    _write({"name": name, "value": float(value), "unit": unit, "goal": goal, "met": met})
