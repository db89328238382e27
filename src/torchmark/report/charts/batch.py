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
    series: dict[str, list[tuple[int, float]]] = {}
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
            series.setdefault(label.strip(), []).append((b, rate))
            units.add(fmt.base_unit(r))
    series = {k: sorted(v) for k, v in series.items() if len(v) >= 2}
    if not series:
        return Chart("batch", title, None, "no workload in these runs swept a batch size")
    with _rc():
        fig, ax = _plot()
        for label, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("batch size")
        ax.set_ylabel(" / ".join(sorted(units)))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart("batch", title, _svg(fig), "median throughput; both axes logarithmic")
