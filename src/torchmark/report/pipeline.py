"""The ``input`` workload's breakdown: per loader configuration, images/s, the share of a
step spent waiting for data, copying it and computing, and the ratio to the same step fed
from device memory; then the advice (``workloads.pipeline.advice``). Pure functions of the
stored results."""

from __future__ import annotations

from rich.console import RenderableType

from torchmark import format as fmt
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.results import Result, RunRecord
from torchmark.workloads.pipeline.advice import advise, rate
from torchmark.workloads.pipeline.feed import LoaderConfig
from torchmark.workloads.pipeline.workload import RESIDENT, config_of


def config_cell(r: Result) -> Alt:
    if r.variant == RESIDENT:
        return Alt("device-resident", "resident")
    c = config_of(r.params)
    if c == LoaderConfig():
        return Alt("defaults (workers=0)", "w=0")
    words = [f"w={c.workers}"]
    words += ["pin"] if c.pin else []
    words += [f"prefetch={c.prefetch}"] if c.prefetch is not None else []
    words += ["persistent"] if c.persistent else []
    short = " ".join(words).replace("prefetch=", "pf=").replace("persistent", "pers")
    return Alt(" ".join(words), short)


def share(part: float | None, step: float | None) -> str:
    if part is None or not step:
        return "none" if part is None and step else fmt.DASH
    return f"{round(100 * part / step)} %"


def breakdown_table(record: RunRecord) -> FitTable | None:
    rs = [r for r in record.results if r.workload == "input"]
    if not rs:
        return None
    devices = list(dict.fromkeys(r.device for r in rs))
    table = FitTable(
        Col("loader", wrap=10),
        Col("device", show=len(devices) > 1),
        Col("images/s", justify="right"),
        Col("step", justify="right", drop=2),
        Col("wait", justify="right"),
        Col("copy", justify="right", drop=1),
        Col("compute", justify="right"),
        Col("vs resident", justify="right", short_header="vs res."),
        title="input pipeline · share of each step (wait / copy / compute)",
    )
    for device in devices:
        mine = [r for r in rs if r.device == device]
        resident = next((r for r in mine if r.variant == RESIDENT and r.ok), None)
        for r in mine:
            b = r.extra.get("input", {})
            step = b.get("step_s")
            vs = rate(r) / rate(resident) if resident and r.ok and rate(resident) else None
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
            table.row(
                config_cell(r),
                r.device,
                fmt.sig(rate(r)) if r.ok else r.status,
                *cells,
                f"{round(100 * vs)} %" if vs is not None else "",
            )
    return table


def pipeline_tables(record: RunRecord) -> list[RenderableType]:
    table = breakdown_table(record)
    if table is None:
        return []
    text: list[str] = []
    for a in advise(record.results):
        text += [f"input on {a.device}: {line}" for line in a.lines]
    if any(r.ok and r.extra.get("input", {}).get("copy_s") is None for r in record.results):
        text.append("copy: none on the CPU (the batch is already in its memory)")
    return [table, lines(text)]
