"""compare says when either side ran under other processes' load, and a change between
unreliable results measured beside other jobs is "can't tell", never FASTER."""

from __future__ import annotations

import io

from rich.console import Console

from torchmark.judge.comparison import compare, judge, loaded
from torchmark.report.compare import comparison_renderables
from torchmark.results import Result, RunRecord

BUSY = {"other_cores": 1.4, "logical_cores": 2, "accelerator": False}
QUIET = {"other_cores": 0.05, "logical_cores": 2, "accelerator": False}


def res(median_s: float, spread: float, telemetry: dict[str, object]) -> Result:
    n = 20
    samples = [median_s * (1 + spread * ((i * 7) % n - n / 2) / n) for i in range(n)]
    return Result(
        workload="simplenet",
        variant="infer",
        device="cpu",
        samples_s=samples,
        telemetry=telemetry,
    )


def test_unreliable_results_under_other_load_read_cant_tell() -> None:
    # Before: 1.53x FASTER between two runs both at 1.1-1.6 of 2 cores of other load.
    a, b = res(1e-3, 0.6, BUSY), res(0.5e-3, 0.6, BUSY)
    c = judge(a, b)
    assert c.verdict == "UNCLEAR"
    assert c.why.startswith("can't tell: A and B unreliable under other load, FASTER 2.00x")
    assert "under other load in A (other processes used 1.4 of 2 cores) and B" in c.why
    quiet = judge(res(1e-3, 0.6, QUIET), res(0.5e-3, 0.6, QUIET))
    assert quiet.verdict == "FASTER" and not loaded(quiet.a, quiet.b)


def test_a_change_beside_other_jobs_says_so() -> None:
    a, b = res(1e-3, 0.02, QUIET), res(0.5e-3, 0.02, BUSY)
    c = judge(a, b)
    assert c.verdict == "FASTER" and "under other load in B" in c.why
    cmp = compare(
        [
            RunRecord(run_id="a", status="complete", results=[a]),
            RunRecord(run_id="b", status="complete", results=[b]),
        ]
    )
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    for part in comparison_renderables(cmp, 80):
        console.print(part)
    text = " ".join(out.getvalue().split())
    assert "FASTER, under other load in B (other processes used 1.4 of 2 cores)" in text
    assert "1 of 1 cases ran under other processes' load" in text
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80


def test_a_report_of_two_runs_carries_compares_verdict_per_case() -> None:
    # Before: a two-run HTML report showed % of ceiling falling while the speed rose, and
    # no FASTER / SLOWER anywhere
    from torchmark.report import html

    quiet_a, quiet_b = res(1e-3, 0.02, QUIET), res(0.5e-3, 0.02, QUIET)
    busy_b = res(0.5e-3, 0.02, BUSY)
    page = html.render(
        [
            RunRecord(run_id="a", status="complete", results=[quiet_a]),
            RunRecord(run_id="b", status="complete", results=[quiet_b]),
            RunRecord(run_id="c", status="complete", results=[busy_b]),
        ]
    )
    assert "Compared case by case" in page
    assert page.count("<b>FASTER</b>") == 2
    assert "under other load in B (other processes used 1.4 of 2 cores)" in page
    one = html.render([RunRecord(run_id="a", status="complete", results=[quiet_a])])
    assert "Compared case by case" not in one
