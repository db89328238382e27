"""Terminal view of `torchmark model` (batch sweep, break-even, cost): a pure function of
the stored RunRecord that fits the console's width (``report.layout``)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.report.table import Footnotes, flag_words, spread_cell, verdict_word
from torchmark.results import Result, RunRecord
from torchmark.results.payloads import CostRow, ModelPayload

VIEWS = {
    "e2e": "e2e = host tensors in and out",
    "device": "device = inputs already on the device",
}


def _flags(r: Result, notes: Footnotes) -> Alt:
    refs = notes.refs(r)
    if not r.ok:
        return Alt(refs.strip(), refs.strip())
    return Alt(", ".join(flag_words(r)) + refs, (verdict_word(r) + refs).strip())


def sweep_table(record: RunRecord, notes: Footnotes | None = None) -> FitTable:
    """One row per device, view and batch: median time per call, its spread, items/s,
    energy and cost per item where measured."""
    notes = notes if notes is not None else Footnotes()
    payload = record.payload
    cost = payload.cost if isinstance(payload, ModelPayload) else None
    cost_rows: dict[tuple[str, object], CostRow] = {
        (row.device, row.batch): row for row in (cost.rows if cost else [])
    }
    devices = list(dict.fromkeys(r.device for r in record.results))
    t = FitTable(
        Col("device", show=len(devices) > 1),
        Col("view"),
        Col("batch", justify="right"),
        Col("median", justify="right"),
        Col("±IQR", justify="right"),
        Col("items/s", justify="right"),
        # the energy a GPU measured per item outlasts its price at a guessed $/kWh
        Col("J/item", justify="right", drop=3, vital=True),
        Col("cost/M items", justify="right", short_header="cost/M", drop=2),
        Col("flags", wrap=10, shorten=1),
        title="Batch sweep: median time per call"
        + (f" on {devices[0]}" if len(devices) == 1 else ""),
    )
    for r in record.results:
        b = r.params.get("batch")
        energy = r.extra.get("energy") or {}
        jpi = energy.get("j_per_item") if energy.get("available") else None
        price = ""
        if cost_rows:
            c = cost_rows.get((r.device, b))
            price = "no price" if c is None else fmt.sig(c.cost_per_million, 4)
        t.row(
            r.device,
            r.variant,
            str(b),
            fmt.duration(r.median_s) if r.ok else r.status,
            spread_cell(r),
            fmt.si(r.rate("items"), f"{r.work.item_unit}/s").removesuffix(f" {r.work.item_unit}/s")
            if r.ok
            else fmt.DASH,
            "" if jpi is None else fmt.sig(jpi),
            price if r.ok else "",
            _flags(r, notes),
        )
    return t


def breakeven_table(record: RunRecord) -> FitTable | None:
    from torchmark.user import breakeven

    payload = record.payload
    be = payload.break_even if isinstance(payload, ModelPayload) else None
    if not be:
        return None
    t = FitTable(
        Col("GPU", shorten=1),
        Col("end-to-end", wrap=10),
        Col("device-only", wrap=10),
        Col("batches tried", short_header="batches", justify="right", shorten=1),
        Col("notes", wrap=12, drop=1),
        title="Break-even: batch from which the GPU beats the CPU",
    )
    for gpu, e in be.items():
        rng = e.range
        t.row(
            Alt(f"{gpu} ({e.label or gpu})", gpu),
            breakeven.describe(e.e2e),
            breakeven.describe(e.device),
            f"{rng[0]}..{rng[1]}" if rng else fmt.DASH,
            "; ".join(e.notes),
        )
    return t


def model_view(record: RunRecord) -> list[RenderableType]:
    """What ``torchmark model`` prints: the sweep, its footnotes, energy, break-even, cost."""
    notes = Footnotes()
    out: list[RenderableType] = [sweep_table(record, notes)]
    views = dict.fromkeys(r.variant for r in record.results)
    said = [VIEWS[v] for v in views if v in VIEWS]
    text = notes.lines() + (["view: " + "; ".join(said)] if said else [])
    energy_reasons = {
        r.device: (r.extra.get("energy") or {}).get("reason")
        for r in record.results
        if r.ok and not (r.extra.get("energy") or {}).get("available", True)
    }
    text += [
        f"energy on {dev}: not available ({why})" for dev, why in energy_reasons.items() if why
    ]
    payload = record.payload
    be = breakeven_table(record)
    if be is None:
        from torchmark.user.breakeven import NO_GPU

        note = payload.break_even_note if isinstance(payload, ModelPayload) else None
        text.append(note or NO_GPU)
    out.append(lines(text))
    if be is not None:
        out.append(be)
    cost = payload.cost if isinstance(payload, ModelPayload) else None
    if cost:
        if cost.cheaper:
            cheaper = ", ".join(f"batch {b}: {d}" for b, d in cost.cheaper.items())
            out.append(Text(f"Cheaper per item: {cheaper}"))
        else:
            out.append(Text("Cost: only one priced device measured; nothing to compare"))
    return out
