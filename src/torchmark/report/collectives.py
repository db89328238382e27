"""The collectives of a run as nccl-tests prints them: size, time, algbw, busbw."""

from __future__ import annotations

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.layout import Col, FitTable
from torchmark.results import RunRecord


def busbw_table(record: RunRecord) -> FitTable | None:
    """One row per measured collective case; None when the run has none. A case its verdict
    rejects (invalid: a scheduler artefact of the ranks under load) reads its verdict's word,
    never its number (``verdicts``)."""
    rows = [r for r in record.results if r.workload == "collectives" and r.status == "ok"]
    rows = [r for r in rows if "busbw_Bps" in r.extra]
    if not rows:
        return None
    ranks = rows[0].extra.get("ranks")
    backend = rows[0].extra.get("backend")
    t = FitTable(
        Col("op"),
        Col("size", justify="right"),
        Col("time", justify="right"),
        Col("algbw", justify="right"),
        Col("busbw", justify="right"),
        title=f"collectives over {ranks} ranks ({backend}; time = slowest rank's median)",
    )
    for r in rows:
        size = fmt.binary_bytes(int(r.params["bytes"]))
        if not verdicts.may(r, "compare"):  # its number is a measurement error: never shown
            t.row(r.variant, size, verdicts.rule_of(r).word, fmt.DASH, fmt.DASH)
            continue
        t.row(
            r.variant,
            size,
            fmt.duration(r.median_s),
            fmt.si(r.extra["algbw_Bps"], "B/s"),
            fmt.si(r.extra["busbw_Bps"], "B/s"),
        )
    return t


__all__ = ["busbw_table"]
