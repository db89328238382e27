"""Render comparisons of runs: the decision itself lives in :mod:`torchmark.comparison`.

The table fits the width it is given (an 80-column terminal, a CI log, a wide screen): the
essential columns (case, each run's throughput, the speed ratio, the verdict) are never cut;
the reasons move under the table when they do not fit beside it, and the device joins the
case cell before a case has to wrap.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from torchmark import format as fmt
from torchmark import reference
from torchmark.comparison import (
    INDEPENDENT_RULE,
    Change,
    Comparison,
    Key,
    Verdict,
    cannot_judge,
    compare,
    judge,
    regressions,
    run_name,
)
from torchmark.errors import InputError
from torchmark.report.pipeline import comparison_parts
from torchmark.report.table import add_row
from torchmark.results import Result, RunRecord

RULE = INDEPENDENT_RULE
__all__ = [
    "RULE",
    "Change",
    "Comparison",
    "Key",
    "Verdict",
    "cannot_judge",
    "compare",
    "comparison_renderables",
    "judge",
    "regressions",
]
_name = run_name


def letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


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
            f"{letter(i)} = {_name(r, i)}  {r.created_utc:%Y-%m-%d %H:%M} UTC  "
            f"{host + '  ' if host else ''}[{devs or 'devices not recorded'}]  {r.status}"
        )
    return lines


# Column gaps of box.SIMPLE_HEAD with pad_edge=False: one space each side of a separator.
GAP = 2
# A reason narrower than this reads one word a line: it goes under the table instead.
MIN_WHY = 28
# A case column narrower than this wraps a case over 3+ lines: split the runs into pairs.
MIN_CASE = 24


def _case(r: Result) -> str:
    return fmt.case_label(r.variant, r.params, r.workload)  # as `run` names it


def _rows(cmp: Comparison) -> list[list[str]]:
    rows = []
    for j in range(len(cmp.shared_keys)):
        a = cmp.changes[0][j].a
        row = [_case(a), a.device, _cell(a)]
        for changes in cmp.changes:
            c = changes[j]
            row += [_cell(c.b), fmt.ratio(c.speed), c.verdict or "n/a"]
        rows.append(row)
    return rows


def _headers(cmp: Comparison, ids: Sequence[int] | None = None) -> list[str]:
    out = ["case", "device", "A"]
    for i in range(1, len(cmp.runs)):
        x = letter(ids[i] if ids else i)
        out += [x, f"{x}/A", f"{x} vs A"]
    return out


def layout(cmp: Comparison, width: int) -> tuple[bool, bool] | None:
    """(reasons beside the cases, device in a column of its own) for ``width`` columns:
    the widest layout whose essential columns print whole; None when even the narrowest
    leaves the case column under ``MIN_CASE`` (many runs side by side: print them a pair
    at a time)."""
    headers, rows = _headers(cmp), _rows(cmp)
    natural = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(headers)]
    numbers = sum(natural[2:]) + GAP * (len(natural) - 2)
    case_dev = natural[0] + GAP + natural[1]
    why = len(cmp.runs) == 2 and bool(rows)
    if why and case_dev + GAP + numbers + GAP + MIN_WHY <= width:
        return True, True
    if case_dev + GAP + numbers <= width:
        return False, True
    if width - numbers - GAP < MIN_CASE and len(cmp.runs) > 2:
        return None
    return False, False


def comparison_table(
    cmp: Comparison, width: int = 120, ids: Sequence[int] | None = None
) -> tuple[Table, list[str]]:
    """Baseline A, then per later run: its throughput, speed relative to A, verdict; and
    the reasons that did not fit beside the cases (UNCLEAR and not comparable: one line
    each, under the table; FASTER / SLOWER / SAME follow the rule printed below it)."""
    with_why, with_device = layout(cmp, width) or (False, False)
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
            for i, changes in enumerate(cmp.changes, start=1):
                c = changes[j]
                if c.verdict in (None, "UNCLEAR"):
                    vs = f" in {letter(i)}" if len(cmp.runs) > 2 else ""
                    vs = f" in {letter(ids[i])}" if ids else vs
                    said = c.verdict or "not comparable"
                    notes.append(f"{case} on {device}{vs}: {said}, {c.why}")
        add_row(table, *cells)
    return table, notes


def pairs(cmp: Comparison) -> list[tuple[Comparison, tuple[int, int]]]:
    """Each later run against A on its own, with the two runs' indices (C stays C)."""
    return [
        (Comparison((cmp.runs[0], cmp.runs[i]), (changes,)), (0, i))
        for i, changes in enumerate(cmp.changes, start=1)
    ]


def _cell(r: Result) -> str:
    if not r.ok:
        return r.status
    return fmt.throughput(r)


def only_lines(cmp: Comparison) -> list[str]:
    lines = []
    for i, results in sorted(cmp.only_in.items()):
        cases = ", ".join(
            fmt.case_label(r.variant, r.params, r.workload, r.device) for r in results
        )
        lines.append(
            f"only in {letter(i)} ({fmt.plural(len(results), 'case')}, not compared): {cases}"
        )
    return lines


def summary_lines(cmp: Comparison, ids: Sequence[int] | None = None) -> list[str]:
    lines = []
    for i, changes in enumerate(cmp.changes, start=1):
        i = ids[i] if ids else i
        counts: dict[str, int] = {}
        for c in changes:
            v = c.verdict or "not comparable"
            counts[v] = counts.get(v, 0) + 1
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        lines.append(f"{letter(i)} vs A, {len(changes)} shared cases: {tally}")
    return lines


def comparison_renderables(cmp: Comparison, width: int = 120) -> list[RenderableType]:
    """What ``compare`` prints, laid out for a ``width``-column terminal or log."""
    parts: list[RenderableType] = [Text("\n".join(run_legend(cmp.runs)))]
    views = [(cmp, None)] if layout(cmp, width) is not None else pairs(cmp)
    for sub, ids in views:
        table, notes = comparison_table(sub, width, ids)
        parts += [table, Text("\n".join([*notes, *summary_lines(sub, ids)]))]
    if only_lines(cmp):
        parts.append(Text("\n".join(only_lines(cmp))))
    # the input workloads' breakdown side by side (nothing when no run has them)
    parts += comparison_parts(cmp, [letter(i) for i in range(len(cmp.runs))])
    return [*parts, Text(RULE, style="dim")]


def placement_table(
    ref: reference.ReferenceSet, mine: list[reference.ReferenceRow], width: int = 120
) -> tuple[Table, list[str]]:
    """The reference rows and this machine's rows, fastest first, with what each measured;
    caveats that do not fit beside the rows become numbered notes under the table."""
    extra = [] if ref.kind == "run" else [r for s in reference.runs() for r in s.rows]
    rows = reference.ranked([*ref.rows, *extra, *mine])
    table = Table(
        title=f"{ref.title} ({ref.name}), ranked",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
    )
    names, caveats = [], []
    for r in rows:
        name = f"▶ {r.hardware}  (this machine)" if r.this_machine else r.hardware
        if r.source not in (ref.name, "this machine"):
            name += f"  [{r.source}]"
        names.append(name)
        caveats.append(
            "; ".join(
                x for x in (f"IMPLAUSIBLE: {r.implausible}" if r.implausible else "", r.note) if x
            )
        )
    # rank, it/s, implied and % columns take ~45 columns with their gaps
    beside = max(map(len, names), default=0) + 45 + MIN_WHY <= width
    table.add_column("#", justify="right", no_wrap=True)
    # a hardware name wraps only when even the notes layout leaves it too little room
    longest = max(map(len, names), default=8)
    table.add_column("hardware", overflow="fold", min_width=min(longest, max(width - 54, 12)))
    table.add_column(ref.unit, justify="right", no_wrap=True)
    table.add_column("implied", justify="right", no_wrap=True)
    table.add_column("% of datasheet bw", justify="right", no_wrap=True)
    table.add_column("caveat" if beside else "note", overflow="fold", min_width=4)
    notes: list[str] = []
    for rank, (r, name, caveat) in enumerate(zip(rows, names, caveats, strict=True), start=1):
        if caveat and not beside:
            notes.append(f"[{len(notes) + 1}] {r.hardware}: {caveat}")
            caveat = f"[{len(notes)}]"
        add_row(
            table,
            str(rank),
            Text(name, style="bold") if r.this_machine else name,
            # a published figure as printed; a measured one to its significant digits
            fmt.sig(r.value) if r.measured else f"{r.value:g}",
            fmt.si(r.implied_bytes_per_s, "B/s"),
            fmt.pct(r.pct_of_datasheet),
            caveat,
        )
    return table, notes


def placement_renderables(
    ref: reference.ReferenceSet, record: RunRecord, width: int = 120
) -> list[RenderableType]:
    mine = reference.seed_rows(record)
    if not mine:
        raise InputError(
            f"run {record.run_id or '(file)'} has no {reference.SEED_WORKLOAD} "
            f"{reference.SEED_VARIANT} result to place; run `torchmark run --workload "
            f"{reference.SEED_WORKLOAD}` first"
        )
    per_it = (
        f"one iteration = {fmt.si(ref.bytes_per_iteration, 'B')} of memory traffic, so "
        f"implied = it/s × {fmt.si(ref.bytes_per_iteration, 'B')}. "
        if ref.bytes_per_iteration
        else ""
    )
    table, notes = placement_table(ref, mine, width)
    return [
        table,
        *([Text("\n".join(notes))] if notes else []),
        Text(f"source: {ref.provenance}"),
        *([Text(f"what it measured: {ref.what} {per_it}".strip())] if ref.what else []),
    ]
