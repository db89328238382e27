"""`torchmark doctor` (is this install and machine fit to measure?) and `torchmark soak`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from torchmark.cli.app import AsJsonOption, DbOption, JsonOutOption, app, console, open_store
from torchmark.results import RunRecord

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
LEVEL_STYLE = {"ok": "green", "warn": "yellow", "invalid": "bold red"}
BARS = "▁▂▃▄▅▆▇█"


@app.command()
def doctor(
    as_json: AsJsonOption = False,
) -> None:
    """Check the install and the machine: each check ok / warn / fail (or skip) with its fix."""
    from torchmark import doctor as doc

    checks = doc.run_checks(doc.gather())
    code = doc.exit_code(checks)
    if as_json:
        out = {"ok": code == 0, "checks": [c.as_dict() for c in checks]}
        console.print_json(json.dumps(out))
    else:
        t = Table(show_header=False, box=None, pad_edge=False)
        for col in ("status", "check", "detail"):
            t.add_column(col, no_wrap=col != "detail")
        for c in checks:
            detail = Text(c.detail)
            if c.fix and c.status != "ok":
                detail.append("\nfix:", "dim").append(f" {c.fix}")
            t.add_row(Text(f"{c.status:<4}", STYLE[c.status]), c.name, detail)
        console.print(t)
        n = {s: sum(c.status == s for c in checks) for s in STYLE}
        console.print(", ".join(f"{v} {k}" for k, v in n.items() if v))
    if code:
        raise typer.Exit(code)


def sparkline(values: list[float | None]) -> str:
    """Unicode bars scaled from 0 to the largest value (a fall reads as a falling bar)."""
    top = max((v for v in values if v is not None), default=0.0)
    if top <= 0:
        return ""
    return "".join(
        " " if v is None else BARS[min(len(BARS) - 1, int(v / top * (len(BARS) - 1) + 0.5))]
        for v in values
    )


# telemetry columns of the soak table: (window key, header, what to say when no window has it)
SOAK_SENSORS = (
    ("clock_mhz", "clock MHz", "clock"),
    ("temp_c", "temp °C", "temperature"),
    ("power_w", "power W", "power"),
)


# The throughput bar's full width: with every sensor and the throttle reasons the table
# takes exactly 80 columns.
BAR = 10


def show_soak(record: RunRecord) -> None:
    """Throughput per window beside the telemetry of the same span, in 80 columns; a
    sensor no window read is said once under the table instead of a column of dashes."""
    from torchmark import format as fmt
    from torchmark.report.layout import Col, FitTable
    from torchmark.results.payloads import SoakPayload

    s = record.payload.soak if isinstance(record.payload, SoakPayload) else None
    if s is None:
        console.print("this run has no soak windows (it stopped before the first was stored)")
        return
    wins = s.windows
    unit = s.unit or ""
    console.print(Text.assemble("Soak of ", (s.case, "bold"), f" for {s.elapsed_s:.0f} s"))
    sensors = [x for x in SOAK_SENSORS if any(getattr(w, x[0]) is not None for w in wins)]
    # FitTable: at 60 columns rich cut every header ("secon…", "temp…") and dropped the
    # throttle reasons; here the bar gives way first (the sparkline below keeps the
    # shape), then each window stacks over its figures.
    t = FitTable(
        Col("seconds", justify="right"),
        Col(unit, justify="right"),
        Col("", drop=1),
        *(Col(header, justify="right") for _, header, _ in sensors),
        Col("throttle", wrap=12, vital=True),
    )
    top = max((w.rate or 0.0 for w in wins), default=0.0) or 1.0
    digits = 0 if s.elapsed_s >= 60 else 1
    for w in wins:
        rate = w.rate
        t.row(
            f"{w.t0_s:.{digits}f}–{w.t1_s:.{digits}f}",
            fmt.DASH if rate is None else fmt.sig(rate, 3),
            "█" * round(BAR * (rate or 0.0) / top),
            *(_num(getattr(w, key)) for key, _, _ in sensors),
            # a no-break space: "100 %" never wraps apart
            ", ".join(f"{k} {v}\u00a0%" for k, v in w.throttle.items()),
        )
    console.print(t)
    missing = [sensor[2] for sensor in SOAK_SENSORS if sensor not in sensors]
    if missing:
        console.print(f"not read on this device: {', '.join(missing)} (no sensor exposed)")
    console.print(f"throughput over time: {sparkline([w.rate for w in wins])}")
    v = record.verdict
    if v is not None:
        console.print(Text.assemble("verdict: ", (v.level, LEVEL_STYLE[v.level])))
        for reason in v.reasons:
            console.print(f"  - {reason}")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


@app.command()
def soak(
    duration: Annotated[
        str, typer.Option(help="How long: 90s, 10m, 1h (plain numbers are seconds).")
    ] = "10m",
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            "-d",
            help="The device to soak: cpu, cuda, cuda:N (default: the first accelerator, "
            "else the CPU).",
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option("--workload", "-w", help="Heavy workload to repeat; see `torchmark list`."),
    ] = "matmul",
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    """Repeat a heavy workload: throughput over time with clocks, heat, power and throttling."""
    from torchmark.cli.run import check_json_path, finish, shown_even_if_interrupted
    from torchmark.devices import available, resolve
    from torchmark.soak import parse_duration
    from torchmark.soak import soak as run_soak
    from torchmark.workloads import WORKLOADS, load_builtins

    seconds = parse_duration(duration)
    check_json_path(json_path)
    if device is None:
        found = available()
        dev = [next((d for d in found if d.is_accelerator), found[0])]
    else:
        dev = resolve(device)
    load_builtins()
    w = WORKLOADS.get(workload)()
    store = open_store(db)
    progress = Progress(
        TextColumn(f"soaking {workload} on {dev[0].name}", markup=False),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with shown_even_if_interrupted(show_soak, json_path), progress:
        task = progress.add_task("soak", total=seconds)
        record = run_soak(
            w,
            dev[0],
            seconds,
            store=store,
            on_chunk=lambda t, total: progress.update(task, completed=t),
        )
    finish(record, show_soak, json_path, store.url)
