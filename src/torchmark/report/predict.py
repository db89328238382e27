"""A stored prediction (``torchmark predict``) in the terminal, and a prediction beside a
measured run (``compare``): every predicted figure with its interval and its dominant
term, marked predicted. Pure functions of stored runs; no torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.results import Result, RunRecord, is_host
from torchmark.results.payloads import Measured, PredictedCase, PredictPayload

# What sets a predicted call's time, in words.
TERM_WORDS = {
    "compute": "compute (the GPU's or CPU's matmul peak at the learned efficiency)",
    "memory": "memory (bandwidth at the learned streaming efficiency)",
    "launch": "launch/host (Python, dispatch and kernel launches on the host set the pace)",
    "transfer": "transfer (inputs copied in and outputs back over the measured link)",
}
SHORT = {"launch": "launch/host"}
FOOTER = (
    "Predicted, not measured (METHOD.md §5): never ranked, compared as faster or slower, "
    "averaged or submitted. How close predictions come: docs/your-model.md (leave-one-out on "
    "the committed H100/H200 runs)."
)


def payload(record: RunRecord) -> PredictPayload | None:
    return record.payload if isinstance(record.payload, PredictPayload) else None


def span(c: PredictedCase) -> str:
    """``62.1 µs - 148 µs``: where the measured time should fall."""
    return f"{fmt.duration(c.low)} - {fmt.duration(c.high)}"


def rate_span(c: PredictedCase) -> str:
    """Items per second over the interval, slowest first."""
    if not c.low or not c.high:
        return fmt.DASH
    return f"{fmt.si(c.items / c.high)} - {fmt.si(c.items / c.low)}"


def measured_words(m: Measured | None) -> str:
    if m is None:
        return ""
    where = "inside" if m.inside else "OUTSIDE"
    return f"{fmt.duration(m.measured_s)}, {where} ({m.error_pct:+.0f} %)"


def title(record: RunRecord) -> str:
    p = payload(record)
    if p is None or p.target is None:
        return "Predicted, not measured"
    t = p.target
    side = "its host CPU" if t.side == "cpu" else t.device
    return (
        f"Predicted, not measured: {p.model} on {t.model} ({side} of {t.name}, a "
        f"{t.source}{f', {t.threads} threads' if t.side == 'cpu' and t.threads else ''})"
    )


def cases_table(record: RunRecord) -> FitTable:
    p = payload(record)
    cases = p.cases if p is not None else []
    measured = {m.case: m for m in (p.measured if p is not None else [])}
    t = FitTable(
        Col("case", wrap=16),
        Col("per call", justify="right"),
        Col("interval", justify="right", vital=True),
        Col("items/s", justify="right", drop=1),
        Col("bound by", shorten=1, vital=True),
        Col("measured there", drop=2),
        title="Per call on the target (predicted)",
    )
    for c in cases:
        if not c.predicted:
            t.row(c.case, "not predicted", "", "", "", "")
            continue
        dom = c.dominant or ""
        t.row(
            c.case,
            fmt.duration(c.seconds),
            span(c),
            rate_span(c),
            Alt(TERM_WORDS.get(dom, dom).split(" (")[0], SHORT.get(dom, dom)),
            measured_words(measured.get(c.case)),
        )
    return t


def calibration_line(record: RunRecord) -> str | None:
    p = payload(record)
    if p is None or p.target is None or not p.target.calibration:
        return None
    cal = p.target.calibration
    eff = ", ".join(f"{k} {v:.2f}" for k, v in sorted((cal.get("e_c") or {}).items()))
    h = cal.get("h_s")
    host = (
        f"; host {fmt.duration(h)} per launch (from {', '.join(cal.get('h_cases') or [])})"
        if h
        else "; no host time per launch (no launch-bound model case)"
    )
    return (
        f"learned from {p.target.name}: matmul efficiency {eff or 'none measured'}; streaming "
        f"{cal.get('e_m', 1.0):.2f}{host}"
    )


def predict_view(record: RunRecord) -> list[RenderableType]:
    """What ``torchmark predict`` prints: the cases with their intervals and dominant
    terms, why any was not predicted, the basis, predicted vs measured, your CPU."""
    p = payload(record)
    out: list[RenderableType] = [Text(title(record), style="bold")]
    if p is None:
        return out
    out.append(cases_table(record))
    out.append(lines([n for n in notes(record) if n != p.break_even]))
    if p.here:
        out.append(here_table(record))
        out.append(lines([p.break_even or ""]))
    out.append(Text(FOOTER, style="dim"))
    return out


def here_table(record: RunRecord) -> FitTable:
    p = payload(record)
    rows = p.here if p is not None else []
    target = p.target.model if p is not None and p.target is not None else "target"
    t = FitTable(
        Col("batch", justify="right"),
        # the interval and the verdict's reason wrap rather than end in "..." at 80 columns
        Col("this CPU (measured)", justify="right", short_header="CPU", wrap=18),
        Col(f"{target} (predicted)", justify="right", short_header="target", wrap=18),
        Col("verdict", wrap=16),
        title=f"Your model: this CPU (measured) vs {target} (predicted), "
        f"{rows[0].view if rows else 'e2e'} view",
    )
    for r in rows:
        # the figure, then its interval on a line of its own: never cut, never split
        cpu = _within(r.cpu_s, r.cpu_low, r.cpu_high, "\n", "not measured")
        tgt = _within(r.target_s, r.target_low, r.target_high, "\n", "not predicted")
        t.row(str(r.batch), cpu, tgt, r.verdict)
    return t


def _within(s: float | None, low: float | None, high: float | None, gap: str, none: str) -> str:
    """``2.1 ms (1.9 ms - 2.4 ms)``: a time and its interval, ``gap`` between; else ``none``."""
    if s is None:
        return none
    return f"{fmt.duration(s)}{gap}({fmt.duration(low)} - {fmt.duration(high)})"


# -- compare: a prediction beside measured runs --------------------------------------------


def _match(c: PredictedCase, run: RunRecord) -> Result | None:
    side = c.side
    for r in run.results:
        if (("cpu" if is_host(r.device) else "gpu") != side or r.workload != c.workload
                or r.variant != c.variant or not r.ok):  # fmt: skip
            continue
        if all(str(r.params.get(k)) == str(v) for k, v in c.params.items()):
            return r
    return None


def compare_view(records: Sequence[RunRecord]) -> list[RenderableType]:
    """Each prediction's cases beside the same cases of the measured runs: the measured
    median and whether it falls inside the predicted interval, the one verdict a
    prediction gets (never FASTER or SLOWER: it is not a measurement)."""
    preds = [r for r in records if verdicts.is_prediction(r.kind)]
    runs = [r for r in records if not verdicts.is_prediction(r.kind)]
    out: list[RenderableType] = []
    for pr in preds:
        p = payload(pr)
        if p is None:
            continue
        t = FitTable(
            Col("case", wrap=16),
            Col(f"{pr.run_id or 'prediction'} (predicted)", justify="right",
                short_header="predicted"),
            *(Col(f"{r.run_id or 'run'}", justify="right") for r in runs),
            Col("verdict", wrap=12),
            title=title(pr),
        )  # fmt: skip
        for c in p.cases:
            if not c.predicted:
                continue
            cells, said = [], []
            for r in runs:
                m = _match(c, r)
                if m is None:
                    cells.append("not measured")
                    continue
                if not verdicts.may(m, "compare"):
                    cells.append(verdicts.rule_of(m).word)
                    said.append(f"{r.run_id}: {verdicts.says(m)}")
                    continue
                cells.append(fmt.duration(m.median_s))
                assert c.low is not None and c.high is not None and m.median_s is not None
                inside = c.low <= m.median_s <= c.high
                said.append(f"{r.run_id}: {'inside' if inside else 'OUTSIDE'} the interval")
            t.row(c.case, f"{fmt.duration(c.seconds)} ({span(c)})", *cells, "; ".join(said))
        out.append(t)
    out.append(
        Text(
            "A predicted column is never compared as FASTER or SLOWER: its one verdict is whether "
            "the measured median falls inside its interval (judge.verdicts: predicted).",
            style="dim",
        )
    )
    return out


# -- Markdown and HTML: the same figures ----------------------------------------------------


def rows(record: RunRecord) -> list[dict[str, str]]:
    """Each case's cells, as every view of a prediction prints them."""
    p = payload(record)
    if p is None:
        return []
    measured = {m.case: m for m in p.measured}
    out = []
    for c in p.cases:
        dom = c.dominant or ""
        out.append(
            {
                "case": c.case,
                "per_call": fmt.duration(c.seconds) if c.predicted else "not predicted",
                "interval": span(c) if c.predicted else "",
                "items": rate_span(c) if c.predicted else "",
                "bound": SHORT.get(dom, dom) if c.predicted else "",
                "measured": measured_words(measured.get(c.case)),
            }
        )
    return out


def notes(record: RunRecord) -> list[str]:
    """The lines under the table: refusals, terms, basis, interval, calibration, CPU."""
    p = payload(record)
    if p is None:
        return []
    text = [f"{c.case}: not predicted: {c.refused}" for c in p.cases if c.refused]
    for dom in dict.fromkeys(c.dominant for c in p.cases if c.predicted and c.dominant):
        text.append(f"bound by {TERM_WORDS.get(dom, dom)}")
    text += [f"basis: {b}" for b in dict.fromkeys(c.basis for c in p.cases if c.basis)]
    text += [
        f"interval: {b}"
        for b in dict.fromkeys(c.interval_basis for c in p.cases if c.interval_basis)
    ]
    if any(c.dominant == "launch" for c in p.cases if c.predicted):
        text.append(HOST_NOTE)
    line = calibration_line(record)
    if line:
        text.append(line)
    if p.measured:
        inside = sum(m.inside for m in p.measured)
        text.append(f"measured there: {inside} of {len(p.measured)} inside the interval")
        text += [f"  {m.case}: measured in {m.source}" for m in p.measured]
    if p.break_even:
        text.append(p.break_even)
    return text + [f"note: {n}" for n in p.notes]


HOST_NOTE = (
    "launch/host-bound: such a call runs at the speed of the target machine's host CPU, not "
    "its GPU; the same GPU behind a slower host runs it slower (docs/your-model.md)"
)


def markdown_lines(
    record: RunRecord, cell: Callable[[str], str], text: Callable[[str], str]
) -> list[str]:
    """A prediction as Markdown: its title, the cases table (marked predicted), the lines."""
    out = [
        text(title(record)),
        "",
        "| Case (predicted) | Per call | Interval | Items/s | Bound by | Measured there |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows(record):
        out.append(
            "| " + " | ".join(cell(r[k]) for k in ("case", "per_call", "interval", "items",
                                                   "bound", "measured")) + " |"
        )  # fmt: skip
    out += ["", *(text(n) + "  " for n in notes(record)), "", text(FOOTER)]
    return out


def html_context(record: RunRecord) -> dict[str, Any] | None:
    """A prediction's section of the HTML report."""
    p = payload(record)
    if p is None:
        return None
    here = [
        {
            "batch": r.batch,
            "cpu": _within(r.cpu_s, r.cpu_low, r.cpu_high, " ", "not measured"),
            "target": _within(r.target_s, r.target_low, r.target_high, " ", "not predicted"),
            "verdict": r.verdict,
        }
        for r in p.here
    ]
    return {"title": title(record), "rows": rows(record), "notes": notes(record),
            "here": here, "footer": FOOTER}  # fmt: skip
