"""Charts of stored runs as inline SVG, one module per figure kind (``base``: what they
share). Each function returns a ``Chart``: the SVG, or ``None`` and one line saying why
there is nothing to draw. Pure functions of RunRecords: nothing here measures.

    ceiling      % of the measured ceiling per case
    batch        throughput vs batch size
    speedup      accelerator over CPU per workload; a user model's break-even
    roofline     results (and a profile's top ops) under the measured ceilings
    precision    best throughput per precision
    telemetry    clock, heat and power over the run
    seed         this machine in the seed blog's table
    collectives  bus bandwidth per message size
    pipeline     the input pipeline's breakdown and workers curve
    serving      a serving run's latency against the offered rate (drawn in its section)
"""

from __future__ import annotations

from collections.abc import Sequence

from torchmark.report.charts.base import Chart
from torchmark.report.charts.batch import throughput_vs_batch
from torchmark.report.charts.ceiling import ceiling_pct
from torchmark.report.charts.collectives import collectives_busbw
from torchmark.report.charts.pipeline import input_breakdown, workers_curve
from torchmark.report.charts.precision import precision_bars
from torchmark.report.charts.roofline import ops_roofline, roofline
from torchmark.report.charts.seed import seed_table
from torchmark.report.charts.speedup import break_even, speedup_per_workload
from torchmark.report.charts.telemetry import telemetry_timeline, timeline_rows
from torchmark.results import RunRecord

__all__ = [
    "Chart",
    "all_charts",
    "break_even",
    "ceiling_pct",
    "collectives_busbw",
    "input_breakdown",
    "ops_roofline",
    "precision_bars",
    "roofline",
    "seed_table",
    "speedup_per_workload",
    "telemetry_timeline",
    "throughput_vs_batch",
    "timeline_rows",
    "workers_curve",
]


def all_charts(runs: Sequence[RunRecord]) -> list[Chart]:
    charts = [
        ceiling_pct(runs),
        throughput_vs_batch(runs),
        speedup_per_workload(runs),
        break_even(runs),
        roofline(runs),
        precision_bars(runs),
        telemetry_timeline(runs),
    ]
    if any(r.workload == "collectives" for run in runs for r in run.results):
        charts.append(collectives_busbw(runs))  # only distributed runs have any
    return charts
