"""Progress of a run: a plain line per finished case when piped, a bar in a terminal."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from torchmark.cli.progress import ProgressEvents
from torchmark.results import Result, Verdict, Work
from torchmark.workloads import Case

CPU = SimpleNamespace(name="cpu")


def cases() -> list[Case]:
    return [
        Case(
            "simplenet", "infer", CPU, (("scenario", "infer"), ("precision", "fp32"), ("batch", 64))
        ),  # type: ignore[arg-type]
        Case("matmul", "bfloat16", CPU, (("n", 512),)),  # type: ignore[arg-type]
    ]


def results() -> list[Result]:
    ok = Result(
        workload="simplenet",
        variant="infer",
        device="cpu",
        samples_s=[0.071, 0.072, 0.071925, 0.07185, 0.0716],  # 5: a spread is known
        work=Work(items=64, item_unit="samples"),
        verdict=Verdict(level="warn", reasons=["noisy"]),
    )
    skipped = Result(
        workload="matmul", variant="bfloat16", device="cpu", status="skipped",
        reason="no bf16 [fast] path",
    )  # fmt: skip
    return [ok, skipped]


def drive(console: Console, lines: bool | None = None) -> None:
    events = ProgressEvents(console, lines=lines)
    with events.shown():
        events.planned(cases())
        events.ceilings(CPU, cached=False)  # type: ignore[arg-type]
        for case, result in zip(cases(), results(), strict=True):
            events.case_started(case)
            events.case_done(case, result)


def test_piped_prints_a_plain_line_per_case_and_no_bar() -> None:
    # 64 samples / 71.85 ms median = 891/s; IQR 0.0716..0.071925 s = 0.45 % of the median
    out = io.StringIO()
    drive(Console(file=out, force_terminal=False, width=80))
    assert out.getvalue().splitlines() == [
        "Planned 2 cases on cpu (2 workloads: simplenet, matmul)",
        "measuring ceilings on cpu",
        "[1/2] simplenet/infer fp32 b=64 on cpu: 891 samples/s ±0.45 %, warn",
        "[2/2] matmul/bf16 n=512 on cpu: skipped: no bf16 [fast] path",
    ]
    assert "\x1b" not in out.getvalue()  # no colour, no cursor movement


def test_a_terminal_gets_a_bar_and_lines_only_where_asked() -> None:
    out = io.StringIO()
    drive(Console(file=out, force_terminal=True, width=80))
    text = out.getvalue()
    assert "Planned 2 cases" in text and "[1/2]" not in text
    out = io.StringIO()
    drive(Console(file=out, force_terminal=True, width=80), lines=True)  # model, tune
    assert "[2/2] matmul/bf16 n=512 on cpu: skipped" in out.getvalue()


def test_one_workload_one_case_in_words() -> None:
    out = io.StringIO()
    events = ProgressEvents(Console(file=out, force_terminal=False))
    events.planned(cases()[:1])
    assert out.getvalue().startswith("Planned 1 case on cpu (1 workload: simplenet)")


def test_a_dumb_terminal_gets_a_line_per_case(monkeypatch: pytest.MonkeyPatch) -> None:
    # TERM=dumb (an Emacs shell, some CI consoles): a terminal where rich draws no bar; a
    # quick run there printed nothing for 84 s
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    assert console.is_terminal and console.is_dumb_terminal
    drive(console)
    lines = out.getvalue().splitlines()
    assert "[1/2] simplenet/infer fp32 b=64 on cpu: 891 samples/s ±0.45 %, warn" in lines
    assert "[2/2] matmul/bf16 n=512 on cpu: skipped: no bf16 [fast] path" in lines
    assert "measuring ceilings on cpu" in lines


def test_a_soak_without_a_live_bar_says_each_tenth() -> None:
    from torchmark.cli.progress import tenths

    out = io.StringIO()
    tick = tenths(Console(file=out, force_terminal=False, width=80), "soaking matmul on cpu")
    for t in (5, 30, 61, 62, 300, 600):
        tick(t, 600)
    assert out.getvalue().splitlines() == [
        "soaking matmul on cpu: 61 s of 600 s",
        "soaking matmul on cpu: 300 s of 600 s",
        "soaking matmul on cpu: 600 s of 600 s",
    ]
