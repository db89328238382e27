"""The host's pace: timed around each search, a change beyond its noise flags the answer,
and two runs of one machine whose hosts ran at different paces compare as "can't tell"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchmark.judge import pace
from torchmark.kinds.serving import answer, generator, kind
from torchmark.kinds.serving import pace as measured
from torchmark.kinds.serving.fleet import Local
from torchmark.report.serving import compare_table, fleet_heading, lines
from torchmark.results import RunRecord
from torchmark.results.serving import FleetDoc, ServingPayload, read, write
from torchmark.testing import FakeClock, FakeDevice, FakeExecutor, MemoryStore

FIXTURE = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"


def spread(ms: float, n: int = 60, jitter: float = 0.02) -> list[float]:
    """n paces around ``ms`` (deterministic: a ramp of +-jitter)."""
    return [1e-3 * ms * (1 - jitter + 2 * jitter * i / (n - 1)) for i in range(n)]


def test_a_pace_changes_only_beyond_its_noise_and_by_more_than_ten_percent() -> None:
    assert pace.changed(spread(1.0), spread(1.0)) is None
    ratio = pace.changed(spread(1.0), spread(1.43))
    assert ratio is not None and abs(ratio - 1.43) < 1e-9
    assert pace.changed(spread(1.43), spread(1.0)) is not None  # faster is a change too
    # apart beyond their intervals but by 5 %: the search's own steps are 5 %
    assert pace.changed(spread(1.0, jitter=0.001), spread(1.05, jitter=0.001)) is None
    # 40 % apart in the median, but each so wide the intervals overlap
    wide = [1e-3 * x for x in (0.2, 3.0) * 30]
    assert pace.changed(wide, [x * 1.4 for x in wide]) is None
    assert pace.changed(spread(1.0)[:9], spread(2.0)) is None  # too few to say
    said = pace.sentence(spread(1.27), spread(1.81), "in A", "in this run")
    assert "the host ran 43 % slower in this run than in A" in said
    assert "1.27 ms, then 1.81 ms" in said


def test_the_measured_pace_times_the_same_work_each_time() -> None:
    ticks = iter(range(100))
    out = measured.measure(3, timer=lambda: float(next(ticks)))
    assert out == [1.0, 1.0, 1.0]
    assert measured._unit() == measured._unit()


def test_the_pace_is_timed_before_each_fleet_starts_and_after_it_has_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(0.0)
    monkeypatch.setattr(generator, "PER_RATE_S", 0.01)
    monkeypatch.setattr(generator, "RATES", (1_000,))
    open_now: list[bool] = [False]
    timed: list[tuple[float, bool]] = []

    @contextlib.contextmanager
    def fleet(self: kind.Serving, *args: Any) -> Iterator[Local]:
        open_now[0] = True
        yield Local(FakeExecutor(clock, 0.010), clock)
        open_now[0] = False

    def paced() -> list[float]:
        timed.append((clock.now(), open_now[0]))
        return spread(1.0 if len(timed) == 1 else 1.5)

    monkeypatch.setattr(kind.Serving, "_fleet", fleet)
    cfg = kind.ServingConfig(model="fake", p99_ms=50, batches=(1,), budget_s=60, point_s=20)
    device = FakeDevice(FakeClock(0.0), 0, "Fake GPU")
    run = kind.Serving(cfg, lambda: None, [device], MemoryStore(), clock=clock, pace=paced).run()  # type: ignore[arg-type]
    assert len(timed) == 2 and not any(was_open for _, was_open in timed)
    assert timed[1][0] > timed[0][0]  # the search ran between them
    p = read(run)
    assert p is not None
    (f,) = p.fleets
    assert f.pace_s == spread(1.0) and f.pace_end_s == spread(1.5)
    assert f.load_changed and any("the host ran 50 % slower after it closed" in n for n in f.notes)
    assert "host pace 1 ms, then 1.5 ms" in fleet_heading(f)
    # a fake clock's run with no pace given times none (it has no host to pace)
    run = kind.Serving(cfg, lambda: None, [device], MemoryStore(), clock=FakeClock(0.0)).run()  # type: ignore[arg-type]
    p = read(run)
    assert p is not None and p.fleets[0].pace_s == [] and not p.fleets[0].load_changed


def test_a_host_that_slowed_during_the_search_flags_the_answer() -> None:
    f = FleetDoc(device="cpu", label="x", pace_s=spread(1.16), pace_end_s=spread(1.52))
    answer.refresh(f)
    assert f.load_changed
    note = next(n for n in f.notes if "the host ran" in n)
    assert "31 % slower after it closed than before the fleet started" in note
    p = ServingPayload(model="m", bound_s=0.05, fleets=[f])
    said = lines(p)
    assert any(note in line for line in said)
    assert any(line.startswith("host pace: the median time") for line in said)
    f.pace_end_s = spread(1.18)
    answer.refresh(f)
    assert not f.load_changed and not any("the host ran" in n for n in f.notes)


def _run(rate: float, top: float, paced: list[float], fingerprint: str = "m1") -> RunRecord:
    run = RunRecord.model_validate_json(FIXTURE.read_text())
    run.fingerprint = fingerprint
    p = read(run)
    assert p is not None
    a = p.answers[0]
    p.answers[0] = a.model_copy(update={"max_rate": rate, "top": top, "confirmed": True})
    assert a.fleet is not None
    p.fleets[a.fleet] = p.fleets[a.fleet].model_copy(update={"pace_s": paced})
    write(run, p)
    return run


def test_compare_says_cant_tell_where_the_host_ran_slower_in_the_slower_run() -> None:
    a = _run(3_090, 3_433, spread(1.0))
    slow_host = _run(2_502, 2_780, spread(1.4))
    _, changes = compare_table([a, slow_host])
    verdict, why = changes[0][1], changes[0][2]
    assert verdict == "UNCLEAR" and "can't tell the serving from the host" in why
    assert "failed at 2,780/s where A served 3,090/s" in why and "40 % slower" in why
    # the same host pace: the serving got slower
    assert compare_table([a, _run(2_502, 2_780, spread(1.0))])[1][0][1] == "SLOWER"
    # a host that ran faster in the slower run only strengthens the verdict
    assert compare_table([a, _run(2_502, 2_780, spread(0.7))])[1][0][1] == "SLOWER"
    # two machines: their paces differ by nature, the brackets decide
    other = _run(2_502, 2_780, spread(1.4), fingerprint="m2")
    assert compare_table([a, other])[1][0][1] == "SLOWER"
    # runs stored before the pace was timed: the brackets decide
    assert compare_table([_run(3_090, 3_433, []), slow_host])[1][0][1] == "SLOWER"


def test_compare_says_at_least_where_nothing_over_was_measured() -> None:
    from rich.console import Console

    a = _run(3_090, 3_433, [])
    b = _run(1_274, 5_000, [])
    p = read(b)
    assert p is not None
    p.answers[0] = p.answers[0].model_copy(update={"top": None})
    write(b, p)
    table, changes = compare_table([a, b])
    console = Console(width=80, record=True)
    console.print(table)
    text = console.export_text()
    assert ">= 1,274" in text and "3,090-3,433" in text
    assert changes[0][1] == "UNCLEAR"


def test_compare_cant_tell_where_either_answer_saw_its_machine_change() -> None:
    a = _run(1_935, 2_150, [])
    b = _run(2_362, 2_624, [])
    assert compare_table([a, b])[1][0][1] == "FASTER"
    p = read(a)
    assert p is not None
    p.answers[0] = p.answers[0].model_copy(update={"flags": ["load_changed"]})
    write(a, p)
    (change,) = compare_table([a, b])[1]
    assert change[1] == "UNCLEAR" and "A's machine changed during its search" in change[2]
