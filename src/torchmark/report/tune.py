"""Terminal view of `torchmark tune` (ranked candidates, recommendation): a pure function of
the stored RunRecord that fits the console's width (``report.layout``)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.report.table import Footnotes
from torchmark.results import RunRecord
from torchmark.results.payloads import BestThroughput, TunePayload

__all__ = ["tune_table", "tune_view"]


STATUS_STYLE = {"faster": "green", "rejected": "red", "slower": "yellow"}


def tune_table(record: RunRecord, notes: Footnotes | None = None) -> FitTable:
    """Candidates ranked per device: status, speedup over the baseline, latency, spread;
    why a candidate was skipped or rejected is a footnote."""
    notes = notes if notes is not None else Footnotes()
    cands = record.payload.candidates if isinstance(record.payload, TunePayload) else []
    devices = list(dict.fromkeys(c.device for c in cands))
    paired = any(c.baseline_ms is not None for c in cands)
    t = FitTable(
        Col("device", show=len(devices) > 1),
        Col("candidate", wrap=14),
        Col("status"),
        Col("speedup", justify="right"),
        Col("latency", justify="right"),
        # the baseline's median over the candidate's own interleaved rounds: the speedup is
        # baseline / latency of the same row (under drift it differs from the baseline row's)
        Col("baseline", justify="right", short_header="base", show=paired),
        Col("±IQR", justify="right", drop=3, vital=True),
        Col("max error", justify="right", shorten=2, drop=4, vital=True),
        Col("notes", wrap=12),
        title="Candidates, ranked (speedup over the baseline)"
        + (f" on {devices[0]}" if len(devices) == 1 else ""),
    )
    for c in cands:
        err = c.max_error
        why = [c.reason] if c.reason else []
        items = c.items_ratio or 1
        if items != 1 and c.speedup is not None:
            why.append(
                f"{c.name}: {items:g}x the batch per call, so the speedup is per item: "
                f"{items:g} x baseline / latency"
            )
        if c.compile_s:
            why.append(f"{c.name}: torch.compile took {fmt.duration(c.compile_s)}")
        refs = sorted({notes.ref(w) for w in why})
        note = f"[{','.join(map(str, refs))}]" if refs else ""
        t.row(
            c.device,
            c.name,
            Text(c.status, style=STATUS_STYLE.get(c.status, "")),
            fmt.ratio(c.speedup) if c.speedup is not None else fmt.DASH,
            fmt.duration(c.latency_ms / 1e3) if c.latency_ms is not None else fmt.DASH,
            fmt.duration(c.baseline_ms / 1e3) if c.baseline_ms else fmt.DASH,
            fmt.pct(100 * c.rel_iqr, digits=2) if c.rel_iqr is not None else fmt.DASH,
            Alt(
                f"{err:.2g} (tol {c.tolerance or 0:g})" if err is not None else fmt.DASH,
                f"{err:.2g}" if err is not None else fmt.DASH,
            ),
            note,
        )
    return t


def tune_view(record: RunRecord) -> list[RenderableType]:
    """What ``torchmark tune`` prints: the ranked candidates, notes, and per device the
    recommendation with the code that applies it."""
    notes = Footnotes()
    out: list[RenderableType] = [tune_table(record, notes)]
    said = notes.lines() + [f"note: {n}" for n in record.payload.notes]
    if said:
        out.append(lines(said))
    recs = record.payload.recommendation if isinstance(record.payload, TunePayload) else {}
    for dev, rec in recs.items():
        sp = rec.speedup
        why = f" ({rec.reason})" if rec.reason else ""
        head = Text.assemble(
            "\n",
            (f"Recommended on {dev}:", "bold"),
            f" {rec.name}" + (f", {fmt.ratio(sp)} the baseline" if sp else "") + why,
        )
        out.append(head)
        out.append(Text("\n".join(rec.code)))
    best_rates = record.payload.throughput if isinstance(record.payload, TunePayload) else {}
    for dev, best in best_rates.items():
        out.append(
            Text.assemble(
                "\n", (f"Best throughput on {dev}:", "bold"), " " + throughput_words(best)
            )
        )
        out.append(Text("\n".join(best.code)))
        if best.passed_over:
            out.append(lines([f"note: {w}" for w in best.passed_over]))
    return out


def throughput_words(best: BestThroughput) -> str:
    """tune's second answer in words: the batch with the most items/s and what it costs."""
    base_ms, base_b = best.baseline_latency_ms or 0.0, best.baseline_batch
    if not best.speedup or best.speedup == 1.0:
        return (
            f"{best.name} at batch {best.batch}: no larger batch moved more items per "
            "second beyond the noise"
        )
    rate = best.items_per_s
    return (
        f"{best.name}, {fmt.ratio(best.speedup)} the baseline's items/s"
        + (f" ({fmt.si(rate, 'item/s')})" if rate else "")
        + f"; each call of batch {best.batch} then takes "
        f"{fmt.duration(best.latency_ms / 1e3)} (the baseline's at batch {base_b}: "
        f"{fmt.duration(base_ms / 1e3)})"
    )
