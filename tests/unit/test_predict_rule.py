"""A prediction is not a measurement (METHOD.md §5, judge/verdicts.py): its run holds no
result, its rule allows no use a measurement allows, every reader that meets it says so in
one line, and the board refuses it."""

from __future__ import annotations

import pytest

from torchmark.judge import verdicts
from torchmark.results import RunRecord
from torchmark.results.payloads import PredictedCase, PredictPayload, PredictTarget


def prediction() -> RunRecord:
    target = PredictTarget(name="h100-quick", source="committed reference run", side="gpu",
                           device="cuda:0", model="NVIDIA H100 80GB HBM3")  # fmt: skip
    case = PredictedCase(case="simplenet/infer fp32 b=64", workload="simplenet", variant="infer",
                         params={"batch": 64}, items=64, seconds=1e-4, low=8e-5, high=2e-4,
                         dominant="launch")  # fmt: skip
    return RunRecord(
        tool_version="t", fingerprint="f", kind="predict", run_id="p1",
        payload=PredictPayload(model="simplenet", target=target, cases=[case]),
    )  # fmt: skip


@pytest.mark.parametrize("use", verdicts.USES)
def test_a_predicted_figure_allows_nothing_a_measurement_allows(use: verdicts.Use) -> None:
    assert not verdicts.PREDICTED.allows(use)
    said = verdicts.prediction_refusal(prediction(), use)
    assert said is not None and "\n" not in said
    assert said.startswith("run p1 is a prediction of h100-quick, not a measurement")
    assert f"never {verdicts.USE_WORDS[use]}" in said


def test_a_measured_run_is_never_refused_as_a_prediction() -> None:
    run = RunRecord(tool_version="t", fingerprint="f", kind="run")
    assert verdicts.prediction_refusal(run, "rank") is None
    assert verdicts.prediction_refusal(run, "submit") is None
    assert "never submitted to a leaderboard" in (
        verdicts.prediction_refusal(prediction(), "submit") or ""
    )


def test_nothing_that_reads_results_finds_one_in_a_prediction() -> None:
    run = prediction()
    assert run.results == [] and verdicts.counted(run.results) == 0
    back = RunRecord.model_validate_json(run.model_dump_json())  # stored and read back
    assert isinstance(back.payload, PredictPayload) and back.payload.cases[0].predicted


def test_the_board_refuses_a_prediction_as_the_server_judges() -> None:
    from torchmark.web import serving

    said = serving.refusal(prediction())
    assert said is not None and "is a prediction of h100-quick" in said and "never ranked" in said


def test_the_speedup_geometric_mean_and_the_ranking_have_nothing_of_it() -> None:
    from torchmark.report import charts

    chart = charts.speedup_per_workload([prediction()])
    assert chart.svg is None  # no result, so no ratio to average
