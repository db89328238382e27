"""Rooflines under the measured ceilings: a run's results per device, and a profile's top
ops."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.kinds.profile.names import op_labels
from torchmark.report.charts.base import (
    HEIGHT,
    WIDTH,
    Chart,
    _log,
    _plot,
    _rc,
    _run_prefix,
    _svg,
)
from torchmark.report.rows import devices_of
from torchmark.results import Ceiling, Result, RunRecord
from torchmark.results.payloads import OpRow, ProfilePayload, ProfileSummary

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _point_labels(pts: Sequence[Result]) -> list[str]:
    """Each point's workload, plus the variant and parameters that tell it from the same
    workload's other points on the panel."""
    out = []
    for r in pts:
        same = [x for x in pts if x.workload == r.workload]
        # a user model is named by its spec: dir/file.py:factory reads as file.py:factory
        words = [r.workload.rsplit("/", 1)[-1]]
        if len({x.variant for x in same}) > 1:
            words.append(r.variant)
        varying = {
            k: v
            for k, v in r.params.items()
            if len({str(x.params.get(k)) for x in same}) > 1 and str(v) != r.variant
        }
        words.append(fmt.case_label("", varying))
        if r.in_cache is not None:  # above the memory roof by right: the cache's speed
            words.append("(in cache)")
        out.append(" ".join(w for w in words if w))
    return out


def roofline(runs: Sequence[RunRecord]) -> Chart:
    """Each result at its arithmetic intensity, under the measured bandwidth and compute roofs.

    Models count their FLOPs but (gpt2 decode aside) not their bytes, so their intensity is
    unknown: they stand in a strip right of the roofline at their achieved FLOP/s, against
    the same compute roofs."""
    title = "Roofline (measured ceilings)"
    panels: list[tuple[str, RunRecord, list[Result], list[Result]]] = []
    no_flops: list[str] = []
    for run in runs:
        for d in devices_of(run):
            # a number its verdict rejects (invalid) is no point on a chart
            mine = [r for r in run.results if r.device == d and r.ok and verdicts.may(r, "compare")]
            placed = [r for r in mine if r.work.flops > 0 and r.work.bytes > 0]
            strip = [r for r in mine if r.work.flops > 0 and not r.work.bytes > 0]
            no_flops += [
                f"{fmt.result_label(r, device=False)} · {d}" for r in mine if not r.work.flops > 0
            ]
            peak = any(c.device == d and c.key.startswith("matmul:") for c in run.ceilings)
            if placed or (strip and peak):  # FLOP/s alone, with no roof, is no roofline
                panels.append((_run_prefix(runs, run) + d, run, placed, strip))
    if not panels:
        return Chart(
            "roofline",
            title,
            None,
            "no result declares both its FLOPs and its bytes, nor stands against a measured "
            "matmul peak",
        )
    workloads = list(dict.fromkeys(r.workload for p in panels for r in [*p[2], *p[3]]))
    with _rc():
        import matplotlib as mpl
        from matplotlib.figure import Figure

        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        colour = {w: cycle[i % len(cycle)] for i, w in enumerate(workloads)}
        ratios: list[float] = []
        for p in panels:
            ratios += [4.0, 1.6] if p[3] else [4.0]
        fig = Figure(figsize=(WIDTH * max(1, len(panels)) ** 0.5, HEIGHT + 0.6))
        grid = fig.add_gridspec(1, len(ratios), width_ratios=ratios, wspace=0.2)
        col = 0
        for label, run, placed, strip in panels:
            ax: Axes = fig.add_subplot(grid[0, col])
            col += 1
            device = (placed or strip)[0].device
            bw = run.ceiling(device, "bandwidth")
            peaks = [c for c in run.ceilings if c.device == device and c.key.startswith("matmul:")]
            xs = [r.work.flops / r.work.bytes for r in placed]
            lo, hi = _roof(ax, xs, peaks, bw)
            ys = [r.rate("flops") or math.nan for r in placed]
            span = [*ys, *(c.value for c in peaks)]
            _labelled(
                ax,
                [
                    (x, y, text, colour[r.workload], 18.0)
                    for r, x, y, text in zip(placed, xs, ys, _point_labels(placed), strict=True)
                ],
                lo,
                hi,
                span,
            )
            ax.set_title(f"{label} {_model(run, device)}".strip(), fontsize=9)
            ax.set_xlabel("arithmetic intensity (FLOP/byte)")
            if col == 1:
                ax.set_ylabel("achieved FLOP/s (median)")
            if not strip:
                continue
            side: Axes = fig.add_subplot(grid[0, col], sharey=ax)
            col += 1
            for c in peaks:
                side.axhline(c.value, color="grey", linewidth=1, linestyle="--")
            ys = [r.rate("flops") or math.nan for r in strip]
            tops = [c.value for c in peaks] + [y for y in ys if math.isfinite(y)]
            for r, y, text, ty in zip(
                strip, ys, _point_labels(strip), _spread(ys, tops), strict=True
            ):
                side.scatter([0.12], [y], color=colour[r.workload], zorder=3, s=18, marker="D")
                side.annotate(
                    text,
                    (0.12, y),
                    xytext=(0.3, ty),
                    fontsize=6.5,
                    va="center",
                    arrowprops={"arrowstyle": "-", "color": "#999", "lw": 0.5},
                )
            side.set_xlim(0, 1)
            side.set_xticks([])
            side.tick_params(axis="y", labelleft=False)
            side.grid(axis="x", visible=False)
            side.set_xlabel("models:\nbytes not counted")
    note = (
        "grey lines: measured memory bandwidth × intensity, capped by each measured matmul "
        "peak; a point's distance below its roof is the headroom. Diamonds: results that "
        "count FLOPs but not bytes (models), at their achieved FLOP/s"
    ) + _not_drawn("no FLOP count", no_flops)
    return Chart("roofline", title, _svg(fig), note)


def _spread(ys: Sequence[float], span: Sequence[float]) -> list[float]:
    """Label heights for points at ``ys`` on a log axis covering ``span``: in the points'
    order, at least ~6 % of the axis apart, so stacked labels do not overprint."""
    finite = [y for y in span if y > 0 and math.isfinite(y)]
    if not finite:
        return list(ys)
    gap = max(0.08, 0.06 * (math.log10(max(finite)) - math.log10(min(finite))))
    order = sorted(range(len(ys)), key=lambda i: ys[i] if math.isfinite(ys[i]) else 0.0)
    out = list(ys)
    last = -math.inf
    for i in order:
        if not (ys[i] > 0 and math.isfinite(ys[i])):
            continue
        at = max(math.log10(ys[i]), last + gap)
        out[i], last = 10**at, at
    return out


def _not_drawn(why: str, items: list[str], most: int = 4) -> str:
    """A note's ending naming what the chart leaves out and why ("" when nothing)."""
    if not items:
        return ""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return f". Not drawn, {why}: " + ", ".join(items[:most]) + more


def _model(run: RunRecord, device: str) -> str:
    info = run.environment.get("devices", {}).get(device, {})
    return str(info.get("model", "")) if isinstance(info, dict) else ""


def ops_roofline(run: RunRecord) -> Chart:
    """A ``profile`` run's top ops on the roofline: each op whose FLOPs and bytes are known
    at its arithmetic intensity and achieved FLOP/s, under the bandwidth and matmul
    ceilings measured in the same run on its device."""
    title = "Top ops on the roofline (measured ceilings)"
    p = run.payload.profile if isinstance(run.payload, ProfilePayload) else None
    ops = p.ops if p is not None else []
    device = (p.device if p is not None else None) or ""
    bw = run.ceiling(device, "bandwidth")
    named = {o.ceiling_key for o in ops} | {o.peak_key for o in ops}
    peaks = [c for c in run.ceilings if c.device == device and c.key.startswith("matmul:")]
    peaks = [c for c in peaks if c.key in named] or peaks[:1]
    labels = op_labels([o.name for o in ops])
    counted = [
        (label, o)
        for label, o in zip(labels, ops, strict=True)
        if o.flops and o.bytes and o.flop_rate
    ]
    impossible = [(label, o) for label, o in counted if _above_physical(run, device, p, o)]
    placed = [x for x in counted if x not in impossible]
    missing = [label for label, o in zip(labels, ops, strict=True) if (label, o) not in counted]
    if not ops:
        return Chart("ops_roofline", title, None, "this profile has no top ops")
    if bw is None and not peaks:
        return Chart(
            "ops_roofline", title, None, "no ceiling was measured in this run (--no-ceilings)"
        )
    never = _not_drawn(
        "above the device's physical peak (FLOPs counted on an op that did not run them all)",
        [f"{label} ({fmt.si(o.flop_rate, 'FLOP/s')})" for label, o in impossible],
    )
    if not placed:
        return Chart(
            "ops_roofline",
            title,
            None,
            "no top op has both a FLOP count and bytes (torch counts FLOPs of matmul, "
            "convolution, add and mul; GPU kernels inherit them from the op that launched "
            "them where one kernel does its work)" + never,
        )
    xs = [(o.flops or 0.0) / (o.bytes or 1.0) for _, o in placed]
    ys = [o.flop_rate or 0.0 for _, o in placed]
    fig, ax = _plot()
    with _rc():
        lo, hi = _roof(ax, xs, peaks, bw)
        span = [*ys, *(c.value for c in peaks)]
        _labelled(
            ax,
            [
                (
                    x,
                    y,
                    f"{label} ({fmt.pct(o.share)})" + _over_peak(run, device, o),
                    "#b3261e" if _over_peak(run, device, o) else "#4e79a7",
                    10 + 90 * o.share / 100,
                )
                for (label, o), x, y in zip(placed, xs, ys, strict=True)
            ],
            lo,
            hi,
            span,
        )
        case = p.case if p is not None else ""
        ax.set_title(f"{case} · {device} {_model(run, device)}".strip(), fontsize=9)
        ax.set_xlabel("arithmetic intensity (FLOP/byte; bytes: the op's tensor inputs)")
        ax.set_ylabel("achieved FLOP/s (over its self time)")
    note = (
        (
            "grey lines: the measured bandwidth × intensity, capped by the measured matmul peak; "
            "a dot's size is its share of the step. Bytes count the op's inputs only (a lower "
            "bound), so an intensity is an upper bound"
            + (
                "; red, marked '!': above the measured peak of its dtype (the peak measured "
                "low, or FLOPs not all its own)"
                if any(_over_peak(run, device, o) for _, o in placed)
                else ""
            )
        )
        + _not_drawn("no FLOP or byte count", missing)
        + never
    )
    return Chart("ops_roofline", title, _svg(fig), note)


def _op_peak(run: RunRecord, device: str, o: OpRow) -> Ceiling | None:
    key = o.peak_key or (o.ceiling_key if (o.ceiling_key or "").startswith("matmul:") else None)
    return run.ceiling(device, key) if key else None


def _over_peak(run: RunRecord, device: str, o: OpRow) -> str:
    """ " ! above the fp32 peak" where the op's FLOP/s beat the measured peak of its dtype."""
    peak = _op_peak(run, device, o)
    if peak is None or not o.flop_rate or o.flop_rate <= peak.value:
        return ""
    return f" ! above the {fmt.ceiling_label(peak)}"


def _above_physical(run: RunRecord, device: str, p: ProfileSummary | None, o: OpRow) -> bool:
    """Whether the op's FLOP/s are more than the device could physically do at its dtype
    (``physical.flops_bound``): a FLOP count that is not the op's own, never a point."""
    from torchmark.hardware.physical import flops_bound

    peak = _op_peak(run, device, o)
    key = peak.key if peak is not None else "matmul:float32"
    info = run.environment.get("devices", {}).get(device, {})
    gpu = p is not None and p.kind == "gpu"
    limit, _ = flops_bound(key, info if isinstance(info, dict) else {}, gpu)
    if peak is not None and peak.theoretical:
        limit = max(limit, peak.theoretical)
    return (o.flop_rate or 0.0) > limit


def _roof(
    ax: Axes, xs: list[float], peaks: list[Ceiling], bw: Ceiling | None
) -> tuple[float, float]:
    """The roofline's frame on ``ax``: the bandwidth slope up to each measured matmul peak
    (or the peaks alone as lines), each labelled; returns the x range (FLOP/B) it spans."""
    lo = min([*(x / 4 for x in xs), 0.05])
    hi = max([*(4 * x for x in xs), 100.0])
    if bw is not None:
        hi = max([hi, *(4 * c.value / bw.value for c in peaks)])
        for c in peaks:
            ridge = c.value / bw.value
            ax.plot([lo, ridge, hi], [lo * bw.value, c.value, c.value], color="grey", lw=1)
        if not peaks:  # no compute ceiling measured: the bandwidth slope alone
            ax.plot([lo, hi], [lo * bw.value, hi * bw.value], color="grey", lw=1)
        # Along the slope below the first ridge, where the low-intensity points
        # (elementwise work, ~0.1 FLOP/B) do not sit.
        knee = min([c.value / bw.value for c in peaks] or [hi])
        at = math.sqrt(max(lo, 0.5) * knee) if knee > 0.5 else lo * 1.5
        ax.annotate(
            f"bw {fmt.ceiling_value(bw)}",
            (at, at * bw.value),
            xytext=(-3, 3),
            textcoords="offset points",
            fontsize=7,
            ha="right",
            va="bottom",
        )
    else:
        for c in peaks:
            ax.axhline(c.value, color="grey", lw=1)
    for c in peaks:
        ax.annotate(
            f"{fmt.ceiling_label(c)} {fmt.ceiling_value(c)}",
            (hi, c.value),
            ha="right",
            va="bottom",
            fontsize=7,
        )
    return lo, hi


def _labelled(
    ax: Axes,
    points: list[tuple[float, float, str, str, float]],
    lo: float,
    hi: float,
    span: list[float],
) -> None:
    """Roofline points (x, y, label, colour, size) on log-log axes over [lo, hi], each
    labelled beside it; labels spread apart vertically (a thin line back to the point when
    moved), to the left near the right edge."""
    edge = math.log10(lo) + 0.7 * (math.log10(hi) - math.log10(lo))
    ys = [p[1] for p in points]
    for (x, y, text, colour, size), ty in zip(points, _spread(ys, span), strict=True):
        ax.scatter([x], [y], color=colour, zorder=3, s=size)
        left = math.log10(x) > edge
        ax.annotate(
            text,
            (x, y),
            xytext=(x * (0.8 if left else 1.25), ty),
            fontsize=6.5,
            va="center",
            ha="right" if left else "left",
            arrowprops={"arrowstyle": "-", "color": "#bbb", "lw": 0.4} if ty != y else None,
        )
    _log(ax, "x")
    _log(ax, "y")
    ax.set_xlim(lo, hi)
