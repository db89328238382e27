"""Progress of a run as it goes, for `run`, `model` and `tune` (the runner never formats).

In a terminal that can redraw: a progress bar (and, where asked, a line per finished case
above it). Wherever the display cannot be live (a CI log, `| tee`, a file, and a terminal
with TERM=dumb such as an Emacs shell, where rich draws no bar): one plain line per
finished case, so the run shows progress instead of minutes of silence (a quick run under
TERM=dumb printed nothing for 84 s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from torchmark import format as fmt

if TYPE_CHECKING:
    from torchmark.devices import Device
    from torchmark.results import Result
    from torchmark.workloads import Case


def case_line(case: Case, result: Result, done: int, total: int | None) -> str:
    """``[3/10] simplenet/infer fp32 b=64 on cpu: 890 samples/s ±16 %, warn``."""
    count = f"[{done}/{total}]" if total else f"[{done}]"
    if result.status == "skipped":
        what = f"skipped: {result.reason or 'no reason given'}"
    elif result.status == "wrong":
        what = f"WRONG: {result.reason or 'correctness check failed'}"
    elif not result.ok:
        what = "no samples"
    else:
        # as its row's cells read
        from torchmark.report.table import spread_cell, verdict_word

        m = result.measurement
        spread = f"±{spread_cell(result)}" if m.spread_known else f"({fmt.plural(m.n, 'sample')})"
        what = f"{fmt.throughput(result)} {spread}"
        word = verdict_word(result)
        if word:
            what += f", {word}"
    return f"{count} {case.label}: {what}"


class ProgressEvents:
    """Runner events -> a live progress bar where the display can redraw, a plain line per
    case otherwise.

    ``lines``: also print a line per finished case under a live bar (model and tune, whose
    results are worth seeing as they come); default: only where there is no bar."""

    def __init__(self, console: Console, lines: bool | None = None) -> None:
        self.console = console
        self.terminal = console.is_terminal
        # rich's own test for a display it can redraw: a terminal, and not TERM=dumb
        live = console.is_interactive
        self.lines = (not live) if lines is None else (lines or not live)
        self.total: int | None = None
        self.done = 0
        self.progress: Progress | None = None
        if live:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.task = self.progress.add_task("planning", total=None)

    @contextmanager
    def shown(self) -> Iterator[ProgressEvents]:
        """The bar is live inside this block (nothing to start when piped)."""
        with self.progress or nullcontext():
            yield self

    def _say(self, line: str) -> None:
        self.console.print(Text(line), soft_wrap=not self.terminal)

    def planned(self, cases: Sequence[Case]) -> None:
        devices = sorted({c.device.name for c in cases})
        workloads = list(dict.fromkeys(c.workload for c in cases))
        self.total = len(cases)
        self._say(
            f"Planned {fmt.plural(len(cases), 'case')} on {', '.join(devices) or 'no device'} "
            f"({fmt.plural(len(workloads), 'workload')}: {', '.join(workloads)})"
        )
        from torchmark.workloads.base import plan_notes

        for line in plan_notes(cases):
            self._say(line)
        if self.progress is not None:
            self.progress.update(self.task, total=len(cases), description="ceilings")

    def ceilings(self, device: Device, cached: bool) -> None:
        what = "cached ceilings" if cached else "measuring ceilings"
        if self.progress is not None:
            self.progress.update(self.task, description=f"{what} on {device.name}")
        elif not cached:
            self._say(f"measuring ceilings on {device.name}")

    def case_started(self, case: Case) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=case.label)

    def store_failed(self, reason: str) -> None:
        self._say(
            f"warning: {reason}. Measuring goes on: every result is kept and, if the store "
            "is still failing at the end, written to a JSON file"
        )

    def case_done(self, case: Case, result: Result) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress.advance(self.task)
        if self.lines:
            self._say(case_line(case, result, self.done, self.total))


def tenths(console: Console, what: str) -> Callable[[float, float], None]:
    """For a run measured in time (soak): where no bar is live, a line at each tenth of the
    duration (``soaking matmul on cpu: 60 s of 600 s``); where one is, nothing."""
    said = [0]

    def tick(done_s: float, total_s: float) -> None:
        if console.is_interactive or total_s <= 0:
            return
        tenth = min(10, int(10 * done_s / total_s))
        if tenth > said[0]:
            said[0] = tenth
            console.print(Text(f"{what}: {done_s:.0f} s of {total_s:.0f} s"), soft_wrap=True)

    return tick
