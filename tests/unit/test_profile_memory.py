"""Memory by what it holds at the step's peak: the pure part over a hand-made timeline, and
how it is shown."""

from __future__ import annotations

import pytest
from rich.console import Console

from torchmark.kinds.profile import memory as m
from torchmark.report.profile import html_context, memory_tables
from torchmark.results.payloads import MemoryAtPeak

# torch's column order (column 0 unused, None: unknown)
COLUMNS = [
    None, "PARAMETER", "OPTIMIZER_STATE", "INPUT", "TEMPORARY", "ACTIVATION", "GRADIENT",
    "AUTOGRAD_DETAIL", None,
]  # fmt: skip
ROWS = [
    # params, opt, input, tmp, act, grad, autograd, unknown
    [0, 100, 200, 10, 0, 0, 0, 0, 5],  # before the step
    [0, 100, 200, 10, 3, 300, 0, 0, 5],  # forward: activations (618)
    [0, 100, 200, 10, 7, 250, 90, 20, 5],  # backward: the peak, 682
    [0, 100, 200, 10, 0, 0, 100, 0, 5],  # after
]


def test_categories_at_the_peak_sum_to_it_and_each_keeps_its_own_largest() -> None:
    got = m.at_peak(COLUMNS, ROWS)
    assert got.peak_bytes == 682 == sum(got.at_peak.values())
    assert got.at_peak == {
        m.PARAMETERS: 100,
        m.GRADIENTS: 90,
        m.OPTIMIZER: 200,
        m.ACTIVATIONS: 250,
        m.INPUTS: 10,
        m.OTHER: 7 + 20 + 5,  # temporaries, autograd's buffers, unknown
    }
    assert got.largest[m.ACTIVATIONS] == 300 and got.largest[m.GRADIENTS] == 100
    d = got.as_dict()
    assert [c["name"] for c in d["categories"]] == list(m.ORDER)
    with pytest.raises(ValueError):
        m.at_peak(COLUMNS, [])


def render(p: dict) -> str:
    console = Console(width=80, record=True, color_system=None)
    mem = MemoryAtPeak.model_validate(p["memory"]) if p.get("memory") else None
    for r in memory_tables(mem):
        console.print(r)
    return console.export_text()


def test_the_memory_table_and_its_html_bar() -> None:
    p = {"memory": m.at_peak(COLUMNS, ROWS).as_dict()}
    text = render(p)
    assert "Memory at the step's peak, 682 B live" in text
    assert "activations" in text and "36.7 %" in text  # 250 of 682
    assert "own largest" in text and "300 B" in text
    assert max(len(ln) for ln in text.splitlines()) <= 80
    base = {"case": "c", "kind": "cpu", "categories": [], "ops": [], "verdict": "", "rules": []}
    from torchmark.results import RunRecord

    rec = RunRecord(
        tool_version="t", kind="profile", command="t", environment={}, fingerprint="f",
        payload={"kind": "profile", "profile": {**base, **p, "steps": 1, "profiled_step_s": 1.0,
                           "unprofiled_median_s": 1.0, "overhead_pct": 0.0}},
    )  # fmt: skip
    ctx = html_context(rec)
    assert ctx is not None and ctx["memory_peak"] == "682 B"
    assert sum(float(c["width"]) for c in ctx["memory"]) == pytest.approx(100, abs=0.01)


def test_memory_not_known_says_why_and_absent_says_nothing() -> None:
    assert "not known (torch's memory profiler failed: X)" in render(
        {"memory": {"error": "torch's memory profiler failed: X"}}
    )
    assert render({"memory": None}) == "" and render({}) == ""
