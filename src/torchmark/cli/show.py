"""`torchmark show RUN`: a stored run in the terminal, as the command that measured it
printed it at its end (the same printer per kind of run: ``cli.printers``).

Torch-free: it starts in a fraction of a second where the measuring commands take ~1.3 s
to import torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import RenderableType
from rich.text import Text

from torchmark.cli import printers
from torchmark.cli.app import DbOption, app, console, one_line
from torchmark.cli.report import RUN_HELP, load_runs
from torchmark.results import RunRecord


def printer_for(record: RunRecord, verbose: bool = False) -> Callable[[RunRecord], None]:
    """The printer the measuring command used for this kind of run. ``verbose`` is that
    command's ``-v``: how each ceiling was measured (run), every categorisation rule
    (profile); model, tune, soak and serving have none."""
    if record.kind == "soak":
        return printers.show_soak
    if record.kind == "profile":
        return functools.partial(printers.show_profile, verbose=verbose)
    if record.kind == "tune":
        return printers.show_tune
    if record.kind == "serving":
        return printers.show_serving
    if record.kind == "predict":
        return printers.show_predict
    if record.kind == "bench":
        return printers.show_bench
    if record.kind == "model" and "loader" not in record.config:  # --loader: the input view
        return printers.show_model
    if record.config.get("distributed"):
        return functools.partial(printers.show_distributed, verbose=verbose)
    return functools.partial(printers.show_run, verbose=verbose)


def header(record: RunRecord) -> Text:
    """``Run ID · kind · status · 2026-11-21 08:30 UTC · host``: which run this is."""
    host = record.environment.get("host")
    when = f"{record.created_utc:%Y-%m-%d %H:%M} UTC"
    said = " · ".join(str(x) for x in (record.kind, record.status, when, host) if x)
    return Text.assemble("Run ", (str(record.run_id or "(no id)"), "bold"), f" · {said}")


def command_line(record: RunRecord) -> Text | None:
    """``$ torchmark run --quick``: one line even in a log, as profile prints its command."""
    from torchmark.cli.history import short_command

    return Text(f"$ {short_command(record.command)}", no_wrap=True) if record.command else None


@app.command()
def show(
    runs: Annotated[list[str], typer.Argument(help=RUN_HELP, show_default=False)],
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also say how each ceiling was measured, as `run -v` (a profile: every "
            "categorisation rule, as `profile -v`).",
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """A stored run in the terminal: the tables and verdicts its command printed at its end.

    Several runs print one after another; the rungs of a `run --scaling` ladder given
    together end with the ladder's table, as that command printed it.
    """
    records = load_runs(runs, db)  # every run found before any is printed
    for i, record in enumerate(records):
        if i:
            console.print()
        console.print(header(record))
        line = command_line(record)
        if line is not None:
            console.print(line, soft_wrap=True)
        printer_for(record, verbose)(record)
        hint = resumable(record, db)
        if hint:
            console.print(hint, soft_wrap=one_line(console))
    ladder = scaling_ladder(records)
    if ladder:
        console.print()
    printers.printed(ladder)


def resumable(record: RunRecord, db: str | None) -> str | None:
    """An interrupted `torchmark run` (not a distributed one): the command that finishes it,
    as the run printed when it stopped."""
    from torchmark.report.parts import resume_hint
    from torchmark.run.resume import can_resume

    if not record.run_id or can_resume(record) is not None:
        return None
    return resume_hint(record.run_id, db)


def scaling_ladder(records: list[RunRecord]) -> list[RenderableType]:
    """The runs of a `run --scaling` ladder (no DDP, then ranks) given together: the table
    that command printed after its rungs. Nothing for runs that are not one."""
    if len(records) < 2 or not any(r.config.get("distributed") for r in records):
        return []
    from torchmark.report.scaling import ladder, ladder_renderables

    if not any(len({g.label for g in rungs}) > 1 for rungs in ladder(records).values()):
        return []
    return ladder_renderables(records)
