"""Render comparisons of runs: the decision itself lives in :mod:`torchmark.judge.comparison`.

The table fits the width it is given (an 80-column terminal, a CI log, a wide screen): the
essential columns (case, each run's throughput, the speed ratio, the verdict) are never cut;
the reasons move under the table when they do not fit beside it, and the device joins the
case cell before a case has to wrap.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from torchmark import format as fmt
from torchmark import reference
from torchmark.errors import InputError
from torchmark.judge import verdicts
from torchmark.judge.comparison import INDEPENDENT_RULE, Comparison, run_name
from torchmark.report.pipeline import comparison_parts
from torchmark.report.table import add_row
from torchmark.results import Result, RunRecord


def run_legend(runs: Sequence[RunRecord]) -> list[str]:
    lines = []
    for i, r in enumerate(runs):
        host = r.environment.get("host") or ""  # a reference run's host name is stripped
        devs = ", ".join(
            f"{d} {info.get('model', '')}".strip()
            for d, info in r.environment.get("devices", {}).items()
            if isinstance(info, dict)
        )
        lines.append(
            f"{fmt.run_letter(i)} = {run_name(r, i)}  {r.created_utc:%Y-%m-%d %H:%M} UTC  "
            f"{host + '  ' if host else ''}[{devs or 'devices not recorded'}]  {r.status}"
        )
    return lines


# Column gaps of box.SIMPLE_HEAD with pad_edge=False: one space each side of a separator.
GAP = 2
# A reason narrower than this reads one word a line: it goes under the table instead.
MIN_WHY = 28
# A case column narrower than this wraps a case over 3+ lines: split the runs into pairs.
MIN_CASE = 24


def _rows(cmp: Comparison) -> list[list[str]]:
    rows = []
    for j in range(len(cmp.shared_keys)):
        a = cmp.changes[0][j].a
        row = [fmt.result_label(a, device=False), a.device, _cell(a)]
        for changes in cmp.changes:
            c = changes[j]
            row += [_cell(c.b), fmt.ratio(c.speed), c.verdict or "n/a"]
        rows.append(row)
    return rows


def _headers(cmp: Comparison, ids: Sequence[int] | None = None) -> list[str]:
    out = ["case", "device", "A"]
    for i in range(1, len(cmp.runs)):
        x = fmt.run_letter(ids[i] if ids else i)
        out += [x, f"{x}/A", f"{x} vs A"]
    return out


Layout = tuple[bool, bool] | None | Literal["stacked"]


def layout(cmp: Comparison, width: int) -> Layout:
    """(reasons beside the cases, device in a column of its own) for ``width`` columns:
    the widest layout whose essential columns print whole; None when even the narrowest
    leaves the case column under ``MIN_CASE`` (many runs side by side: print them a pair
    at a time); "stacked" when a pair leaves it so (each case on a line of its own, its
    figures on the next: ``stacked_lines``)."""
    headers, rows = _headers(cmp), _rows(cmp)
    natural = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(headers)]
    numbers = sum(natural[2:]) + GAP * (len(natural) - 2)
    case_dev = natural[0] + GAP + natural[1]
    why = len(cmp.runs) == 2 and bool(rows)
    if why and case_dev + GAP + numbers + GAP + MIN_WHY <= width:
        return True, True
    if case_dev + GAP + numbers <= width:
        return False, True
    if len(cmp.runs) > 2:
        return None if width - numbers - GAP < MIN_CASE else (False, False)
    # A pair: stacked when its longest label would wrap over 3+ lines. What rich gives the
    # case column, exactly: an edge column each side, 3 columns (pad, rule, pad) per gap.
    room = width - 2 - sum(natural[2:]) - 3 * (len(natural) - 2)
    label = max((len(r[0]) + len(r[1]) + 3 for r in rows), default=0)
    return "stacked" if room < min(MIN_CASE, label) else (False, False)


def comparison_table(
    cmp: Comparison, width: int = 120, ids: Sequence[int] | None = None, fit: Layout = None
) -> tuple[Table, list[str]]:
    """Baseline A, then per later run: its throughput, speed relative to A, verdict; and
    the reasons that did not fit beside the cases (UNCLEAR and not comparable: one line
    each, under the table; FASTER / SLOWER / SAME follow the rule printed below it).
    ``fit``: ``layout(cmp, width)`` where the caller has it already."""
    chosen = fit if fit is not None else layout(cmp, width)
    with_why, with_device = chosen if isinstance(chosen, tuple) else (False, False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    headers = _headers(cmp, ids)
    table.add_column("case" if with_device else "case (device)", overflow="fold")
    if with_device:
        table.add_column("device", no_wrap=True)
    for h in headers[2:]:
        verdict = h.endswith(" vs A")
        table.add_column(h, justify="left" if verdict else "right", no_wrap=True)
    if with_why:
        table.add_column("why", overflow="fold", min_width=MIN_WHY)
    notes: list[str] = []
    for j, row in enumerate(_rows(cmp)):
        case, device, rest = row[0], row[1], row[2:]
        cells = [case, device, *rest] if with_device else [f"{case} ({device})", *rest]
        if with_why:
            cells.append(cmp.changes[0][j].why)
        else:
            notes += _notes(cmp, j, ids)
        add_row(table, *cells)
    return table, notes


def _notes(cmp: Comparison, j: int, ids: Sequence[int] | None) -> list[str]:
    """Case ``j``'s UNCLEAR and not comparable verdicts with their reasons, and any verdict
    with other processes' load on either side, between different world sizes (its speed is
    per rank: without the reason a DDP x2 run read FASTER or SLOWER than DDP x1 as if like
    for like) or of a working set in the cache (its speed is the cache's, not DRAM's)."""
    from torchmark.judge.comparison import cached, loaded
    from torchmark.judge.worlds import world_difference

    out = []
    for i, changes in enumerate(cmp.changes, start=1):
        c = changes[j]
        if (
            c.verdict in (None, "UNCLEAR")
            or world_difference(c.a, c.b)
            or cached(c.a, c.b)
            or loaded(c.a, c.b)
        ):
            vs = f" in {fmt.run_letter(i)}" if len(cmp.runs) > 2 else ""
            vs = f" in {fmt.run_letter(ids[i])}" if ids else vs
            said = c.verdict or "not comparable"
            out.append(f"{fmt.result_label(c.a)}{vs}: {said}, {c.why}")
    return out


STACK = "  "  # the figures' indent under their case


def stacked_lines(
    cmp: Comparison, ids: Sequence[int] | None = None, width: int = 80
) -> tuple[Text, list[str]]:
    """The comparison table for a narrow terminal: each case (device) on a line of its own,
    its figures on the next, indented, the same figures as the table's, aligned from case
    to case (``  A 50.0 it/s   B 45.5 it/s   B/A 0.909×  SLOWER``; where that overflows
    ``width``, the ratio and verdict on a line of their own); and the same notes."""
    rows = _rows(cmp)
    names = [fmt.run_letter(ids[i] if ids else i) for i in range(len(cmp.runs))]
    # (label, value) per figure: A's throughput, then per later run its throughput, its
    # speed relative to A, its verdict
    fields = [
        [("A", row[2])]
        + [
            part
            for i, x in enumerate(names[1:])
            for part in ((x, row[3 + 3 * i]), (f"{x}/A", row[4 + 3 * i]), ("", row[5 + 3 * i]))
        ]
        for row in rows
    ]
    # each field padded to its widest so that the cases line up
    wide = [max(len(f[k][1]) for f in fields) for k in range(len(fields[0]))] if fields else []
    out = Text()
    notes: list[str] = []
    for j, (row, figures) in enumerate(zip(rows, fields, strict=True)):
        out.append(f"{row[0]} ({row[1]})\n", style="bold")
        cells = [
            f"{label} {value.rjust(w)}" if label else value.ljust(w)
            for (label, value), w in zip(figures, wide, strict=True)
        ]
        # "A 288,515 samples/s   B 70,447 samples/s   B/A 0.244×   UNCLEAR" is 67 wide
        lines = [cells]
        if len(STACK + "   ".join(cells)) > width:
            rates = {0, *range(1, len(cells), 3)}  # A's throughput, then each run's
            lines = [
                [c for k, c in enumerate(cells) if k in rates],
                [c for k, c in enumerate(cells) if k not in rates],
            ]
        for part in lines:
            out.append(STACK + "   ".join(part).rstrip() + "\n")
        notes += _notes(cmp, j, ids)
    out.rstrip()
    return out, notes


def pairs(cmp: Comparison) -> list[tuple[Comparison, tuple[int, int]]]:
    """Each later run against A on its own, with the two runs' indices (C stays C)."""
    return [
        (Comparison((cmp.runs[0], cmp.runs[i]), (changes,)), (0, i))
        for i, changes in enumerate(cmp.changes, start=1)
    ]


def _cell(r: Result) -> str:
    """The throughput, or the word that stands in for a number its verdict rejects (an
    invalid result is a measurement error, never printed as a plain number)."""
    if not r.ok:
        return r.status
    if not verdicts.may(r, "compare"):
        return verdicts.rule_of(r).word
    return fmt.throughput(r)


def only_lines(cmp: Comparison) -> list[str]:
    lines = []
    for i, results in sorted(cmp.only_in.items()):
        cases = ", ".join(
            fmt.case_label(r.variant, r.params, r.workload, r.device) for r in results
        )
        n = fmt.plural(len(results), "case")
        lines.append(f"only in {fmt.run_letter(i)} ({n}, not compared): {cases}")
    return lines


def summary_lines(cmp: Comparison, ids: Sequence[int] | None = None) -> list[str]:
    from torchmark.judge.comparison import loaded

    lines = []
    for i, changes in enumerate(cmp.changes, start=1):
        i = ids[i] if ids else i
        counts = Counter(c.verdict or "not comparable" for c in changes)
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        x = fmt.run_letter(i)
        lines.append(f"{x} vs A, {len(changes)} shared cases: {tally}")
        busy = sum(1 for c in changes if c.verdict and loaded(c.a, c.b))
        if busy:
            lines.append(
                f"{x} vs A: {busy} of {len(changes)} cases ran under other processes' "
                "load on one side or both: their verdicts may be the load's"
            )
    return lines


def comparison_renderables(cmp: Comparison, width: int = 120) -> list[RenderableType]:
    """What ``compare`` prints, laid out for a ``width``-column terminal or log."""
    parts: list[RenderableType] = [Text("\n".join(run_legend(cmp.runs)))]
    # layout() formats every case's figures: once a view, not again to draw it
    whole = layout(cmp, width)
    views = (
        [(cmp, None, whole)]
        if whole is not None
        else [(sub, ids, layout(sub, width)) for sub, ids in pairs(cmp)]
    )
    for sub, ids, fit in views:
        if fit == "stacked":
            block, notes = stacked_lines(sub, ids, width)
            parts += [Text(), block, Text()]
        else:
            table, notes = comparison_table(sub, width, ids, fit)
            parts.append(table)
        parts.append(Text("\n".join([*notes, *summary_lines(sub, ids)])))
    if only := only_lines(cmp):
        parts.append(Text("\n".join(only)))
    # the input workloads' breakdown side by side (nothing when no run has them)
    parts += comparison_parts(cmp, [fmt.run_letter(i) for i in range(len(cmp.runs))])
    return [*parts, Text(INDEPENDENT_RULE, style="dim")]


# Rank, it/s, implied and % columns with their gaps; the hardware column gets the rest.
PLACEMENT_NUMBERS = 54


def _placement_rows(
    ref: reference.ReferenceSet, mine: list[reference.ReferenceRow]
) -> list[tuple[reference.ReferenceRow, str, str]]:
    """(row, name as shown, caveat), fastest first."""
    extra = [] if ref.kind == "run" else [r for s in reference.runs() for r in s.rows]
    out = []
    for r in reference.ranked([*ref.rows, *extra, *mine]):
        name = f"▶ {r.hardware}  (this machine)" if r.this_machine else r.hardware
        if not r.this_machine:
            name = reference.shown_name(r, ref, mine)
        implausible = f"IMPLAUSIBLE: {r.implausible}" if r.implausible else ""
        if not r.rankable:  # its own verdict keeps it off the ranking: said as the verdict
            implausible = f"not ranked: {r.implausible}"
        out.append((r, name, "; ".join(x for x in (implausible, r.note) if x)))
    return out


def _placement_value(r: reference.ReferenceRow) -> str:
    # a published figure as printed; a measured one to its significant digits
    return fmt.sig(r.value) if r.measured else f"{r.value:g}"


def placement_title(ref: reference.ReferenceSet) -> str:
    return f"{ref.title} ({ref.name}), ranked"


def placement_table(
    ref: reference.ReferenceSet,
    mine: list[reference.ReferenceRow],
    width: int = 120,
    rows: list[tuple[reference.ReferenceRow, str, str]] | None = None,
) -> tuple[Table, list[str]]:
    """The reference rows and this machine's rows, fastest first, with what each measured;
    caveats that do not fit beside the rows become numbered notes under the table. The
    title (``placement_title``) prints above it: as the table's it would be cut to the
    table's width. ``rows``: ``_placement_rows(ref, mine)`` where the caller has them."""
    rows = rows if rows is not None else _placement_rows(ref, mine)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    longest = max((len(name) for _, name, _ in rows), default=8)
    # the figures' own widths (a header may be the widest), 3 columns between each two
    # and one at each edge: an estimate that fell 5 short cut the caveats' ends at 120
    cells = [(_placement_value(r), fmt.si(r.implied_bytes_per_s, "B/s")) for r, _, _ in rows]
    figures = (
        max([1, *(len(x) for x in _ranks(rows))])
        + max([len(ref.unit), *(len(v) for v, _ in cells)])
        + max([len("implied"), *(len(i) for _, i in cells)])
        + len("% of datasheet bw")
    )
    beside = longest + figures + 3 * 5 + 2 + MIN_WHY <= width
    table.add_column("#", justify="right", no_wrap=True)
    # a hardware name wraps only when even the notes layout leaves it too little room
    table.add_column("hardware", overflow="fold", min_width=min(longest, max(width - 54, 12)))
    table.add_column(ref.unit, justify="right", no_wrap=True)
    table.add_column("implied", justify="right", no_wrap=True)
    table.add_column("% of datasheet bw", justify="right", no_wrap=True)
    table.add_column("caveat" if beside else "note", overflow="fold", min_width=4)
    notes: list[str] = []
    for rank, (r, name, caveat) in zip(_ranks(rows), rows, strict=True):
        if caveat and not beside:
            notes.append(f"[{len(notes) + 1}] {r.hardware}: {caveat}")
            caveat = f"[{len(notes)}]"
        add_row(
            table,
            rank,
            Text(name, style="bold") if r.this_machine else name,
            _placement_value(r),
            fmt.si(r.implied_bytes_per_s, "B/s"),
            fmt.pct(r.pct_of_datasheet),
            caveat,
        )
    return table, notes


def _ranks(rows: list[tuple[reference.ReferenceRow, str, str]]) -> list[str]:
    """1, 2, 3 ... for the rows that may be ranked; a dash for one its verdict keeps off
    (verdicts: an invalid measurement is shown, never placed)."""
    out, n = [], 0
    for r, _, _ in rows:
        n += r.rankable
        out.append(str(n) if r.rankable else fmt.DASH)
    return out


def placement_stacked(
    ref: reference.ReferenceSet, rows: list[tuple[reference.ReferenceRow, str, str]]
) -> tuple[Text, list[str]]:
    """``placement_table`` for a narrow terminal: each machine's rank and name on a line of
    its own, its figures on the next, indented and aligned from row to row
    (``2,422 it/s → 2.93 TB/s   87.3 % of datasheet  [1]``); the same caveats, as
    numbered notes. ``rows``: ``_placement_rows(ref, mine)``."""
    pcts = [fmt.pct(r.pct_of_datasheet) for r, _, _ in rows if r.pct_of_datasheet is not None]
    pct_w = max(map(len, pcts), default=0)
    fields = [
        (
            _placement_value(r),
            fmt.si(r.implied_bytes_per_s, "B/s"),
            "no datasheet figure"
            if r.pct_of_datasheet is None
            else f"{fmt.pct(r.pct_of_datasheet).rjust(pct_w)} of datasheet",
        )
        for r, _, _ in rows
    ]
    wide = [max((len(f[k]) for f in fields), default=0) for k in range(3)]
    ranks = _ranks(rows)
    rank_w = max((len(x) for x in ranks), default=1)
    out = Text()
    notes: list[str] = []
    for rank, (r, name, caveat), (value, implied, pct) in zip(ranks, rows, fields, strict=True):
        out.append(f"{rank:>{rank_w}}  {name}\n", style="bold" if r.this_machine else "")
        ref_mark = ""
        if caveat:
            notes.append(f"[{len(notes) + 1}] {r.hardware}: {caveat}")
            ref_mark = f"  [{len(notes)}]"
        # "→": the implied traffic, as the line under the table defines it
        line = f"{value.rjust(wide[0])} {ref.unit} → {implied.rjust(wide[1])}   {pct}{ref_mark}"
        out.append(" " * (rank_w + 2) + line.rstrip() + "\n")
    out.rstrip()
    return out, notes


def placement_renderables(
    ref: reference.ReferenceSet, record: RunRecord, width: int = 120
) -> list[RenderableType]:
    mine = reference.seed_rows(record)
    if not mine:
        # one at another size (a quick run on the CPU, --size) does other work per "it"; so
        # does one at the blog's size under a torch that stops folding foo() (METHOD.md §1)
        seed, w = reference.SEED_WORKLOAD, reference.SEED_VARIANT
        blog = math.isqrt(int(ref.tensor_bytes) // 4) if ref.tensor_bytes else None
        sizes = {
            r.params.get("size")
            for r in record.results
            if r.workload == seed and r.variant == w and r.ok
        }
        other = sorted(str(n) for n in sizes if n != blog)
        if other:
            has = (
                f"has its {seed} {w} at {', '.join(other)}^2, other work per iteration than "
                f"the blog's table counts: nothing to place; `torchmark run --workload {seed}` "
                "measures it at the blog's size"
            )
        elif sizes:
            has = (
                f"has its {seed} {w} at the blog's size, but this torch does other work per "
                "iteration (foo() not constant-folded, METHOD.md §1): nothing to place"
            )
        else:
            has = f"has no {seed} {w} result to place; run `torchmark run --workload {seed}` first"
        raise InputError(f"run {record.run_id or '(file)'} {has}")
    per_it = (
        f"one iteration = {fmt.si(ref.bytes_per_iteration, 'B')} of memory traffic, so "
        f"implied = it/s × {fmt.si(ref.bytes_per_iteration, 'B')}. "
        if ref.bytes_per_iteration
        else ""
    )
    # ranked once: the layout's choice and the body it chose read the same rows
    rows = _placement_rows(ref, mine)
    longest = max((len(name) for _, name, _ in rows), default=0)
    body: RenderableType
    if width - PLACEMENT_NUMBERS < min(longest, MIN_CASE):
        body, notes = placement_stacked(ref, rows)
        body = Group(Text(), body, Text())  # the blank lines a table's edges leave
    else:
        body, notes = placement_table(ref, mine, width, rows)
    return [
        Text(placement_title(ref)),
        body,
        *([Text("\n".join(notes))] if notes else []),
        Text(f"source: {ref.provenance}"),
        *([Text(f"what it measured: {ref.what} {per_it}".strip())] if ref.what else []),
    ]
