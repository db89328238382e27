"""`torchmark compare` and `torchmark report`: views of stored runs (they never measure)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from torchmark import reference
from torchmark.cli.app import DbOption, app, console, err_console, open_store
from torchmark.errors import InputError, TorchmarkError
from torchmark.report import format as fmt
from torchmark.results import RunRecord


class RegressionFound(TorchmarkError):
    """--fail-on-regression tripped: exit 1, the cases are listed above the error line."""


RUN_HELP = "Run ids from `torchmark history`, `latest`, or exported JSON files."


def _is_file(spec: str) -> bool:
    return spec.lower().endswith(".json") or Path(spec).is_file()


def load_runs(specs: Sequence[str], db: str | None) -> list[RunRecord]:
    """Runs by id or ``latest`` from the store, or from JSON files (migrated on import)."""
    from torchmark.store.exchange import import_run

    store: Any = None
    out = []
    try:
        for spec in specs:
            if _is_file(spec):
                record = import_run(Path(spec))
                record.run_id = record.run_id or Path(spec).stem
            else:
                store = store or open_store(db)
                record = store.load(spec)
            out.append(record)
    finally:
        if store is not None:
            store.close()
    return out


@app.command()
def compare(
    runs: Annotated[list[str] | None, typer.Argument(help=RUN_HELP, show_default=False)] = None,
    ref: Annotated[
        str | None,
        typer.Option(
            "--reference",
            help="Place RUN (default: latest) in a reference set, e.g. seed-2023 "
            "(the seed blog's 2023 table).",
        ),
    ] = None,
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            "--fail-on-regression",
            metavar="PCT",
            help="Exit 1 when a case is SLOWER than in the first run by more than PCT % "
            "of its median time.",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Compare runs case by case (FASTER / SLOWER / SAME / UNCLEAR against their noise)."""
    from torchmark.report import compare as cmp_mod  # scipy (~0.8 s): `report` needs none

    specs = list(runs or [])
    if fail_on_regression is not None and fail_on_regression < 0:
        raise InputError(f"--fail-on-regression takes a percentage >= 0, not {fail_on_regression}")
    records: list[RunRecord]
    if ref is not None:
        if len(specs) > 1:
            raise InputError("--reference places one run; give at most one RUN (default: latest)")
        refset = reference.load(ref)
        (mine,) = load_runs(specs or ["latest"], db)
        for part in cmp_mod.placement_renderables(refset, mine):
            console.print(part)
        if refset.run is None:
            return
        console.print()
        records = [refset.run, mine]
    else:
        if len(specs) < 2:
            raise InputError(
                "compare needs two or more runs (ids, latest, or JSON files), "
                "or --reference NAME; valid reference sets: " + ", ".join(reference.names())
            )
        records = load_runs(specs, db)
    result = cmp_mod.compare(records)
    for part in cmp_mod.comparison_renderables(result):
        console.print(part)
    if fail_on_regression is not None:
        bad = cmp_mod.regressions(result, fail_on_regression)
        for i, c in bad:
            a = c.a
            case = f"{a.workload}/{a.variant} {fmt.params(a.params)}".strip()
            err_console.print(
                f"regression: {case} on {a.device} takes {c.time_change or 0:.1%} longer in "
                f"{cmp_mod.letter(i)} than in A (limit {fail_on_regression:g} %)",
                soft_wrap=True,
            )
        if bad:
            raise RegressionFound(
                f"{len(bad)} case(s) slower than the {fail_on_regression:g} % limit "
                "(--fail-on-regression)"
            )
        console.print(f"no case slower than {fail_on_regression:g} % (with a SLOWER verdict)")


@app.command()
def report(
    runs: Annotated[list[str], typer.Argument(help=RUN_HELP, show_default=False)],
    html: Annotated[
        Path | None, typer.Option("--html", help="Write one self-contained HTML file.")
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Write a Markdown table to FILE ('-' for stdout)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """A report of stored runs: HTML with charts, or a Markdown table for an issue."""
    from torchmark.report import markdown as md_mod

    records = load_runs(runs, db)
    if html is None and markdown is None:
        markdown = Path("-")
    if markdown is not None:
        text = md_mod.render(records)
        if str(markdown) == "-":
            typer.echo(text, nl=False)
        else:
            _write(markdown, text)
            console.print(f"wrote {markdown}")
    if html is not None:
        from torchmark.report import html as html_report  # matplotlib (~0.7 s) for the charts

        _write(html, html_report.render(records))
        console.print(f"wrote {html}")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path} ({e.strerror or e})") from None
