"""Collectives' bus bandwidth per message size."""

from __future__ import annotations

from collections.abc import Sequence

from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _log, _plot, _rc, _run_prefix, _svg
from torchmark.results import RunRecord


def collectives_busbw(runs: Sequence[RunRecord]) -> Chart:
    """busbw per message size, one line per collective (nccl-tests' figure: comparable with
    the link's own speed whatever the rank count)."""
    title = "Collectives: bus bandwidth per message size"
    series: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for r in run.results:
            if r.workload != "collectives" or not r.ok or "busbw_Bps" not in r.extra:
                continue
            if not verdicts.may(r, "compare"):  # an invalid point is no point on the curve
                continue
            ranks = r.extra.get("ranks", "?")
            label = f"{_run_prefix(runs, run)}{r.variant} ({ranks} ranks, {r.device})"
            bytes_ = r.work.bytes or float(r.params.get("bytes", 0))
            series.setdefault(label, []).append((bytes_, r.extra["busbw_Bps"]))
    series = {k: sorted(v) for k, v in series.items() if v}
    if not series:
        return Chart(
            "busbw",
            title,
            None,
            "no collective finished (each needs >= 2 ranks: --nproc-per-node 2)",
        )
    with _rc():
        fig, ax = _plot()
        for label, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] / 1e9 for p in pts], marker="o", label=label)
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "busbw",
        title,
        _svg(fig),
        "busbw = size / time (the slowest rank's) x nccl-tests' factor: all_reduce 2(n-1)/n, "
        "all_gather, reduce_scatter and all_to_all (n-1)/n, broadcast and send/recv 1",
    )
