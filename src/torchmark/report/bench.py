"""A run of torchmark's own suite (``python -m benchmarks``): its timed figures as a run's
tables (``compare`` judges them), then each script's outcome and the other figures."""

from __future__ import annotations

from rich.console import RenderableType

from torchmark.report.layout import lines
from torchmark.results import RunRecord
from torchmark.results.payloads import BenchPayload


def bench_view(record: RunRecord) -> list[RenderableType]:
    from torchmark.report.table import run_tables

    out: list[RenderableType] = run_tables(record) if record.results else []
    p = record.payload
    if not isinstance(p, BenchPayload):
        return out
    said = [
        f"{s.name}: {s.outcome} in {s.wall_s:.0f} s" + (f" (goal: {s.goal})" if s.goal else "")
        for s in p.scripts
    ]
    for f in p.figures:
        verdict = "" if f.met is None else ", met" if f.met else ", MISSED"
        goal = f" (goal {f.goal}{verdict})" if f.goal else ""
        said.append(f"{f.script}, {f.name}: {f.value:.4g} {f.unit}{goal}".replace(" ,", ","))
    return [*out, lines(said)]
