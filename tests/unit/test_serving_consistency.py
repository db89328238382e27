"""A serving printout never contradicts itself in silence: single-stream beside offline
batch 1, a rate held above its own offline capacity, a p99 that falls as the rate rises."""

from __future__ import annotations

from typing import Any

from torchmark.kinds.serving import answer
from torchmark.report.serving import fleet_heading, lines
from torchmark.results.serving import FleetDoc, PointDoc, ServingPayload


def point(rate: float, p99: float, ci: tuple[float, float], **kw: Any) -> PointDoc:
    return PointDoc(
        rate=rate,
        max_batch=32,
        max_wait_s=0.0,
        outcome=kw.pop("outcome", "within"),
        why="",
        p99_s=p99,
        p99_ci_s=ci,
        valid=kw.pop("valid", True),
        confirm=kw.pop("confirm", False),
        duration_s=kw.pop("duration_s", 5.0),
        **kw,
    )


def test_offline_batch_1_under_what_single_stream_implies_is_said() -> None:
    # the printout: p50 0.0943 ms one at a time (~21k/s for two instances) beside
    # an offline batch-1 rate of 7,254/s; the rate one at a time follows the mean
    f = FleetDoc(
        device="cpu",
        label="x",
        processes=2,
        threads=1,
        single_n=200,
        single_p50_s=0.0943e-3,
        single_mean_s=0.0943e-3,
        single_p99_s=0.2e-3,
        offline={"1": 7_254.0, "32": 104_040.0},
    )
    answer.refresh(f)
    assert any("offline batch 1 read 7,254/s" in n and "21,209/s" in n for n in f.notes)
    assert "mean 0.0943 ms (10,604/s)" in fleet_heading(f)
    f.single_mean_s = 0.5e-3  # stalls under load: a mean of 0.5 ms, 4,000/s for two
    answer.refresh(f)
    assert not any("offline batch 1" in n for n in f.notes)


def test_a_rate_held_above_its_own_offline_capacity_says_the_offline_figure_read_low() -> None:
    f = FleetDoc(device="cpu", label="x", processes=1, threads=2, offline={"32": 43_017.0})
    f.points = [point(50_000, 0.008, (0.0079, 0.0081), confirm=True, duration_s=15.0)]
    answer.refresh(f)
    note = next(n for n in f.notes if "above the offline capacity" in n)
    assert "50,000 req/s held for 15 s" in note and "at least 50,000/s" in note
    p = ServingPayload(model="m", bound_s=0.05, fleets=[f])
    assert any(note in line for line in lines(p))


def test_a_p99_that_falls_as_the_rate_rises_flags_the_answer() -> None:
    # the issue's: p99 13.7 ms at 95,587/s but 7.55 ms at 102,414/s (95 % CI 7.54-7.57)
    f = FleetDoc(device="cpu", label="x", processes=2, threads=1, offline={"32": 120_000.0})
    f.points = [
        point(95_587, 0.0137, (0.0135, 0.0139)),
        point(102_414, 0.00755, (0.00754, 0.00757), confirm=True),
        point(105_828, 0.09, (0.08, 0.1), outcome="over", valid=False),
    ]
    answer.refresh(f)
    assert f.load_changed
    assert any("p99 13.7 ms at 95,587 req/s but 7.55 ms at 102,414" in n for n in f.notes)
    a = answer.device_answer("cpu", "x", [(0, f)], 0.050)
    assert "load_changed" in a.flags and "the load changed" in a.sentence
    # a p99 that rises with the rate, or falls within the intervals, is one curve
    f.points[1] = point(102_414, 0.0137, (0.0130, 0.0145), confirm=True)
    answer.refresh(f)
    assert not f.load_changed and not any("beyond both" in n for n in f.notes)
