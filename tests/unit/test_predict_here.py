"""Your model on the target (predicted) against this CPU (measured): which is faster beyond
both intervals, batch by batch, and the break-even batch (kinds/predict/here.py)."""

from __future__ import annotations

from torchmark.kinds.predict.here import break_even, compare
from torchmark.results import Result, RunRecord, Verdict
from torchmark.results.payloads import PredictedCase


def cpu(batch: int, t: float, level: str = "ok") -> Result:
    return Result(workload="m.py:make", variant="e2e", device="cpu", params={"batch": batch},
                  samples_s=[t * (1 + 0.001 * i) for i in range(40)],
                  verdict=Verdict(level=level, reasons=[] if level == "ok" else ["x"]))  # fmt: skip


def predicted(batch: int, t: float, view: str = "e2e") -> PredictedCase:
    return PredictedCase(case=f"m b={batch} ({view})", workload="m.py:make", variant=view,
                         params={"batch": batch}, items=batch, seconds=t, low=0.8 * t,
                         high=1.5 * t, dominant="launch")  # fmt: skip


def test_the_target_wins_only_beyond_both_intervals_and_the_break_even_says_from_where() -> None:
    run = RunRecord(tool_version="t", fingerprint="f", kind="model",
                    results=[cpu(1, 1e-4), cpu(8, 4e-4), cpu(64, 4e-3)])  # fmt: skip
    cases = [predicted(1, 3e-4), predicted(1, 2e-4, "device"), predicted(8, 3e-4),
             predicted(64, 4e-4)]  # fmt: skip
    rows = compare(cases, run, "m.py:make")
    assert [(r.batch, r.view, r.verdict) for r in rows] == [
        (1, "e2e", "CPU faster"),  # 240-450 µs predicted against 100 µs measured
        (8, "e2e", "can't tell"),  # 240-450 µs against ~410 µs: they overlap
        (64, "e2e", "target faster"),
    ]
    assert break_even(rows, "H100") == (
        "break-even: from batch 64, H100 is predicted faster beyond both intervals"
    )


def test_a_cpu_result_its_verdict_rejects_is_not_compared() -> None:
    run = RunRecord(tool_version="t", fingerprint="f", kind="model",
                    results=[cpu(1, 1e-4, "invalid")])  # fmt: skip
    (row,) = compare([predicted(1, 3e-4)], run, "m.py:make")
    assert row.verdict == "CPU result invalid: not compared" and row.cpu_s is None
    assert "not known" in break_even([row], "H100")


def test_the_here_table_wraps_its_intervals_and_verdicts_at_80_columns() -> None:
    from rich.console import Console

    from torchmark.report.predict import here_table
    from torchmark.results.payloads import HereRow, PredictPayload, PredictTarget

    rows = [
        HereRow(batch=1, view="e2e", cpu_s=315e-6, cpu_low=311e-6, cpu_high=462e-6,
                target_s=124e-6, target_low=70.3e-6, target_high=209e-6,
                verdict="target faster"),
        HereRow(batch=8, view="e2e", target_s=133e-6, target_low=79.6e-6,
                target_high=218e-6, verdict="CPU result invalid: not compared"),
    ]  # fmt: skip
    target = PredictTarget(name="h100-quick", source="reference", side="gpu", device="cuda:0",
                           model="NVIDIA H100 80GB HBM3")  # fmt: skip
    run = RunRecord(tool_version="t", fingerprint="f", kind="predict",
                    payload=PredictPayload(target=target, here=rows))  # fmt: skip
    console = Console(width=80, record=True, highlight=False, markup=False)
    console.print(here_table(run))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    # each interval whole on its line; the verdict's words all there (wrapped in its column)
    for said in ("(311 µs - 462 µs)", "(70.3 µs - 209 µs)", "(79.6 µs - 218 µs)"):
        assert said in text, said
    assert all(w in text.split() for w in ["CPU", "result", "invalid:", "not", "compared"])
