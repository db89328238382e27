"""Best throughput per precision, relative to float32."""

from __future__ import annotations

from collections.abc import Sequence

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _plot, _rc, _run_prefix, _svg
from torchmark.results import RunRecord


def precision_bars(runs: Sequence[RunRecord]) -> Chart:
    """Best throughput per precision, relative to float32, per workload and device."""
    title = "Precision comparison"
    groups: dict[str, dict[str, float]] = {}
    for run in runs:
        for r in run.results:
            key = next((k for k in fmt.PRECISION_KEYS if k in r.params), None)
            rate = r.rate(r.headline)
            if key is None or rate is None or not verdicts.may(r, "rank"):
                continue  # "best per precision" ranks: only what its verdict lets rank
            g = f"{_run_prefix(runs, run)}{r.workload}/{r.variant} {r.device}"
            p = fmt.DTYPE_SHORT.get(str(r.params[key]), str(r.params[key]))
            best = groups.setdefault(g, {})
            best[p] = max(best.get(p, 0.0), rate)
    groups = {g: v for g, v in groups.items() if len(v) >= 2}
    if not groups:
        return Chart("precision", title, None, "no workload ran at more than one precision")
    precisions = sorted({p for v in groups.values() for p in v})
    with _rc():
        fig, ax = _plot(max(2.0, 0.45 * len(groups) * len(precisions) / 2 + 1))
        h = 0.8 / len(precisions)
        names = list(groups)
        for j, p in enumerate(precisions):
            ys = [i + j * h for i, g in enumerate(names) if p in groups[g]]
            rel = [
                groups[g][p] / groups[g].get("fp32", max(groups[g].values()))
                for g in names
                if p in groups[g]
            ]
            rects = ax.barh(ys, rel, h, label=p)
            ax.bar_label(rects, labels=[fmt.ratio(x) for x in rel], fontsize=7, padding=2)
        ax.set_yticks([i + h * (len(precisions) - 1) / 2 for i in range(len(names))], names)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("best throughput relative to fp32 (or to the fastest precision)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart("precision", title, _svg(fig), "best over the other parameters of each case")
