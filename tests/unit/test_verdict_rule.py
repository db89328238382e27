"""The one rule for what a reader may do with a result of each verdict, and the
readers that follow it: compare and its gate."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from clitest import cli
from torchmark.judge import verdicts
from torchmark.judge.comparison import cannot_judge, compare, judge, regressions
from torchmark.report.compare import comparison_renderables
from torchmark.results import Result, RunRecord, Verdict
from torchmark.store.exchange import export_run

ARTEFACT = (
    "samples split into two clusters, 7.99 ms and 16 ms (40% slow), while other processes "
    "used 1.8 of 2 cores: a scheduler artefact of 2 threads competing for the cores, not the "
    "hardware; measure again with --threads 1 (the free cores; --threads auto "
    "picks them) or on a quiet machine"
)


def res(median_s: float, spread: float = 0.01, n: int = 20, **kw: object) -> Result:
    samples = [median_s * (1 + spread * ((i * 7) % n - n / 2) / n) for i in range(n)]
    base: dict[str, object] = {"workload": "simplenet", "variant": "infer", "device": "cpu"}
    base.update(kw)
    return Result(samples_s=samples, **base)  # type: ignore[arg-type]


def run(run_id: str, *results: Result, status: str = "complete") -> RunRecord:
    return RunRecord(run_id=run_id, status=status, results=list(results))  # type: ignore[arg-type]


def invalid(median_s: float) -> Result:
    return res(median_s, verdict=Verdict(level="invalid", reasons=[ARTEFACT]))


def printed(cmp: object, width: int = 80) -> str:
    out = io.StringIO()
    for part in comparison_renderables(cmp, width):  # type: ignore[arg-type]
        Console(file=out, width=width, color_system=None).print(part)
    return out.getvalue()


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        (res(1e-3), "ok"),
        (res(1e-3, verdict=Verdict(level="warn", reasons=["first call 40x slower"])), "warn"),
        (res(1e-3, spread=0.3, verdict=Verdict(level="warn", reasons=["spread"])), "noisy"),
        (res(1e-3, spread=1.0, verdict=Verdict(level="warn", reasons=["spread"])), "unreliable"),
        (
            res(1e-3, stop_reason="time_out", verdict=Verdict(level="warn", reasons=["timed out"])),
            "timed_out",
        ),
        (invalid(1e-3), "invalid"),
        (res(1e-3, status="wrong", reason="max error 0.1 > tolerance 1e-4"), "wrong"),
        (Result(workload="w", variant="v", device="cpu", status="skipped"), "skipped"),
    ],
)
def test_each_verdict_kind_has_one_rule(result: Result, kind: str) -> None:
    assert verdicts.kind_of(result) == kind
    rule = verdicts.RULES[kind]  # type: ignore[index]
    trusted = kind in ("ok", "warn", "noisy", "timed_out")
    assert verdicts.may(result, "count_ok") == (trusted or kind == "unreliable")
    assert verdicts.may(result, "recommend") == (trusted or kind == "unreliable")
    assert verdicts.may(result, "average") == trusted  # a >= 25 % spread is never averaged in
    assert verdicts.may(result, "compare") == (trusted or kind == "unreliable")
    assert verdicts.may(result, "rank") == (trusted or kind == "unreliable")
    if not verdicts.may(result, "compare"):
        refused = verdicts.refusal(result, "compare")
        assert refused and refused.startswith(rule.word) and refused.endswith("not compared")


def test_compare_never_calls_an_invalid_result_faster() -> None:
    # Two quick runs of the same code 4 minutes apart printed
    # "simplenet/infer ... B/A 34.7x FASTER" for a result the run marked invalid.
    a = run("A", res(0.03))
    b = run("B", invalid(0.03 / 34.7))
    c = judge(a.results[0], b.results[0])
    assert c.verdict is None and c.why.startswith("invalid in B: samples split")
    cmp = compare([a, b])
    text = printed(cmp)
    assert "FASTER" not in text.split("verdict rule:")[0]
    assert "invalid in B: samples split into two clusters" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.startswith(" simplenet"))
    assert "invalid" in row and "samples/s" not in row.split("invalid")[1]  # no plain number
    # the gate cannot judge it: exit 3, never 1 (regression) nor 0
    assert regressions(cmp, 5) == []
    assert [c.why for _, c in cannot_judge(cmp, 5)] == [c.why]


def test_compare_never_compares_against_an_invalid_baseline_nor_a_wrong_result() -> None:
    a = run("A", invalid(0.03), res(0.01, workload="resnet50"))
    b = run("B", res(0.03), res(0.01, workload="resnet50", status="wrong", reason="NaN"))
    cmp = compare([a, b])
    whys = sorted(c.why for _, c in cannot_judge(cmp, 5))
    assert whys[0].startswith("invalid in A:") and whys[1] == "wrong in B: NaN"


def test_the_gate_exits_3_on_an_invalid_case_and_its_text_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = []
    for record in (run("A", res(0.03)), run("B", invalid(0.001))):
        files.append(tmp_path / f"{record.run_id}.json")
        files[-1].write_text(export_run(record))
    code, out, err = cli(capsys, "compare", *map(str, files), "--fail-on-regression", "5")
    assert code == 3, (out, err)
    assert "cannot judge: simplenet/infer on cpu: invalid in B: samples split" in err


def test_the_gate_text_says_each_reason_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "but p=2e-23 but the 49.3% change": the reason is introduced once.
    wide = res(0.01, spread=1.2, n=200)
    slow = res(0.0149, spread=1.2, n=200)
    files = []
    for record in (run("A", wide), run("B", slow)):
        files.append(tmp_path / f"{record.run_id}.json")
        files[-1].write_text(export_run(record))
    code, _, err = cli(capsys, "compare", *map(str, files), "--fail-on-regression", "5")
    line = next(x for x in err.splitlines() if x.startswith("cannot judge"))
    assert code == 3 and line.count(" but ") <= 1, line
    assert "in B, UNCLEAR: p=" in line


def test_an_incomplete_later_run_leaves_its_missing_cases_unjudged() -> None:
    a = run("A", res(0.03), res(0.01, workload="resnet50"))
    b = run("B", res(0.03), status="incomplete")
    unsure = cannot_judge(compare([a, b]), 5)
    assert [c.why for _, c in unsure] == ["not measured in B: the run is incomplete"]
    assert cannot_judge(compare([a, run("C", res(0.03))]), 5) == []


def test_the_rule_module_imports_neither_torch_nor_numpy() -> None:
    import subprocess

    code = (
        "import sys, torchmark.judge.verdicts; "
        "print('torch' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
