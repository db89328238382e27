"""`torchmark soak`: repeat a heavy workload for a duration (``kinds.soak``); its view is
``report.soak``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from torchmark.cli.app import DbOption, JsonOutOption, app, console, open_store
from torchmark.cli.output import check_json_path, finish, shown_even_if_interrupted
from torchmark.cli.printers import show_soak

__all__ = ["show_soak", "soak"]


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
    from torchmark.devices import available, resolve
    from torchmark.kinds.soak.kind import soak as run_soak
    from torchmark.run.config import parse_duration
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
    from torchmark.cli.progress import tenths

    what = f"soaking {workload} on {dev[0].name}"
    tick = tenths(console, what)  # a line at each tenth where the bar cannot be drawn
    progress = Progress(
        TextColumn(what, markup=False),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with shown_even_if_interrupted(show_soak, json_path), progress:
        task = progress.add_task("soak", total=seconds)

        def on_chunk(t: float, total: float) -> None:
            progress.update(task, completed=t)
            tick(t, total)

        record = run_soak(w, dev[0], seconds, store=store, on_chunk=on_chunk)
    finish(record, show_soak, json_path, store.url)
