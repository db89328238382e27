"""A memory-bound result whose working set fits the last-level cache measured the cache, not
DRAM (METHOD.md §2.9): above the DRAM ceiling is expected, never "invalid" for that, never
ranked among results that measured memory; far above what a cache could move it is still a
measurement error. The case checked: seed-add as-published at the blog's 2048 (a 16 MiB tensor,
the 2-core VM's cache counted as 32 MiB) read 255 % of a 20 GB/s ceiling and was "invalid:
measurement error". Fakes only: a fake ceiling and cache size, hand-made samples."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from torchmark.judge import verdicts
from torchmark.judge.comparison import compare
from torchmark.judge.validity import judge
from torchmark.report.compare import comparison_renderables
from torchmark.report.table import Footnotes, flag_words, results_table, verdict_word
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.web.ranking import check_bounds

MiB = 2**20
BW = 20e9  # the fake DRAM ceiling
# what bandwidth.measure stores: the VM reports its host's 480 MiB L3, 32 MiB are counted
LLC = {"llc_bytes": 480 * MiB, "llc_counted_bytes": 32 * MiB, "cores": 2}


def seed(
    gbps: float,
    working_set: int = 16 * MiB,
    details: dict[str, Any] | None = None,
    theoretical: float | None = None,
    telemetry: dict[str, Any] | None = None,
    device: str = "cpu",
) -> Result:
    """seed-add as-published at 2048: one in-place add of a 16 MiB tensor, 32 MiB moved."""
    moved = 2 * 16 * MiB
    t = moved / (gbps * 1e9)
    r = Result(
        workload="seed-add",
        variant="as-published",
        device=device,
        params={"size": 2048},
        samples_s=[t * (1 + 0.002 * (i % 5 - 2)) for i in range(20)],
        work=Work(bytes=moved, items=1, item_unit="it"),
        headline="items",
        ceiling=Ceiling(
            device=device,
            key="bandwidth",
            value=BW,
            unit="B/s",
            method="fake",
            theoretical=theoretical,
            details=LLC if details is None else details,
        ),
        extra={"working_set_bytes": working_set},
        telemetry=telemetry,
    )
    r.verdict = judge(r)
    return r


def test_a_working_set_in_the_cache_is_in_cache_not_invalid() -> None:
    r = seed(51.0)  # 255 % of the DRAM ceiling
    assert r.pct_of_ceiling == pytest.approx(255, abs=1)
    assert "in_cache" in r.flags and "above_ceiling" not in r.flags
    assert r.verdict is not None and r.verdict.level == "warn"
    assert r.verdict.reasons[0] == (
        "in cache: above the DRAM ceiling is expected (working set 16 MiB fits the 32 MiB "
        "last-level cache; 255 % of bandwidth)"
    )
    assert verdicts.kind_of(r) == "in_cache"
    assert verdicts.says(r) == r.verdict.reasons[0]  # the word once, not "in cache: in cache"
    # never ranked or averaged among DRAM-sized results; the same case still compares
    assert not verdicts.may(r, "rank") and not verdicts.may(r, "average")
    assert verdicts.may(r, "compare") and verdicts.may(r, "count_ok")
    assert verdicts.counted([r]) == 1


def test_below_the_ceiling_in_the_cache_is_still_said() -> None:
    r = seed(10.0)  # 50 %: a cache-resident number all the same
    assert verdicts.kind_of(r) == "in_cache"
    assert r.verdict is not None
    assert r.verdict.reasons[0].startswith("in cache: working set 16 MiB fits the 32 MiB")


def test_a_working_set_beyond_the_cache_above_the_ceiling_stays_invalid() -> None:
    r = seed(51.0, working_set=48 * MiB)
    assert "above_ceiling" in r.flags and "in_cache" not in r.flags
    assert verdicts.kind_of(r) == "invalid"
    assert r.verdict is not None and "measurement error" in r.verdict.reasons[0]


def test_an_unknown_cache_size_is_no_excuse() -> None:
    # an LLC the device could not report (32 MiB assumed) says nothing about this machine
    r = seed(51.0, details={"llc_bytes": None, "llc_counted_bytes": 32 * MiB})
    assert verdicts.kind_of(r) == "invalid"
    old = seed(51.0, details={})  # a ceiling stored before the cache was recorded
    assert verdicts.kind_of(old) == "invalid"


def test_far_above_what_a_cache_can_move_is_still_invalid() -> None:
    # 2 cores x 6 GHz x 192 B a cycle = 2.3 TB/s: nothing a 2-core CPU moves, cache or not
    r = seed(5000.0)
    assert verdicts.kind_of(r) == "invalid"
    assert r.verdict is not None
    assert r.verdict.reasons[0].startswith("5,000 GB/s is above even a cache's 2,304 GB/s")
    assert "measurement error" in r.verdict.reasons[0]
    # the core count from the run's telemetry where the ceiling does not carry it
    many = seed(5000.0, details={**LLC, "cores": None}, telemetry={"logical_cores": 64})
    assert verdicts.kind_of(many) == "in_cache"


def test_an_accelerator_is_bounded_by_its_datasheet() -> None:
    gpu = {"accelerator": True}
    near = seed(8000.0, theoretical=3.35e12, telemetry=gpu, device="cuda:0")  # L2 at 2.4x HBM
    assert verdicts.kind_of(near) == "in_cache"
    far = seed(20000.0, theoretical=3.35e12, telemetry=gpu, device="cuda:0")
    assert verdicts.kind_of(far) == "invalid"
    assert (
        far.verdict is not None and "4x the datasheet's memory bandwidth" in far.verdict.reasons[0]
    )


def test_the_table_says_in_cache_in_one_line() -> None:
    r = seed(51.0)
    assert flag_words(r) == ["in cache"] and verdict_word(r) == "in cache"
    notes = Footnotes()
    table = results_table(RunRecord(run_id="a", status="complete", results=[r]), notes)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    (row,) = [line for line in out.getvalue().splitlines() if "it/s" in line]
    assert "in cache [1]" in row and "invalid" not in row
    assert notes.lines() == [f"[1] {r.verdict.reasons[0]}"]  # type: ignore[union-attr]


def test_compare_compares_it_and_says_it_is_the_cache() -> None:
    a = RunRecord(run_id="a", status="complete", results=[seed(51.0)])
    b = RunRecord(run_id="b", status="complete", results=[seed(40.0)])
    cmp = compare([a, b])
    (change,) = cmp.changes[0]
    assert change.verdict == "SLOWER"
    assert change.why.startswith("in cache in A and B: the cache's speed, not DRAM's; ")
    out = io.StringIO()
    for part in comparison_renderables(cmp, 80):
        Console(file=out, width=80, color_system=None).print(part)
    flat = " ".join(out.getvalue().split())
    assert "seed-add/as-published size=2048 on cpu: SLOWER, in cache in A and B" in flat


def test_the_board_accepts_it_and_refuses_beyond_the_cache() -> None:
    ok = RunRecord(run_id="a", status="complete", results=[seed(51.0)])
    assert check_bounds(ok) is None  # 255 % of the DRAM ceiling: the cache's, listed unranked
    past = seed(51.0, 48 * MiB)  # beyond the cache: its own verdict calls it an error
    beyond = RunRecord(run_id="b", status="complete", results=[past])
    assert past.verdict is not None and past.verdict.level == "invalid"
    assert check_bounds(beyond) is None  # stored with that verdict, never ranked
    past.verdict = None  # a verdict that would rank it: refused
    assert "255 % of its run's measured ceiling" in (check_bounds(beyond) or "")


def test_the_html_charts_say_in_cache_not_a_measurement_error() -> None:
    from torchmark.report import charts

    r = seed(51.0)
    r.work = r.work.model_copy(update={"flops": 2048.0**2})  # one add per element
    bad = seed(51.0, working_set=48 * MiB)  # beyond the cache: invalid
    bad.params = {"size": 4096}
    run = RunRecord(run_id="a", status="complete", results=[r, bad])
    ceiling = charts.ceiling_pct([run])
    assert ceiling.svg is not None
    assert "255 % of bw  in cache" in ceiling.svg
    assert ceiling.svg.count("ABOVE CEILING: measurement error") == 1  # the invalid one
    # in the cache but past what a cache moves: invalid, an error on the chart too
    past = charts.ceiling_pct([RunRecord(run_id="p", status="complete", results=[seed(5000.0)])])
    assert past.svg is not None and "ABOVE CEILING: measurement error" in past.svg
    roof = charts.roofline([run])
    assert roof.svg is not None and "(in cache)" in roof.svg
    assert "4096" not in roof.svg  # an invalid number is no point on the roofline
