"""A profile's schedule sized to the step (a fake clock sets the step time) and the device
allocator's peaks per profiled step (a fake device scripts them)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from tests.unit.test_profile_report import gpu_profile, record

from torchmark.devices.base import MemoryStats
from torchmark.kinds.profile.capture import (
    LONG_STEP_S,
    WAIT,
    WARMUP,
    Capture,
    active_steps,
    capture,
    lead_steps,
    reduced_note,
    steps_for_events,
)
from torchmark.report.profile import memory_line, profile_tables
from torchmark.results.payloads import ProfileSummary
from torchmark.testing import FakeClock, FakeDevice

typed = ProfileSummary.model_validate

MB = 1_000_000


class MemoryFake(FakeDevice):
    """Each step allocates 10 MB more than the last at its peak; the allocator holds 64 MB
    more than that. ``resets`` counts reset_peak_memory() calls."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.step, self.resets = 0, 0

    def reset_peak_memory(self) -> None:
        self.resets += 1

    def memory_stats(self) -> MemoryStats | None:
        alloc = 100 * MB + 10 * MB * self.step
        return MemoryStats(alloc, alloc + 64 * MB)


def stepper(clock: FakeClock, dev: MemoryFake, seconds: float) -> Any:
    def fn() -> None:
        import torch

        torch.ones(8).add_(1)  # a real op, so that the profiler records the step
        dev.step += 1
        clock.advance(seconds)

    return fn


def profiled(seconds: float, **kw: Any) -> tuple[Capture, MemoryFake, list[str]]:
    """``capture`` of steps ``seconds`` long on the fake clock; its progress lines."""
    clock = FakeClock()
    dev = MemoryFake(clock)
    said: list[str] = []
    got = capture(stepper(clock, dev, seconds), dev, say=said.append, clock=clock, **kw)
    return got, dev, said


def test_lead_and_active_steps_follow_the_step_time() -> None:
    assert lead_steps(None) == lead_steps(0.01) == (WAIT, WARMUP)
    assert lead_steps(LONG_STEP_S * 2) == (0, 1)
    assert active_steps(0.01, 5, 30.0) == 5
    assert active_steps(7.0, 5, 30.0) == 4
    assert active_steps(12.0, 5, 30.0) == 2
    assert active_steps(45.0, 5, 30.0) == 1  # longer than the budget: still one step


def test_a_long_step_gets_fewer_active_steps_said_and_stated() -> None:
    got, dev, said = profiled(12.0, active=5, step_s=10.0)
    sched = got.schedule
    assert (sched["wait"], sched["warmup"], sched["active"], sched["requested"]) == (0, 1, 2, 5)
    assert sched["warm_step_s"] == pytest.approx(12.0)
    # one step counted (FLOPs, events), one warm-up step, two active
    assert got.breakdown.steps == 2 and dev.step == 4
    assert said[0].startswith("profiling: one step counted (FLOPs, ")
    assert said[1] == "profiling: a profiled step takes 12 s; recording 2 active step(s)"
    assert "profiling: active step 2/2 took 12 s" in said
    assert said[-1].startswith("profiling: reading the trace (")
    note = reduced_note(sched, 30.0)
    assert note is not None and note.startswith("2 active step(s) instead of 5")
    assert "took 12 s" in note and "within 30 s" in note


def test_a_step_with_many_events_gets_fewer_active_steps() -> None:
    assert steps_for_events(None, 5, 100) == 5
    assert steps_for_events(30, 5, 100) == 3
    assert steps_for_events(500, 5, 100) == 1
    got, _, _ = profiled(0.01, active=5, events_budget=1)
    sched = got.schedule
    assert sched["step_events"] > 1 and sched["active"] == 1 == got.breakdown.steps
    note = reduced_note(sched, 30.0)
    assert note is not None and note.startswith("1 active step(s) instead of 5: a step records")
    assert "a profiled step took" not in note  # its time was within the budget
    assert got.flops == {} and got.flops_by_call == {}  # an add has no FLOP formula in torch


def test_a_short_step_keeps_the_asked_schedule_and_says_nothing() -> None:
    got, _, said = profiled(0.01, active=3, step_s=0.01)
    assert (got.schedule["wait"], got.schedule["warmup"], got.schedule["active"]) == (1, 2, 3)
    assert got.breakdown.steps == 3 and said == []
    assert reduced_note(got.schedule, 30.0) is None


def test_allocator_peaks_are_read_per_active_step_after_a_reset() -> None:
    got, dev, _ = profiled(0.01, active=3)
    # step 1 counts FLOPs, 2-4 are the wait and warm-ups; the active ones are 5, 6, 7
    assert [m.allocated_bytes for m in got.step_memory] == [150 * MB, 160 * MB, 170 * MB]
    assert [m.reserved_bytes for m in got.step_memory] == [214 * MB, 224 * MB, 234 * MB]
    assert dev.resets == 1 + 6  # once before the capture, once before each step
    assert got.device_peak_bytes == 170 * MB


def test_a_device_without_allocator_stats_keeps_no_step_memory() -> None:
    clock = FakeClock()
    dev = FakeDevice(clock)
    got = capture(stepper(clock, MemoryFake(clock), 0.01), dev, active=2, clock=clock)
    assert got.step_memory == []


STEP_MEMORY = {
    "steps": [
        {"allocated_bytes": 140 * MB, "reserved_bytes": 204 * MB},
        {"allocated_bytes": 160 * MB, "reserved_bytes": 224 * MB},
    ],
    "peak_allocated_bytes": 160 * MB,
    "peak_reserved_bytes": 224 * MB,
    "smallest_allocated_bytes": 140 * MB,
    "largest_step": 2,
}


def test_memory_line_names_allocated_and_reserved_per_step() -> None:
    line = memory_line(typed(gpu_profile(step_memory=STEP_MEMORY, host_rss_peak_bytes=2 * 10**9)))
    assert line is not None
    assert "reset before each of 2): allocated 160 MB, reserved 224 MB" in line
    assert "step 2, the largest; the smallest step's allocated peak 140 MB" in line
    assert line.endswith("host RSS peak 2.00 GB (the process's)")


def test_memory_line_on_the_cpu_is_host_rss_alone() -> None:
    line = memory_line(typed(gpu_profile(host_rss_peak_bytes=2 * 10**9)))
    assert line == "memory: host RSS peak 2.00 GB (the process's)"


def test_a_reduced_schedule_is_said_beside_the_steps() -> None:
    sched = {"wait": 0, "warmup": 1, "active": 2, "requested": 5}
    console = Console(width=80, record=True, color_system=None)
    for r in profile_tables(record(gpu_profile(schedule=sched, step_memory=STEP_MEMORY))):
        console.print(r)
    text = " ".join(console.export_text().split())
    assert "2 active steps after 0 wait and 1 warm-up (5 asked; fewer for a long step" in text
    assert "reserved 224 MB" in text


def test_the_html_report_says_the_allocator_peaks() -> None:
    from torchmark.report import html

    page = html.render([record(gpu_profile(step_memory=STEP_MEMORY))])
    assert "allocated 160 MB, reserved 224 MB" in page


def test_noise_unknown_after_a_cut_points_to_the_notes() -> None:
    from torchmark.report.profile import overhead_line

    sched = {"wait": 0, "warmup": 1, "active": 2, "requested": 5}
    line = overhead_line(typed(gpu_profile(schedule=sched, spread_pct=None)))
    assert line.endswith("(its noise is not known: under 4 steps, see the notes)")
