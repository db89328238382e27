"""Golden text of `model`, `tune` and `history` at 60, 80 and 120 columns and piped, and the
layout rules every table follows (report.layout.FitTable).

Regenerate after an intended change with
``TORCHMARK_UPDATE_GOLDEN=1 pytest tests/unit/test_report_widths.py`` and read the diff.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from test_report_table import WIDTHS, matches_golden, printed

from torchmark import format as fmt
from torchmark.report.layout import Alt, Col, FitTable
from torchmark.report.model import model_view
from torchmark.report.tune import tune_view
from torchmark.results import RunRecord
from torchmark.store.base import RunSummary

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json((RUNS / f"{name}.json").read_text())


def summaries() -> list[RunSummary]:
    t0 = datetime(2026, 11, 21, 8, 30, 12, tzinfo=timezone.utc)
    return [
        RunSummary(
            run_id=f"20261121-08301{i}-ab1{i}",
            kind=kind,
            created_utc=t0.replace(second=i),
            status=status,
            devices=devices,
            n_results=10,
            n_ok=ok,
            tool_version="0.1.0",
            command=f"/venv/bin/torchmark {kind} --quick --db sqlite:////home/user/results.db",
            host="gpu-box-17",
        )
        for i, (kind, status, devices, ok) in enumerate(
            [
                ("run", "complete", ["cpu", "cuda:0"], 10),
                ("model", "incomplete", ["cpu"], 7),
                ("tune", "complete", ["cpu"], 9),
            ]
        )
    ]


def check(text: str, golden: str, width: str) -> None:
    assert matches_golden(text, golden)
    assert max(len(line) for line in text.splitlines()) <= (WIDTHS[width] or 80)
    assert "…" not in text  # nothing essential truncated


@pytest.mark.parametrize("width", WIDTHS)
def test_model_sweep_matches_golden_text(width: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    text = printed(model_view(load("model-cpu-gpu")), WIDTHS[width])
    check(text, f"model-{width}.txt", width)
    flat = " ".join(text.split())
    # a reason with rich markup in it prints as written, as a footnote
    assert "bad [/layer] at batch 64" in flat
    assert "always (at every batch tried)" in flat  # the break-even table


@pytest.mark.parametrize("width", WIDTHS)
def test_tune_table_matches_golden_text(width: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    text = printed(tune_view(load("tune-cpu")), WIDTHS[width])
    check(text, f"tune-{width}.txt", width)
    assert "CUDA graphs need CUDA" in text and "1.48×" in text
    # neither the spread nor the max error gives way (stacked if need be; at 60 columns
    # the spread on a line of its own under its candidate's figures)
    assert "2.1 %" in text and re.search(r"rejected .* 0\.31\b", text)
    if width == "60":
        lines = text.splitlines()
        baseline = next(k for k, line in enumerate(lines) if line.startswith("baseline"))
        assert lines[baseline + 2].split() == ["±IQR", "2.1", "%"]
    assert "model = torch.compile(model)" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_history_matches_golden_text(width: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.cli.history import history_table

    monkeypatch.delenv("COLUMNS", raising=False)
    text = printed([history_table(summaries(), "sqlite:////home/user/results.db")], WIDTHS[width])
    check(text, f"history-{width}.txt", width)
    for run in summaries():
        assert run.run_id in text  # the id is never dropped or shortened
    assert ("\n  11-21 08:30  run " in text) == (width == "60")  # 60: stacked under the id


def test_history_json_keys_are_its_columns() -> None:
    from torchmark.cli.history import history_rows

    [row, *_] = history_rows(summaries())
    assert list(row)[:9] == [
        "id", "utc_time", "kind", "status", "devices", "ok", "total", "host", "command"
    ]  # fmt: skip
    assert (row["ok"], row["total"], row["command"][:13]) == (10, 10, "torchmark run")


def render(table: FitTable, width: int) -> list[str]:
    out = Console(width=width, color_system=None, force_terminal=True, record=True)
    out.print(table.table(width))
    return [line.rstrip() for line in out.export_text().splitlines()]


def test_columns_give_way_in_the_declared_order() -> None:
    t = FitTable(
        Col("case", wrap=8),
        Col("rate", justify="right"),
        Col("median", justify="right", drop=2),
        Col("flags", shorten=1),
        Col("empty"),
    )
    flags = Alt("warn, noisy, timed_out [1]", "warn [1]")
    t.row("infer fp32 b=64", "890 samples/s", "71.9 ms", flags)
    wide, mid, narrow = render(t, 80), render(t, 50), render(t, 36)
    assert "warn, noisy, timed_out [1]" in wide[-1] and "empty" not in wide[0]
    assert mid[-1].endswith("warn [1]") and "71.9 ms" in mid[-1]  # shortened first
    assert "median" not in narrow[0] and "890 samples/s" in narrow[-2 if len(narrow) > 3 else -1]
    assert all(len(line) <= 36 for line in narrow)
    # the case wraps at a space, never one word a line nor cut
    assert [line.split("  ")[0].strip() for line in narrow[2:]] == ["infer fp32", "b=64"]


def test_a_wrapped_cell_spills_into_the_empty_rows_below() -> None:
    t = FitTable(Col("case", wrap=8, spill=True), Col("device"), Col("rate", justify="right"))
    t.row("inference fp32 b=32", "cpu", "16.8 img/s")
    t.row("", "cuda:0", "1,525 img/s")
    lines = render(t, 34)
    assert len(lines) == 4  # header, rule and two rows: the label adds no line
    assert lines[2].startswith("inference ") and lines[3].startswith("fp32 b=32 ")


def test_cells_are_never_markup() -> None:
    t = FitTable(Col("a"), title="[bold]title[/]")
    t.row("[bold red]pwn[/] [/layer]")
    out = Console(width=80, record=True)
    out.print(t)
    text = out.export_text()
    assert "[bold red]pwn[/] [/layer]" in text and "[bold]title[/]" in text
    assert isinstance(t.title, str) and Text(t.title).plain == "[bold]title[/]"


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [(0.9996, "", "1.00"), (999_950.0, "it/s", "1.00 M it/s"), (999.6, "B/s", "1.00 kB/s")],
)
def test_si_chooses_the_prefix_after_rounding(value: float, unit: str, text: str) -> None:
    assert fmt.si(value, unit) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.9996, "1.00 s"), (0.00099996, "1.00 ms")])
def test_duration_chooses_the_unit_after_rounding(seconds: float, text: str) -> None:
    assert fmt.duration(seconds) == text


def test_one_case_label_says_each_parameter_once() -> None:
    params = {"scenario": "infer", "precision": "fp32", "batch": 64}
    assert fmt.case_label("infer", params) == "infer fp32 b=64"
    assert fmt.case_label("float32", {"n": 1 << 24}, "add", "cpu") == "add/fp32 n=16.8M on cpu"
    assert fmt.case_label("square", {"dtype": "bfloat16", "size": 4096}) == "square bf16 size=4096"


def test_plural() -> None:
    assert (fmt.plural(1, "sample"), fmt.plural(4, "sample")) == ("1 sample", "4 samples")


@pytest.mark.parametrize("width", [80, 120])
def test_tune_speedup_is_the_latency_ratio_printed_on_its_row(width: int) -> None:
    """speedup = baseline / latency of the same printed row, at every width (issue: a row
    read `faster 53.21x 1.41 ms` against a 7.51 ms baseline)."""
    console = Console(width=width, record=True, force_terminal=False)
    console.print(tune_view(load("tune-cpu"))[0])
    checked = 0
    for line in console.export_text().splitlines():
        cells = line.split()
        if "×" not in line or "ms" not in line:
            continue
        ratio = next(c for c in cells if c.endswith("×"))
        ms = [float(cells[i - 1]) for i, c in enumerate(cells) if c == "ms"]
        if len(ms) < 2:
            continue
        latency, baseline = ms[0], ms[1]
        assert float(ratio.rstrip("×")) == pytest.approx(baseline / latency, rel=0.01), line
        checked += 1
    assert checked == 4  # compile, inference_mode, the baseline itself, threads=1


def printed_table(table: FitTable, width: int) -> list[str]:
    out = Console(width=width, color_system=None, force_terminal=True, record=True)
    out.print(table)
    return [line.rstrip() for line in out.export_text().splitlines()]


def test_a_table_too_wide_even_narrowed_stacks_rather_than_cut() -> None:
    t = FitTable(Col("id"), Col("status"), Col("devices", wrap=6), Col("ok", justify="right"))
    t.row("20261121-083010-ab10", "complete", "cpu, cuda:0", "10/10")
    t.row("20261121-083011-ab11", "incomplete", "cpu", "7/10")
    assert not t.stacks(60) and t.stacks(30)
    lines = printed_table(t, 30)
    assert all(len(line) <= 30 for line in lines) and "…" not in "".join(lines)
    assert lines[0] == "id" and lines[1].split() == ["status", "devices", "ok"]
    assert lines[3] == "20261121-083010-ab10" and lines[4].split()[0] == "complete"
    assert lines[4].split()[-1] == "10/10" and lines[4].startswith("  ")


def test_a_vital_column_is_kept_by_stacking_where_it_would_be_dropped() -> None:
    def table(vital: bool) -> FitTable:
        t = FitTable(
            Col("case"),
            Col("rate", justify="right"),
            Col("% ceiling", justify="right", drop=1, vital=vital),
        )
        t.row("matmul/square fp32 size=4096", "153 GFLOP/s", "76.4 % fp32")
        t.row("", "42.9 TFLOP/s", "84.2 % fp32")  # a further device of the case above
        return t

    assert "76.4" not in "\n".join(printed_table(table(False), 45))  # dropped
    lines = printed_table(table(True), 45)
    assert lines[3:] == [
        "matmul/square fp32 size=4096",
        "   153 GFLOP/s  76.4 % fp32",
        "  42.9 TFLOP/s  84.2 % fp32",
    ]
    assert not table(True).stacks(60)  # room for all: a plain table


def test_a_vital_column_stacking_has_no_room_for_goes_on_a_line_of_its_own() -> None:
    t = FitTable(
        Col("case"),
        Col("device"),
        Col("rate", justify="right"),
        Col("speedup over the CPU", justify="right", drop=1, vital=True),
    )
    t.row("matmul/square fp32 size=4096", "cpu", "153 GFLOP/s", "")
    t.row("", "cuda:0", "42.9 TFLOP/s", "281×")
    t.row("add n=16.8M", "cpu", "16.1 GB/s", "—")  # a dash: no figure, nothing to say
    assert not t.stacks(80)
    # 40: under the figures' second column; 30: that overflows, at the figures' indent
    for width, indent in ((40, 10), (30, 2)):
        lines = printed_table(t, width)
        assert all(len(line) <= width for line in lines) and "…" not in "".join(lines)
        assert lines[1].split() == ["device", "rate"]  # the figures' line had no room
        assert lines[3:] == [
            "matmul/square fp32 size=4096",
            "  cpu      153 GFLOP/s",
            "  cuda:0  42.9 TFLOP/s",
            " " * indent + "speedup over the CPU 281×",
            "add n=16.8M",
            "  cpu        16.1 GB/s",
        ]
