"""What each kind of run prints at its end, one function per kind.

The measuring command prints it with the run it just stored; ``torchmark show`` with a
stored one, so this module and what it imports stay torch-free (``show`` starts in well
under a second; the measuring modules import torch, ~1.3 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from torchmark.cli.app import console

if TYPE_CHECKING:
    from rich.console import RenderableType

    from torchmark.results import RunRecord

__all__ = [
    "show_bench",
    "show_distributed",
    "show_model",
    "show_predict",
    "show_profile",
    "show_run",
    "show_serving",
    "show_soak",
    "show_tune",
]


def printed(parts: list[RenderableType]) -> None:
    for part in parts:
        console.print(part)


def show_run(record: RunRecord, verbose: bool = False) -> None:
    """`torchmark run` (and `model --loader`): results, notes, the input breakdown, ceilings;
    ``verbose``: how each ceiling was measured."""
    from torchmark.report.table import run_tables

    printed(run_tables(record, verbose=verbose))


def show_distributed(record: RunRecord, verbose: bool = False) -> None:
    """A run under ranks (torchrun, Slurm, a --scaling rung): the run's tables, then the
    collectives' bus bandwidth when it measured any."""
    from torchmark.report.collectives import busbw_table

    show_run(record, verbose)
    table = busbw_table(record)
    if table is not None:
        console.print(table)


# Each kind's view is imported when a run of that kind is shown: `show` imports one.


def show_model(record: RunRecord) -> None:
    from torchmark.report.model import model_view

    printed(model_view(record))


def show_predict(record: RunRecord) -> None:
    from torchmark.report.predict import predict_view

    printed(predict_view(record))


def show_tune(record: RunRecord) -> None:
    from torchmark.report.tune import tune_view

    printed(tune_view(record))


def show_serving(record: RunRecord) -> None:
    from torchmark.report.serving import serving_view

    printed(serving_view(record))


def show_soak(record: RunRecord) -> None:
    from torchmark.report.soak import soak_view

    printed(soak_view(record))


def show_bench(record: RunRecord) -> None:
    from torchmark.report.bench import bench_view

    printed(bench_view(record))


def show_profile(record: RunRecord, verbose: bool = False) -> None:
    """`torchmark profile`: the case's run table, then where its step time goes;
    ``verbose``: every categorisation rule."""
    from torchmark.report.profile import profile_tables

    show_run(record)
    for renderable in profile_tables(record, verbose):
        # a command line (no_wrap) prints whole: the terminal folds it, a copy stays one line
        whole = isinstance(renderable, Text) and bool(renderable.no_wrap)
        console.print(renderable, soft_wrap=whole)
