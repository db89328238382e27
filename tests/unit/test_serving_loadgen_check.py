"""The LoadGen check's judgement (benchmarks/serving_loadgen.py): turns of LoadGen and
torchmark's client taken in ABBA order, read into each tool's verdicts and limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


def lg(k: int, rate: float, valid: bool, tail_over: bool | None = None) -> dict[str, Any]:
    over = (not valid) if tail_over is None else tail_over
    return {
        "round": k,
        "tool": "LoadGen",
        "rate": rate,
        "valid": "VALID" if valid else "INVALID",
        "constraints": "NO" if over else "Yes",
        "errors": {},
    }


def tm(k: int, rate: float, held: bool, errors: dict[str, int] | None = None) -> dict[str, Any]:
    return {"round": k, "tool": "torchmark", "rate": rate, "passed": held, "errors": errors or {}}


def test_loadgen_valid_at_the_answer_and_invalid_above_in_every_round_agrees(capsys) -> None:
    from serving_loadgen import verdict

    turns = [tm(1, 100, True), lg(1, 100, True), tm(1, 110, False), lg(1, 110, False)]
    turns += [lg(2, 100, True), tm(2, 100, True), lg(2, 110, False), tm(2, 110, False)]
    assert verdict(turns, (100, 110)) == 0
    out = capsys.readouterr().out
    assert "same verdict in 4 of 4 pairs" in out
    assert "LoadGen VALID 2 of 2, torchmark's client held 2 of 2" in out
    assert "max rate agree within 10%" in out


def test_one_round_invalid_at_the_answer_is_not_agreement_and_the_split_pair_counted(
    capsys,
) -> None:
    from serving_loadgen import verdict

    turns = [tm(1, 100, True), lg(1, 100, True), tm(1, 110, False), lg(1, 110, False)]
    turns += [lg(2, 100, False), tm(2, 100, True), lg(2, 110, False), tm(2, 110, False)]
    assert verdict(turns, (100, 110)) == 1
    out = capsys.readouterr().out
    assert "same verdict in 3 of 4 pairs (1 where one passed and the other did not)" in out
    assert "do not agree" in out


def test_invalid_above_only_for_want_of_queries_cannot_be_told_apart(capsys) -> None:
    from serving_loadgen import verdict

    turns = [lg(1, 100, True), lg(1, 110, False, tail_over=False)]
    assert verdict(turns, (100, 110)) == 1
    assert "can't be told apart" in capsys.readouterr().out


def test_a_failed_request_fails_the_turn_whatever_its_verdict() -> None:
    from serving_loadgen import passed

    assert passed(tm(1, 100, True))
    assert not passed(tm(1, 100, True, errors={"HTTP 500": 1}))
    assert not passed({**lg(1, 100, True), "errors": {"reset": 2}})


def test_each_tools_limit_is_the_highest_rate_held_below_its_lowest_failure(capsys) -> None:
    from serving_loadgen import limits

    turns = [
        tm(1, 80, True),
        lg(1, 80, True),
        tm(1, 90, True),
        lg(1, 90, False),
        tm(1, 100, False),
        lg(1, 100, True),  # held above a failure: not the limit
        tm(1, 110, False),
        lg(1, 110, False),
    ]
    limits(turns, (100, 110, 80, 90))
    out = capsys.readouterr().out
    assert "torchmark held 90, failed 100; LoadGen held 80, failed 90" in out
    assert "the ladder 80, 90, 100, 110" in out
