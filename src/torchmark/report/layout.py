"""Tables that fit the width they get: 80 columns, a wide terminal, or a pipe.

rich squeezes a table that is too wide by wrapping its cells down to one word per line and
then truncating the rest (``c…``, ``18…``); and when stdout is not a terminal it renders at
80 columns. ``FitTable`` decides instead, in an order the caller declares: first leave out
columns with nothing in them, then, step by step, switch a column to its short cells
(``43.6 % of bw`` -> ``43.6 % bw``) while that makes it fit without wrapping; failing
that, let columns wrap and leave out low-priority columns, step by step, until it fits.
Essential columns are never truncated; a column that may wrap does so at spaces and never
below the width of its longest word.

    t = FitTable(Col("case", wrap=14), Col("median", justify="right", drop=2),
                 Col("flags", shorten=1), title="run 1")
    t.row("fp32 n=33.6M", "23.3 ms", Alt("warn, noisy [1]", "warn [1]"))
    console.print(t)          # fitted to console.width (COLUMNS, or 80 when piped)
    t.table(80)               # the rich Table at a given width, e.g. for tests
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from torchmark.format import DASH

# Two spaces between columns, none at the edges: the layout below counts on it.
GAP = 2


@dataclass(frozen=True)
class Alt:
    """A cell with a shorter form for when its column must shrink."""

    full: str | Text
    short: str | Text


Cell = str | Text | Alt


@dataclass
class Col:
    """A column and how it gives way: ``shorten``/``drop`` are step numbers (lowest first)
    at which it switches to its short cells or is left out; ``wrap`` > 0 lets it wrap at
    spaces, never narrower than ``wrap`` nor its longest word."""

    header: str
    justify: Literal["left", "right"] = "left"
    short_header: str | None = None
    shorten: int | None = None
    drop: int | None = None
    wrap: int = 0
    style: str = ""
    keep_empty: bool = False  # show even when every cell is empty
    show: bool = True  # False: never shown (e.g. a device column in a one-device run)
    # A wrapped cell continues into the empty cells below it (a case label over the rows
    # of its devices) instead of adding lines of its own.
    spill: bool = False
    # Rather than drop this column, print the table stacked (``FitTable.stacked``), where
    # it is kept, on a line of its own if need be: a figure a verdict rests on that nothing
    # else on the row gives (% of ceiling, speedup over the CPU, spread, max error).
    vital: bool = False


def _text(c: str | Text) -> Text:
    # Every string is plain text: a reason or a name such as "[h100-ref]" must print as
    # written, never be read as rich markup.
    return c if isinstance(c, Text) else Text(c)


def _pick(c: Cell, short: bool) -> Text:
    if isinstance(c, Alt):
        return _text(c.short if short else c.full)
    return _text(c)


def _width(t: Text) -> int:
    return max((Text(line).cell_len for line in t.plain.split("\n")), default=0)


def _longest_word(t: Text) -> int:
    return max((len(w) for w in t.plain.split()), default=0)


def _wrapped(t: Text, width: int) -> Text:
    """Plain text wrapped at spaces, continuation lines keeping the first line's indent
    (rich would start them at the column's edge)."""
    if t.spans or t.cell_len <= width or "\n" in t.plain:
        return t
    indent = t.plain[: len(t.plain) - len(t.plain.lstrip(" "))]
    return Text(
        "\n".join(
            textwrap.wrap(
                t.plain,
                width,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        ),
        style=t.style,
    )


def _spill(column: list[Text], grid: list[list[Text]], k: int) -> None:
    """Move the continuation lines of each cell into the empty cells below it."""
    for r, cell in enumerate(column):
        parts = cell.plain.split("\n")
        if len(parts) < 2 or cell.spans:
            continue
        free = 0
        while r + 1 + free < len(column) and not column[r + 1 + free].plain:
            free += 1
        keep = max(1, len(parts) - free)
        grid[r][k] = Text("\n".join(parts[:keep]), style=cell.style)
        for j, line in enumerate(parts[keep:], start=1):
            grid[r + j][k] = Text(line, style=cell.style)


@dataclass
class _Row:
    cells: list[Cell]
    style: str = ""
    section: bool = False  # a rule (blank line) before this row


@dataclass
class Plan:
    """What ``FitTable.plan`` chose for one width."""

    columns: list[int]  # indices of the columns shown
    short: set[int] = field(default_factory=set)
    widths: dict[int, int] = field(default_factory=dict)
    fits: bool = True


class FitTable:
    def __init__(
        self, *columns: Col, title: str | Text | None = None, show_header: bool = True
    ) -> None:
        self.columns = list(columns)
        self.title = title
        self.show_header = show_header
        self.rows: list[_Row] = []
        self._section = False

    def row(self, *cells: Cell, style: str = "") -> None:
        padded = list(cells) + [""] * (len(self.columns) - len(cells))
        self.rows.append(_Row(padded, style, self._section))
        self._section = False

    def section(self) -> None:
        self._section = bool(self.rows)

    def _has_content(self, i: int) -> bool:
        if not self.columns[i].show:
            return False
        return self.columns[i].keep_empty or any(
            _pick(r.cells[i], False).plain.strip() for r in self.rows
        )

    def _need(self, i: int, short: bool) -> tuple[int, int]:
        """(narrowest, natural) width of column ``i``."""
        col = self.columns[i]
        head = Text(col.short_header if short and col.short_header else col.header)
        if not self.show_header:
            head = Text("")
        cells = [_pick(r.cells[i], short) for r in self.rows]
        natural = max([_width(head), *(_width(c) for c in cells)])
        # A column with short cells uses them rather than wrap its full ones.
        if not col.wrap or (col.shorten is not None and not short):
            return natural, natural
        words = max([_longest_word(head), *(_longest_word(c) for c in cells)])
        return min(natural, max(col.wrap, words)), natural

    def plan(self, width: int) -> Plan:
        """First the shortening steps alone, as long as no cell would wrap; failing that,
        every column shortened, wrapping allowed, and the drop steps in order."""
        shown = [i for i in range(len(self.columns)) if self._has_content(i)]
        short: set[int] = set()
        shorten = sorted({c.shorten for c in self.columns if c.shorten is not None})
        for step in [None, *shorten]:
            if step is not None:
                short |= {i for i in shown if self.columns[i].shorten == step}
            need = {i: self._need(i, i in short) for i in shown}
            if sum(hi for _, hi in need.values()) + GAP * (len(shown) - 1) <= width:
                return Plan(shown, short, {i: hi for i, (_, hi) in need.items()})
        drops = sorted({c.drop for c in self.columns if c.drop is not None})
        for step in [None, *drops]:
            if step is not None:
                shown = [i for i in shown if self.columns[i].drop != step]
            need = {i: self._need(i, i in short) for i in shown}
            if sum(lo for lo, _ in need.values()) + GAP * (len(shown) - 1) <= width:
                return Plan(shown, short, self._share(need, width))
        need = {i: self._need(i, i in short) for i in shown}
        return Plan(shown, short, {i: lo for i, (lo, _) in need.items()}, fits=False)

    @staticmethod
    def _share(need: dict[int, tuple[int, int]], width: int) -> dict[int, int]:
        """Narrowest widths, then the room left to the columns that wrap, those short of
        their natural width by the least first (so that as few as possible wrap)."""
        widths = {i: lo for i, (lo, _) in need.items()}
        room = width - sum(widths.values()) - GAP * (len(widths) - 1)
        for i, (lo, hi) in sorted(need.items(), key=lambda kv: kv[1][1] - kv[1][0]):
            grow = min(room, hi - lo)
            widths[i] += grow
            room -= grow
        return widths

    def table(self, width: int, title: bool = True, p: Plan | None = None) -> Table:
        p = p or self.plan(width)
        grid = self._grid(p, range(len(self.rows)))
        return self._table(p, grid, self.rows, title=title, show_header=self.show_header)

    def _grid(self, p: Plan, rows: Iterable[int], spill: bool = True) -> list[list[Text]]:
        """The cells of ``rows`` as the plan shows them, wrapped at spaces."""
        grid = [[_pick(self.rows[r].cells[i], i in p.short) for i in p.columns] for r in rows]
        for k, i in enumerate(p.columns):
            if self.columns[i].wrap:
                for cells in grid:
                    cells[k] = _wrapped(cells[k], p.widths[i])
                if self.columns[i].spill and spill:
                    _spill([cells[k] for cells in grid], grid, k)
        return grid

    def _table(
        self,
        p: Plan,
        grid: list[list[Text]],
        rows: list[_Row],
        title: bool = True,
        show_header: bool = True,
    ) -> Table:
        t = Table(
            title=self.title if title else None,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
            show_header=show_header,
        )
        for i in p.columns:
            col = self.columns[i]
            head = col.short_header if i in p.short and col.short_header else col.header
            t.add_column(
                head,
                justify=col.justify,
                style=col.style or None,
                width=p.widths[i],
                no_wrap=not col.wrap,
                overflow="fold" if col.wrap else "ellipsis",
            )
        for r, cells in zip(rows, grid, strict=True):
            if r.section:
                t.add_section()
            t.add_row(*cells, style=r.style or None)
        return t

    def _split(self) -> tuple[int, FitTable] | None:
        """The first column shown, and a table of the columns after it."""
        shown = [i for i in range(len(self.columns)) if self._has_content(i)]
        if len(shown) < 2:
            return None
        lead = shown[0]
        keep = [i for i in range(len(self.columns)) if i != lead]
        rest = FitTable(*(self.columns[i] for i in keep), show_header=self.show_header)
        rest.rows = [_Row([r.cells[i] for i in keep], r.style, r.section) for r in self.rows]
        return lead, rest

    def stacks(self, width: int, p: Plan | None = None) -> bool:
        """Whether ``width`` is printed stacked: when the table overflows it even with its
        columns dropped, or drops a vital column that stacking would keep. ``p``: this
        width's plan where the caller has it."""
        p = p or self.plan(width)
        if p.fits and not self._left_out(p):
            return False  # the usual case: no copy of the rows (_split) to find it out
        split = self._split()
        if split is None:
            return False
        # stacked, a vital column the figures' line has no room for goes on a line of
        # its own under them (``stacked``): stacking keeps every vital column
        return not p.fits or split[1].plan(width - len(STACK_INDENT)).fits

    def _left_out(self, p: Plan) -> list[int]:
        """The vital columns with content that plan ``p`` leaves out."""
        return [
            i
            for i, c in enumerate(self.columns)
            if c.vital and i not in p.columns and self._has_content(i)
        ]

    def stacked(self, width: int) -> list[RenderableType]:
        """For a narrow width: each row's first cell on a line of its own, the other
        cells on the next, indented, in columns of their own under one header. Where the
        table would cut cells (``20261121-083010-a…``) or drop a column (``% ceiling``).
        A vital column even that line has no room for follows it on a line of its own,
        each cell with its header (``vs CPU 47.6×``), under the line's second column (at
        the figures' indent where that overflows ``width``)."""
        split = self._split()
        assert split is not None, "stacked needs two columns with content"
        lead, rest = split
        p = rest.plan(width - len(STACK_INDENT))
        apart = rest._left_out(p)
        under = len(STACK_INDENT) + (p.widths[p.columns[0]] + GAP if len(p.columns) > 1 else 0)
        out: list[RenderableType] = []
        if self.show_header:
            out += [
                Text(self.columns[lead].header, style="bold"),
                _indented(rest._table(p, [], [], title=False)),
            ]
        grid = rest._grid(p, range(len(self.rows)), spill=False)
        for k, (row, cells) in enumerate(zip(rest.rows, grid, strict=True)):
            if row.section and k:
                out.append(Text())
            first = _pick(self.rows[k].cells[lead], False)
            # empty: a further row of the case above (a device); the same as above: a
            # further row of its group ("cuda:0" over its batches)
            if first.plain.strip() and (
                k == 0 or first != _pick(self.rows[k - 1].cells[lead], False)
            ):
                out.append(first)
            if any(c.plain.strip() for c in cells):
                table = rest._table(p, [cells], [row], title=False, show_header=False)
                out.append(_indented(table))
            kept = [(rest.columns[i].header, _pick(row.cells[i], False)) for i in apart]
            # a dash says "no figure" in a column; on a line of its own it says nothing
            said = [
                Text.assemble(f"{head} ", cell)
                for head, cell in kept
                if cell.plain.strip() not in ("", DASH)
            ]
            if said:
                line = Text("   ").join(said)
                # under the second column where it fits; else at the figures' indent
                room = under if under + line.cell_len <= width else len(STACK_INDENT)
                out.append(Text(" " * room).append(line))
        return out

    def full(self) -> dict[str, object]:
        """The table in full, as plain strings, for a page (which has room, and scrolls
        where it has not): its title, and the headers, alignment and cells of the columns
        with content, each cell in its full form."""
        shown = [i for i in range(len(self.columns)) if self._has_content(i)]
        title = self.title.plain if isinstance(self.title, Text) else self.title
        return {
            "title": title or "",
            "headers": [self.columns[i].header for i in shown],
            "right": [self.columns[i].justify == "right" for i in shown],
            "rows": [[_pick(r.cells[i], False).plain for i in shown] for r in self.rows],
        }

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # The title on a line of its own: as the table's title it would wrap to the
        # table's width, which can be far narrower than the console.
        if self.title:
            yield _text(self.title)
        p = self.plan(options.max_width)  # once: the table needs the same plan
        if self.stacks(options.max_width, p):
            yield from self.stacked(options.max_width)
        else:
            yield self.table(options.max_width, title=False, p=p)


STACK_INDENT = "  "


def _indented(table: Table) -> Padding:
    return Padding(table, (0, 0, 0, len(STACK_INDENT)))


def lines(texts: Iterable[str]) -> Group:
    """Plain-text lines (never markup) for printing under a table."""
    return Group(*(Text(t) for t in texts))
