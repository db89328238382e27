"""A stored ``profile`` run as terminal tables: the breakdown, top ops, verdict and rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.kinds.profile.names import op_labels
from torchmark.report.layout import Alt, Col, FitTable
from torchmark.results import RunRecord
from torchmark.results.payloads import (
    Advice,
    Checked,
    Launches,
    MemoryAtPeak,
    OpRow,
    ProfilePayload,
    ProfileSummary,
    Schedule,
)

BAR = 20  # characters of the share bar at 100 %
# Past this the profiler's own cost is a large part of each small op's time: said next to
# the breakdown (linear10 here: 9 µs unprofiled, ~50 µs profiled).
OVERHEAD_WARN_PCT = 25.0


# The op column's narrow form: at 80 columns the other columns of the top-ops table need
# ~43-46 (calls 5, self/step 9, share 7, % ceil 6-9, bound 7-8, gaps 10), which leaves this.
OP_WIDTH = 34


def op_cell(short: str) -> Alt:
    """An op's label, and for a narrow table the same on lines of at most ``OP_WIDTH``
    (broken before its template argument, each line cut with …)."""
    if len(short) <= OP_WIDTH or (" " in short and "<" not in short):
        return Alt(short, short)  # fits, or wraps at its spaces
    head, sep, rest = short.partition("<")
    lines = [head, "  " + sep + rest] if sep and head else [short]
    return Alt(short, "\n".join(_cut(line, OP_WIDTH) for line in lines))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


RULES_SHORT = {
    "cpu": "each instant goes to the innermost op on the step's thread, its name tried "
    "against regexes for matmul/conv, reductions, memory ops, elementwise, then framework; "
    "inside no op is Python",
    "gpu": "each instant goes to the highest active of compute > communication > memcpy > "
    "memset on any stream; sync events are never compute; idle is host-wait when the next "
    "launch came after the GPU went idle, else kernel-wait",
}


def overhead_line(p: ProfileSummary) -> str:
    prof, plain, over = p.profiled_step_s, p.unprofiled_median_s, p.overhead_pct
    mean = p.profiled_mean_s
    line = (
        f"profiled step median {fmt.duration(prof)} of {p.steps}"
        + (f" (mean {fmt.duration(mean)}: the breakdown's step)" if mean else "")
        + f" vs unprofiled median {fmt.duration(plain)}: profiler overhead "
    )
    if over is None:
        return line + "unknown"
    if p.under_load:  # the verdict says whose load
        return line + f"{over:+.0f} %, can't tell under load (see the verdict)"
    spread = p.spread_pct
    if spread is None:
        if (p.schedule.requested or 0) > p.schedule.active:  # cut for a long step
            return line + f"{over:+.0f} % (its noise is not known: under 4 steps, see the notes)"
        return line + f"{over:+.0f} % (its noise is not known: give 4 or more --steps)"
    if abs(over) <= spread:
        return line + (
            f"can't tell ({over:+.0f} %, within the {_spread_words(p, spread)}: the machine was "
            "noisy; run again on a quiet one)"
        )
    line += f"{over:+.0f} %"
    busy = p.device_busy_s
    if over > OVERHEAD_WARN_PCT and p.kind == "gpu":
        line += (
            "; the profiler slows the host (it traces every launch), so idle: host-wait is inflated"
        )
        if busy and plain:
            line += (
                f": the GPU's work, {fmt.duration(busy)} per step, fills "
                f"{100 * busy / plain:.0f} % of the unprofiled step"
            )
    elif over > OVERHEAD_WARN_PCT:
        line += (
            "; the profiler's own cost per op lands mostly in framework and Python time, "
            "so their shares are inflated"
        )
    return line


def _spread_words(p: ProfileSummary, spread: float) -> str:
    prof, plain = p.profiled_spread_pct, p.unprofiled_spread_pct
    if prof is None and plain is None:  # stored before the two were kept apart
        return f"{spread:.0f} % spread (IQR / median) of the step times"
    parts = [
        f"{v:.0f} % {what}"
        for v, what in ((prof, "profiled"), (plain, "unprofiled"))
        if v is not None
    ]
    return "step times' spread, IQR / median: " + ", ".join(parts)


ABOVE_NOTE = (
    "{n} op(s) above 100 % of the measured ceiling: the bandwidth ceiling is main memory's "
    "and an op whose data fits in cache moves it faster; a ceiling measured while other "
    "processes ran may be low (see the ceilings' notes)"
)


def launch_line(lx: Launches) -> str:
    return (
        f"launches: {lx.per_step:.3g} per step; each launch call takes "
        f"{fmt.duration(lx.launch_us_median / 1e6)} on the host and the GPU starts it "
        f"{fmt.duration(lx.queue_us_median / 1e6)} after the call returns (medians)"
    )


def memory_line(p: ProfileSummary) -> str | None:
    parts = []
    sm = p.step_memory
    if sm:
        n = len(sm.steps)
        line = f"device peak per step (allocator, reset before each of {n}): allocated " + fmt.si(
            sm.peak_allocated_bytes, "B"
        )
        if sm.peak_reserved_bytes is not None:
            line += f", reserved {fmt.si(sm.peak_reserved_bytes, 'B')}"
        if n > 1:
            line += (
                f" (step {sm.largest_step}, the largest; the smallest step's allocated "
                f"peak {fmt.si(sm.smallest_allocated_bytes, 'B')})"
            )
        parts.append(line)
    elif p.device_peak_bytes:
        parts.append(f"device peak allocated {fmt.si(p.device_peak_bytes, 'B')} while profiled")
    if p.host_rss_peak_bytes:
        parts.append(f"host RSS peak {fmt.si(p.host_rss_peak_bytes, 'B')} (the process's)")
    return "memory: " + "; ".join(parts) if parts else None


def checked_words(ck: Checked | None) -> str:
    """A checked variant's outcome, against the profiled case's unprofiled median."""
    if not ck:
        return ""
    if ck.status != "ok":
        return f"not measured: {ck.status} ({ck.reason or 'no reason given'})"
    speed, verdict = ck.speed, ck.verdict
    if speed is None or verdict == "UNCLEAR":
        return "measured: can't tell" + (f" ({speed:.2f}×; {ck.why})" if speed else "")
    if verdict == "SAME":
        return f"measured: no change that matters ({speed:.2f}×)"
    return f"measured: {speed:.2f}× ({'faster' if speed > 1 else 'slower'}, {verdict})"


def advice_lines(advice: Sequence[Advice]) -> list[str]:
    out = []
    for a in advice:
        out.append(f"- {a.variant}: {a.why}")
        if a.command:  # none where the change is in the user's model
            out.append(f"    $ {a.command}")
        if a.checked:
            out.append(f"    {checked_words(a.checked)}")
    return out


def memory_tables(mem: MemoryAtPeak | None) -> list[RenderableType]:
    """Memory by what it holds at the step's peak, or why it is not known."""
    if not mem:
        return []
    if mem.error is not None:
        return [Text(f"memory by category: not known ({mem.error})")]
    peak = mem.peak_bytes or 0
    t = FitTable(
        Col("holds", wrap=10),
        Col("at peak", justify="right"),
        Col("share", justify="right"),
        Col("own largest", justify="right", drop=1, short_header="largest"),
        Col("", drop=2),
        title=f"Memory at the step's peak, {fmt.si(peak, 'B')} live (torch's memory profiler)",
    )
    for cat in mem.categories:
        share = 100 * cat.bytes / peak if peak else 0.0
        t.row(
            cat.name,
            fmt.si(cat.bytes, "B"),
            fmt.pct(share),
            fmt.si(cat.largest_bytes, "B"),
            "#" * round(BAR * share / 100),
        )
    return [t, Text(f"note: {mem.note}; own largest: the category's most at any instant")]


def profile_of(record: RunRecord) -> ProfileSummary | None:
    """The run's profile; None for another kind of run, or one stopped before a capture."""
    return record.payload.profile if isinstance(record.payload, ProfilePayload) else None


def profile_tables(record: RunRecord, verbose: bool = False) -> list[RenderableType]:
    p = profile_of(record)
    if not p:
        return [Text("this run has no profile (it stopped before one was captured)")]
    out: list[RenderableType] = [
        Text.assemble(("Profile of ", "bold"), (p.case, "bold")),
        Text(
            f"{p.schedule.active} active steps after {p.schedule.wait} wait and "
            f"{p.schedule.warmup} warm-up"
            + _reduced(p.schedule)
            + "; "
            + ("GPU breakdown" if p.kind == "gpu" else "CPU breakdown (no kernel-level events)")
        ),
        Text(overhead_line(p)),
    ]
    t = FitTable(
        Col("category", wrap=12),
        Col("per step", justify="right"),
        Col("share", justify="right"),
        Col("", drop=1),
        title=f"Where the step's time goes ({p.kind.upper()}, sums to the step)",
    )
    total_us = 0.0
    for cat in p.categories:
        total_us += cat.us_per_step
        t.row(
            cat.name,
            fmt.duration(cat.us_per_step / 1e6),
            fmt.pct(cat.share),
            "#" * round(BAR * cat.share / 100),
        )
    t.row("total", fmt.duration(total_us / 1e6), fmt.pct(sum(c.share for c in p.categories)), "")
    out.append(t)
    ops = FitTable(
        Col("op", wrap=14, shorten=0),
        Col("kind", shorten=0, drop=3),
        Col("calls", justify="right", drop=4),
        Col("self/step", justify="right"),
        Col("share", justify="right"),
        Col("rate", justify="right", drop=2),
        Col("of ceiling", justify="right", shorten=1, short_header="% ceil"),
        Col("bound", drop=5),
        title="Top ops by self time (per step)",
    )
    labels = op_labels([o.name for o in p.ops])
    for o, label in zip(p.ops, labels, strict=True):
        mark = " !" if o.above_ceiling else ""
        of = (
            Alt(f"{fmt.pct(o.pct_ceiling)} {o.ceiling_key}{mark}", fmt.pct(o.pct_ceiling) + mark)
            if o.pct_ceiling is not None
            else ""
        )
        ops.row(
            op_cell(label),
            Alt(o.category, o.category.split(" ")[0]),
            f"{o.calls:.3g}",
            fmt.duration(o.self_us / 1e6),
            fmt.pct(o.share),
            _rate(o, record),
            of,
            o.bound,
        )
    out.append(ops)
    n_above = sum(o.above_ceiling for o in p.ops)
    if n_above:
        out.append(Text(f"! {ABOVE_NOTE.format(n=n_above)}"))
    n_over = sum(over_peak(o, record) and not o.above_ceiling for o in p.ops)
    if n_over:
        out.append(Text(f"! {OVER_PEAK_NOTE.format(n=n_over)}"))
    out.append(Text.assemble(("verdict: ", "bold"), p.verdict))
    if p.advice:
        checked = any(a.checked for a in p.advice)
        out.append(
            Text(
                "worth checking (each command measures it against this case"
                + ("; measured here with --check)" if checked else "; --check measures it now)"),
                style="bold",
            )
        )
        # a command stays on one line (the terminal folds it), so that it copies whole
        out.extend(
            Text(line, no_wrap=True, overflow="ignore") if line.startswith("    $ ") else Text(line)
            for line in advice_lines(p.advice)
        )
    if p.launches:
        out.append(Text(launch_line(p.launches)))
    memory = memory_line(p)
    if memory:
        out.append(Text(memory))
    out.extend(memory_tables(p.memory))
    for note in p.notes:
        out.append(Text(f"note: {note}"))
    if verbose:
        pairs = zip(labels, (o.name for o in p.ops), strict=True)
        renamed = [(label, name) for label, name in pairs if label != name]
        if renamed:
            out.append(Text("ops in full:", style="bold"))
            out.extend(Text(f"  {label}: {name}") for label, name in renamed)
        out.append(Text("rules:", style="bold"))
        out.extend(Text(f"  {line}") for line in p.rules)
    else:
        out.append(
            Text(
                f"rules: {RULES_SHORT[p.kind]} (-v prints each regex"
                + (" and the kernels' full names)" if p.kind == "gpu" else ")")
            )
        )
    if p.trace_file:
        out.append(Text(f"trace: {p.trace_file} (open in ui.perfetto.dev)"))
    return out


# One colour per category, in the breakdown's order (CPU and GPU lists are both 7-8 long).
COLORS = ("#4e79a7", "#59a14f", "#edc948", "#f28e2b", "#b07aa1", "#e15759", "#bab0ac", "#76b7b2")


def html_context(record: RunRecord) -> dict[str, Any] | None:
    """The HTML report's profile section: a stacked bar of the categories and the top ops."""
    p = profile_of(record)
    if not p:
        return None
    cats = [
        {
            "name": cat.name,
            "share": cat.share,
            "width": f"{cat.share:.3f}",
            "pct": fmt.pct(cat.share),
            "time": fmt.duration(cat.us_per_step / 1e6),
            "color": COLORS[i % len(COLORS)],
        }
        for i, cat in enumerate(p.categories)
    ]
    labels = op_labels([o.name for o in p.ops])
    ops = [
        {
            "name": label,
            "full": o.name,
            "category": o.category,
            "calls": f"{o.calls:.3g}",
            "time": fmt.duration(o.self_us / 1e6),
            "share": fmt.pct(o.share),
            "rate": _rate(o, record),
            "of": f"{fmt.pct(o.pct_ceiling)} {o.ceiling_key}" + (" !" if o.above_ceiling else "")
            if o.pct_ceiling is not None
            else "",
            "bound": o.bound,
        }
        for o, label in zip(p.ops, labels, strict=True)
    ]
    mem = p.memory
    peak = (mem.peak_bytes or 0) if mem is not None else 0
    memory = (
        [
            {
                "name": cat.name,
                "share": share,
                "width": f"{share:.3f}",
                "pct": fmt.pct(share),
                "size": fmt.si(cat.bytes, "B"),
                "color": COLORS[i % len(COLORS)],
            }
            for i, cat in enumerate(mem.categories)
            for share in [100 * cat.bytes / peak if peak else 0.0]
        ]
        if mem is not None and mem.error is None
        else []
    )
    from markupsafe import Markup

    from torchmark.report.charts.roofline import ops_roofline

    chart = ops_roofline(record)
    return {
        "case": p.case,
        "kind": p.kind,
        # matplotlib's own SVG, every text escaped by it: safe to inline (as html._chart)
        "roofline": {"svg": Markup(chart.svg) if chart.svg else None, "note": chart.note},
        "advice": [{**a.model_dump(), "outcome": checked_words(a.checked)} for a in p.advice],
        "memory": memory,
        "memory_peak": fmt.si(peak, "B") if memory else None,
        "memory_note": (mem.note or mem.error) if mem is not None else None,
        "memory_line": memory_line(p),
        "overhead": overhead_line(p),
        "categories": cats,
        "ops": ops,
        "verdict": p.verdict,
        "rules": p.rules,
        "above": ABOVE_NOTE.format(n=sum(o.above_ceiling for o in p.ops))
        if any(o.above_ceiling for o in p.ops)
        else None,
    }


def over_peak(o: OpRow, record: RunRecord) -> bool:
    """The op's FLOP/s beat the measured peak of its dtype (the FLOPs it was credited with
    are not all its own, or the peak measured low)."""
    p = record.payload.profile if isinstance(record.payload, ProfilePayload) else None
    peak = record.ceiling(p.device or "", o.peak_key) if p is not None and o.peak_key else None
    return peak is not None and (o.flop_rate or 0.0) > peak.value


OVER_PEAK_NOTE = (
    "{n} op(s) with a FLOP rate above the measured peak of its dtype (!): the FLOPs it was "
    "credited with are not all its own (one kernel of an op that launches several), or the peak "
    "measured low"
)


def _reduced(sched: Schedule) -> str:
    asked = sched.requested
    if asked is None or asked <= sched.active:
        return ""
    return f" ({asked} asked; fewer for a long step, see the notes)"


def _rate(o: OpRow, record: RunRecord) -> str:
    if o.flop_rate:
        return fmt.si(o.flop_rate, "FLOP/s") + (" !" if over_peak(o, record) else "")
    return fmt.si(o.byte_rate, "B/s") if o.byte_rate else ""
