"""benchmarks/ as a suite: every script registered with its question, the figures protocol,
a script's outcome in one word, and two suite runs that `torchmark compare` tells apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clitest import cli

ROOT = Path(__file__).resolve().parents[2]
HELPERS = {"__init__", "__main__", "figures", "suite", "board_queries", "convbn_model"}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


def test_every_script_is_registered_with_a_question_and_listed_in_the_readme() -> None:
    from benchmarks.suite import SUITE

    names = [b.name for b in SUITE]
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - HELPERS
    assert sorted(names) == sorted(scripts)
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for b in SUITE:
        assert (ROOT / b.script).is_file() and b.question.strip()
        assert f"| {b.name}.py |" in readme, b.name
    # one plan for a GPU visit, no script per visit
    assert not list((ROOT / "benchmarks").glob("gpu_session*"))


def test_figures_go_to_the_runner_only_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import figures

    out = tmp_path / "f.jsonl"
    monkeypatch.delenv(figures.ENV, raising=False)
    figures.timed("alone", [1.0])  # run alone: nothing written anywhere
    monkeypatch.setenv(figures.ENV, str(out))
    figures.timed("history", [0.3, float("nan"), 0.31], "<= 0.4 s", True)
    figures.figure("ratio", 1.02, "x", "within 3 %", True)
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert docs == [
        {"name": "history", "samples_s": [0.3, 0.31], "goal": "<= 0.4 s", "met": True},
        {"name": "ratio", "value": 1.02, "unit": "x", "goal": "within 3 %", "met": True},
    ]


@pytest.mark.parametrize(
    ("rounds", "low", "high", "said"),
    [
        ([0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36], -math.inf, 0.4, "met"),
        ([0.41, 0.42, 0.43, 0.44, 0.45, 0.46, 0.47], -math.inf, 0.4, "MISSED"),
        # the median (0.38) under the goal, the slowest round above it: the noise's
        ([0.30, 0.32, 0.35, 0.38, 0.39, 0.40, 0.47], -math.inf, 0.4, "CAN'T TELL"),
        ([0.99, 0.995, 1.0, 1.0, 1.005, 1.01, 1.02], 0.97, 1.03, "met"),
        ([0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96], 0.97, 1.03, "MISSED"),
        ([1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.10], 0.97, 1.03, "MISSED"),
        ([0.96, 0.99, 1.0, 1.0, 1.0, 1.01, 1.02], 0.97, 1.03, "CAN'T TELL"),
        # too few rounds for an interval: inside the band, yet never a met goal
        ([1.0, 1.0, 1.0], 0.97, 1.03, "CAN'T TELL"),
        ([float("nan")] * 7, 0.97, 1.03, "CAN'T TELL"),
    ],
)
def test_a_figure_is_judged_by_its_medians_interval(
    rounds: list[float], low: float, high: float, said: str
) -> None:
    from benchmarks import figures

    verdict = figures.judged(rounds, low, high)
    assert verdict.said == said
    if rounds[0] == rounds[0]:
        assert verdict.median == sorted(rounds)[len(rounds) // 2]
        assert verdict.lo <= verdict.median <= verdict.hi or len(rounds) < 6


@pytest.mark.parametrize(
    ("said", "status"),
    [
        (["met", "met"], 0),
        ([], 0),
        (["met", "CAN'T TELL"], 3),
        (["CAN'T TELL", "MISSED", "met"], 1),
    ],
)
def test_a_script_exits_with_its_worst_verdict(said: list[str], status: int) -> None:
    from benchmarks import figures

    assert figures.exit_status(said) == status


@pytest.mark.parametrize(
    ("code", "output", "goal", "outcome"),
    [
        (0, "goal: met", True, "met"),
        (0, "figures", False, "done"),
        (1, "goal: MISSED", True, "missed"),
        (3, "goal: CAN'T TELL (0.36-0.43 s)", True, "can't tell"),
        (0, "not available: no CUDA device", True, "not available"),
        (0, "part 1: 3 %\npart 2 not available: no run given", False, "done"),
        (1, "Traceback (most recent call last):\n  ...", True, "failed"),
        (-9, "", True, "failed"),
    ],
)
def test_a_script_ends_in_one_word(code: int, output: str, goal: bool, outcome: str) -> None:
    from benchmarks.__main__ import outcome_of

    assert outcome_of(code, output, goal) == outcome


def test_two_suite_runs_are_stored_and_compare_shows_the_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.__main__ import Outcome, store_run
    from benchmarks.suite import BY_NAME

    db = f"sqlite:///{tmp_path / 'bench.db'}"
    monkeypatch.setenv("TORCHMARK_DB", db)

    def suite_run(scale: float) -> str:
        samples = [scale * (0.30 + 0.001 * (i % 5)) for i in range(20)]
        figs = [
            {"name": "history", "samples_s": samples, "goal": "<= 0.4 s", "met": True},
            {"name": "ratio", "value": 1.01, "unit": "x", "goal": "", "met": None},
        ]
        run_id = store_run([Outcome(BY_NAME["startup"], "met", 9.0, figs)], True, db, ["all"])
        assert run_id is not None
        return run_id

    before, after = suite_run(1.0), suite_run(1.5)
    code, out, err = cli(capsys, "show", after)
    assert code == 0, err
    said = " ".join(out.split())
    assert "startup: met in 9 s" in said and "startup, ratio: 1.01 x" in said
    code, out, err = cli(capsys, "compare", before, after)
    assert code == 0, err
    assert "SLOWER" in out and "startup/history" in out
    code, out, _ = cli(capsys, "export", after)
    doc = json.loads(out)
    assert doc["kind"] == "bench" and doc["command"] == "python -m benchmarks all"
    assert doc["payload"]["figures"][0]["name"] == "ratio"
    assert doc["payload"]["scripts"][0]["outcome"] == "met"
