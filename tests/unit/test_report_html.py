"""HTML and Markdown reports of fixture runs: self-contained, every chart or a reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchmark import reference
from torchmark.report import charts, flags, html, markdown
from torchmark.report.charts import telemetry
from torchmark.results import RunRecord, Verdict
from torchmark.results.payloads import ModelPayload, RunPayload, TunePayload
from torchmark.user.breakeven import NO_GPU

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json((RUNS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def full_page() -> str:
    return html.render([load("cpu-gpu")])


def test_page_is_self_contained(full_page: str) -> None:
    assert "<script" not in full_page
    assert "<link" not in full_page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", full_page)
    assert "@import" not in full_page
    # SVG clip paths use url(#id): only in-page references are allowed.
    assert set(re.findall(r"url\((.)", full_page)) <= {"#"}


def test_every_chart_is_drawn_for_a_full_fixture(full_page: str) -> None:
    # six across runs, % of ceiling, and the seed-table placement in the run's section
    assert full_page.count('<svg class="chart"') == 8
    assert 'id="not-drawn"' not in full_page
    # Text stays text (svg.fonttype none), so labels are searchable and scale crisply.
    assert "arithmetic intensity (FLOP/byte)" in full_page


def test_numbers_carry_their_verdicts_and_flags(full_page: str) -> None:
    assert "2,381 it/s" in full_page and "95.9 % of bw" in full_page
    assert '<div class="reason">2 throttled samples set aside</div>' in full_page
    assert 'title="out of memory at batch 1024">skipped</span>' in full_page
    assert '<div class="reason">out of memory at batch 1024</div>' in full_page
    assert "every call returns the same tensor" in full_page
    assert "rank 1 of 12 in the seed blog" in full_page
    assert "3.35 TB/s" in full_page  # theoretical next to the measured ceiling


def test_the_vs_cpu_column_is_shown_only_where_an_accelerator_has_a_ratio(
    full_page: str,
) -> None:
    assert "<th>vs CPU</th>" in full_page and "vs CPU: the" in full_page
    assert re.search(r'<td class="num"[^>]*>\d[\d.,]*×</td>', full_page)
    cpu = html.render([load("cpu-only")])
    assert "vs CPU" not in cpu and 'colspan="8"' in cpu


def test_missing_data_gives_one_line_per_chart() -> None:
    page = html.render([load("cpu-only")])
    # A CPU-only run still has its % of ceiling and its place in the seed table.
    assert page.count('<svg class="chart"') == 2
    assert 'id="chart-ceiling_pct"' in page and 'id="chart-seed_table"' in page
    assert "Not drawn here:" in page
    for key, why in (
        ("batch", "no workload in these runs swept a batch size"),
        ("speedup", "no case was measured on both the CPU and an accelerator"),
        ("break_even", "no user-model run with a CPU-vs-GPU batch sweep"),
        ("precision", "no workload ran at more than one precision"),
        ("telemetry", "no telemetry recorded in these runs"),
        ("roofline", "no result declares both its FLOPs and its bytes"),
    ):
        assert re.search(f'<li id="chart-{key}"><b>[^<]+</b>: {why}', page), key
    assert ">WRONG</span>" in page and "output differs from the reference" in page


def test_a_run_with_nothing_to_draw_says_so_once() -> None:
    run = load("cpu-only")
    run.results, run.ceilings = [], []
    page = html.render([run])
    assert '<svg class="chart"' not in page
    assert "No chart can be drawn from this run:" in page
    assert page.count('<li id="chart-') == 7


def test_report_is_deterministic(full_page: str) -> None:
    # Same runs, same bytes (svg.hashsalt fixes matplotlib's element ids): reports diff well.
    assert html.render([load("cpu-gpu")]) == full_page


def test_two_runs_label_their_series() -> None:
    page = html.render([load("cpu-gpu"), load("cpu-gpu-slower")])
    assert "Results: run fixture-cpu-gpu-slower" in page
    assert "fixture-cpu-gpu-slower cuda:0" in page  # chart legends name the run


def test_break_even_note_when_the_gpu_was_absent() -> None:
    run = load("cpu-only")
    run.payload = RunPayload(break_even={}, break_even_note=NO_GPU)
    chart = charts.break_even([run])
    assert chart.svg is None and "no GPU on this machine" in chart.note


def test_break_even_chart_names_the_crossing() -> None:
    chart = charts.break_even([load("cpu-gpu")])
    assert chart.svg is not None
    assert "e2e: from batch 4" in chart.note and "device: always" in chart.note


@pytest.mark.parametrize(
    "telemetry",
    [
        {
            "timeline": {
                "columns": ["t_s", "clock_mhz", "temp_c", "power_w"],
                "rows": [[0.5, 1980, 50, 300]],
            }
        },
        {"timeline": [{"t": 0.5, "clock_mhz": 1980, "temp_c": 50, "power_w": 300}]},
    ],
)
def test_timeline_rows_read_both_shapes(telemetry: dict[str, object]) -> None:
    (row,) = charts.timeline_rows(telemetry)
    assert row["t"] == 0.5 and row["clock_mhz"] == 1980 and row["power_w"] == 300


def test_the_telemetry_chart_draws_the_other_processes_load() -> None:
    run = load("here-quick")  # 1.5-1.7 of 2 cores used by other processes, a flat clock
    svg = charts.telemetry_timeline([run]).svg or ""
    assert "other load (cores)" in svg  # its own axis
    assert "cpu: other processes' load" in svg and "(cores of 2, mean per result)" in svg
    # a timeline with the other load row by row: drawn as recorded, said so
    for r in run.results:
        if r.telemetry and r.telemetry.get("timeline"):
            tl = r.telemetry["timeline"]
            tl["columns"] = [*tl["columns"], "other_cores"]
            tl["rows"] = [[*row, 0.25 * i] for i, row in enumerate(tl["rows"])]
    svg = charts.telemetry_timeline([run]).svg or ""
    assert "(cores of 2)" in svg and "mean per result" not in svg
    # results back to back: each after the one before (its set-up's readings included)
    (ts,) = [[row["t"] for row in s] for s in telemetry.timelines([run]).series.values()]
    assert ts == sorted(ts)
    # no other load recorded: no such axis
    plain = charts.telemetry_timeline([load("cpu-gpu")]).svg or ""
    assert "other load" not in plain


def test_timeline_rows_absent() -> None:
    assert charts.timeline_rows(None) == []
    assert charts.timeline_rows({"sources": {}}) == []


def test_markdown_is_a_pasteable_table() -> None:
    text = markdown.render([load("cpu-gpu")])
    lines = text.splitlines()
    header = lines.index(
        "| Hardware | Workload | Throughput | Median | Spread (IQR) | % of ceiling | Flags |"
    )
    assert lines[header + 1] == "|---|---|---:|---:|---:|---:|---|"
    row = "| NVIDIA H100 80GB HBM3 (cuda:0) | seed-add/as-published | 2,381 it/s | 420 µs |"
    assert any(line.startswith(row) for line in lines)
    assert all(line.count("|") == 8 for line in lines[header : header + 20])


TEX = "$\\frac{a$"  # unbalanced TeX: matplotlib's mathtext raised ValueError on it


def test_tex_in_names_is_drawn_as_written() -> None:
    run = load("cpu-gpu")
    for r in run.results:
        r.workload = TEX
    page = html.render([run])
    assert page.count('<svg class="chart"') == 7  # all but the seed table: no seed-add left
    # svg.fonttype none keeps text as text: the label reached the SVG literally.
    assert re.search(r"<text[^>]*>[^<]*\$\\frac\{a\$", page)


def test_markdown_escapes_stored_html() -> None:
    run = load("cpu-gpu")
    run.results[0].workload = "<img src=x onerror=alert(1)>"
    run.environment["host"] = "<b>host</b>"
    run.command = "torchmark run --name `<x>`"
    text = markdown.render([run])
    assert "<img" not in text and "<b>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text and "&lt;b&gt;host&lt;/b&gt;" in text
    # In a code span HTML is inert and entities would show as typed: kept raw, fenced longer.
    assert "`` torchmark run --name `<x>` ``" in text


def test_matplotlib_loads_only_when_a_chart_is_drawn() -> None:
    code = (
        "import sys, pathlib\n"
        "from torchmark.results import RunRecord\n"
        "from torchmark.report import html\n"
        f"p = pathlib.Path({str(RUNS)!r})\n"
        "run = RunRecord.model_validate_json((p / 'cpu-only.json').read_text())\n"
        "run.results, run.ceilings = [], []\n"
        "html.render([run])\n"
        "print('matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_one_pill_per_flag_with_its_reason_on_hover() -> None:
    run = load("cpu-only")
    r = next(x for x in run.results if x.ok and not x.flags)
    r.extra_flags = ["competing_load", "short_warmup"]
    r.verdict = Verdict(
        level="warn",
        reasons=[
            "other processes used 1.3 of 2 cores during the run",
            "first call 40x slower than steady state",
        ],
    )
    pills, reasons = flags.pills(r)
    assert pills == [
        {"text": "competing load", "title": "other processes used 1.3 of 2 cores during the run"},
        {"text": "short warmup", "title": flags.FLAG_HELP["short_warmup"]},
    ]
    # A reason no flag explains is shown once, as text; an explained one only on hover.
    assert reasons == ["first call 40x slower than steady state"]
    page = html.render([run])
    assert page.count("other processes used 1.3 of 2 cores") == 1
    # Markdown has no hover: each flag once, by its reason where it has one.
    row = next(x for x in markdown.render([run]).splitlines() if "first call 40x" in x)
    assert row.endswith(
        "| other processes used 1.3 of 2 cores during the run; short warmup; "
        "first call 40x slower than steady state |"
    )


def test_why_a_number_is_invalid_is_shown_not_hidden() -> None:
    run = load("cpu-only")
    r = next(x for x in run.results if "above_ceiling" in x.flags)
    why = "above 100 % of the measured ceiling (120 % of bandwidth): measurement error"
    r.verdict = Verdict(level="invalid", reasons=[why])
    pills, reasons = flags.pills(r)
    assert [p["text"] for p in pills] == ["invalid", "above ceiling"]
    assert pills[1]["title"] == why and reasons == [why]


def test_seed_table_chart_highlights_this_machine_among_the_blogs_rows() -> None:
    chart = charts.seed_table(load("cpu-gpu"))
    assert chart.svg is not None
    # The blog's eleven rows and this run's two devices, each named once on the axis.
    assert chart.svg.count("(this machine)") == 2
    assert "▶ NVIDIA H100 80GB HBM3 (cuda:0) (this machine)" in chart.svg
    for row in reference.load("seed-2023").rows:
        assert row.hardware in chart.svg
    assert "2,381 it/s" in chart.svg and "670 it/s" in chart.svg
    # Same ranking as `compare --reference seed-2023`: the blog's 11 rows, the committed
    # reference runs' and this run's two; without the H100 reference run (2,422 it/s) this
    # H100 (2,381) ranks first and the CPU tenth of 13.
    ref = reference.load("seed-2023")
    mine = reference.seed_rows(load("cpu-gpu"), source="this machine", mine=True)
    rows = reference.placed(ref, mine)
    runs = sum(len(s.rows) for s in reference.runs())
    assert len(rows) == 13 + runs
    ranks = ", ".join(str(next(i for i, r in enumerate(rows) if r == m) + 1) for m in mine)
    assert chart.note.startswith(f"rank {ranks} of {13 + runs},")


def test_seed_table_chart_says_why_when_there_is_nothing_to_place() -> None:
    run = load("cpu-gpu")
    run.results = [r for r in run.results if r.workload != "seed-add"]
    chart = charts.seed_table(run)
    assert chart.svg is None and "no seed-add as-published result" in chart.note
    assert 'id="chart-seed_table"' not in html.render([run])


def test_ceiling_chart_flags_a_bar_above_the_ceiling() -> None:
    chart = charts.ceiling_pct([load("cpu-only")])
    assert chart.svg is not None
    assert "105 % of bw  ABOVE CEILING: measurement error" in chart.svg
    assert "22.4 % of bw" in chart.svg and ">100 %<" in chart.svg
    # The WRONG triad has no percentage and no bar.
    assert "triad" not in chart.svg


def test_ceiling_axis_ends_at_a_round_value_just_above_the_largest_bar() -> None:
    run = load("cpu-only")
    run.results = [r for r in run.results if r.workload != "seed-add"]  # 22.4 % is left
    svg = charts.ceiling_pct([run]).svg or ""
    ticks = re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, re.S)
    assert ticks[-1] == "25" and ">100 %<" not in svg  # not 0-140 with its 100 % line
    assert [charts.ceiling.axis_end(x) for x in (64.7, 140.0, 104.9, 8.3)] == [70, 140, 120, 9]
    # a bar past the ceiling: the axis runs past 100 %, the ceiling's line drawn
    svg = charts.ceiling_pct([load("cpu-only")]).svg or ""
    ticks = re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, re.S)
    assert ticks[-1] == "120" and ">100 %<" in svg


def test_ceiling_chart_marks_a_bar_its_verdict_rejects() -> None:
    """A loaded machine's invalid result (a spread the verdict calls a scheduler artefact)
    below 100 % was drawn as a plain bar beside the figures that stand."""
    from torchmark.results import Verdict

    run = load("cpu-only")
    plain = charts.ceiling_pct([run]).svg or ""
    assert "invalid: its verdict rejects it" not in plain
    for r in run.results:
        if r.pct_of_ceiling is not None and 22 < r.pct_of_ceiling < 23:
            r.verdict = Verdict(level="invalid", reasons=["spread 730 % of the median"])
    svg = charts.ceiling_pct([run]).svg or ""
    assert "22.4 % of bw  invalid: its verdict rejects it" in svg


def test_roofline_places_models_and_seed_add_and_labels_each_point() -> None:
    run = load("cpu-gpu")
    for r in run.results:
        if r.workload == "seed-add" and r.variant == "as-published":
            r.work = r.work.model_copy(update={"flops": 12288.0**2})  # as seed-add now declares
        if r.workload == "resnet50" and r.params.get("batch") == 1:
            r.work = r.work.model_copy(update={"bytes": 0.0})  # a model that counts no bytes
    chart = charts.roofline([run])
    assert chart.svg is not None
    assert chart.svg.count(">seed-add<") == 2  # one per device panel
    # batch=32 on the roofline, batch=1 in the strip: each point says what tells it apart
    assert chart.svg.count(">resnet50 fp32<") == 4
    assert "models:" in chart.svg and "bytes not counted" in chart.svg
    assert "Not drawn, no FLOP count: seed-add/intended · cpu" in chart.note


def test_tune_runs_show_their_recommendation_code_and_candidates() -> None:
    run = load("cpu-only")
    run.kind = "tune"
    recommendation = {
        "cpu": {
            "name": "channels-last, threads=1",
            "speedup": 1.31,
            "config": {"variant": "fp32", "channels_last": True, "threads": 1, "batch": 1},
            "code": ["model = model.to(memory_format=torch.channels_last)", "out = model(x) < 2"],
        }
    }
    candidates = [
        {
            "device": "cpu",
            "name": "channels-last, threads=1",
            "status": "faster",
            "speedup": 1.31,
            "latency_ms": 5.72,
            "rel_iqr": 0.031,
            "max_error": 0.0,
            "tolerance": 1e-4,
        },
        {
            "device": "cpu",
            "name": "int8-dynamic",
            "status": "skipped",
            "speedup": None,
            "latency_ms": None,
            "reason": "time budget: 3 s left",
        },
    ]
    run.payload = TunePayload(recommendation=recommendation, candidates=candidates)
    page = html.render([run])
    assert "<h2>Tune: recommendation</h2>" in page
    assert page.index("Tune: recommendation") < page.index("<h2>Results")
    assert "AMD EPYC 7B13 (cpu):</b> channels-last, threads=1, 1.31× the baseline" in page
    assert "model = model.to(memory_format=torch.channels_last)\nout = model(x) &lt; 2" in page
    assert "channels_last=True, threads=1" in page
    assert '<tr class="st-faster"><td>cpu</td><td>channels-last, threads=1</td>' in page
    assert "5.72 ms" in page and "3.1 %" in page and "time budget: 3 s left" in page


def test_a_cpu_only_model_run_says_how_to_get_the_break_even_once() -> None:
    run = load("cpu-only")
    run.kind = "model"
    run.payload = ModelPayload(break_even={}, break_even_note=NO_GPU)
    page = html.render([run])
    assert page.count("no GPU on this machine") == 1
    assert '<p class="nochart" id="break-even-note">no GPU on this machine' in page
    assert "run the same `torchmark model` command on a machine with a GPU" in page
    assert "see the break-even note in the run&#39;s section above" in page


def _collectives_run() -> RunRecord:
    from torchmark.results import Result, Work

    results = [
        Result(
            workload="collectives",
            variant=op,
            device="cpu",
            params={"bytes": size},
            samples_s=[size / rate] * 5,
            work=Work(bytes=size, items=1, item_unit="call"),
            headline="bytes",
            extra={"op": op, "ranks": 2, "busbw_Bps": rate * factor, "backend": "gloo"},
        )
        for op, factor in (("all_reduce", 1.0), ("broadcast", 1.0))
        for size, rate in ((1024, 1e8), (65536, 2e9), (1 << 20, 5e9))
    ]
    return RunRecord(tool_version="t", fingerprint="f", results=results)


def test_collectives_get_a_busbw_chart_and_other_runs_none() -> None:
    run = _collectives_run()
    found = [c for c in charts.all_charts([run]) if c.key == "busbw"]
    assert len(found) == 1 and found[0].svg is not None
    assert (
        "all_reduce (2 ranks, cpu)" in found[0].svg and "broadcast (2 ranks, cpu)" in found[0].svg
    )
    assert "2(n-1)/n" in found[0].note
    assert not [c for c in charts.all_charts([load("cpu-only")]) if c.key == "busbw"]


def test_the_seed_chart_and_the_line_under_the_table_give_the_same_ranks() -> None:
    # The chart said "rank 14 of 14", the line under it "rank 12 of 12".
    import re

    from torchmark.report.table import seed_placement

    run = load("cpu-gpu")
    note = charts.seed_table(run).note
    drawn = re.match(
        r"rank ([\d, ]+) of (\d+), log scale \(in the blog's table alone ([\d, ]+) "
        r"of (\d+)\)",
        note,
    )
    assert drawn is not None, note
    lines = [" ".join(line.split()) for line in seed_placement(run)]
    for k, line in enumerate(lines):
        said = re.search(
            r"rank (\d+) of (\d+) in the seed blog's 2023 table \((\d+) of (\d+) "
            r"with torchmark's reference runs\)",
            line,
        )
        assert said is not None, line
        rank, of, rank_all, of_all = said.groups()
        assert (rank, of) == (drawn.group(3).split(", ")[k], drawn.group(4))
        assert (rank_all, of_all) == (drawn.group(1).split(", ")[k], drawn.group(2))


def test_a_reference_row_named_like_this_cpu_is_said_to_be_another_machine() -> None:
    # "<your CPU name> [h100-quick]" 11x above this CPU read as "your CPU
    # can do 11x better": it is the H100 box's host, which bears the same model name.
    from torchmark.report.compare import placement_table

    h200 = reference.load("h200-quick").run
    assert h200 is not None
    svg = charts.seed_table(h200).svg or ""
    assert "Intel(R) Xeon(R) Processor (cpu) [h100-quick, another machine]" in svg
    ref = reference.load("seed-2023")
    table, _ = placement_table(ref, reference.seed_rows(h200), 200)
    names = [str(c) for c in table.columns[1]._cells]
    assert "Intel(R) Xeon(R) Processor (cpu)  [h100-quick, another machine]" in names
    assert "NVIDIA H100 80GB HBM3 (cuda:0)  [h100-quick]" in names  # no GPU of that name here
