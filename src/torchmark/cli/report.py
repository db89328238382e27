"""`torchmark compare` and `torchmark report`: views of stored runs (they never measure)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from torchmark import format as fmt
from torchmark import reference
from torchmark.cli.app import DbOption, app, console, err_console, one_line, read_store
from torchmark.cli.printers import printed
from torchmark.errors import InputError, TorchmarkError
from torchmark.judge import verdicts
from torchmark.results import RunRecord

if TYPE_CHECKING:
    from torchmark.judge.comparison import Change, Comparison


class RegressionFound(TorchmarkError):
    """--fail-on-regression tripped: exit 1, the cases are listed above the error line."""


class CannotJudge(TorchmarkError):
    """--fail-on-regression cannot pass what it cannot judge: a case UNCLEAR with its median
    time grown beyond the limit, or measured in the baseline only (exit 3)."""

    exit_code = 3


RUN_HELP = "Run ids from `torchmark history`, `latest`, or exported JSON files."


def load_runs(specs: Sequence[str], db: str | None) -> list[RunRecord]:
    """Runs by id or ``latest`` from the store, or from JSON files (migrated on import)."""
    from torchmark.store.exchange import import_run, is_file_spec

    store: Any = None
    out = []
    try:
        for spec in specs:
            if is_file_spec(spec):  # by spelling: ids and paths never clash
                record = import_run(Path(spec))
                record.run_id = record.run_id or Path(spec).stem
            else:
                store = store or read_store(db)
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
            help="Place RUN in a reference set, e.g. seed-2023 (the seed blog's 2023 table); "
            "default: the newest stored run with a seed-add as-published result.",
        ),
    ] = None,
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            "--fail-on-regression",
            metavar="PCT",
            help="Exit 1 when a case is SLOWER than in the first run by more than PCT % "
            "of its median time; exit 3 (cannot judge) when a case is UNCLEAR, too noisy to "
            "tell, with its median beyond PCT, invalid or WRONG on either side, or did not "
            "run in a later run.",
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(help="Place RUN among a leaderboard's machines (torchmark board URL)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Compare runs case by case (FASTER / SLOWER / SAME / UNCLEAR against their noise).

    SAME only when the data rule out a change of 2 % or more; a change within the noise is
    UNCLEAR; a result its own verdict rejects (invalid, WRONG, skipped) is never judged.
    Exit codes with --fail-on-regression: 0 no regression, 1 a regression, 2 bad input,
    3 cannot judge (UNCLEAR beyond the limit, invalid or WRONG, or a case that no longer
    runs).
    """
    from torchmark.judge.comparison import compare as judged  # scipy (~0.8 s)
    from torchmark.report import compare as cmp_mod

    specs = list(runs or [])
    if server is not None:
        from torchmark.cli.submit import place_on_server

        return place_on_server(specs, server, db)
    if fail_on_regression is not None and not (
        math.isfinite(fail_on_regression) and fail_on_regression >= 0
    ):
        raise InputError(
            f"--fail-on-regression takes a percentage >= 0 (e.g. 10), not {fail_on_regression}"
        )
    records: list[RunRecord]
    if ref is not None:
        if len(specs) > 1:
            raise InputError(
                "--reference places one run; give at most one RUN (default: the newest "
                "with a seed-add result)"
            )
        refset = reference.load(ref)
        mine = load_runs(specs, db)[0] if specs else _newest_placeable(db)
        printed(cmp_mod.placement_renderables(refset, mine, console.width))
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
    if any(r.kind == "serving" for r in records):
        return _compare_serving(records, fail_on_regression)
    if any(verdicts.is_prediction(r.kind) for r in records):
        return _compare_predicted(records, fail_on_regression)
    result = judged(records)
    printed(cmp_mod.comparison_renderables(result, console.width))
    if fail_on_regression is not None:
        _gate(result, fail_on_regression)


def _compare_serving(records: list[RunRecord], pct: float | None) -> None:
    """Serving runs: each device's max rate at the bound per run, and whether a later run's
    bracket lies above or below the first's (--fail-on-regression: a SLOWER device by more
    than PCT % (its bracket's top that far under A's bottom) fails, an UNCLEAR one cannot be
    judged)."""
    from torchmark.report.serving import compare_table, compare_view

    printed(compare_view(records))
    if pct is None:
        return
    _, changes = compare_table(records)
    bad = [c for c in changes if c[1] == "SLOWER" and 100 * c[3] > pct]
    unsure = [c for c in changes if c[1] == "UNCLEAR"]
    for dev, verdict, why, _ in bad + unsure:
        err_console.print(f"{verdict}: {dev} {why}", soft_wrap=one_line(err_console), markup=False)
    if bad:
        raise RegressionFound(f"{len(bad)} device(s) serve less (--fail-on-regression)")
    if unsure:
        raise CannotJudge(
            f"{len(unsure)} device(s) cannot be judged: the searches' brackets overlap "
            "(a longer --budget narrows them)"
        )


def _compare_predicted(records: list[RunRecord], pct: float | None) -> None:
    """A prediction beside measured runs: a column marked predicted, whose one verdict is
    whether each measured median falls inside its interval; never FASTER or SLOWER, and
    never the side of a regression gate."""
    from torchmark.report.predict import compare_view

    if pct is not None:
        pred = next(r for r in records if verdicts.is_prediction(r.kind))
        raise InputError(verdicts.prediction_refusal(pred, "compare") or "a prediction")
    if all(verdicts.is_prediction(r.kind) for r in records):
        raise InputError(
            "compare a prediction with a run measured on the machine it predicts (give both)"
        )
    printed(compare_view(records))


def _newest_placeable(db: str | None) -> RunRecord:
    with contextlib.closing(read_store(db)) as store:
        return reference.newest_placeable(store)


def _gate(result: Comparison, pct: float) -> None:
    """--fail-on-regression: one line per failing case on stderr, then the exit code."""
    from torchmark.judge.comparison import cannot_judge, regressions

    bad = regressions(result, pct)
    unsure = cannot_judge(result, pct)
    for i, c in bad:
        err_console.print(
            f"regression: {_case(c)} takes {c.time_change or 0:.1%} longer in "
            f"{fmt.run_letter(i)} than in A (limit {pct:g} %)",
            soft_wrap=one_line(err_console),
            markup=False,
        )
    for i, c in unsure:
        # "median time +49.3% in B, UNCLEAR: p=2e-23 but the 49.3% change is within the
        # noise": the reason keeps its own words, after the verdict it explains
        what = (
            f"median time {c.time_change or 0:+.1%} in {fmt.run_letter(i)}, {c.verdict}: {c.why}"
            if c.verdict
            else c.why
        )
        err_console.print(
            f"cannot judge: {_case(c)}: {what}", soft_wrap=one_line(err_console), markup=False
        )
    if bad:
        raise RegressionFound(
            f"{len(bad)} case(s) slower than the {pct:g} % limit (--fail-on-regression)"
            + (f"; {len(unsure)} more cannot be judged" if unsure else "")
        )
    if unsure:
        raise CannotJudge(
            f"{len(unsure)} case(s) cannot be judged against the {pct:g} % limit "
            "(--fail-on-regression): measure them again on a quiet machine (not --quick), "
            "fix the case that no longer runs or is WRONG, or finish an incomplete run "
            "(torchmark run --resume)"
        )
    console.print(f"no case slower than {pct:g} % (every case judged)")


def _case(c: Change) -> str:
    return fmt.result_label(c.a)


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
            typer.echo(_printable(text), nl=False)
        else:
            _write(markdown, text)
            console.print(f"wrote {markdown}")
    if html is not None:
        from torchmark.report import html as html_report  # matplotlib (~0.7 s) for the charts

        _write(html, html_report.render(records))
        console.print(f"wrote {html}")


def _printable(text: str) -> str:
    """A stored text that is no UTF-8 (a lone surrogate: a file name decoded with
    surrogateescape, a run imported before such text was refused) as a backslash escape:
    writing the report raised UnicodeEncodeError."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(_printable(text), encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path} ({e.strerror or e})") from None
