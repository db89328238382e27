"""How a suite script hands its figures to the runner (``python -m benchmarks``).

A script prints its figures beside their goals as it always has; it also calls ``timed`` for
a figure that is a time with its samples (stored as a result: ``torchmark compare`` judges
it against the run before, within its noise) and ``figure`` for any other (a ratio, a bias:
stored with its goal). Run alone, outside the runner, both do nothing.

``judged`` is the one rule the scripts judge a figure by: the median of the rounds with its
95 % interval, against the goal's band.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

ENV = "TORCHMARK_BENCH_FIGURES"  # the file the runner reads back, one JSON object a line
# A script's exit status: 0 every goal met, 1 one missed, CANT_TELL where none was missed
# and the noise straddles one (the runner's "can't tell", never a missed goal).
CANT_TELL = 3


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


class Judged(NamedTuple):
    median: float
    lo: float  # the median's 95 % interval (NaN: too few rounds to give one)
    hi: float
    said: Literal["met", "MISSED", "CAN'T TELL"]


def judged(rounds: Iterable[float], low: float = -math.inf, high: float = math.inf) -> Judged:
    """The median of ``rounds`` against the band ``[low, high]``: ``met`` where its 95 %
    interval lies inside, ``MISSED`` where it lies wholly outside, ``CAN'T TELL`` where the
    noise straddles an edge (more rounds tell). A point median inside the band is not a
    met goal: on this VM one command's median start moved 0.38-0.45 s between two quiet
    runs."""
    from torchmark.stats.order import quantile_ci  # here: the runner imports this module

    kept = [x for x in rounds if x == x]  # NaN: a round that measured nothing
    if not kept:
        return Judged(math.nan, math.nan, math.nan, "CAN'T TELL")
    lo, hi = quantile_ci(kept, 0.5)
    said: Literal["met", "MISSED", "CAN'T TELL"] = "CAN'T TELL"
    if low <= lo and hi <= high:
        said = "met"
    elif hi < low or lo > high:
        said = "MISSED"
    return Judged(statistics.median(kept), lo, hi, said)


def exit_status(said: Iterable[str]) -> int:
    """What a script whose goals were judged ``said`` (``judged``'s words) exits with."""
    words = set(said)
    return 1 if "MISSED" in words else CANT_TELL if "CAN'T TELL" in words else 0
