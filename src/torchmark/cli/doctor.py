"""`torchmark doctor`: is this install and machine fit to measure?"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from torchmark.cli.app import AsJsonOption, app, console

if TYPE_CHECKING:
    from torchmark.doctor import Check

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@app.command()
def doctor(
    as_json: AsJsonOption = False,
) -> None:
    """Check the install and the machine: each check ok / warn / fail (or skip) with its fix."""
    from torchmark import doctor as doc

    if as_json:
        checks = doc.run_checks(doc.gather())
        code = doc.exit_code(checks)
        console.print_json(json.dumps({"ok": code == 0, "checks": [c.as_dict() for c in checks]}))
        if code:
            raise typer.Exit(code)
        return
    # What needs no torch prints at once, the load after its 0.3 s sample, the rest after
    # torch's import (~3 s here).
    host = doc.gather_host(sample_load=False)
    checks = _more(doc.run_checks(host), [])
    host = doc.with_load(host)
    checks = _more(doc.run_checks(host), checks)
    checks = _more(doc.run_checks(doc.gather_torch(host)), checks)
    n = {s: sum(c.status == s for c in checks) for s in STYLE}
    console.print(", ".join(f"{v} {k}" for k, v in n.items() if v))
    code = doc.exit_code(checks)
    if code:
        raise typer.Exit(code)


def _more(found: list[Check], shown: list[Check]) -> list[Check]:
    """Print the checks in ``found`` not yet ``shown`` (by name); all of them, after."""
    names = {c.name for c in shown}
    more = [c for c in found if c.name not in names]
    if more:
        _table(more)
    return shown + more


def _table(checks: list[Check]) -> None:
    t = Table(show_header=False, box=None, pad_edge=False)
    for col in ("status", "check", "detail"):  # the check as wide in both tables
        t.add_column(col, no_wrap=col != "detail", min_width=22 if col == "check" else None)
    for c in checks:
        detail = Text(c.detail)
        if c.fix and c.status != "ok":
            detail.append("\nfix:", "dim").append(f" {c.fix}")
        t.add_row(Text(f"{c.status:<4}", STYLE[c.status]), c.name, detail)
    console.print(t)
