"""This machine among the seed blog's 2023 table (and the committed reference runs)."""

from __future__ import annotations

from torchmark import format as fmt
from torchmark import reference
from torchmark.report.charts.base import Chart, _log, _plot, _rc, _svg
from torchmark.results import RunRecord

MINE = "#d9480f"  # this machine's rows and bars
KIND_COLOURS = {"gpu": "#4c78a8", "cpu": "#72b7b2", "unknown": "#9aa0a6"}


def seed_table(run: RunRecord) -> Chart:
    """This machine's ``seed-add as-published`` rate among the seed blog's 2023 rows (and
    any committed reference runs): the ranking of ``compare --reference seed-2023``, drawn."""
    title = "This machine in the seed blog's 2023 table"
    ref = reference.load(reference.SEED_SET)
    mine = reference.seed_rows(run)
    if not mine:
        return Chart(
            "seed_table",
            title,
            None,
            f"no {reference.SEED_WORKLOAD} {reference.SEED_VARIANT} result at the blog's size "
            f"to place (`torchmark run --workload {reference.SEED_WORKLOAD}`)",
        )
    rows = reference.placed(ref, mine)
    with _rc():
        from matplotlib.patches import Patch

        fig, ax = _plot(0.3 * len(rows) + 1.2)
        ys = range(len(rows))
        colours = [MINE if r.this_machine else KIND_COLOURS.get(r.device_type) for r in rows]
        bars = ax.barh(ys, [r.value for r in rows], color=colours, height=0.7)
        for bar, r in zip(bars, rows, strict=True):
            if r.implausible:
                bar.set_hatch("///")
                bar.set_alpha(0.45)
        labels = [
            f"{fmt.sig(r.value) if r.this_machine else f'{r.value:g}'} it/s"
            + (f" · {fmt.si(r.implied_bytes_per_s, 'B/s')}" if r.implied_bytes_per_s else "")
            + (" · implausible" if r.implausible else "")
            for r in rows
        ]
        ax.bar_label(bars, labels=labels, fontsize=7.5, padding=3)
        names = [
            f"▶ {r.hardware} (this machine)"
            if r.this_machine
            else reference.shown_name(r, ref, mine).replace("  [", " [")
            for r in rows
        ]
        ax.set_yticks(list(ys), names)
        for tick, r in zip(ax.get_yticklabels(), rows, strict=True):
            if r.this_machine:
                tick.set_color(MINE)
                tick.set_fontweight("bold")
        ax.invert_yaxis()  # fastest at the top, as the ranking reads
        _log(ax, "x")
        lo, hi = min(r.value for r in rows), max(r.value for r in rows)
        ax.set_xlim(lo / 2, hi * 6)  # room for the value labels right of the longest bar
        ax.set_xlabel(f"{ref.unit} of the blog's loop (log scale)")
        ax.grid(axis="y", visible=False)
        handles = [
            Patch(color=MINE, label="this machine"),
            Patch(color=KIND_COLOURS["gpu"], label="GPU, another machine"),
            Patch(color=KIND_COLOURS["cpu"], label="CPU, another machine"),
            Patch(facecolor="white", edgecolor="grey", hatch="///", label="implausible"),
        ]
        ax.legend(handles=handles, loc="lower right")
    per_it = fmt.si(ref.bytes_per_iteration, "B") if ref.bytes_per_iteration else "?"
    at = reference.placements(ref, mine)  # the ranks the line under the table gives
    alone = ", ".join(str(a.rank or fmt.DASH) for a in at)
    return Chart(
        "seed_table",
        title,
        _svg(fig),
        f"rank {', '.join(str(a.rank_all or fmt.DASH) for a in at)} of {at[0].of_all}, log "
        f"scale (in "
        f"the blog's table alone {alone} of {at[0].of}); "
        f"each it is {per_it} of memory traffic, so the bars are memory bandwidth; a row "
        "marked [name] is a reference run measured by torchmark, the others the blog's as "
        "published; hatched rows cannot be taken at face value (`torchmark compare "
        "--reference seed-2023` says why)",
    )
