"""The ``input`` and ``input-tokens`` workloads' breakdown and advice, pure functions of
their stored results.

The table: per loader configuration, images/s (or tokens/s), the share of a step spent
waiting for data, copying it and computing, and the ratio to the same step fed from
device memory; under it, the advice (``report.pipeline_advice``); and two runs' pipelines
compared (``comparison_parts``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import RenderableType

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.loaders import INPUT_WORKLOADS, RESIDENT, YOURS, LoaderConfig, config_of
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.report.pipeline_advice import Advice, advise, rate, unit_of
from torchmark.results import Result, RunRecord

if TYPE_CHECKING:
    from torchmark.judge.comparison import Change, Comparison


def config_cell(r: Result) -> Alt:
    if r.variant == RESIDENT:
        return Alt("device-resident", "resident")
    if r.params.get(YOURS):
        return Alt("your loader, as given", "yours")
    c = config_of(r.params)
    if c == LoaderConfig():
        return Alt("defaults (workers=0)", "w=0")
    words = [f"w={c.workers}"]
    words += ["pin"] if c.pin else []
    words += [f"prefetch={c.prefetch}"] if c.prefetch is not None else []
    words += ["persistent"] if c.persistent else []
    words += ["side-stream"] if c.side_stream else ["non_blocking"] if c.non_blocking else []
    short = " ".join(words).replace("prefetch=", "pf=").replace("persistent", "pers")
    short = short.replace("non_blocking", "nb").replace("side-stream", "side")
    return Alt(" ".join(words), short)


def share(part: float | None, step: float | None) -> str:
    if part is None or not step:
        return "none" if part is None and step else fmt.DASH
    return f"{round(100 * part / step)} %"


def breakdown_cells(r: Result, resident: Result | None) -> list[str]:
    """One configuration's step, its wait / copy / compute shares and its ratio to the
    device-resident step: the cells every view of the breakdown prints."""
    b = r.extra.get("input", {})
    step = b.get("step_s")
    vs = None  # only where both verdicts allow a comparison (not invalid under load, ...)
    if resident is not None and verdicts.may(r, "compare") and verdicts.may(resident, "compare"):
        vs = rate(r) / rate(resident) if rate(resident) else None
    if r.variant == RESIDENT:
        cells = [fmt.duration(r.median_s), "0 %", "0 %", "100 %"]
    elif not r.ok:
        cells = [r.status, "", "", ""]
    else:
        cells = [
            fmt.duration(step),
            share(b.get("wait_s"), step),
            share(b.get("copy_s"), step),
            share(b.get("compute_s"), step),
        ]
    return [*cells, f"{round(100 * vs)} %" if vs is not None else ""]


def by_device(record: RunRecord, workload: str) -> list[tuple[str, list[Result], Result | None]]:
    """(device, its results of ``workload`` in run order, its resident case if it ran)."""
    rs = [r for r in record.results if r.workload == workload]
    out = []
    for device in dict.fromkeys(r.device for r in rs):
        mine = [r for r in rs if r.device == device]
        resident = next((r for r in mine if r.variant == RESIDENT and r.ok), None)
        out.append((device, mine, resident))
    return out


def breakdown_table(record: RunRecord, workload: str = "input") -> FitTable | None:
    rs = [r for r in record.results if r.workload == workload]
    if not rs:
        return None
    groups = by_device(record, workload)
    table = FitTable(
        Col("loader", wrap=10),
        Col("device", show=len(groups) > 1),
        Col(f"{unit_of(rs)}/s", justify="right"),
        Col("step", justify="right", drop=2),
        Col("wait", justify="right"),
        Col("copy", justify="right", drop=1),
        Col("compute", justify="right"),
        Col("vs resident", justify="right", short_header="vs res."),
        title=f"{workload} pipeline · share of each step (wait / copy / compute)",
    )
    for _, mine, resident in groups:
        for r in mine:
            table.row(
                config_cell(r),
                r.device,
                fmt.sig(rate(r)) if r.ok else r.status,
                *breakdown_cells(r, resident),
            )
    return table


def advice_lines(record: RunRecord, workload: str) -> list[str]:
    """The advice for ``workload``'s cases, one line each, with the CPU's missing copy said."""
    text: list[str] = []
    for a in advice_of(record, workload):
        text += [f"{workload} on {a.device}: {line}" for line in a.lines]
    mine = [r for r in record.results if r.workload == workload]
    # the resident case copies nothing by design: only a fed case without a copy says CPU
    fed = [r for r in mine if r.ok and r.variant != RESIDENT]
    if any(r.extra.get("input", {}).get("copy_s") is None for r in fed):
        text.append("copy: none on the CPU (the batch is already in its memory)")
    return text


def advice_of(record: RunRecord, workload: str) -> list[Advice]:
    """``advise`` on ``workload``'s results alone: a caller per workload does not advise
    on every input workload each time."""
    return advise([r for r in record.results if r.workload == workload], record.ceilings)


def workloads_in(record: RunRecord) -> list[str]:
    return [w for w in INPUT_WORKLOADS if any(r.workload == w for r in record.results)]


def markdown_lines(record: RunRecord, cell: Callable[[str], str]) -> list[str]:
    """The breakdown as a Markdown table per input workload, then its advice as a list;
    ``cell`` escapes a stored string for a table cell (Markdown's own rules)."""
    out: list[str] = []
    for workload in workloads_in(record):
        rs = [r for r in record.results if r.workload == workload]
        out += [
            "",
            f"**{workload} pipeline**: share of each step spent waiting for the next batch, "
            "copying it to the device and computing",
            "",
            f"| Loader | Device | {unit_of(rs)}/s | Step | Wait | Copy | Compute | vs resident |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for _, mine, resident in by_device(record, workload):
            for r in mine:
                row = [
                    str(config_cell(r).full),
                    r.device,
                    fmt.sig(rate(r)) if r.ok else r.status,
                    *breakdown_cells(r, resident),
                ]
                out.append("| " + " | ".join(cell(x) for x in row) + " |")
        out += ["", *(f"- {cell(line)}" for line in advice_lines(record, workload))]
    return out


def pipeline_tables(record: RunRecord) -> list[RenderableType]:
    out: list[RenderableType] = []
    for workload in workloads_in(record):
        table = breakdown_table(record, workload)
        if table is not None:
            out += [table, lines(advice_lines(record, workload))]
    return out


def _shares(r: Result) -> tuple[float, float, float] | None:
    """(wait, copy, compute) as fractions of the step; the resident step computes only."""
    parts = step_parts(r)
    if parts is None:
        return None
    step: float = (r.median_s if r.variant == RESIDENT else r.extra["input"]["step_s"]) or 1.0
    return (parts[0] / step, parts[1] / step, parts[2] / step)


def step_parts(r: Result) -> tuple[float, float, float] | None:
    """(wait, copy, compute) seconds of the median step; the resident step computes only."""
    if r.variant == RESIDENT and r.ok and r.median_s is not None:
        return (0.0, 0.0, r.median_s)
    b = r.extra.get("input", {})
    if not r.ok or not b.get("step_s"):
        return None
    return (b.get("wait_s") or 0.0, b.get("copy_s") or 0.0, b.get("compute_s") or 0.0)


def _moved(a: Result, b: Result, k: int) -> str:
    sa, sb = _shares(a), _shares(b)
    if sa is None or sb is None:
        return ""
    x, y = round(100 * sa[k]), round(100 * sb[k])
    return f"{x} %" if x == y else f"{x}→{y} %"


def _said(c: Change) -> str:
    return {"UNCLEAR": "can't tell", None: "not comparable"}.get(c.verdict, str(c.verdict))


def comparison_parts(cmp: Comparison, names: Sequence[str]) -> list[RenderableType]:
    """Per later run: each input configuration's items/s in A and in it, the ratio and the
    verdict the main table gave (``comparison.independent``), how the step's wait / copy /
    compute shares moved, and one line per configuration that changed. ``names``: the
    runs' letters (A, B, ...)."""
    out: list[RenderableType] = []
    for i, changes in enumerate(cmp.changes, start=1):
        x = names[i]
        for workload in INPUT_WORKLOADS:
            mine = [c for c in changes if c.a.workload == workload]
            if not mine:
                continue
            unit = unit_of([c.a for c in mine])
            table = FitTable(
                Col("loader", wrap=10, shorten=1),
                Col("device", show=len({c.a.device for c in mine}) > 1),
                Col(f"A {unit}/s", justify="right", short_header="A"),
                Col(f"{x} {unit}/s", justify="right", short_header=x),
                Col(f"{x}/A", justify="right"),
                Col(f"{x} vs A"),
                Col("wait", justify="right"),
                Col("copy", justify="right", drop=1),
                Col("compute", justify="right", drop=2),
                title=f"{workload} pipeline, A → {x}: items/s and share of each step",
            )
            text: list[str] = []
            for c in mine:
                a, b = c.a, c.b
                table.row(
                    config_cell(a),
                    a.device,
                    fmt.sig(rate(a)) if a.ok else a.status,
                    fmt.sig(rate(b)) if b.ok else b.status,
                    fmt.ratio(c.speed) if c.speed else "",
                    _said(c),
                    _moved(a, b, 0),
                    _moved(a, b, 1),
                    _moved(a, b, 2),
                )
                label = f"{config_cell(a).full} on {a.device}"
                if c.verdict in ("FASTER", "SLOWER") and c.speed:
                    text.append(
                        f"changed: {label}: {rate(a):,.0f} → {rate(b):,.0f} {unit}/s "
                        f"({c.speed:.2f}x, {c.verdict}); wait {_moved(a, b, 0)} of the step"
                    )
                elif c.verdict is None:
                    text.append(f"not comparable: {label}: {c.why}")
            unclear = [str(config_cell(c.a).short) for c in mine if c.verdict == "UNCLEAR"]
            if unclear:
                text.append(
                    "can't tell (the noise is larger than the change; reasons above): "
                    + ", ".join(unclear)
                )
            if not any(c.verdict in ("FASTER", "SLOWER") for c in mine):
                text.append(f"no input configuration measurably changed from A to {x}")
            text += _best_moved(cmp.runs[0], cmp.runs[i], workload, x)
            out += [table, lines(text)]
    return out


def _best_moved(ra: RunRecord, rb: RunRecord, workload: str, x: str) -> list[str]:
    """Which configuration each run's advice names best, where the two differ."""
    best = [{a.device: a.best for a in advice_of(r, workload)} for r in (ra, rb)]
    out = []
    for device, cfg in best[0].items():
        other = best[1].get(device)
        if cfg is not None and other is not None and cfg != other:
            # "fastest measured", not "best": the two may sit within each other's noise
            out.append(
                f"fastest measured on {device}: A {cfg.label()}; {x} {other.label()} "
                "(each run's advice says whether it beat the defaults beyond the noise)"
            )
    return out
