"""`torchmark history`, `torchmark export`, `torchmark import`."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from torchmark.cli.app import DbOption, app, console, err_console, open_store, read_store
from torchmark.errors import InputError, UnknownNameError
from torchmark.judge import verdicts
from torchmark.report.layout import Alt, Col, FitTable
from torchmark.store.base import RunSummary


def shown_status(r: RunSummary) -> str:
    """A run still marked running whose process is gone on this host was killed (SIGKILL,
    power loss): nothing could mark it incomplete, so say so here."""
    if r.status != "running" or r.pid is None or r.host != socket.gethostname():
        return r.status
    import psutil  # only for a run said to be running on this host

    try:  # a pid can be reused: the live process must be older than the run
        alive = psutil.Process(r.pid).create_time() <= r.created_utc.timestamp() + 1
    except psutil.Error:
        alive = False
    return "running" if alive else "incomplete (process gone)"


def history_rows(runs: list[RunSummary]) -> list[dict[str, Any]]:
    """One dict per run, keyed by the table's column names (``--json`` prints these):
    id, utc_time, kind, status (as shown: a killed run reads "incomplete (process gone)"),
    devices, ok, total, host, command; then tool_version and pid."""
    return [
        {
            "id": r.run_id,
            "utc_time": r.created_utc.isoformat(),
            "kind": r.kind,
            "status": shown_status(r),
            "devices": list(r.devices),
            "ok": r.n_ok,
            "total": r.n_results,
            "host": r.host,
            "command": short_command(r.command),
            "tool_version": r.tool_version,
            "pid": r.pid,
        }
        for r in runs
    ]


def history_table(runs: list[RunSummary], where: str) -> FitTable:
    """Newest first. When narrow: the host goes first, then the seconds and the year of
    the time, then the command; never the id, status or counts."""
    table = FitTable(
        Col("id"),
        Col("UTC time", shorten=2),
        Col("kind"),
        Col("status", wrap=8),
        Col("devices", wrap=6),
        Col("ok/total", justify="right"),
        Col("host", drop=1),
        Col("command", wrap=24, drop=3),
        title=f"Stored runs in {where}",
    )
    for r in runs:
        status = shown_status(r)
        table.row(
            r.run_id,
            Alt(f"{r.created_utc:%Y-%m-%d %H:%M:%S}", f"{r.created_utc:%m-%d %H:%M}"),
            r.kind,
            Text(status, style="" if status == "complete" else "yellow"),
            ", ".join(r.devices),
            counted(r),
            r.host,
            short_command(r.command),
        )
    return table


def counted(r: RunSummary) -> str:
    """``3/4``; a prediction holds no result to count, and is never "0 ok" (``predicted``)."""
    return verdicts.PREDICTED.word if verdicts.is_prediction(r.kind) else f"{r.n_ok}/{r.n_results}"


def short_command(command: str) -> str:
    """``/venv/bin/torchmark run`` or ``.../torchmark/__main__.py run`` -> ``torchmark run``."""
    program, _, rest = command.partition(" ")
    name = Path(program).name
    if name in ("torchmark", "__main__.py"):
        return f"torchmark {rest}".strip()
    return command


@app.command()
def history(
    db: DbOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Show the N newest runs.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List stored runs, newest first."""
    if limit < 1:
        raise InputError(f"--limit must be at least 1, not {limit}")
    with contextlib.closing(read_store(db)) as store:
        runs = store.list_runs(limit)
    if as_json:
        sys.stdout.write(json.dumps(history_rows(runs), indent=2) + "\n")
    elif not runs:
        console.print(f"No runs stored in {store.url} yet; `torchmark run` makes one.")
    else:
        console.print(history_table(runs, store.url))
        console.print(f"See a run's tables again with `torchmark show {runs[0].run_id}`")


@app.command()
def export(
    run: Annotated[str, typer.Argument(help="Run id from `torchmark history`, or latest.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="json or csv.")] = "json",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to FILE instead of stdout.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Write a stored run as JSON (lossless, re-importable) or CSV (for spreadsheets)."""
    from torchmark.store.exchange import FORMATS, export_run

    if fmt not in FORMATS:
        raise UnknownNameError("format", fmt, FORMATS)
    with contextlib.closing(read_store(db)) as store:
        record = store.load(run)
    text = export_run(record, fmt)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {output} ({e.strerror or e}); choose another -o") from None
    console.print(f"Run {record.run_id} written to {output} ({fmt})")


def _already_stored(store: Any, record: Any) -> bool:
    """Whether the store holds this run, under its id, with the same content."""
    from torchmark.errors import RunNotFoundError

    if not record.run_id:
        return False
    try:
        kept = store.load(record.run_id)
    except RunNotFoundError:
        return False
    return bool(kept.model_dump(mode="json") == record.model_dump(mode="json"))


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A run exported with `torchmark export`.")],
    db: DbOption = None,
) -> None:
    """Store a run exported as JSON (keeps its id unless that id is already taken)."""
    from torchmark.store.exchange import import_run
    from torchmark.web.admission import refusal

    record = import_run(file)  # parse and validate fully before the store is touched
    refused = refusal(record)  # the board's bounds are this store's: one rule, one module
    if refused:
        raise InputError(f"{file} is refused: {refused}")
    with contextlib.closing(open_store(db)) as store:
        if _already_stored(store, record):
            # the same file imported again: one copy, not a new one each time
            err_console.print(
                f"Run {record.run_id} is already in {store.url}, the same: nothing imported",
                soft_wrap=not err_console.is_terminal,
            )
            console.print(record.run_id)
            return
        run_id = store.save(record)
    if record.run_id and run_id != record.run_id:
        err_console.print(  # one line in a log or a pipe: a long store path must not cut it
            f"Run id {record.run_id} is already in {store.url}; both are kept, "
            f"the imported one as {run_id}",
            soft_wrap=not err_console.is_terminal,
        )
    console.print(run_id)
