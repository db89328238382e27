"""The scaling ladder's efficiency column reads a rung only where its verdict allows a
comparison (``verdicts.may``): a DDP step judged invalid under load gets no FASTER/SLOWER."""

from __future__ import annotations

from torchmark.report.scaling import Rung, efficiency
from torchmark.results import Result, Verdict, Work


def step(median_s: float, verdict: Verdict | None = None) -> Result:
    return Result(
        workload="simplenet",
        variant="train",
        device="cpu",
        params={"batch": 8},
        samples_s=[median_s * (1 + 0.01 * (i % 3)) for i in range(12)],
        work=Work(items=8, item_unit="sample"),
        verdict=verdict,
    )


def rung(r: Result) -> Rung:
    return Rung("no DDP", 1, r, None, None, None, (), None, None, None)


def test_an_invalid_side_gets_no_efficiency_verdict() -> None:
    base = rung(step(0.010, Verdict(level="ok")))
    quiet = step(0.020, Verdict(level="ok"))
    loaded = step(0.020, Verdict(level="invalid", reasons=["samples split into two clusters"]))
    judged = efficiency(base, quiet, 8)
    assert judged is not None and judged.verdict == "SLOWER"
    assert efficiency(base, loaded, 8) is None
    assert efficiency(rung(loaded), quiet, 8) is None
