"""The collectives' busbw table and chart never show a number its verdict rejects.

A new user's walk of the README: `torchmark run -w collectives --nproc-per-node 2` on a
loaded 2-core VM judged all_reduce at 4 KiB invalid (a scheduler artefact: samples in two
clusters, 102-159 µs and 619-761 µs) and its table said so, but the nccl-tests table under
it printed the same case as a plain "4 KiB  640 µs  6.40 MB/s  6.40 MB/s"."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from torchmark.report import charts
from torchmark.report.collectives import busbw_table
from torchmark.results import Result, RunRecord, Verdict, Work

ARTEFACT = "samples split into two clusters, 102 µs and 619 µs (41% slow): a scheduler artefact"


def collective(size: int, rate: float, verdict: Verdict | None = None) -> Result:
    return Result(
        workload="collectives",
        variant="all_reduce",
        device="cpu",
        params={"bytes": size, "ranks": 2},
        samples_s=[size / rate * (1 + 0.01 * (i % 3)) for i in range(12)],
        work=Work(bytes=size, items=1, item_unit="call"),
        headline="bytes",
        extra={"op": "all_reduce", "ranks": 2, "algbw_Bps": rate, "busbw_Bps": rate},
        verdict=verdict,
    )


def run() -> RunRecord:
    bad = collective(4096, 6.4e6, Verdict(level="invalid", reasons=[ARTEFACT]))
    return RunRecord(run_id="c", results=[collective(1024, 5.88e6), bad, collective(1 << 20, 1e9)])


def test_the_busbw_table_prints_invalid_not_its_number() -> None:
    table = busbw_table(run())
    assert table is not None
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    rows = {line.split()[1]: line for line in out.getvalue().splitlines() if "KiB" in line}
    assert "invalid" in rows["4"] and "6.40" not in rows["4"] and "MB/s" not in rows["4"]
    assert "5.88 MB/s" in rows["1"]


def test_the_busbw_chart_leaves_out_an_invalid_point(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.axes

    plotted: list[list[float]] = []
    real = matplotlib.axes.Axes.plot

    def spy(self: matplotlib.axes.Axes, x: list[float], *a: object, **kw: object) -> object:
        plotted.append(list(x))
        return real(self, x, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    (chart,) = [c for c in charts.all_charts([run()]) if c.key == "busbw"]
    assert chart.svg
    assert plotted == [[1024.0, float(1 << 20)]]  # 4 KiB, invalid, is no point on the curve
