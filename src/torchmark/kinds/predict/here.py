"""Your model on the target (predicted) against this CPU (measured), batch by batch, and
the break-even batch: the smallest from which the target's whole predicted interval lies
below the CPU's measured confidence interval, at that batch and every larger one tried.
Pure: a stored model run and the predicted cases."""

from __future__ import annotations

from collections.abc import Sequence

from torchmark.judge import verdicts
from torchmark.results import Result, RunRecord
from torchmark.results.payloads import HereRow, PredictedCase


def _cpu_results(run: RunRecord, workload: str) -> dict[int, Result]:
    out = {}
    for r in run.results:
        if r.device == "cpu" and r.workload == workload and r.ok:
            b = r.params.get("batch")
            if isinstance(b, int):
                out[b] = r
    return out


def compare(cases: Sequence[PredictedCase], run: RunRecord, workload: str) -> list[HereRow]:
    """One row per predicted batch: the CPU's measured median with its 95 % CI, the
    target's predicted interval (the end-to-end view where one was predicted: inputs copied
    in, outputs back, as the CPU's own step), and which is faster beyond both."""
    cpu = _cpu_results(run, workload)
    views = {c.variant for c in cases}
    view = "e2e" if "e2e" in views else next(iter(views), "device")
    rows = []
    for c in cases:
        if c.variant != view:
            continue
        b = int(c.params.get("batch", c.items))
        r = cpu.get(b)
        ci = r.ci_median_s if r is not None else None
        row = HereRow(batch=b, view=view)
        if r is not None and not verdicts.may(r, "compare"):  # its verdict rejects it
            row.verdict = f"CPU result {verdicts.rule_of(r).word}: not compared"
        elif r is not None:
            row.cpu_s = r.median_s
            row.cpu_low, row.cpu_high = (ci[0], ci[1]) if ci else (r.median_s, r.median_s)
        if c.predicted:
            row.target_s, row.target_low, row.target_high = c.seconds, c.low, c.high
        if row.verdict == "n/a":
            row.verdict = _verdict(row)
        rows.append(row)
    return sorted(rows, key=lambda x: x.batch)


def _verdict(row: HereRow) -> str:
    if row.cpu_s is None or row.cpu_low is None or row.cpu_high is None:
        return "CPU not measured"
    if row.target_low is None or row.target_high is None:
        return "not predicted"
    if row.target_high < row.cpu_low:
        return "target faster"
    if row.target_low > row.cpu_high:
        return "CPU faster"
    return "can't tell"


def break_even(rows: Sequence[HereRow], target: str) -> str:
    """The batch from which the target wins, in words."""
    judged = [r for r in rows if r.verdict in ("target faster", "CPU faster", "can't tell")]
    if not judged:
        return "break-even: not known (no batch both measured here and predicted)"
    tried = f"batches {judged[0].batch}..{judged[-1].batch} tried"
    wins = [r.verdict == "target faster" for r in judged]
    if all(wins):
        return f"break-even: {target} is predicted faster at every batch ({tried})"
    if not any(wins):
        unsure = any(r.verdict == "can't tell" for r in judged)
        said = "can't tell at some batches" if unsure else "the CPU is faster at every batch"
        return f"break-even: none in the range ({said}; {tried})"
    last_loss = max(i for i, w in enumerate(wins) if not w)
    if last_loss == len(wins) - 1:
        return f"break-even: not in the range ({tried}: the largest batch is not a win)"
    b = judged[last_loss + 1].batch
    return f"break-even: from batch {b}, {target} is predicted faster beyond both intervals"
