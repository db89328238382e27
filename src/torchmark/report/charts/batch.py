"""Throughput against batch size, one line per case and device."""

from __future__ import annotations

import re
from collections.abc import Sequence

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _log, _plot, _rc, _run_prefix, _svg
from torchmark.results import Result, RunRecord

BATCH_KEYS = ("batch", "batch_size")
TUNE_BATCH = re.compile(r" @ batch \d+$")


def _batch(r: Result) -> int | None:
    for k in BATCH_KEYS:
        v = r.params.get(k)
        if isinstance(v, int | float) and v > 0:
            return int(v)
    return None


def throughput_vs_batch(runs: Sequence[RunRecord]) -> Chart:
    title = "Throughput vs batch size"
    # per point: batch, median rate, and the rates at the samples' quartiles (the spread)
    series: dict[str, list[tuple[int, float, float, float]]] = {}
    units: set[str] = set()
    for run in runs:
        for r in run.results:
            b, rate = _batch(r), r.rate(r.headline)
            if b is None or rate is None or not verdicts.may(r, "compare"):
                continue  # an invalid point is no point on a curve
            rest = {k: v for k, v in r.params.items() if k not in BATCH_KEYS}
            # tune names a candidate by its batch ("amp-bf16 @ batch 8"): one line per setting
            variant = TUNE_BATCH.sub("", r.variant)
            label = (
                f"{_run_prefix(runs, run)}{r.device} {fmt.case_label(variant, rest, r.workload)}"
            )
            series.setdefault(label.strip(), []).append((b, rate, *_spread(r, rate)))
            units.add(fmt.base_unit(r))
    series = {k: sorted(v) for k, v in series.items() if len(v) >= 2}
    if not series:
        return Chart("batch", title, None, "no workload in these runs swept a batch size")
    with _rc():
        fig, ax = _plot()
        for label, pts in series.items():
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                marker="o",
                capsize=3,
                label=label,
            )
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("batch size")
        ax.set_ylabel(" / ".join(sorted(units)))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "batch",
        title,
        _svg(fig),
        "median throughput, bars from its samples' quartiles (the spread); both axes logarithmic",
    )


def _spread(r: Result, rate: float) -> tuple[float, float]:
    """The rates at the samples' slower and faster quartile (time's q3 and q1)."""
    q1, q3 = r.measurement.quartiles
    m = r.measurement.median
    if not (q1 > 0 and q3 > 0 and m > 0):
        return rate, rate
    return rate * m / q3, rate * m / q1
