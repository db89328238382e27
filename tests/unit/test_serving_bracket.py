"""The bracket a serving answer rests on (``serving.search.bracket_of``): the highest rate
within the bound, and above it the lowest rate *with the same batching* that was not within.
A point over the bound at another batching says nothing of the best setting's limit."""

from __future__ import annotations

from dataclasses import dataclass

from torchmark.kinds.serving.search import bracket_of


@dataclass(frozen=True)
class Point:
    rate: float
    outcome: str
    batch: int


def test_the_bracket_top_is_at_the_best_points_own_batching() -> None:
    points = [
        Point(1000, "within", 32),
        Point(1200, "OVER", 8),  # another batching failing lower: not the best's limit
        Point(1500, "OVER", 32),
        Point(1100, "within", 32),
    ]
    i, top = bracket_of(points, lambda p: p.batch)
    assert i == 3
    assert top == Point(1500, "OVER", 32)


def test_no_point_within_has_no_bracket_and_ties_go_to_the_first_measured() -> None:
    assert bracket_of([Point(10, "OVER", 1)], lambda p: p.batch) == (None, None)
    i, top = bracket_of([Point(5, "within", 1), Point(5, "within", 8)], lambda p: p.batch)
    assert (i, top) == (0, None)
