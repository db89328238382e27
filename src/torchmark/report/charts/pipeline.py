"""The input pipeline: where each step goes, and items/s against num_workers."""

from __future__ import annotations

import math

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _plot, _rc, _svg
from torchmark.results import RunRecord

STEP_PARTS = (("wait", "#e45756"), ("copy", "#f2b701"), ("compute", "#4c78a8"))


def input_breakdown(run: RunRecord, workload: str = "input") -> Chart:
    """One stacked bar per loader configuration: the median step split into the time
    blocked waiting for the batch, copying it to the device and computing (ms per step),
    the device-resident step on top as the floor every bar is read against."""
    from torchmark.report.pipeline import by_device, config_cell, step_parts

    title = f"{workload}: where each step goes (wait / copy / compute)"
    bars: list[tuple[str, tuple[float, float, float]]] = []
    groups = by_device(run, workload)
    for device, mine, _ in groups:
        for r in mine:
            parts = step_parts(r)
            if parts is not None:
                where = f" {device}" if len(groups) > 1 else ""
                bars.append((f"{config_cell(r).full}{where}", parts))
    if not bars:
        return Chart(
            f"{workload}-breakdown", title, None, "no configuration finished with a breakdown"
        )
    with _rc():
        fig, ax = _plot(max(2.0, 0.32 * len(bars) + 1))
        left = [0.0] * len(bars)
        for k, (name, colour) in enumerate(STEP_PARTS):
            widths = [1e3 * parts[k] for _, parts in bars]
            ax.barh(range(len(bars)), widths, 0.7, left=left, label=name, color=colour)
            left = [x + w for x, w in zip(left, widths, strict=True)]
        ax.set_yticks(range(len(bars)), [name for name, _ in bars])
        ax.invert_yaxis()
        ax.set_xlabel("ms per step (median)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    cpu = not any(parts[1] for _, parts in bars)
    return Chart(
        f"{workload}-breakdown",
        title,
        _svg(fig),
        "each bar is one configuration's median step; the device-resident step has no wait "
        "and no copy: the gap to it is what the pipeline costs"
        + ("; no copy on the CPU (the batch is already in its memory)" if cpu else ""),
    )


def workers_curve(run: RunRecord, workload: str = "input") -> Chart:
    """Items/s against num_workers for the plain configurations (one line per device),
    the other knobs as points at their worker count, and the device-resident rate as the
    ceiling line no loader can pass."""
    from torchmark.loaders import LOADER, LoaderConfig, config_of
    from torchmark.report.pipeline import by_device, config_cell, rate, unit_of

    groups = by_device(run, workload)
    rs = [r for _, mine, _ in groups for r in mine]
    unit = unit_of(rs)
    title = f"{workload}: {unit}/s vs num_workers"
    plain = [
        r
        for r in rs
        if r.variant == LOADER
        and r.ok
        and verdicts.may(r, "compare")  # an invalid point is no point on the curve
        and config_of(r.params) == LoaderConfig(config_of(r.params).workers)
    ]
    # by identity: `r in plain` compared the pydantic Results field by field, samples too
    is_plain = {id(r) for r in plain}
    if len({config_of(r.params).workers for r in plain}) < 2:
        return Chart(
            f"{workload}-workers",
            title,
            None,
            "fewer than two worker counts finished: no curve to draw",
        )
    with _rc():
        fig, ax = _plot()
        for device, mine, resident in groups:
            where = f" {device}" if len(groups) > 1 else ""
            curve = sorted(
                ((config_of(r.params).workers, r) for r in mine if id(r) in is_plain),
                key=lambda wr: wr[0],
            )
            xs = [w for w, _ in curve]
            ys = [rate(r) for _, r in curve]
            (line,) = ax.plot(xs, ys, marker="o", label=f"plain DataLoader{where}")
            # the 95 % CI of each median as a bar: a count whose bar overlaps the next one's
            # is not shown to be faster (fewer than 6 samples: no CI, no bar)
            for w, r in curve:
                ci, per = r.ci_median_s, r.work.items if r.work else None
                if ci and per and ci[0] > 0:
                    ax.vlines(w, per / ci[1], per / ci[0], color=line.get_color(), linewidth=1)
            drawn = [r for r in mine if r.ok and verdicts.may(r, "compare")]
            others = [r for r in drawn if r.variant == LOADER and id(r) not in is_plain]
            top = max([rate(r) for r in drawn] or [1.0])
            last: dict[int, float] = {}  # per worker count: the highest label so far
            for k, r in enumerate(sorted(others, key=rate)):
                w, y = config_of(r.params).workers, rate(r)
                ax.scatter(
                    [w],
                    [y],
                    marker="D",
                    color=line.get_color(),
                    zorder=3,
                    label=f"other knobs{where}" if k == 0 else None,
                )
                # labels at one worker count stacked ~6 % of the axis apart: three knobs
                # at 16 workers within 40 images/s of each other overprinted
                at = max(y, last.get(w, -math.inf) + 0.06 * top)
                last[w] = at
                ax.annotate(
                    str(config_cell(r).short),
                    (w, at),
                    xytext=(6, 0),
                    fontsize=7,
                    textcoords="offset points",
                    ha="left",
                    va="center",
                )
            if resident is not None:
                ax.axhline(
                    rate(resident),
                    color=line.get_color(),
                    linestyle="--",
                    label=f"device-resident{where}: {fmt.sig(rate(resident))} {unit}/s",
                )
        ax.set_xscale("symlog", base=2, linthresh=1)
        ticks = sorted({config_of(r.params).workers for r in plain})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("num_workers")
        ax.set_ylabel(f"{unit}/s (median)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        f"{workload}-workers",
        title,
        _svg(fig),
        "line: num_workers alone, with the 95 % confidence interval of each median (none "
        "under 6 samples); diamonds: other knobs at their worker count; dashed: the same "
        "step fed from device memory, the ceiling a loader can only approach",
    )
