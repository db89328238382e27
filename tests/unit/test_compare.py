"""The compare verdicts: FASTER / SLOWER / SAME / UNCLEAR against the noise of both runs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from torchmark.errors import InputError
from torchmark.report.compare import compare, comparison_renderables, judge, regressions
from torchmark.results import Result, RunRecord, Work

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json((RUNS / f"{name}.json").read_text())


def res(samples: list[float] | np.ndarray, **kw: object) -> Result:
    base: dict[str, object] = {"workload": "add", "variant": "v", "device": "cpu"}
    base.update(kw)
    return Result(samples_s=[float(x) for x in samples], work=Work(items=1), **base)  # type: ignore[arg-type]


def spread(median: float, rel: float, n: int = 20) -> np.ndarray:
    """n samples evenly spread over median ± rel (deterministic, relative IQR ≈ rel)."""
    return median * (1 + np.linspace(-rel, rel, n))


def test_clear_slowdown_is_slower() -> None:
    c = judge(res(spread(1.0, 0.01)), res(spread(1.10, 0.01)))
    assert c.verdict == "SLOWER"
    assert c.speed == pytest.approx(1 / 1.10)
    assert c.time_change == pytest.approx(0.10)
    assert c.p_value is not None and c.p_value < 0.01


def test_clear_speedup_is_faster() -> None:
    assert judge(res(spread(1.0, 0.01)), res(spread(0.8, 0.01))).verdict == "FASTER"


def test_significant_but_tiny_change_is_same() -> None:
    # 1 % apart with 0.2 % spread: Mann-Whitney is certain, but 1 % < the 2 % threshold.
    c = judge(res(spread(1.0, 0.002)), res(spread(1.01, 0.002)))
    assert c.p_value is not None and c.p_value < 0.01
    assert c.verdict == "SAME"
    assert "threshold" in c.why


def test_change_within_the_noise_is_not_a_verdict() -> None:
    # 8 % apart but each run spreads ±30 %: the threshold is the combined noise.
    c = judge(res(spread(1.0, 0.3, n=12)), res(spread(1.08, 0.3, n=12)))
    assert c.verdict in ("SAME", "UNCLEAR")
    assert c.verdict != "SLOWER"


def test_few_samples_are_unclear() -> None:
    # Three samples each: no 95 % order-statistic CI of the median exists, and even a
    # perfect separation cannot reach p < 0.01 with Mann-Whitney at n=3.
    c = judge(res([1.0, 1.2, 0.9]), res([1.3, 1.5, 1.1]))
    assert c.verdict == "UNCLEAR"
    assert "too few" in c.why


def test_same_when_ci_is_tight() -> None:
    rng = np.random.default_rng(0)
    a = 1.0 + 0.005 * rng.standard_normal(60)
    b = 1.0 + 0.005 * rng.standard_normal(60)
    c = judge(res(a), res(b))
    assert c.verdict == "SAME"
    assert 0.98 <= c.ci[0] <= 1 <= c.ci[1] <= 1.02


def test_skipped_side_is_not_compared() -> None:
    c = judge(res(spread(1, 0.01)), res([], status="skipped", reason="out of memory"))
    assert c.verdict is None and "skipped in B: out of memory" in c.why


def test_compare_fixture_runs_lists_one_sided_cases() -> None:
    cmp = compare([load("cpu-only"), load("cpu-gpu")])
    assert [k[0] for k in cmp.shared_keys] == ["seed-add", "add"]
    only_b = {(r.workload, r.device) for r in cmp.only_in[1]}
    assert ("matmul", "cuda:0") in only_b
    assert {r.workload for r in cmp.only_in[0]} == {"triad"}
    # 16 ms vs 20 ms per call: B is 0.8x the speed of A.
    seed = cmp.changes[0][0]
    assert seed.verdict == "SLOWER" and seed.speed == pytest.approx(0.8)


def test_regressions_use_the_time_change_and_the_verdict() -> None:
    cmp = compare([load("cpu-gpu"), load("cpu-gpu-slower")])  # every case 10 % longer
    assert len(regressions(cmp, 5)) == 17  # 19 shared cases, 2 skipped in both
    assert regressions(cmp, 10.5) == []


def test_nothing_in_common_is_one_clear_error() -> None:
    a = RunRecord(run_id="a", results=[res(spread(1, 0.01))])
    b = RunRecord(run_id="b", results=[res(spread(1, 0.01), workload="matmul")])
    with pytest.raises(InputError, match=r"no case in common.*a: add; b: matmul"):
        compare([a, b])


def test_one_run_is_not_a_comparison() -> None:
    with pytest.raises(InputError, match="at least two runs"):
        compare([load("cpu-only")])


def test_rendered_comparison_states_the_rule_and_leftovers() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    for part in comparison_renderables(compare([load("cpu-only"), load("cpu-gpu")])):
        console.print(part)
    text = out.getvalue()
    assert "Mann-Whitney" in text and "max(2%, combined relative IQR)" in text
    assert "only in B (17 cases" in text
    assert "0.800×" in text and "SLOWER" in text


def test_one_sample_a_side_is_unclear_not_a_regression() -> None:
    from torchmark.report.compare import judge
    from torchmark.results import Result

    a = Result(workload="w", variant="v", device="cpu", samples_s=[1.00])
    b = Result(workload="w", variant="v", device="cpu", samples_s=[1.05])
    change = judge(a, b)
    assert change.verdict == "UNCLEAR" and "too few samples" in change.why
    # constant but different samples do carry a verdict: Mann-Whitney ranks them
    a12 = Result(workload="w", variant="v", device="cpu", samples_s=[1.00] * 12)
    b12 = Result(workload="w", variant="v", device="cpu", samples_s=[1.10] * 12)
    assert judge(a12, b12).verdict == "SLOWER"
