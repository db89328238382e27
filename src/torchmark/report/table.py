"""Terminal tables of one stored run: results per case and device, then the ceilings.

A pure function of the RunRecord (``run_tables``); ``torchmark run`` prints it at the end.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from torchmark import reference
from torchmark.devices import is_host
from torchmark.report import format as fmt
from torchmark.results import Result, RunRecord

# A workload sweeping a precision parameter gets a "best" row per device.
PRECISION_KEYS = fmt.PRECISION_KEYS

CASE_WIDTH = 22
CaseKey = tuple[str, str, tuple[tuple[str, str], ...]]


def add_row(table: Table, *cells: RenderableType) -> None:
    """Add a row with every string cell as plain text: a reason or a hardware name such as
    "[h100-ref]" must print as written, never be read as rich markup."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def case_key(r: Result) -> CaseKey:
    """A case without its device: what a CPU and a GPU result have in common."""
    workload, variant, _, params = r.key
    return (workload, variant, params)


def devices_of(record: RunRecord) -> list[str]:
    """Devices in the run, the host CPU first (the speedup denominator), then as recorded."""
    seen = list(dict.fromkeys(r.device for r in record.results))
    seen += [c.device for c in record.ceilings if c.device not in seen]
    return sorted(seen, key=lambda d: not is_host(d))


def speedup(result: Result, host: Result | None) -> float | None:
    """How many times the host's rate this result's rate is (same case, same work)."""
    if host is None or not result.ok or not host.ok or is_host(result.device):
        return None
    mine, theirs = result.rate(result.headline), host.rate(host.headline)
    return mine / theirs if mine and theirs else None


def ceiling_cell(r: Result) -> str:
    p = r.pct_of_ceiling
    if p is None or r.ceiling is None:
        return fmt.DASH
    return f"{fmt.pct(p)} of {fmt.ceiling_label(r.ceiling)}"


def flag_words(r: Result, verbose: bool = False) -> list[str]:
    """Everything that qualifies a number: status, quality flags, the validity verdict
    (its level only; ``verbose`` adds the reasons, for reports with room for them)."""
    if r.status == "skipped":
        return [f"skipped: {r.reason or 'no reason given'}"]
    if r.status == "wrong":
        return [f"WRONG: {r.reason or 'correctness check failed'}"]
    words = list(r.flags)
    if r.verdict is not None and r.verdict.level != "ok":
        if verbose and r.verdict.reasons:
            # the level is the worst reason's, so it heads the list rather than each reason
            first, *rest = r.verdict.reasons
            words += [f"{r.verdict.level}: {first}", *rest]
        else:
            words.insert(0, r.verdict.level)
    return words


class Footnotes:
    """Verdict reasons printed once under the table; rows point to them by number."""

    def __init__(self) -> None:
        self.reasons: dict[str, int] = {}

    def refs(self, r: Result) -> str:
        if r.verdict is None or r.verdict.level == "ok" or not r.ok:
            return ""
        nums = [self.reasons.setdefault(why, len(self.reasons) + 1) for why in r.verdict.reasons]
        return " " + "".join(f"[{n}]" for n in nums) if nums else ""

    def lines(self) -> list[str]:
        return [f"[{n}] {why}" for why, n in self.reasons.items()]


def status_cell(r: Result) -> str:
    return {"skipped": "skipped", "wrong": "WRONG"}.get(r.status, fmt.throughput(r))


def spread_cell(r: Result) -> str:
    # Two digits: a spread is itself an estimate, good to about 10 % of its value.
    return fmt.pct(100 * r.measurement.rel_iqr, digits=2) if r.ok else fmt.DASH


def _precision_key(results: Iterable[Result]) -> str | None:
    results = list(results)
    for k in PRECISION_KEYS:
        if len({str(r.params.get(k)) for r in results if k in r.params}) > 1:
            return k
    return None


def _best_rows(table: Table, results: list[Result], devices: list[str]) -> None:
    """One row per device: the precision (with its other params) that ran fastest."""
    key = _precision_key(results)
    if key is None:
        return
    for d in devices:
        mine = [r for r in results if r.device == d and r.ok and r.rate(r.headline)]
        if not mine:
            continue
        best = max(mine, key=lambda r: r.rate(r.headline) or 0.0)
        others = {k: v for k, v in best.params.items() if k != key}
        label = fmt.DTYPE_SHORT.get(str(best.params[key]), str(best.params[key]))
        where = f"{best.variant} {fmt.params(others)}".strip()
        add_row(
            table,
            f"best {key}: {label} ({where})",
            d,
            fmt.throughput(best),
            fmt.duration(best.median_s),
            spread_cell(best),
            ceiling_cell(best),
            "",
            "",
        )


def _spread_label(label: str, n_rows: int) -> list[str]:
    """The case label wrapped over the case's device rows, so it adds no line of its own."""
    lines = textwrap.wrap(label, CASE_WIDTH, break_on_hyphens=False) or [""]
    if len(lines) > n_rows:
        lines = [*lines[: n_rows - 1], " ".join(lines[n_rows - 1 :])]
    return lines + [""] * (n_rows - len(lines))


def results_table(record: RunRecord, notes: Footnotes | None = None) -> Table:
    """One row per case and device, grouped by workload; GPUs show their speedup over the CPU."""
    notes = notes if notes is not None else Footnotes()
    devices = devices_of(record)
    title = f"run {record.run_id or '(unsaved)'}"
    if record.status != "complete":
        title += f" · {record.status}"
    table = Table(
        title=title, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", expand=True
    )
    table.add_column("case", width=CASE_WIDTH, overflow="fold")
    table.add_column("device", no_wrap=True)
    table.add_column("throughput", justify="right", no_wrap=True)
    table.add_column("median", justify="right", no_wrap=True)
    table.add_column("IQR", justify="right", no_wrap=True)
    table.add_column("% of ceiling", justify="right", no_wrap=True)
    table.add_column("vs CPU", justify="right", no_wrap=True)
    table.add_column("flags", overflow="fold", ratio=1)

    by_case: dict[CaseKey, dict[str, Result]] = {}
    for r in record.results:
        by_case.setdefault(case_key(r), {})[r.device] = r
    workloads = list(dict.fromkeys(k[0] for k in by_case))
    for w_i, workload in enumerate(workloads):
        if w_i:
            table.add_section()
        add_row(table, Text(workload, style="bold"))
        for key, per_device in by_case.items():
            if key[0] != workload:
                continue
            host = next((r for d, r in per_device.items() if is_host(d)), None)
            rows = [per_device[d] for d in devices if d in per_device]
            label = f"{rows[0].variant} {fmt.params(rows[0].params)}".strip()
            for r, case in zip(rows, _spread_label(label, len(rows)), strict=True):
                add_row(
                    table,
                    case,
                    r.device,
                    status_cell(r),
                    fmt.duration(r.median_s),
                    spread_cell(r),
                    ceiling_cell(r),
                    fmt.ratio(speedup(r, host)) if speedup(r, host) else "",
                    ", ".join(flag_words(r)) + notes.refs(r),
                )
        _best_rows(table, [r for r in record.results if r.workload == workload], devices)
    if not record.results:
        add_row(table, "(no results)")
    return table


def ceilings_table(record: RunRecord) -> Table:
    table = Table(title="ceilings", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for name, justify in (
        ("device", "left"),
        ("ceiling", "left"),
        ("measured", "right"),
        ("theoretical", "right"),
        ("% of theor.", "right"),
        ("method", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "method")  # type: ignore[arg-type]
    order = {d: i for i, d in enumerate(devices_of(record))}
    for c in sorted(record.ceilings, key=lambda c: (order.get(c.device, 99), c.key)):
        theo = fmt.ceiling_value(c, c.theoretical) if c.theoretical else fmt.DASH
        add_row(
            table,
            c.device,
            c.key,
            fmt.ceiling_value(c),
            theo,
            fmt.pct(c.pct_of_theoretical),
            c.method + (f" (theoretical: {c.theoretical_source})" if c.theoretical_source else ""),
        )
    if not record.ceilings:
        add_row(table, "(none measured)")
    return table


def seed_placement(record: RunRecord, ref: reference.ReferenceSet | None = None) -> list[str]:
    """Where each device's ``seed-add as-published`` rate falls in the blog's 2023 table."""
    ref = ref or reference.load("seed-2023")
    lines = []
    for row in reference.seed_rows(record):
        slower, faster, rank = reference.neighbours(ref.rows, row.value)
        where = " and ".join(
            f"{n.hardware} ({n.value:g})" for n in (slower, faster) if n is not None
        )
        between = (
            f"between {where}"
            if slower and faster
            else f"above {where}"
            if slower
            else f"below {where}"
        )
        gbs = fmt.si(row.implied_bytes_per_s, "B/s")
        tensor = fmt.si(ref.tensor_bytes, "B") if ref.tensor_bytes else "?"
        lines.append(
            f"{reference.SEED_WORKLOAD} {reference.SEED_VARIANT} on {row.hardware}: "
            f"{fmt.sig(row.value)} it/s, rank {rank} of {len(ref.rows) + 1} in the seed "
            f"blog's 2023 table, {between}. One it/s there is one in-place add over a "
            f"{tensor} tensor ({gbs} here): see `torchmark compare --reference seed-2023`."
        )
    return lines


def run_tables(record: RunRecord) -> list[RenderableType]:
    """What ``torchmark run`` prints at the end: results, seed-table placement, ceilings."""
    footnotes = Footnotes()
    out: list[RenderableType] = [results_table(record, footnotes)]
    if footnotes.reasons:
        out.append(Group(*(Text(line) for line in footnotes.lines())))
    notes = _notes(record)
    if notes:
        out.append(Group(*(Text(n) for n in notes)))
    out.append(ceilings_table(record))
    placement = seed_placement(record)
    if placement:
        out.append(Group(*(Text(line) for line in placement)))
    return out


def _notes(record: RunRecord) -> list[str]:
    """Observations the workloads made (e.g. the seed loop returns one cached tensor)."""
    seen: dict[str, list[str]] = {}
    for r in record.results:
        for n in r.notes:
            seen.setdefault(n, []).append(f"{r.workload}/{r.variant} {r.device}")
    return [f"note: {n} ({_where(w)})" for n, w in seen.items()]


def _where(places: list[str]) -> str:
    places = list(dict.fromkeys(places))
    return ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
