"""Accelerators over the CPU: per workload (geometric mean), and a user model's break-even
batch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.report.charts.base import Chart, _log, _plot, _rc, _run_prefix, _svg
from torchmark.report.table import case_key
from torchmark.results import Result, RunRecord, is_host
from torchmark.results.payloads import BreakEvenFindings


def speedup_per_workload(runs: Sequence[RunRecord]) -> Chart:
    """Geometric mean over each workload's cases of GPU rate / CPU rate, per accelerator."""
    title = "Speedup over the CPU, per workload"
    bars: dict[str, dict[str, float]] = {}  # workload -> device label -> geomean
    for run in runs:
        by_case: dict[Any, dict[str, Result]] = {}
        for r in run.results:
            by_case.setdefault(case_key(r), {})[r.device] = r
        ratios: dict[tuple[str, str], list[float]] = {}
        for key, per_dev in by_case.items():
            # a geometric mean: only results their verdict lets be averaged (verdicts)
            host = next(
                (r for d, r in per_dev.items() if is_host(d) and verdicts.may(r, "average")),
                None,
            )
            if host is None:
                continue
            for d, r in per_dev.items():
                a, b = r.rate(r.headline), host.rate(host.headline)
                if not is_host(d) and a and b and verdicts.may(r, "average"):
                    ratios.setdefault((key[0], _run_prefix(runs, run) + d), []).append(a / b)
        for (w, d), xs in ratios.items():
            bars.setdefault(w, {})[d] = math.exp(sum(map(math.log, xs)) / len(xs))
    if not bars:
        return Chart(
            "speedup", title, None, "no case was measured on both the CPU and an accelerator"
        )
    devices = sorted({d for v in bars.values() for d in v})
    with _rc():
        fig, ax = _plot()
        width = 0.8 / len(devices)
        names = list(bars)
        for j, d in enumerate(devices):
            xs = [i + j * width for i, w in enumerate(names) if d in bars[w]]
            ys = [bars[w][d] for w in names if d in bars[w]]
            rects = ax.bar(xs, ys, width, label=d)
            ax.bar_label(rects, labels=[fmt.ratio(y) for y in ys], fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.8)
        _log(ax, "y")
        ax.set_xticks([i + width * (len(devices) - 1) / 2 for i in range(len(names))], names)
        ax.set_ylabel("× CPU throughput (geometric mean)")
        ax.legend()
    return Chart(
        "speedup",
        title,
        _svg(fig),
        "each bar: geometric mean over the workload's cases of accelerator / CPU median rate; "
        "below 1× the CPU is faster",
    )


def break_even(runs: Sequence[RunRecord]) -> Chart:
    """GPU speedup over the CPU by batch, per view of time, from a run's break-even."""
    title = "CPU-vs-GPU break-even"
    curves: dict[str, list[tuple[int, float]]] = {}
    marks: list[tuple[str, int | str]] = []
    notes = []
    for run in runs:
        if not isinstance(run.payload, BreakEvenFindings):
            continue
        be = run.payload.break_even
        if not be:
            if run.payload.break_even_note:
                notes.append(f"{run.run_id}: {run.payload.break_even_note}")
            continue
        for gpu, entry in be.items():
            label = f"{_run_prefix(runs, run)}{entry.label or gpu}"
            for p in entry.per_batch:
                if p.speedup:
                    curves.setdefault(f"{label} ({p.mode})", []).append((p.batch, p.speedup))
            marks.append((f"{label} e2e", entry.e2e))
            marks.append((f"{label} device", entry.device))
    if not curves:
        why = "; ".join(notes) or "no user-model run with a CPU-vs-GPU batch sweep (break_even)"
        return Chart("break_even", title, None, why)
    with _rc():
        fig, ax = _plot()
        for label, pts in curves.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.annotate(
            "GPU faster ↑ / CPU faster ↓",
            (0.01, 1.0),
            xycoords=("axes fraction", "data"),
            fontsize=8,
            va="bottom",
        )
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("batch size")
        ax.set_ylabel("GPU speedup over CPU")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    words = "; ".join(f"{n}: {_be_words(v)}" for n, v in marks)
    return Chart("break_even", title, _svg(fig), f"break-even batch: {words}")


def _be_words(v: int | str) -> str:
    return f"from batch {v}" if isinstance(v, int) else str(v)
