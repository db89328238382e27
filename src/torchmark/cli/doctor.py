"""`torchmark doctor`: is this install and machine fit to measure?"""

from __future__ import annotations

import json

import typer
from rich.table import Table
from rich.text import Text

from torchmark.cli.app import AsJsonOption, app, console

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


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
