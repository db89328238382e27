"""A serving run's latency against the offered rate, per device and split: the hockey stick
(flat while the device keeps up, steep where its queue starts to grow)."""

from __future__ import annotations

from torchmark.report.charts.base import Chart, _log, _plot, _svg
from torchmark.results.serving import ServingPayload, ms


def hockey_stick(p: ServingPayload) -> Chart:
    """p99 latency against the offered rate per fleet (the knee is the device's limit),
    p50 dashed, the bound as a line, points the generator fell behind on as crosses."""
    key, heading = "serving_curve", "Latency vs request rate (the hockey stick)"
    fleets = [f for f in p.fleets if any(pt.p99_s is not None for pt in f.points)]
    if not fleets:
        return Chart(key, heading, None, "no load point finished a request")
    fig, ax = _plot()
    for f in fleets:
        label = f"{f.device} {f.split}".strip()
        best = f.best_point
        batching = (best.max_batch, best.max_wait_s) if best else None
        pts = sorted(
            (
                pt
                for pt in f.points
                if pt.p99_s is not None
                and (batching is None or (pt.max_batch, pt.max_wait_s) == batching)
            ),
            key=lambda pt: pt.rate,
        )
        ok = [pt for pt in pts if pt.outcome != "generator_behind"]
        behind = [pt for pt in pts if pt.outcome == "generator_behind"]
        (line,) = ax.plot(
            [pt.rate for pt in ok], [1e3 * (pt.p99_s or 0) for pt in ok], "o-", label=label
        )
        ax.plot(
            [pt.rate for pt in ok],
            [1e3 * (pt.p50_s or 0) for pt in ok],
            "--",
            color=line.get_color(),
            alpha=0.6,
        )
        if behind:
            ax.plot(
                [pt.rate for pt in behind],
                [1e3 * (pt.p99_s or 0) for pt in behind],
                "x",
                color=line.get_color(),
            )
    ax.axhline(1e3 * p.bound_s, color="grey", linewidth=1)
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("latency (ms): p99 solid, p50 dashed")
    _log(ax, "y")
    ax.legend()
    note = (
        f"each device's best batching; the grey line is the {ms(p.bound_s)} "
        "bound; x: the load generator fell behind (the host's timing, not the device)"
    )
    return Chart(key, heading, _svg(fig), note)
