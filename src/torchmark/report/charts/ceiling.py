"""Each result's median as % of its measured ceiling."""

from __future__ import annotations

from collections.abc import Sequence

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _plot, _rc, _run_prefix, _svg
from torchmark.results import RunRecord

ABOVE = "#b3261e"  # above a measured ceiling: impossible, a measurement error


def ticks(end: float) -> list[float]:
    """The % axis's ticks from 0 to ``end`` (1, 2 or 5 x 10^k apart, at most 10 steps)."""
    from matplotlib.ticker import MaxNLocator

    found = MaxNLocator(nbins=10, steps=[1, 2, 5, 10]).tick_values(0, end)
    return [float(t) for t in found if 0 <= t <= end * (1 + 1e-9)]


def axis_end(highest: float) -> float:
    """Where the % axis ends: the first round value (a tick 1, 2 or 5 x 10^k apart, at
    most 10 of them) at or above ``highest``, the largest bar or whisker: an axis to 140 %
    under a largest bar of 64.7 % leaves half the chart empty. It runs past 100 % only
    where a bar does (a measurement error, or a working set in cache)."""
    from matplotlib.ticker import MaxNLocator

    highest = max(highest, 1e-9)
    found = MaxNLocator(nbins=10, steps=[1, 2, 5, 10]).tick_values(0, highest)
    return float(min(t for t in found if t >= highest * (1 - 1e-9)))


def ceiling_pct(runs: Sequence[RunRecord]) -> Chart:
    """Each result's median rate as % of the ceiling it is held against, quartiles as
    whiskers, the 100 % line drawn: above it is a measurement error, unless the working set
    fits the cache (``in cache``: a DRAM ceiling does not bound cache traffic)."""
    title = "% of the measured ceiling, per case"
    bars: list[tuple[str, float, float, float, str]] = []  # label, pct, lo, hi, ceiling
    cached: list[bool] = []  # its working set fits the cache: above the DRAM ceiling is no error
    # the verdict's word where it rejects the figure (invalid, WRONG): drawn marked, never
    # as a plain bar beside the figures that stand
    rejected: list[str | None] = []
    for run in runs:
        for r in run.results:
            p = r.pct_of_ceiling
            if p is None or r.ceiling is None or not r.ok or not r.median_s:
                continue
            q1, q3 = r.measurement.quartiles
            # a rate is work / time: the slow quartile (q3) gives the low percentage
            lo, hi = p * r.median_s / q3, p * r.median_s / q1 if q1 > 0 else p
            label = f"{_run_prefix(runs, run)}{fmt.result_label(r, device=False)} · {r.device}"
            bars.append((label, p, lo, hi, fmt.ceiling_label(r.ceiling)))
            # by its verdict: in the cache but past what a cache moves is still an error
            cached.append(verdicts.kind_of(r) == "in_cache")
            rejected.append(None if verdicts.may(r, "compare") else verdicts.rule_of(r).word)
    if not bars:
        return Chart("ceiling_pct", title, None, "no result is held against a measured ceiling")
    kinds = list(dict.fromkeys(b[4] for b in bars))
    with _rc():
        import matplotlib as mpl
        from matplotlib.patches import Patch

        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        colour = {k: cycle[i % len(cycle)] for i, k in enumerate(kinds)}
        fig, ax = _plot(0.26 * len(bars) + 1.3)
        ys = list(range(len(bars)))
        end = axis_end(max(max(b[1], b[3]) for b in bars))
        ps = [b[1] for b in bars]
        above = [p > 100 and not c for p, c in zip(ps, cached, strict=True)]
        marked = [a or bool(w) for a, w in zip(above, rejected, strict=True)]
        rects = ax.barh(
            ys,
            ps,
            height=0.7,
            color=[ABOVE if m else colour[b[4]] for m, b in zip(marked, bars, strict=True)],
            xerr=[[b[1] - b[2] for b in bars], [b[3] - b[1] for b in bars]],
            error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#444"},
        )
        for rect, m in zip(rects, marked, strict=True):
            if m:
                rect.set_hatch("xx")
        for y, b, a, c, w in zip(ys, bars, above, cached, rejected, strict=True):
            said = (
                "  ABOVE CEILING: measurement error"
                if a
                else f"  {w}: its verdict rejects it"
                if w
                else "  in cache"
                if c
                else ""
            )
            ax.text(
                max(b[1], b[3]) + end * 0.01,
                y,
                f"{fmt.pct(b[1])} of {b[4]}{said}",
                fontsize=7.5,
                va="center",
                color=ABOVE if a or w else "black",
            )
        ax.set_yticks(ys, [b[0] for b in bars])
        for tick, m in zip(ax.get_yticklabels(), marked, strict=True):
            if m:
                tick.set_color(ABOVE)
                tick.set_fontweight("bold")
        ax.invert_yaxis()
        # the axis ends at ``end``; past it, room for the value labels (no ticks, no grid)
        ax.set_xlim(0, end * 1.45)
        ax.set_xticks(ticks(end))
        ax.spines["bottom"].set_bounds(0, end)
        if end >= 100:  # the ceiling's line, where a bar or its whisker reaches it
            ax.axvline(100, color="black", linewidth=1, linestyle="--")
            ax.annotate(
                "100 %",
                (100, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                ha="center",
                va="bottom",
            )
        ax.set_xlabel("% of this machine's measured ceiling (median; whiskers: quartiles)")
        ax.grid(axis="y", visible=False)
        handles = [Patch(color=colour[k], label=k) for k in kinds]
        if any(above):
            handles.append(Patch(facecolor=ABOVE, hatch="xx", label="above ceiling"))
        ax.legend(handles=handles, loc="lower right")
    return Chart(
        "ceiling_pct",
        title,
        _svg(fig),
        "bw: memory bandwidth; peak: matmul FLOP/s at that precision, both measured on this "
        "machine in this run; 100 % is the best any kernel here reached, so a bar past it is "
        "a measurement error, never a fast machine, unless marked in cache: a working set "
        "that fits the last-level cache moves at the cache's speed, not memory's",
    )
