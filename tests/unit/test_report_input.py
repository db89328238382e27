"""The input workloads' breakdown where results are read: ``compare``, Markdown and HTML.

The fixture is a real run (H100, 2026-11-23: resident 1,693 images/s, workers 0..16,
persistent, prefetch, pin). The second run of a comparison is derived from it here, with
one configuration slowed by a stated factor, so the verdicts have a known answer.
Regenerate the golden files with ``TORCHMARK_UPDATE_GOLDEN=1`` and read the diff."""

from __future__ import annotations

import copy
import io
import re

import pytest
from rich.console import Console
from test_report_table import load, matches_golden

from inputruns import RAW, run, slowed
from torchmark.judge.comparison import compare
from torchmark.loaders import LoaderConfig, config_of
from torchmark.report import charts, html, markdown
from torchmark.report.compare import comparison_renderables
from torchmark.report.pipeline import config_cell, pipeline_tables, step_parts
from torchmark.results import RunRecord


def printed(records: list[RunRecord], width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    for part in comparison_renderables(compare(records), console.width):
        console.print(part)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def test_fixture_is_the_measured_run() -> None:
    r = run()
    resident = next(x for x in r.results if x.variant == "resident")
    assert round(resident.rate("items") or 0) == 1693
    workers = sorted({config_of(x.params).workers for x in r.results if x.variant == "loader"})
    assert workers == [0, 1, 2, 4, 8, 16]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_compare_matches_golden_text(width: int) -> None:
    assert matches_golden(printed([run(), slowed(1.4)], width), f"compare-input-{width}.txt")


def test_compare_names_the_configuration_that_changed_and_by_how_much() -> None:
    text = printed([run(), slowed(1.4)], 120)
    section = text[text.index("input pipeline, A → B") :]
    changed = [line for line in section.splitlines() if line.startswith("changed:")]
    assert len(changed) == 1
    assert "w=16 persistent" in changed[0] and "688 → 491 images/s" in changed[0]
    assert "(0.71x, SLOWER)" in changed[0] and "wait 52→66 %" in changed[0]
    row = next(line for line in section.splitlines() if line.startswith("w=16 persistent"))
    assert "SLOWER" in row and "52→66 %" in row


def test_compare_says_cant_tell_where_the_noise_covers_the_change() -> None:
    """workers=4 slowed 3 % inside its 7 % spread: "can't tell", never SAME or SLOWER."""
    b = slowed(1.03, {"workers": 4, "batch": 64})
    text = printed([run(), b], 120)
    section = text[text.index("input pipeline, A → B") :]
    row = next(line for line in section.splitlines() if line.startswith("w=4 "))
    assert "can't tell" in row and "SAME" not in row and "SLOWER" not in row
    assert "no input configuration measurably changed from A to B" in section
    unclear = next(line for line in section.splitlines() if line.startswith("can't tell"))
    assert "w=4" in unclear


def test_compare_verdicts_agree_with_the_main_table() -> None:
    cmp = compare([run(), slowed(1.4)])
    text = printed([run(), slowed(1.4)], 120)
    section = text[text.index("input pipeline, A → B") :]
    said = {"SAME": "SAME", "FASTER": "FASTER", "SLOWER": "SLOWER", "UNCLEAR": "can't tell"}
    for c in cmp.changes[0]:
        assert c.verdict is not None
        label = str(config_cell(c.a).full)
        rows = [line for line in section.splitlines() if line.startswith(label + "  ")]
        assert len(rows) == 1 and said[c.verdict] in rows[0]


def test_compare_of_three_runs_names_each_letter() -> None:
    text = printed([run(), slowed(1.4), slowed(0.6, name="faster")], 120)
    assert "input pipeline, A → B" in text and "input pipeline, A → C" in text
    c = text[text.index("input pipeline, A → C") :]
    assert "(1.67x, FASTER)" in c


def test_compare_without_input_cases_has_no_input_section() -> None:
    plain = load("cpu-gpu")
    slower = load("cpu-gpu-slower")
    assert "pipeline" not in printed([plain, slower], 120)


def test_markdown_has_the_breakdown_table() -> None:
    text = markdown.render([run()])
    section = text[text.index("**input pipeline**") :]
    assert matches_golden(section, "markdown-input.txt")
    rows = [line for line in section.splitlines() if line.startswith("| w=16 persistent")]
    assert rows == ["| w=16 persistent | cuda:0 | 688 | 92.4 ms | 52 % | 8 % | 40 % | 41 % |"]


def test_markdown_without_input_cases_has_no_breakdown() -> None:
    plain = load("cpu-gpu")
    assert "pipeline" not in markdown.render([plain])


def test_stacked_bars_are_the_measured_parts_of_each_step() -> None:
    r = run()
    for x in r.results:
        parts = step_parts(x)
        assert parts is not None
        if x.variant == "resident":
            assert parts == (0.0, 0.0, x.median_s)
        else:
            b = x.extra["input"]
            assert parts == (b["wait_s"], b["copy_s"], b["compute_s"])
            # the parts overlap at most a little: they sum to the step within 2 %
            assert sum(parts) == pytest.approx(b["step_s"], rel=0.02)
    chart = charts.input_breakdown(r)
    assert chart.svg is not None
    for word in ("wait", "copy", "compute", "w=16 persistent", "device-resident"):
        assert word in chart.svg
    assert "no copy on the CPU" not in chart.note


def test_workers_curve_has_the_resident_ceiling_line() -> None:
    chart = charts.workers_curve(run())
    assert chart.svg is not None
    assert "device-resident: 1,693 images/s" in chart.svg
    ticks = re.findall(r">(\d+)</text>", chart.svg)
    assert {"0", "1", "2", "4", "8", "16"} <= set(ticks)
    for label in ("w=16 pers", "w=16 pf=4", "w=16 pin"):
        assert label in chart.svg


def test_workers_curve_says_why_with_one_worker_count() -> None:
    raw = copy.deepcopy(RAW)
    raw["results"] = [r for r in raw["results"] if r["params"].get("workers") in (None, 16)]
    chart = charts.workers_curve(run(raw))
    assert chart.svg is None and "fewer than two worker counts" in chart.note


def test_workers_curve_draws_no_point_its_verdict_rejects() -> None:
    """A worker count judged invalid under load is no point on the curve (as in the batch
    and collectives charts): with one valid count left there is no curve to draw."""
    raw = copy.deepcopy(RAW)
    raw["results"] = [r for r in raw["results"] if r["params"].get("workers") in (None, 0, 16)]
    for r in raw["results"]:
        if r["params"].get("workers") == 0:
            r["verdict"] = {"level": "invalid", "reasons": ["samples split into two clusters"]}
    chart = charts.workers_curve(run(raw))
    assert chart.svg is None and "fewer than two worker counts" in chart.note


def test_breakdown_chart_says_why_when_no_configuration_finished() -> None:
    raw = copy.deepcopy(RAW)
    raw["results"] = [r for r in raw["results"] if r["variant"] == "loader"]
    for r in raw["results"]:
        r.update(status="skipped", reason="worker crashed", samples_s=[])
    chart = charts.input_breakdown(run(raw))
    assert chart.svg is None and "no configuration finished" in chart.note
    page = html.render([run(raw)])
    assert "Input pipeline (input)" in page and "not drawn: no configuration finished" in page


def test_html_report_shows_both_charts_and_the_advice() -> None:
    page = html.render([run()])
    assert 'id="chart-input-breakdown"' in page and 'id="chart-input-workers"' in page
    advice = page[page.index('class="input-advice"') :]
    assert "2.82x the DataLoader defaults" in advice[: advice.index("</ul>")]


def test_html_without_input_cases_has_no_input_section() -> None:
    plain = load("cpu-gpu")
    assert "Input pipeline" not in html.render([plain])


def test_cpu_copy_note_only_where_a_fed_step_copied_nothing() -> None:
    """The resident case copies nothing on any device: it must not make a CUDA run say
    "none on the CPU"; a run whose fed steps copied nothing does say it."""
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    for part in pipeline_tables(run()):
        console.print(part)
    assert "none on the CPU" not in out.getvalue()
    raw = copy.deepcopy(RAW)
    for r in raw["results"]:
        if r["variant"] == "loader":
            r["extra"]["input"]["copy_s"] = None
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    for part in pipeline_tables(run(raw)):
        console.print(part)
    assert "none on the CPU" in out.getvalue()
    assert "no copy on the CPU" in charts.input_breakdown(run(raw)).note


def test_default_is_the_plain_dataloader() -> None:
    assert config_of({"workers": 0, "batch": 64}) == LoaderConfig()


@pytest.mark.parametrize("width", [60, 80, 120, None])
def test_terminal_breakdown_matches_golden_text(
    width: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None: as piped (rich's 80-column fallback, not a terminal, no COLUMNS)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = (
        Console(file=out, force_terminal=False)
        if width is None
        else Console(file=out, width=width, color_system=None, force_terminal=True)
    )
    for part in pipeline_tables(run()):
        console.print(part)
    text = "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
    assert all(len(line) <= (width or 80) for line in text.splitlines())
    assert matches_golden(text, f"input-breakdown-{width or 'piped'}.txt")


def test_two_runs_get_their_own_input_sections() -> None:
    page = html.render([run(), slowed(1.4)])
    for i in (1, 2):
        assert f'id="chart-input-breakdown-{i}"' in page
        assert f'id="chart-input-workers-{i}"' in page
