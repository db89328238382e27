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
