"""Terminal tables of one stored run: results per case and device, then the ceilings.

A pure function of the RunRecord (``run_tables``); ``torchmark run`` prints it at the end.
Tables fit the console's width (``report.layout``): at 80 columns or piped they lose the
words of the flags, then the ``vs CPU`` and median columns, never a figure's digits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from torchmark import format as fmt
from torchmark import reference
from torchmark.judge import verdicts
from torchmark.judge.verdicts import TIMED_OUT_OK_PCT
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.report.pipeline import pipeline_tables
from torchmark.report.rows import ceiling_rows, devices_of, reuse_notes
from torchmark.results import Result, RunRecord, is_host

__all__ = [
    "Footnotes",
    "add_row",
    "case_key",
    "ceiling_cell",
    "ceilings_table",
    "flag_words",
    "results_table",
    "run_tables",
    "seed_placement",
    "speedup",
    "spread_cell",
    "status_cell",
]

# Cases sit under their workload's name, indented: no blank line per workload.
INDENT = "  "
CaseKey = tuple[str, str, tuple[tuple[str, str], ...]]


def add_row(table: Table, *cells: RenderableType) -> None:
    """Add a row with every string cell as plain text: a reason or a hardware name such as
    "[h100-ref]" must print as written, never be read as rich markup."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def case_key(r: Result) -> CaseKey:
    """A case without its device: what a CPU and a GPU result have in common."""
    workload, variant, _, params = r.key
    return (workload, variant, params)


def speedup(result: Result, host: Result | None) -> float | None:
    """How many times the host's rate this result's rate is (same case, same work); none
    where either side's verdict keeps it out of comparisons (``verdicts``)."""
    if host is None or not result.ok or not host.ok or is_host(result.device):
        return None
    if not (verdicts.may(result, "compare") and verdicts.may(host, "compare")):
        return None
    mine, theirs = result.rate(result.headline), host.rate(host.headline)
    return mine / theirs if mine and theirs else None


def ceiling_cell(r: Result, short: bool = False) -> str:
    """``43.6 % of bw``; short: ``43.6 % bw``, ``10.5 % fp32``."""
    p = r.pct_of_ceiling
    if p is None or r.ceiling is None:
        return fmt.DASH
    label = fmt.ceiling_label(r.ceiling)
    if short:
        return f"{fmt.pct(p)} {label.removesuffix(' peak')}"
    return f"{fmt.pct(p)} of {label}"


def flag_words(r: Result) -> list[str]:
    """Everything that qualifies a number: status, quality flags, the validity verdict's level."""
    if r.status == "skipped":
        return [f"skipped: {r.reason or 'no reason given'}"]
    if r.status == "wrong":
        return [f"WRONG: {r.reason or 'correctness check failed'}"]
    words = list(r.flags)
    if r.verdict is not None and r.verdict.level != "ok":
        if verdicts.kind_of(r) == "in_cache":  # not "warn": the number is right, for a cache
            words = ["in cache", *(w for w in words if w != "in_cache")]
        else:
            words.insert(0, r.verdict.level)
    return words


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


class Footnotes:
    """Reasons printed once under a table; rows point to them by number. Reasons that
    differ only in their numbers share one footnote, which gives the numbers' range
    ("other processes used 1.1 to 1.7 of 2 cores during the run")."""

    def __init__(self) -> None:
        self.templates: dict[str, int] = {}
        self.values: dict[str, list[list[str]]] = {}

    def ref(self, reason: str) -> int:
        template = _NUMBER.sub("{}", reason.replace("{", "(").replace("}", ")"))
        self.values.setdefault(template, []).append(_NUMBER.findall(reason))
        return self.templates.setdefault(template, len(self.templates) + 1)

    def refs(self, r: Result) -> str:
        """`` [1][2]``: the result's verdict reasons, or why it was skipped or wrong, or why a
        flag its verdict let pass is harmless (``passed_flags``)."""
        if r.status in ("skipped", "wrong"):
            reasons = flag_words(r)
        elif r.verdict is None or not r.ok:
            return ""
        elif r.verdict.level == "ok":
            reasons = passed_flags(r)
        else:
            reasons = r.verdict.reasons
        nums = sorted({self.ref(why) for why in reasons})
        return f" [{','.join(map(str, nums))}]" if nums else ""

    @property
    def reasons(self) -> list[str]:
        out = []
        for template, seen in self.values.items():
            slots = zip(*seen, strict=True) if len({len(v) for v in seen}) == 1 else []
            filled = [_span(vals) for vals in slots]
            out.append(
                template.format(*filled)
                if len(filled) == template.count("{}")
                else "; ".join(dict.fromkeys(template.format(*v) for v in seen))
            )
        return out

    def lines(self, first: int = 1) -> list[str]:
        """The footnotes numbered ``first`` and after."""
        return [f"[{n}] {why}" for n, why in enumerate(self.reasons, start=1) if n >= first]


def passed_flags(r: Result) -> list[str]:
    """Why a flag an ok verdict let pass is harmless, to be said as a footnote like the
    verdict's reasons are: a ``timed_out`` row read raw beside "warn [1]" (timed out) on the
    next row, with nothing to tell the two apart."""
    if r.verdict is None or r.verdict.level != "ok" or "timed_out" not in r.flags:
        return []
    lo, hi = r.measurement.ci
    m = r.measurement.median
    if not (m > 0 and math.isfinite(lo + hi)):
        return []
    return [
        f"timed out with the median known to ±{50 * (hi - lo) / m:.1f} % (within "
        f"±{TIMED_OUT_OK_PCT:g} %): usable"
    ]


def verdict_word(r: Result) -> str:
    """What a row's flags cell leads with in a narrow table, and what a progress line ends
    with: the verdict's level where it is not ok, else the flags ("" for a clean result)."""
    if r.status in ("skipped", "wrong"):
        return ""
    words = flag_words(r)
    judged = r.verdict is not None and r.verdict.level != "ok"
    return ", ".join(words[:1] if judged else words)


def _span(values: Iterable[str]) -> str:
    vals = list(dict.fromkeys(values))
    if len(vals) == 1:
        return vals[0]
    nums = sorted(vals, key=lambda v: float(v.replace(",", "")))
    return f"{nums[0]} to {nums[-1]}"


def status_cell(r: Result) -> str:
    return {"skipped": "skipped", "wrong": "WRONG"}.get(r.status, fmt.throughput(r))


def spread_cell(r: Result) -> str:
    """The IQR as % of the median (±IQR everywhere). Two digits: a spread is itself an
    estimate, good to about 10 % of its value."""
    # under 5 samples the spread is not known: one sample's IQR of 0 printed "0 %", three
    # samples' "20 %", each beside its own "only N samples: the spread is not known"
    return fmt.spread(r.measurement.rel_iqr) if r.ok and r.measurement.spread_known else fmt.DASH


def _precision_key(results: Iterable[Result]) -> str | None:
    """The precision parameter a workload sweeps (it gets a "best" row per device)."""
    results = list(results)
    for k in fmt.PRECISION_KEYS:
        if len({str(r.params.get(k)) for r in results if k in r.params}) > 1:
            return k
    return None


def _flags_cell(r: Result, notes: Footnotes) -> Alt:
    """All flag words, or (short) the verdict's level and the footnotes saying why."""
    refs = notes.refs(r)
    words = flag_words(r)
    if r.status in ("skipped", "wrong"):
        return Alt(refs.strip(), refs.strip())  # the status is in the throughput column
    return Alt(", ".join(words) + refs, (verdict_word(r) + refs).strip())


def _best_rows(table: FitTable, results: list[Result], devices: list[str]) -> None:
    """One row per device: the precision (with its other params) that ran fastest."""
    key = _precision_key(results)
    if key is None:
        return
    for d in devices:
        mine = [
            r
            for r in results
            if r.device == d and r.ok and r.rate(r.headline) and verdicts.may(r, "rank")
        ]
        if not mine:
            continue
        best = max(mine, key=lambda r: r.rate(r.headline) or 0.0)
        table.row(
            f"{INDENT}best: {fmt.case_label(best.variant, best.params)}",
            d,
            fmt.throughput(best),
            fmt.duration(best.median_s),
            spread_cell(best),
            Alt(ceiling_cell(best), ceiling_cell(best, short=True)),
        )


def results_table(record: RunRecord, notes: Footnotes | None = None) -> FitTable:
    """One row per case and device, grouped by workload; GPUs show their speedup over the
    CPU. One device: its name is in the title rather than on every row."""
    notes = notes if notes is not None else Footnotes()
    devices = devices_of(record)
    title = f"run {record.run_id or '(unsaved)'}"
    if record.status != "complete":
        title += f" · {record.status}"
    if len(devices) == 1:
        title += f" · {reference.device_label(record, devices[0])}"
    if record.config.get("distributed"):  # "DDP x2 · gloo": never mistaken for a plain run
        from torchmark.judge.worlds import world_label

        info = record.config["distributed"]
        title += f" · {world_label(info)} · {info.get('backend')}"
    table = FitTable(
        Col("case", wrap=14, spill=True),
        Col("device", show=len(devices) > 1),
        Col("throughput", justify="right"),
        Col("median", justify="right", drop=3),
        Col("±IQR", justify="right"),
        Col(
            "% of ceiling", justify="right", short_header="% ceiling", shorten=2, drop=5, vital=True
        ),
        Col("vs CPU", justify="right", drop=4, vital=True),
        Col("flags", wrap=10, shorten=1),
        title=title,
    )
    by_case: dict[CaseKey, dict[str, Result]] = {}
    for r in record.results:
        by_case.setdefault(case_key(r), {})[r.device] = r
    for workload in dict.fromkeys(k[0] for k in by_case):
        table.row(Text(workload, style="bold"))
        for key, per_device in by_case.items():
            if key[0] != workload:
                continue
            host = next((r for d, r in per_device.items() if is_host(d)), None)
            rows = [per_device[d] for d in devices if d in per_device]
            label = fmt.case_label(rows[0].variant, rows[0].params)
            for i, r in enumerate(rows):
                s = speedup(r, host)
                table.row(
                    INDENT + label if i == 0 else "",
                    r.device,
                    status_cell(r),
                    fmt.duration(r.median_s),
                    spread_cell(r),
                    Alt(ceiling_cell(r), ceiling_cell(r, short=True)),
                    fmt.ratio(s) if s else "",
                    _flags_cell(r, notes),
                )
        _best_rows(table, [r for r in record.results if r.workload == workload], devices)
    if not record.results:
        table.row("(no results)")
    return table


def ceilings_table(record: RunRecord, notes: Footnotes | None = None) -> FitTable:
    """The measured ceilings; how each was measured is under the table with ``verbose``
    (``run_tables``) and in the HTML report, where there is room for it."""
    notes = notes if notes is not None else Footnotes()
    rows = ceiling_rows(record)
    devices = list(dict.fromkeys(r.device for r in rows))
    title = "ceilings"
    if len(devices) == 1:
        title += f" · {reference.device_label(record, devices[0])}"
    table = FitTable(
        Col("device", show=len(devices) > 1),
        Col("ceiling"),
        Col("measured", justify="right"),
        Col("theoretical", justify="right", drop=2),
        Col("% of theor.", justify="right", drop=3),
        Col("notes", wrap=8, drop=1),
        title=title,
    )
    for row in rows:
        table.row(
            row.device,
            row.key,
            row.measured,
            "" if row.theoretical == fmt.DASH else row.theoretical,
            "" if row.pct == fmt.DASH else row.pct,
            f"[{notes.ref(row.caveat)}]" if row.caveat else "",
        )
    if not rows:
        table.row("", "(none measured)")
    return table


def seed_placement(record: RunRecord) -> list[str]:
    """Where each device's ``seed-add as-published`` rate falls in the blog's 2023 table, and
    among every row the seed chart draws (the committed reference runs too): the chart's
    note gives the same two ranks."""
    mine = reference.seed_rows(record)
    if not mine:  # nothing to place: the reference runs are not read (`show`'s start-up)
        return []
    ref = reference.load(reference.SEED_SET)
    from torchmark.judge.load import load_words, under_load

    # a rank taken beside other jobs says so: the same machine moved from rank 11 to 10
    # with the load, and its line did not say why
    busy = {
        reference.device_label(record, r.device): load_words(r.telemetry or {})
        for r in reference.seed_results(record)
        if under_load(r.telemetry)
    }
    lines = []
    for at in reference.placements(ref, mine):
        row, slower, faster = at.row, at.slower, at.faster
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
        if at.rank is None:  # never ranked: its verdict rejects the number (verdicts)
            lines.append(
                f"{reference.SEED_WORKLOAD} {reference.SEED_VARIANT} on {row.hardware}: not "
                f"placed in the seed blog's 2023 table: {row.implausible}"
            )
            continue
        lines.append(
            f"{reference.SEED_WORKLOAD} {reference.SEED_VARIANT} on {row.hardware}: "
            f"{fmt.sig(row.value)} it/s, rank {at.rank} of {at.of} in the seed blog's 2023 "
            f"table ({at.rank_all} of {at.of_all} with torchmark's reference runs), {between}. "
            f"One it/s there is one in-place add over a {tensor} tensor ({gbs} here): see "
            "`torchmark compare --reference seed-2023`."
            + (
                f" Measured while {busy[row.hardware]}: the rank may be the load's."
                if row.hardware in busy
                else ""
            )
        )
    return lines


def run_tables(record: RunRecord, verbose: bool = False) -> list[RenderableType]:
    """What ``torchmark run`` prints at the end: results, seed-table placement, ceilings.
    ``verbose`` adds how each ceiling was measured (a paragraph each)."""
    footnotes = Footnotes()
    out: list[RenderableType] = [results_table(record, footnotes)]
    if footnotes.templates:
        out.append(lines(footnotes.lines()))
    notes = _notes(record)
    from torchmark.report.parts import parts_note

    parts = parts_note(record)  # a resumed run: when each part ran, the gaps between
    notes += [f"note: {parts}"] if parts else []
    if notes:
        out.append(lines(notes))
    out += pipeline_tables(record)  # the input workload's breakdown and advice, if it ran
    first = len(footnotes.templates) + 1
    out.append(ceilings_table(record, footnotes))
    methods = [
        f"{r.device} {r.key}: {r.method}" + (f"; {r.origin}" if r.origin else "")
        for r in (ceiling_rows(record) if verbose else [])
    ]
    # where reused ceilings came from, said by default: percentages of another day's limits
    reuse = reuse_notes(record)
    if len(footnotes.templates) >= first or methods or reuse:
        out.append(lines(footnotes.lines(first) + methods + [f"note: {n}" for n in reuse]))
    placement = seed_placement(record)
    if placement:
        out.append(lines(placement))
    return out


def _notes(record: RunRecord) -> list[str]:
    """Observations the workloads made (e.g. the seed loop returns one cached tensor), each
    once: where one note is made by several sizes of a case (collectives: every op at every
    size said its busbw factor, ~100 lines), with their count and the sizes it applies to."""
    seen: dict[str, list[Result]] = {}
    for r in record.results:
        for n in r.notes:
            seen.setdefault(n, []).append(r)
    out = []
    for n, rs in seen.items():
        where = _where([fmt.case_label(r.variant, {}, r.workload, r.device) for r in rs])
        sizes = _sizes(rs)
        out.append(f"note: {n} ({f'{len(rs)} cases: {where}, at {sizes}' if sizes else where})")
    return out


def _sizes(rs: list[Result]) -> str:
    """``bytes=1024 to 4.19M``: the sizes (numeric parameters) that vary among results
    named alike; "" where the names alone say where (other parameters: as before)."""
    if len({(r.workload, r.variant, r.device) for r in rs}) == len(rs):
        return ""
    out = []
    for key in dict.fromkeys(k for r in rs for k in r.params):
        vals = [r.params.get(key) for r in rs]
        if len(set(map(str, vals))) < 2:
            continue
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
            return ""
        lo, hi = min(vals, key=float), max(vals, key=float)  # type: ignore[arg-type]
        out.append(f"{key}={fmt.param_value(lo)} to {fmt.param_value(hi)}")
    return "; ".join(out)


def _where(places: list[str]) -> str:
    places = list(dict.fromkeys(places))
    return ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
