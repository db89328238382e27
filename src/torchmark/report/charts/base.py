"""What every chart shares: matplotlib's settings (Agg, text kept as text), the ``Chart``
value, the inline SVG it becomes, log axes labelled in plain text."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchmark import format as fmt
from torchmark.results import RunRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH, HEIGHT = 8.0, 3.8  # inches; the page scales the SVG to its column width

RC: Any = {  # matplotlib types rc keys as Literals; plain strings here
    "svg.fonttype": "none",  # text stays text: the browser's sans-serif draws it
    "svg.hashsalt": "torchmark",  # stable element ids: the same runs give the same file
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "legend.fontsize": 8,
    # Names come from users ("$\\frac{a$" as a workload name crashed mathtext): every
    # label is drawn as written, never parsed as TeX.
    "text.parse_math": False,
    "text.usetex": False,
}


@contextlib.contextmanager
def _rc() -> Iterator[None]:
    """matplotlib's settings for one chart. matplotlib (0.6-0.7 s to import here) loads on the
    first chart drawn, so commands that draw none never pay for it."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit: reports render on headless machines
    with matplotlib.rc_context(RC):
        yield


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    svg: str | None
    note: str = ""  # why there is no chart, or how to read it


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with _rc():
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    # Natural size (width/height in pt) kept: charts show at one text size, and CSS
    # (max-width: 100 %; height: auto) shrinks a wide one to the page. On a phone the page
    # keeps it at least 1.4 px a point wide (--pt, the viewBox's width in points), so its
    # smallest text (6.5 pt) reads at >= 9 px, and the chart scrolls in its box: shrunk to
    # 390 px its text was ~4 px.
    svg = text[text.index("<svg") + 4 :]
    found = re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) ', svg[: svg.index(">")])
    width = f' style="--pt: {float(found.group(1)):.0f}"' if found else ""
    return '<svg class="chart"' + width + svg


def _figure(
    nrows: int = 1, ncols: int = 1, height: float = HEIGHT, sharex: bool = False
) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    with _rc():
        fig = Figure(figsize=(WIDTH, height))
        axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex)
    return fig, axes


def _plot(height: float = HEIGHT) -> tuple[Figure, Axes]:
    """A figure of one plot, as most charts are."""
    fig, axes = _figure(height=height)
    return fig, axes[0][0]


def _log(ax: Axes, which: str, base: int = 10) -> None:
    """A log axis labelled in plain text (100, 1 k, 10 G): matplotlib's default labels are
    TeX ($10^{2}$), which chart text drawn as written would show raw."""
    from matplotlib import ticker

    class Plain(ticker.Formatter):
        def __init__(self, minor: bool) -> None:
            self.minor = minor

        def __call__(self, x: float, pos: int | None = None) -> str:
            if self.minor:  # minor ticks named only where the axis spans under ~1.5 decades
                lo, hi = sorted(self.axis.get_view_interval()) if self.axis else (0, 0)
                if not (lo > 0 and hi / lo < 30):
                    return ""
            if base == 10 and x >= 1e3:
                scale, prefix = next(sp for sp in fmt.SI_PREFIXES if x >= sp[0])
                return f"{x / scale:g} {prefix}"
            return f"{x:g}"

    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(Plain(minor=False))
    axis.set_minor_formatter(Plain(minor=True))


def _run_prefix(runs: Sequence[RunRecord], run: RunRecord) -> str:
    return f"{run.run_id} " if len(runs) > 1 else ""
