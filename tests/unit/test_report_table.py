"""Terminal tables of a stored run: golden text on hand-made fixture runs, and formatting.

Regenerate the golden files after an intended change with
``TORCHMARK_UPDATE_GOLDEN=1 pytest tests/unit/test_report_table.py`` and read the diff.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from torchmark import format as fmt
from torchmark.report.table import run_tables, seed_placement, speedup
from torchmark.results import Result, RunRecord, Work

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
GOLDEN = RUNS / "golden"


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json((RUNS / f"{name}.json").read_text())


def render(record: RunRecord, width: int | None = 120) -> str:
    return printed(run_tables(record), width)


def printed(parts: list[RenderableType], width: int | None) -> str:
    """As a console of ``width`` prints it; ``None``: as piped (not a terminal, no
    COLUMNS: rich's 80-column fallback)."""
    out = io.StringIO()
    if width is None:
        console = Console(file=out, force_terminal=False)
    else:
        console = Console(file=out, width=width, color_system=None, force_terminal=True)
    for part in parts:
        console.print(part)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def matches_golden(text: str, name: str) -> bool:
    golden = GOLDEN / name
    if os.environ.get("TORCHMARK_UPDATE_GOLDEN"):
        golden.write_text(text)
    return text == golden.read_text()


WIDTHS = {"60": 60, "80": 80, "120": 120, "piped": None}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["cpu-gpu", "cpu-only", "cpu-only-noisy"])
def test_run_tables_match_golden_text(
    name: str, width: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    text = render(load(name), WIDTHS[width])
    assert matches_golden(text, f"table-{name}-{width}.txt")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= (WIDTHS[width] or 80)
    assert "…" not in text  # nothing essential truncated


@pytest.mark.parametrize("width", [60, 80])
def test_no_speedup_over_the_cpu_vanishes_at_a_narrow_width(width: int) -> None:
    """Every GPU row's `vs CPU` figure the wide table prints, printed narrow too (at 60
    columns on a line of its own under the row's figures)."""
    record = load("cpu-gpu")
    wide = re.findall(r"\d[\d.,]*×", render(record, 120))
    assert len(wide) == 8
    assert re.findall(r"\d[\d.,]*×", render(record, width)) == wide


def test_golden_text_shows_what_a_reader_needs() -> None:
    text = render(load("cpu-gpu"))
    # GPU over CPU for the same case: 20 ms / 0.42 ms = 47.6x.
    assert "47.6×" in text
    assert "83.9 % of bw" in text and "84.2 % of fp32 peak" in text
    assert "skipped: out of" in text  # the reason travels with the skipped case
    assert "warn [2]" in text and "[2] 2 throttled samples set aside" in text
    assert "best: inference bf16 b=32" in text
    assert "89.6 %" in text  # measured bandwidth / datasheet, ceilings table
    assert "rank 1 of 12" in text


def test_incomplete_run_and_wrong_case_are_visible() -> None:
    text = render(load("cpu-only"))
    assert "incomplete" in text.splitlines()[0]
    assert "WRONG: output differs" in text
    assert "above_ceiling" in text  # 75.5 GB/s against a 72 GB/s measured ceiling


def test_speedup_needs_both_results_ok() -> None:
    rec = load("cpu-gpu")
    cpu, gpu = (r for r in rec.results if r.workload == "add")
    assert speedup(gpu, cpu) == pytest.approx(0.0125 / 0.00007)
    assert speedup(cpu, cpu) is None  # the host is the denominator, not a row with a speedup
    skipped = Result(workload="add", variant="out-of-place", device="cuda:0", status="skipped")
    assert speedup(skipped, cpu) is None


def test_seed_placement_is_computed_from_the_rate() -> None:
    rec = load("cpu-gpu")
    cpu_line, gpu_line = seed_placement(rec)
    # 50 it/s sits between Apple M1 (48) and the overheating server GPU (55).
    assert "50.0 it/s, rank 9 of 12" in cpu_line
    assert "between Apple M1 CPU (48) and Server GPU (Overheat) (55)" in cpu_line
    assert "above Tencent VENUS V100 GPU (677)" in gpu_line
    assert "604 MB tensor" in gpu_line


def test_run_without_seed_add_has_no_placement() -> None:
    rec = RunRecord(
        results=[
            Result(workload="add", variant="v", device="cpu", samples_s=[0.1] * 5, work=Work())
        ]
    )
    assert seed_placement(rec) == []


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1.0, "1.00"),
        (9.996, "10.0"),
        (12.345, "12.3"),
        (999.6, "1,000"),
        (2510.0, "2,510"),
        (0.0012345, "0.00123"),
        (-3.14159, "-3.14"),
        (float("nan"), "—"),
    ],
)
def test_sig_gives_three_significant_digits(value: float, text: str) -> None:
    assert fmt.sig(value) == text


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (8.12e11, "B/s", "812 GB/s"),
        (3.0e12, "B/s", "3.00 TB/s"),
        (7.9e14, "FLOP/s", "790 TFLOP/s"),
        (999.0, "B/s", "999 B/s"),
        (2510.0, "it/s", "2,510 it/s"),
        (1.234e6, "tok/s", "1.23 M tok/s"),
        (None, "it/s", "—"),
    ],
)
def test_si_prefixes(value: float | None, unit: str, text: str) -> None:
    assert fmt.si(value, unit) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5e-9, "2.50 ns"), (3.98e-4, "398 µs"), (0.0207, "20.7 ms"), (1.5, "1.50 s")],
)
def test_durations(seconds: float, text: str) -> None:
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize(
    ("n", "multiple", "up"), [(50_257, 64, 50_304), (50_304, 64, 50_304), (1, 8, 8), (0, 8, 0)]
)
def test_round_up(n: int, multiple: int, up: int) -> None:
    assert fmt.round_up(n, multiple) == up


def test_params_are_compact() -> None:
    assert fmt.params({"n": 1 << 24, "dtype": "bfloat16", "shape": [2, 3]}) == (
        "n=16.8M dtype=bf16 shape=2x3"
    )


def _judged(samples: list[float], stop: str, variant: str) -> Result:
    from torchmark.judge.validity import judge

    r = Result(
        workload="gpt2",
        variant=variant,
        device="cpu",
        samples_s=samples,
        stop_reason=stop,
        work=Work(items=8, item_unit="tokens"),
    )
    r.verdict = judge(r)
    return r


def test_timed_out_reads_the_same_on_every_row_and_its_progress_line() -> None:
    # `timed_out` showed raw on one row and as `warn [1]` on the next, and a
    # progress line omitted the `, warn` its table row had.
    from torchmark.cli.progress import case_line
    from torchmark.devices import CPUDevice
    from torchmark.workloads import Case

    pinned = _judged([1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.0, 1.0], "time_out", "a")
    loose = _judged([1.0, 1.08, 0.93, 1.05, 0.96, 1.0, 1.07, 0.94, 1.02, 0.97], "time_out", "b")
    record = RunRecord(run_id="t", results=[pinned, loose])
    text = render(record, 80)
    row_a = next(line for line in text.splitlines() if line.startswith("  a "))
    row_b = next(line for line in text.splitlines() if line.startswith("  b "))
    assert re.search(r" timed_out \[\d\]$", row_a)
    assert re.search(r" warn, timed_out \[\d\]$", row_b)
    said = " ".join(text.split())
    assert "timed out with the median known to ±1.0 % (within ±2 %): usable" in said
    assert "timed out before the median converged (known to ±6.5 %)" in said
    for r, row, word in ((pinned, row_a, "timed_out"), (loose, row_b, "warn")):
        line = case_line(Case("gpt2", r.variant, CPUDevice(), ()), r, 1, 2)
        assert line.endswith(f", {word}") and f" {word}" in row, (line, row)


def test_a_spread_past_the_median_is_said_so_not_as_a_thousand_percent() -> None:
    # Footnotes printed spreads like "±1,077 %" and "±3,503 %".
    wild = [0.001, 0.002, 0.05, 0.3, 0.0015, 0.4, 0.002, 0.25, 0.003, 0.35, 0.001, 0.5]
    r = _judged(wild, "time_out", "w")
    assert fmt.spread(r.measurement.rel_iqr) == "> 100 %"
    assert r.verdict is not None
    said = " ".join(r.verdict.reasons)
    assert "spread larger than the median (IQR" in said and "x it): unreliable" in said
    assert "its 95 % CI is wider than it" in said
    text = render(RunRecord(run_id="w", results=[r]), 120)
    assert not re.search(r"\d,\d{3} %", text), text  # no "1,077 %" anywhere
    assert "> 100 %" in text


def test_one_sample_has_no_spread_to_print() -> None:
    # A new user's walk of the README: `run --quick` on a loaded 2-core VM measured
    # seed-add intended once (2.4 s a call) and printed "0.416 it/s ±0 %, warn" and a row
    # "0 %" beside "[9] only 1 sample: the spread is not known".
    from torchmark.cli.progress import case_line
    from torchmark.devices import CPUDevice
    from torchmark.workloads import Case

    one = _judged([2.4], "time_out", "once")
    assert one.verdict is not None
    assert "only 1 sample: the spread is not known" in one.verdict.reasons
    line = case_line(Case("gpt2", "once", CPUDevice(), ()), one, 6, 10)
    assert "±" not in line and " (1 sample), warn" in line
    (row,) = [
        x for x in render(RunRecord(run_id="t", results=[one]), 80).splitlines() if "once" in x
    ]
    assert " 0 %" not in row and fmt.DASH in row
    # two samples' spread is not known either (its verdict says so): no figure beside that
    two = _judged([2.4, 2.5], "time_out", "twice")
    assert "(2 samples), warn" in case_line(Case("gpt2", "twice", CPUDevice(), ()), two, 7, 10)


def test_two_to_four_samples_print_no_spread_beside_the_spread_is_not_known() -> None:
    # The README walk: a 3-sample result printed "±20 %" in its progress line and "20 %" in
    # its row, and "spread 20 % of the median: noisy" beside "only 3 samples: the spread is
    # not known". One thing is said: no figure, and that the samples scatter.
    from torchmark.cli.progress import case_line
    from torchmark.devices import CPUDevice
    from torchmark.workloads import Case

    three = _judged([1.0, 1.3, 0.9], "time_out", "three")
    assert three.verdict is not None
    assert not any("%" in why for why in three.verdict.reasons), three.verdict.reasons
    assert "only 3 samples, and they scatter (noisy): the spread is not known" in (
        three.verdict.reasons
    )
    line = case_line(Case("gpt2", "three", CPUDevice(), ()), three, 1, 2)
    assert "±" not in line and " (3 samples), warn" in line, line
    text = render(RunRecord(run_id="t", results=[three]), 80)
    (row,) = [x for x in text.splitlines() if x.startswith("  three ")]
    assert "20 %" not in text and fmt.DASH in row, text
    five = _judged([1.0, 1.3, 0.9, 1.1, 1.2], "time_out", "five")  # a spread: said with it
    assert "±" in case_line(Case("gpt2", "five", CPUDevice(), ()), five, 2, 2)
    assert any(w.startswith("spread ") for w in five.verdict.reasons or [])


def test_compare_says_no_noise_figure_from_a_side_whose_spread_is_not_known() -> None:
    from torchmark.judge.comparison import independent
    from torchmark.stats.measurement import Measurement

    a = Measurement((1.0, 1.5, 0.8, 1.2))  # 4 samples: IQR 31 % of the median, not known
    b = Measurement(tuple(0.5 + 0.001 * i for i in range(12)))
    j = independent(a, b)
    assert not isinstance(j, str) and j.verdict == "FASTER", j
    assert "threshold" not in j.why, j.why  # was "p=0.0011, 117.6% beyond the 31.7% threshold"
    assert "4 samples in A: the spread is not known" in j.why


def test_one_note_made_by_many_sizes_is_one_line_with_their_count_and_sizes() -> None:
    # `run -w collectives` printed ~100 lines of notes: "1 KiB over 2 ranks, busbw = algbw
    # x 1 (...)" once per size and factor; the size is each case's own, the note is one
    sizes = [1024, 16384, 262144, 4194304]
    ops = {"all_reduce": "x 1", "broadcast": "x 1", "all_gather": "x 0.5"}
    link = "link: loopback TCP; no ceiling measured for it, so busbw has no % of ceiling"
    results = [
        Result(
            workload="collectives",
            variant=op,
            device="cpu",
            params={"bytes": b, "ranks": 2},
            samples_s=[1e-4] * 10,
            work=Work(bytes=b, items=1, item_unit="call"),
            notes=[f"over 2 ranks, busbw = algbw {f}", link],
        )
        for op, f in ops.items()
        for b in sizes
    ]
    text = render(RunRecord(run_id="c", results=results), 80)
    notes = " ".join(text.split("note: ", 1)[1].split()).split(" note: ")
    assert len(notes) == 3, notes
    assert notes[0] == (
        "over 2 ranks, busbw = algbw x 1 (8 cases: collectives/all_reduce on cpu, "
        "collectives/broadcast on cpu, at bytes=1024 to 4.19M)"
    )
    assert notes[1].startswith(f"{link} (12 cases: collectives/all_reduce on cpu, ")
    assert notes[1].endswith("collectives/all_gather on cpu, at bytes=1024 to 4.19M)")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_seed_placement_under_other_load_says_so() -> None:
    # the same machine moved from rank 11 to 10 with the load, and its line did not say so
    rec = load("cpu-gpu")
    for r in rec.results:
        if r.workload == "seed-add" and r.device == "cpu":
            r.telemetry = {**(r.telemetry or {}), "other_cores": 1.2, "logical_cores": 2}
    cpu_line, gpu_line = seed_placement(rec)
    assert cpu_line.endswith(
        "Measured while other processes used 1.2 of 2 cores: the rank may be the load's."
    )
    assert "Measured while" not in gpu_line
