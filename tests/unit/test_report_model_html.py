"""The HTML report of a `model` run holds everything `torchmark model` printed: the sweep
with MFU, J/item and cost per million items, the notes under it, the break-even per GPU and
the cheaper device per batch (the break-even table says it; no separate cost table). Both
views read the same pure functions (``report.model``)."""

from __future__ import annotations

import html as html_lib
from pathlib import Path

from rich.console import Console

from torchmark.report import html
from torchmark.report.model import cost_line, model_view, sweep_rows
from torchmark.results import Ceiling, RunRecord
from torchmark.results.payloads import CostTable, ModelPayload
from torchmark.user import cost

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def priced_run() -> RunRecord:
    run = RunRecord.model_validate_json((RUNS / "model-cpu-gpu.json").read_text())
    peaks = {
        "cpu": Ceiling(device="cpu", key="matmul:float32", value=2e11, unit="FLOP/s", method="t"),
        "cuda:0": Ceiling(device="cuda:0", key="matmul:tf32", value=4e14, unit="FLOP/s",
                          method="t"),
    }  # fmt: skip
    run.ceilings = list(peaks.values())
    run.results = [  # 1 GFLOP per item, as a model run's preflight counts them
        r.model_copy(
            update={
                "ceiling": peaks[r.device],
                "work": r.work.model_copy(update={"flops": 1e9 * r.params["batch"]}),
            }
        )
        for r in run.results
    ]
    assert isinstance(run.payload, ModelPayload)
    run.payload.cost = CostTable.model_validate(
        cost.cost_table(run.results, {"cpu": 0.68, "cuda:0": 2.5})
    )
    return run


def test_the_html_holds_every_figure_and_line_the_terminal_printed() -> None:
    run = priced_run()
    console = Console(record=True, width=250)
    for part in model_view(run):
        console.print(part)
    printed = console.export_text()
    page = html_lib.unescape(html.render([run]))
    rows = sweep_rows(run)
    assert any(r.cost and r.cost != "no price" for r in rows)
    assert any(r.j_per_item for r in rows) and any(r.mfu for r in rows)
    for r in rows:
        for cell in (r.cost, r.j_per_item, r.mfu, r.items_per_s):
            if cell:
                assert cell in printed, cell
                assert cell in page, cell
    line = cost_line(run)
    assert line is not None and line.startswith("Cheaper per item: batch 1: cpu")
    assert line in printed and line in page
    assert "cost/M items" in page and "J/item" in page and "MFU" in page
    assert "Break-even: batch from which the GPU beats the CPU" in page
    assert "from batch 4" in page  # the fixture's end-to-end break-even, as printed
    assert "MFU on cuda:0: % of its measured matmul:tf32 peak" in page
