"""Terminal view of `torchmark model` (batch sweep, break-even, cost): a pure function of
the stored RunRecord that fits the console's width (``report.layout``)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.report.table import (
    Footnotes,
    ceiling_cell,
    flag_words,
    spread_cell,
    verdict_word,
)
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


@dataclass(frozen=True)
class SweepRow:
    """One result of a model run as both views print it (terminal and HTML): each cell's
    text, from ``sweep_rows``, the one function that reads the figures."""

    result: Result
    device: str
    view: str
    batch: str
    median: str
    spread: str
    items_per_s: str
    mfu: str  # % of the peak its FLOPs run against, e.g. "54.2 % fp32"
    j_per_item: str
    cost: str  # per million items, "" unpriced, "no price" for a device not priced


def sweep_rows(record: RunRecord) -> list[SweepRow]:
    """Every result of a ``model`` run: median, spread, items/s, MFU, energy and cost per
    item where measured (pure: the stored record alone)."""
    payload = record.payload
    cost = payload.cost if isinstance(payload, ModelPayload) else None
    cost_rows: dict[tuple[str, object], CostRow] = {
        (row.device, row.batch): row for row in (cost.rows if cost else [])
    }
    out = []
    for r in record.results:
        b = r.params.get("batch")
        energy = r.extra.get("energy") or {}
        jpi = energy.get("j_per_item") if energy.get("available") else None
        price = ""
        if cost_rows:
            c = cost_rows.get((r.device, b))
            price = "no price" if c is None else fmt.sig(c.cost_per_million, 4)
        out.append(
            SweepRow(
                result=r,
                device=r.device,
                view=r.variant,
                batch=str(b),
                median=fmt.duration(r.median_s) if r.ok else r.status,
                spread=spread_cell(r),
                items_per_s=fmt.si(r.rate("items"), f"{r.work.item_unit}/s").removesuffix(
                    f" {r.work.item_unit}/s"
                )
                if r.ok
                else fmt.DASH,
                mfu=_mfu(r),
                j_per_item="" if jpi is None else fmt.sig(jpi),
                cost=price if r.ok else "",
            )
        )
    return out


def _mfu(r: Result) -> str:
    """``54.2 % fp32``; "" where unknown; the verdict's word where it rejects the number."""
    if not r.ok or r.ceiling is None:
        return ""
    if "above_ceiling" in r.flags and not verdicts.may(r, "compare"):
        return verdicts.rule_of(r).word  # above the peak: a measurement error, not a figure
    return ceiling_cell(r, short=True)


def mfu_lines(record: RunRecord) -> list[str]:
    """What each device's MFU divides by: the measured peak, and where it came from
    (measured in this run, or reused from the cache: ``report.rows.origin``); or why a
    model run has no MFU."""
    from torchmark.report.rows import origin

    keys = {(r.device, r.ceiling.key): r.ceiling for r in record.results if r.ceiling}
    out = []
    for (device, _key), c in keys.items():
        stored = record.ceiling(device, c.key) or c
        where = origin(stored, record)
        out.append(
            f"MFU on {device}: % of its measured {c.key} peak ({fmt.ceiling_value(stored)}), "
            "the dtype most of the model's FLOPs run in"
            + (
                " (an fp32 GEMM or convolution runs as TF32 where torch allows it)"
                if c.key == "matmul:tf32"
                else ""
            )
            + (f"; {where}" if where else "")
        )
    measured = [r for r in record.results if r.ok]
    if measured and not keys:
        payload = record.payload
        info = payload.model if isinstance(payload, ModelPayload) else None
        if info is not None and not info.flops_per_item:
            out.append("MFU: not available (torch's FLOP counter counted no FLOPs in the model)")
        elif not record.ceilings:
            out.append(
                "MFU: not available (no ceilings in this run: --no-ceilings, or measured "
                "before `model` measured them)"
            )
        else:
            out.append("MFU: not available (no measured peak for the model's dtype here)")
    return out


def cost_line(record: RunRecord) -> str | None:
    """``Cheaper per item: batch 1: cpu, batch 8: cuda:0`` (a priced run), else None."""
    payload = record.payload
    cost = payload.cost if isinstance(payload, ModelPayload) else None
    if not cost:
        return None
    if cost.cheaper:
        return "Cheaper per item: " + ", ".join(f"batch {b}: {d}" for b, d in cost.cheaper.items())
    return "Cost: only one priced device measured; nothing to compare"


def sweep_notes(record: RunRecord) -> list[str]:
    """The lines under the sweep: the views of time, energy that was not available, MFU."""
    views = dict.fromkeys(r.variant for r in record.results)
    said = [VIEWS[v] for v in views if v in VIEWS]
    text = ["view: " + "; ".join(said)] if said else []
    energy_reasons = {
        r.device: (r.extra.get("energy") or {}).get("reason")
        for r in record.results
        if r.ok and not (r.extra.get("energy") or {}).get("available", True)
    }
    text += [
        f"energy on {dev}: not available ({why})" for dev, why in energy_reasons.items() if why
    ]
    return text + mfu_lines(record)


def sweep_table(record: RunRecord, notes: Footnotes | None = None) -> FitTable:
    """One row per device, view and batch: median time per call, its spread, items/s,
    MFU, energy and cost per item where measured (``sweep_rows``)."""
    notes = notes if notes is not None else Footnotes()
    rows = sweep_rows(record)
    devices = list(dict.fromkeys(r.device for r in rows))
    t = FitTable(
        Col("device", show=len(devices) > 1),
        Col("view"),
        Col("batch", justify="right"),
        Col("median", justify="right"),
        Col("±IQR", justify="right"),
        Col("items/s", justify="right"),
        # % of the peak its FLOPs run against: the figure that says how well the model uses
        # the hardware, kept (stacked) rather than dropped
        Col("MFU", justify="right", drop=4, vital=True),
        # the energy a GPU measured per item outlasts its price at a guessed $/kWh
        Col("J/item", justify="right", drop=3, vital=True),
        Col("cost/M items", justify="right", short_header="cost/M", drop=2),
        Col("flags", wrap=10, shorten=1),
        title="Batch sweep: median time per call"
        + (f" on {devices[0]}" if len(devices) == 1 else ""),
    )
    for row in rows:
        t.row(
            row.device,
            row.view,
            row.batch,
            row.median,
            row.spread,
            row.items_per_s,
            row.mfu,
            row.j_per_item,
            row.cost,
            _flags(row.result, notes),
        )
    return t


@dataclass(frozen=True)
class BreakEvenLine:
    """One accelerator's break-even as both views print it."""

    gpu: str
    label: str
    e2e: str
    device: str
    batches: str
    notes: str


def breakeven_lines(record: RunRecord) -> list[BreakEvenLine]:
    """Per accelerator: the batch from which it beats the CPU, per view of time."""
    from torchmark.user import breakeven

    payload = record.payload
    be = payload.break_even if isinstance(payload, ModelPayload) else None
    return [
        BreakEvenLine(
            gpu,
            e.label or gpu,
            breakeven.describe(e.e2e),
            breakeven.describe(e.device),
            f"{e.range[0]}..{e.range[1]}" if e.range else fmt.DASH,
            "; ".join(e.notes),
        )
        for gpu, e in (be or {}).items()
    ]


def breakeven_table(record: RunRecord) -> FitTable | None:
    found = breakeven_lines(record)
    if not found:
        return None
    t = FitTable(
        Col("GPU", shorten=1),
        Col("end-to-end", wrap=10),
        Col("device-only", wrap=10),
        Col("batches tried", short_header="batches", justify="right", shorten=1),
        Col("notes", wrap=12, drop=1),
        title=BREAKEVEN_TITLE,
    )
    for line in found:
        t.row(
            Alt(f"{line.gpu} ({line.label})", line.gpu),
            line.e2e,
            line.device,
            line.batches,
            line.notes,
        )
    return t


BREAKEVEN_TITLE = "Break-even: batch from which the GPU beats the CPU"


def model_view(record: RunRecord) -> list[RenderableType]:
    """What ``torchmark model`` prints: the sweep, its footnotes, energy, MFU, break-even,
    cost."""
    notes = Footnotes()
    out: list[RenderableType] = [sweep_table(record, notes)]
    text = notes.lines() + sweep_notes(record)
    payload = record.payload
    be = breakeven_table(record)
    if be is None:
        from torchmark.user.breakeven import NO_GPU

        note = payload.break_even_note if isinstance(payload, ModelPayload) else None
        text.append(note or NO_GPU)
    out.append(lines(text))
    if be is not None:
        out.append(be)
    line = cost_line(record)
    if line:
        out.append(Text(line))
    return out
