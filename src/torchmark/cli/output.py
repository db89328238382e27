"""Where a command's run goes: ``--json`` checked before anything is measured, the run shown,
stored and written at its end, the same when it is interrupted or the store fails; the plan
shown (``--dry-run``). Every measuring command's shared toolbox."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from torchmark.cli.app import console
from torchmark.errors import InputError, RunInterrupted, RunNotStored
from torchmark.results import RunRecord

if TYPE_CHECKING:
    from torchmark.run.config import RunConfig
    from torchmark.workloads import Case

__all__ = ["check_json_path", "finish", "show_plan", "shown_even_if_interrupted", "write_json"]


def check_json_path(path: Path | None, option: str = "--json") -> None:
    """``--json PATH`` (or another output ``option``) must be writable before anything is
    measured, not after."""
    if path is None:
        return
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputError(f"{option} {path} is a directory: give a file name")
    if not folder.is_dir():
        raise InputError(f"{option} {path}: folder {folder} does not exist (create it first)")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{option} {path}: not writable here (choose another path)")


def write_json(record: RunRecord, path: Path) -> None:
    try:
        path.write_text(record.model_dump_json(indent=2))
    except OSError as e:
        raise InputError(f"cannot write --json file {path}: {e.strerror}") from None
    from torchmark.launch.env import RUNG_ENV

    if not os.environ.get(RUNG_ENV):
        console.print(f"JSON written to {path}")


@contextlib.contextmanager
def shown_even_if_interrupted(
    render: Callable[[RunRecord], None],
    json_path: Path | None,
    resumable: bool = False,
    db: str | None = None,
) -> Iterator[None]:
    """Ctrl-C / SIGTERM / SIGHUP mid-run, or a store that failed: the run measured so far is
    still shown and written (to --json, or to a rescue file when the store has not got it).
    ``resumable``: also say the command that finishes it (``db``: the store it is in)."""
    try:
        yield
    except (RunInterrupted, RunNotStored) as e:
        partial: RunRecord = e.record  # type: ignore[assignment]
        render(partial)
        if json_path:
            write_json(partial, json_path)
        elif partial.payload.not_stored:
            from torchmark.run.session import write_rescue

            console.print(f"JSON written to {write_rescue(partial)}")
        if resumable and isinstance(e, RunInterrupted) and partial.run_id:
            from torchmark.report.parts import resume_hint

            console.print(
                Text(resume_hint(partial.run_id, db)),
                soft_wrap=not console.is_terminal,
            )
        raise


def finish(
    record: RunRecord, render: Callable[[RunRecord], None], json_path: Path | None, store_url: str
) -> None:
    render(record)
    console.print(Text.assemble("Run ", (str(record.run_id), "bold"), f" stored in {store_url}"))
    if json_path:
        write_json(record, json_path)


def show_budget(
    cases: Sequence[Case], cfg: RunConfig, cached: frozenset[str] = frozenset()
) -> None:
    """The plan's sizes and its estimated wall time and peak memory (workloads.budget)."""
    import psutil

    from torchmark.workloads import budget

    for line in budget.lines(
        cases,
        rule=cfg.rule,
        ceilings=cfg.ceilings,
        quick=cfg.suite == "quick",
        process_bytes=psutil.Process().memory_info().rss,
        suite=cfg.suite,
        cached=cached,
    ):
        console.print(Text(line), soft_wrap=not console.is_terminal)


def show_plan(
    cases: Sequence[Case], cfg: RunConfig | None = None, cached: frozenset[str] = frozenset()
) -> None:
    """The planned cases; with ``cfg``, the sizes chosen and the plan's estimate too
    (``cached``: devices whose ceilings are cached, not counted in it)."""
    from torchmark import format as fmt
    from torchmark.report.layout import Col, FitTable

    devices = list(dict.fromkeys(c.device.name for c in cases))
    title = f"{fmt.plural(len(cases), 'planned case')}"
    t = FitTable(
        Col("workload"),
        Col("case", wrap=12),
        Col("device", show=len(devices) > 1),
        title=title + (f" on {devices[0]}" if len(devices) == 1 else ""),
    )
    for c in cases:
        t.row(c.workload, fmt.case_label(c.variant, c.params), c.device.name)
    console.print(t)
    if cfg is not None:
        show_budget(cases, cfg, cached)
    # what a run would say with its plan (the data it writes, how long a case takes)
    from torchmark.workloads.base import plan_notes

    for line in plan_notes(cases):
        console.print(Text(line), soft_wrap=not console.is_terminal)
