"""Soak: duration parsing, windows, the trend verdict, and a whole soak on a fake clock."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from torchmark.cli.soak import show_soak
from torchmark.errors import InputError, RunInterrupted
from torchmark.kinds.soak.kind import soak, trend_reasons
from torchmark.report.soak import sparkline
from torchmark.results import RunRecord, Work
from torchmark.results.payloads import SoakWindow
from torchmark.run.config import parse_duration
from torchmark.testing import FakeClock, FakeDevice, MemoryStore
from torchmark.workloads import Case, PlanOptions, Prepared, Workload


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("10m", 600), ("1h", 3600), ("1.5m", 90), ("45", 45)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "-5m", "0s", "ten minutes", "5 m s"])
def test_bad_duration_names_the_fix(text: str) -> None:
    with pytest.raises(InputError, match="--duration takes a positive time such as 90s, 10m"):
        parse_duration(text)


def win(t0: float, t1: float, rate: float, temp: float | None = None, **throttle: int) -> dict:
    return {
        "t0_s": t0,
        "t1_s": t1,
        "rate": rate,
        "clock_mhz": None,
        "temp_c": temp,
        "power_w": None,
        "throttle": {k.replace("_", " "): v for k, v in throttle.items()},
    }


def typed(wins: list[dict]) -> list[SoakWindow]:
    return [SoakWindow.model_validate(w) for w in wins]


def test_falling_throughput_names_the_throttle_reason_and_temperature() -> None:
    wins = [win(30 * i, 30 * (i + 1), 300.0 if i < 6 else 165.0, 70 + i) for i in range(20)]
    wins[-1]["throttle"] = {"HW thermal slowdown": 100}
    wins[-2]["throttle"] = {"HW thermal slowdown": 80, "SW power cap": 10}
    assert trend_reasons(typed(wins), 600.0) == [
        (
            "warn",
            "throughput fell 45 % from the first to the last minute while HW thermal slowdown "
            "was active; temperature 89 C",
        )
    ]


def test_short_soak_compares_fifths_and_says_when_no_reason() -> None:
    wins = [win(i, i + 1, 10.0 - i * 0.5) for i in range(10)]
    assert trend_reasons(typed(wins), 10.0) == [
        (
            "warn",
            "throughput fell 41 % from the first to the last 2 s with no throttle reason reported",
        )
    ]


def test_flat_and_rising_curves() -> None:
    flat = [win(i, i + 1, 100.0 + (i % 2)) for i in range(10)]
    assert trend_reasons(typed(flat), 10.0) == []
    rising = [win(i, i + 1, 100.0 + 5 * i) for i in range(10)]
    assert trend_reasons(typed(rising), 10.0) == [
        (
            "warn",
            "throughput rose 39 % from the first to the last 2 s: the start was still warming up",
        )
    ]
    assert trend_reasons(typed(flat[:2]), 2.0) == []  # too short to call a trend


def test_sparkline() -> None:
    assert sparkline([8.0, 4.0, None, 0.0]) == "█▅ ▁"
    assert sparkline([]) == ""


class Heating(Workload):
    """A step that slows from 10 ms to 20 ms halfway through, like a GPU reaching its limit."""

    name = "heating"
    summary = "fake"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.start: float | None = None

    def cases(self, device: Any, opts: PlanOptions) -> list[Case]:
        return [Case("heating", "v", device, (("n", n),)) for n in (10, 1000)]

    def prepare(self, case: Case) -> Prepared:
        n = case.param_dict["n"]

        def fn() -> None:
            if n == 1000:  # the heavy case is too slow for the budget: soak picks n=10
                self.clock.advance(5.0)
                return
            self.start = self.clock() if self.start is None else self.start
            slow = self.clock() - self.start >= 8.0
            self.clock.advance(0.020 if slow else 0.010)

        return Prepared(fn=fn, work=Work(items=100, item_unit="img"), timing="e2e")


def test_soak_on_a_fake_clock_finds_the_fall() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock)
    rec = soak(Heating(clock), dev, duration_s=10.0, sources=[], clock=clock)
    assert rec.kind == "soak" and rec.status == "complete"
    s = rec.payload.soak
    assert s.case == "heating/v n=10 on fake:0" and s.unit == "img/s"
    rates = [round(w.rate) for w in s.windows]
    assert rates[:16] == [10000] * 16 and rates[-3:] == [5000] * 3
    assert 5000 < rates[16] < 5500  # the window the slow-down began in
    assert rec.verdict is not None and rec.verdict.level == "warn"
    assert rec.verdict.reasons[0] == (
        "throughput fell 50 % from the first to the last 2 s with no throttle reason reported"
    )
    r = rec.results[0]
    assert r.telemetry is not None and r.telemetry["sources"] == {}
    assert r.excluded == []  # a soak reports the throttled speed: that is its point


def soak_record(wins: list[dict[str, Any]]) -> RunRecord:
    soak_info = {"case": "matmul/bf16 n=8192 on cuda:0", "elapsed_s": 600.0, "unit": "TFLOP/s"}
    return RunRecord(kind="soak", payload={"kind": "soak", "soak": {**soak_info, "windows": wins}})


def full(t0: float, rate: float, **throttle: int) -> dict[str, Any]:
    w = win(t0, t0 + 30, rate, temp=81.0, **throttle)
    return {**w, "clock_mhz": 1980.0, "power_w": 698.4}


@pytest.mark.parametrize("width", [60, 80])
def test_soak_table_reads_in_80_columns_with_every_sensor(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 60 columns rich cut every header ("temp…") and dropped the throttle reasons."""
    monkeypatch.setenv("COLUMNS", str(width))
    wins = [full(0, 790.2), full(30, 702.6, sw_power_cap=40, hw_thermal_slowdown=100)]
    show_soak(soak_record(wins))
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= width, out
    assert "…" not in out
    assert "clock MHz" in out and "temp °C" in out and "power W" in out and "throttle" in out
    assert "790" in out and "703" in out and "0–30" in out and "not read" not in out
    assert "40\u00a0%" in out and "100\u00a0%" in out  # never "100" over "%"
    assert "sw power cap" in " ".join(out.split("throttle")[1].split())


def test_soak_table_says_once_which_sensors_are_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_soak(soak_record([win(0, 1, 0.2), win(1, 2, 0.21)]))
    out = capsys.readouterr().out
    assert "not read on this device: clock, temperature, power (no sensor exposed)" in out
    assert "temp" not in out.split("not read")[0] and "throttle" not in out


class StoppedAtTheEnd(Heating):
    """SIGTERM arriving while the soak puts its result together (its teardown here)."""

    def prepare(self, case: Case) -> Prepared:
        p = super().prepare(case)
        if case.param_dict["n"] == 10:  # the case soaked (the other's is torn down unmeasured)
            p.teardown = lambda: os.kill(os.getpid(), signal.SIGTERM)
        return p


def test_a_soak_stopped_as_it_ends_keeps_its_result() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock)
    store = MemoryStore()
    with pytest.raises(RunInterrupted) as info:
        soak(StoppedAtTheEnd(clock), dev, duration_s=2.0, sources=[], clock=clock, store=store)
    assert info.value.exit_code == 143
    rec: RunRecord = info.value.record  # type: ignore[assignment]
    # was no result: the stop cut the `finally` that adds it
    assert len(rec.results) == 1 and len(rec.results[0].samples_s) > 10
    assert [len(r.results) for r in store.runs.values()] == [1]


def test_a_fall_under_other_load_is_cant_tell_not_the_device() -> None:
    # The README walk at load 2.5-5 on 2 cores: "throughput fell 55 % from the first to the
    # last 2 s with no throttle reason reported": other processes' load, blamed on nothing
    wins = [win(i, i + 1, 10.0 if i < 5 else 4.5) for i in range(10)]
    for i, w in enumerate(wins):
        w["other_cores"] = 0.1 if i < 2 else 1.8  # a fake load reading per window
    (said,) = trend_reasons(typed(wins), 10.0, logical_cores=2)
    assert said == (
        "warn",
        "throughput fell 55 % from the first to the last 2 s: can't tell under load: other "
        "processes used 1.8 of 2 cores in the last 2 s (0.1 in the first); soak again on a "
        "quiet machine",
    )
    assert "no throttle reason" not in said[1]
    # a rise where the other load eased is not "warming up" either
    rising = [win(i, i + 1, 4.5 if i < 5 else 10.0) for i in range(10)]
    for i, w in enumerate(rising):
        w["other_cores"] = 1.6 if i < 2 else 0.2
    (rose,) = trend_reasons(typed(rising), 10.0, logical_cores=2)
    assert rose[1].startswith("throughput rose 122 % from the first to the last 2 s: can't tell")
    assert "1.6 of 2 cores in the first 2 s (0.2 in the last)" in rose[1], rose
    # a GPU soak needs one free host core only: 0.4 of 2 cores is no load for it
    for w in wins:
        w["other_cores"] = 0.4
    (gpu,) = trend_reasons(typed(wins), 10.0, logical_cores=2, accelerator=True)
    assert gpu[1].endswith("with no throttle reason reported")


def test_soak_windows_read_other_processes_load_from_the_host_readings() -> None:
    from torchmark.kinds.soak.kind import Chunk, windows
    from torchmark.results import Result
    from torchmark.telemetry.trace import Recording

    # host CPU times every 0.5 s: busy 1.5 cores, 0.5 of them this process's own
    host = [(t / 2, {"busy_s": 0.75 * t, "proc_s": 0.25 * t, "steal_s": 0.0}) for t in range(21)]
    rec = Recording(device="cpu", accelerator=False, readings={"host": host})
    chunks = [Chunk(i / 2, (i + 1) / 2, 0.01) for i in range(20)]
    r = Result(workload="w", variant="v", device="cpu", samples_s=[0.01] * 20)
    wins = windows(chunks, r, rec, 0.0, n=4)
    assert [w.other_cores for w in wins] == [1.0] * 4
