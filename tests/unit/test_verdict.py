"""Verdicts from recorded traces and from flags: the exact words a user reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchmark.judge.validity import judge, judge_run
from torchmark.results import Ceiling, Result, RunRecord, Verdict, Work
from torchmark.telemetry.trace import Recording, summarize

FIXTURES = Path(__file__).parents[1] / "fixtures" / "telemetry"


def replay(name: str, **kw: Any) -> Result:
    """A Result as the runner builds it, from a recorded trace and its timing samples."""
    d = json.loads((FIXTURES / name).read_text())
    s = summarize(Recording.from_dict(d["recording"]))
    return Result(
        workload="matmul",
        variant="bf16",
        device=d["recording"]["device"],
        params={"n": 8192},
        samples_s=d["samples_s"],
        first_call_s=d["first_call_s"],
        excluded=s["excluded"],
        telemetry=s,
        **kw,
    )


def test_healthy_gpu_run_is_ok() -> None:
    r = replay("gpu_healthy.json")
    assert judge(r) == Verdict(level="ok", reasons=[])
    assert r.flags == []
    assert r.telemetry is not None and r.telemetry["clock_pct_of_max"] == 100.0


def test_thermally_throttled_run_names_heat_and_sets_samples_aside() -> None:
    r = replay("gpu_thermal_throttled.json")
    v = judge(r)
    assert v.level == "warn"
    assert v.reasons == [
        "GPU thermally throttled in 65 % of samples (HW thermal slowdown; up to 87 C)",
        "SM clock below 75 % of its base clock in 65 % of samples",
        "throttled samples set aside: median of 21 unthrottled",
    ]
    assert "throttled" in r.flags
    # the headline is the unthrottled speed; the throttled samples are still stored
    assert r.median_s == pytest.approx(1.40e-3)
    assert r.n == 21 and len(r.samples_s) == 60


def test_power_capped_run_says_power() -> None:
    v = judge(replay("gpu_power_capped.json"))
    assert v.reasons == [
        "GPU power-throttled in 66 % of samples (SW power cap)",
        "throttled samples set aside: median of 17 unthrottled",
    ]


def test_competing_cpu_load_recorded_on_a_busy_machine() -> None:
    r = replay("cpu_competing_load.json")
    assert judge(r) == Verdict(
        level="warn", reasons=["other processes used 1.8 of 2 cores during the run"]
    )
    assert r.flags == ["competing_load"]


def test_same_load_on_a_gpu_run_with_free_cores_is_fine() -> None:
    r = replay("gpu_healthy.json")
    assert r.telemetry is not None
    r.telemetry["other_cores"] = 3.0  # 3 of 16 cores busy: the launching thread has room
    assert judge(r).level == "ok"
    r.telemetry["other_cores"] = 15.0
    assert judge(r).reasons == ["other processes used 15.0 of 16 cores during the run"]


def test_too_few_unthrottled_samples_says_the_median_is_throttled() -> None:
    r = replay("gpu_thermal_throttled.json")
    assert r.telemetry is not None
    r.excluded = []  # as when fewer than 5 unthrottled samples remained
    r.telemetry["throttled_samples"] = list(range(57))
    assert judge(r).reasons[-1] == "too few unthrottled samples: the median is the throttled speed"


def test_telemetry_lost_mid_run_is_a_warning() -> None:
    r = replay("gpu_healthy.json")
    assert r.telemetry is not None
    r.telemetry["sources"]["nvml"]["reason"] = "stopped mid-run: NVML error (GPU is lost)"
    assert judge(r).reasons == [
        "nvml telemetry stopped mid-run: NVML error (GPU is lost): later samples not checked"
    ]


def result(samples: list[float], **kw: Any) -> Result:
    return Result(workload="add", variant="fp32", device="cpu", samples_s=samples, **kw)


def test_above_ceiling_is_invalid() -> None:
    ceiling = Ceiling(device="cpu", key="bandwidth", value=40e9, unit="B/s", method="mul_")
    r = result([0.010] * 10, work=Work(bytes=0.5e9), ceiling=ceiling, headline="bytes")
    assert judge(r) == Verdict(
        level="invalid",
        reasons=[
            "above 100 % of the measured ceiling (125 % of bandwidth): measurement error; if "
            "this machine's speed drifts (VMs do), re-measure with --remeasure-ceilings"
        ],
    )


def test_noise_flags_in_words() -> None:
    noisy = result([1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.2, 1.2, 1.0, 1.1])
    assert judge(noisy).reasons == ["spread 19 % of the median: noisy"]
    unreliable = result([1.0, 1.0, 2.0, 2.0, 1.0, 2.0, 1.5, 1.5])
    assert judge(unreliable).reasons == ["spread 67 % of the median: unreliable"]
    few = result([1.0, 1.0, 1.0])
    assert judge(few).reasons == ["only 3 samples: the spread is not known"]


def test_timed_out_says_how_well_the_median_is_known() -> None:
    pinned = result(
        [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99, 1.0, 1.0], stop_reason="time_out"
    )
    assert "timed_out" in pinned.flags
    assert judge(pinned).reasons == []  # known to ±1.0 %: a usable number, flag only
    loose = result(
        [1.0, 1.08, 0.93, 1.05, 0.96, 1.0, 1.07, 0.94, 1.02, 0.97], stop_reason="time_out"
    )
    assert judge(loose).level == "warn"
    assert judge(loose).reasons == ["timed out before the median converged (known to ±6.5 %)"]


def test_first_call_warns_only_when_the_warm_up_costs_real_time() -> None:
    slow_start = result([0.050] * 10, first_call_s=2.1)
    assert judge(slow_start).reasons == [
        "first call 42x slower than steady state (2.1 s vs 50 ms): warm-up dominated in a job "
        "of fewer than 42 steps"
    ]
    # 40x of a 50 µs op is 2 ms once: irrelevant to any user
    assert judge(result([50e-6] * 10, first_call_s=2e-3)).reasons == []
    # 1.2 s of compile before a 0.5 s step: only 2.4x, the steady state dominates soon
    assert judge(result([0.5] * 10, first_call_s=1.2)).reasons == []


def test_reasons_are_ranked_most_severe_first() -> None:
    ceiling = Ceiling(device="cpu", key="bandwidth", value=40e9, unit="B/s", method="mul_")
    noisy_and_above = result(
        [1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.2, 1.2, 1.0, 1.1],
        work=Work(bytes=60e9),
        ceiling=ceiling,
        headline="bytes",
    )
    v = judge(noisy_and_above)
    assert v.level == "invalid"
    assert v.reasons[0].startswith("above 100 % of the measured ceiling")
    assert v.reasons[1] == "spread 19 % of the median: noisy"


def test_wrong_and_skipped() -> None:
    wrong = result([], status="wrong", reason="output does not depend on its inputs")
    assert judge(wrong) == Verdict(
        level="invalid", reasons=["wrong result: output does not depend on its inputs"]
    )
    assert judge(result([], status="skipped", reason="bf16 unsupported")).level == "ok"


def test_run_verdict_is_the_worst_with_labelled_reasons() -> None:
    ok = result([1.0] * 10)
    hot = replay("gpu_thermal_throttled.json")
    bad = result([], status="wrong", reason="same tensor every call")
    rec = RunRecord(results=[ok, hot, bad], status="incomplete")
    v = judge_run(rec)
    assert v.level == "invalid"
    # most severe first: the invalid result, then the warnings in the order found
    assert v.reasons[0] == "add/fp32 on cpu: wrong result: same tensor every call"
    assert v.reasons[1] == "run incomplete: interrupted after 3 results"
    assert v.reasons[2].startswith("matmul/bf16 n=8192 on cuda:0: GPU thermally throttled in 65 %")
    assert judge_run(RunRecord(results=[ok], status="complete")) == Verdict()
    extra = judge_run(RunRecord(results=[ok], status="complete"), extra=[("warn", "fell")])
    assert extra == Verdict(level="warn", reasons=["fell"])


def cpu_result(samples: list[float], other: float, threads: int) -> Result:
    telemetry = {
        "accelerator": False,
        "other_cores": other,
        "logical_cores": 2,
        "torch_threads": threads,
        "sample_tags": [[] for _ in samples],
    }
    return Result(
        workload="linear10",
        variant="infer",
        device="cpu",
        samples_s=samples,
        work=Work(items=1000),
        telemetry=telemetry,
    )


# The case: Linear(10,1) on (1000,10), 17 µs alone, read ~8 ms with one other busy
# process on 2 cores, its samples snapped to scheduler slices.
SNAPPED = [17e-6] * 6 + [8e-3] * 8 + [16e-3] * 3 + [64e-3] * 3


def test_clustered_samples_under_competing_load_are_invalid_with_the_fix() -> None:
    from torchmark.judge.validity import clusters

    fast, slow, share = clusters(SNAPPED) or (0, 0, 0)
    assert fast == pytest.approx(17e-6) and slow == pytest.approx(8e-3) and share == 0.7
    v = judge(cpu_result(SNAPPED, other=1.0, threads=2))
    assert v.level == "invalid"
    assert v.reasons[0] == (
        "samples split into two clusters, 17 µs and 8 ms (70% slow), while other processes "
        "used 1.0 of 2 cores: a scheduler artefact of 2 threads competing for the cores, not "
        "the hardware; measure again with --threads 1 (the free cores; --threads auto picks "
        "them) or on a quiet machine"
    )


def test_clusters_need_competing_load_and_more_than_one_thread_to_be_invalid() -> None:
    assert judge(cpu_result(SNAPPED, other=0.1, threads=2)).level != "invalid"  # quiet
    one = judge(cpu_result(SNAPPED, other=1.0, threads=1))
    assert one.level == "warn" and any("one thread descheduled" in r for r in one.reasons)


def test_unimodal_noise_is_not_a_cluster() -> None:
    from torchmark.judge.validity import clusters

    rng = np.random.default_rng(3)
    for spread in (0.02, 0.1, 0.3):
        samples = 1e-3 * np.exp(spread * rng.standard_normal(200))
        assert clusters(samples) is None, spread
    # a few outliers (< 5 % of samples) are outliers, not a cluster
    assert clusters([1e-3] * 40 + [9e-3]) is None
    assert judge(cpu_result([1e-3 * (1 + 0.01 * i) for i in range(20)], 1.0, 2)).level == "warn"


# A 768 KB add under one other busy process on 2 cores: every sample 7.99 ms (7.3 µs on
# the quiet machine), no fast cluster left to tell; its floor at 115 GB/s + 1.07 µs dispatch.
STALLED = [7.99e-3 * (1 + 0.0005 * i) for i in range(20)]
ADD_FLOOR_S = 786432 / 115e9 + 1.07e-6


def stalled(other: float, threads: int, floor: float | None = ADD_FLOOR_S) -> Result:
    r = cpu_result(STALLED, other=other, threads=threads)
    if floor is not None:
        r.extra["floor_s"] = floor
    return r


def test_a_call_far_above_its_floor_with_more_threads_than_free_cores_is_invalid() -> None:
    from torchmark.judge.validity import clusters

    assert clusters(STALLED) is None  # the cluster rule cannot see it
    v = judge(stalled(other=1.0, threads=2))
    assert v.level == "invalid"
    assert v.reasons[0] == (
        "8.03 ms a call, 1015x the 7.91 µs its work needs at this machine's measured ceilings, "
        "while other processes used 1.0 of 2 cores: 2 threads waiting for time slices, not "
        "the hardware; measure again with --threads 1 (the free cores; --threads auto picks "
        "them) or on a quiet machine"
    )


def test_a_stall_needs_load_more_threads_than_free_cores_and_a_floor() -> None:
    assert judge(stalled(other=0.1, threads=2)).level == "ok"  # quiet: its time is its own
    assert judge(stalled(other=1.0, threads=1)).level == "warn"  # one thread, one free core
    assert judge(stalled(other=1.0, threads=2, floor=None)).level == "warn"  # a model
    # 40x its floor is slow, not the scheduler's (seed-add intended runs at 20x quiet)
    assert judge(stalled(other=1.0, threads=2, floor=7.99e-3 / 40)).level == "warn"


def test_a_tie_with_the_ceiling_is_not_an_error() -> None:
    """An H100's int8 GEMM workload read 100.2 % and 101 % of a ceiling timed on the same
    kernel: the same speed measured twice, not a measurement error."""
    ceiling = Ceiling(device="cpu", key="bandwidth", value=49.5e9, unit="B/s", method="mul_")
    tie = result([0.010] * 10, work=Work(bytes=0.5e9), ceiling=ceiling, headline="bytes")
    assert tie.pct_of_ceiling == pytest.approx(101.0, abs=0.1)
    assert "above_ceiling" not in tie.flags and judge(tie).level != "invalid"


def test_a_card_at_its_own_default_power_limit_is_not_throttled(tmp_path: Path) -> None:
    """A lent H100 at its default 700 W ran every large GEMM with "SW power cap" set: that
    is the speed the card sustains, kept in the median, not set aside as throttling."""
    d = json.loads((FIXTURES / "gpu_power_capped.json").read_text())
    d["recording"]["sources"]["nvml"]["static"]["default_power_limit_w"] = 700.0
    for _, reading in d["recording"]["readings"]["nvml"]:
        if "SW power cap" in reading["reasons"]:  # the clock the cap brings: not a fault
            reading["sm_mhz"] = 1100  # below 75 % of the 1590 MHz base clock
    (tmp_path / "capped.json").write_text(json.dumps(d))
    r = replay(str(tmp_path / "capped.json"))
    # both speeds stay in the median, so this synthetic trace (1.40 vs 1.58 ms) reads noisy
    assert judge(r).reasons == [
        "spread 11 % of the median: noisy",
        "GPU at its default power limit of 700 W in 66 % of samples: the speed dense work "
        "sustains on this card, kept in the median",
    ]
    assert r.excluded == [] and r.n == len(r.samples_s) and "throttled" not in r.flags
    # capped below its default by someone: throttling, as before
    d["recording"]["sources"]["nvml"]["static"]["default_power_limit_w"] = 750.0
    (tmp_path / "lowered.json").write_text(json.dumps(d))
    assert judge(replay(str(tmp_path / "lowered.json"))).level == "warn"


def test_a_call_far_faster_at_one_thread_under_load_is_invalid() -> None:
    """No roofline floor (a model): the same call at one thread right after tells."""
    r = stalled(other=1.0, threads=2, floor=None)
    r.extra["one_thread_s"] = 7.99e-3 / 3.1
    assert judge(r).level == "invalid"
    assert "3x the 2.58 ms it took with one thread right after" in judge(r).reasons[0]
    r.extra["one_thread_s"] = 7.99e-3 / 2.5  # 2 threads losing 2.5x: overhead, not a stall
    assert judge(r).level == "warn"
    quiet = stalled(other=0.1, threads=2, floor=None)
    quiet.extra["one_thread_s"] = 7.99e-6  # no load: the threads' time is their own
    assert judge(quiet).level == "ok"
    both = stalled(other=1.0, threads=2)
    both.extra["one_thread_s"] = 7.99e-3 / 10
    assert "its work needs at this machine's measured ceilings" in judge(both).reasons[0]


def test_a_timer_past_the_wall_clock_is_invalid() -> None:
    """Invalid is kept for what cannot be true; a timer that read a sample longer
    than the host clock around it is one (the device's speed is not the question)."""
    r = Result(
        workload="matmul",
        variant="float32",
        device="cuda:0",
        timing="device",
        samples_s=[1e-3] * 12,
        work=Work(items=1),
        extra={"timer_check": {"timer_s": 2.0e-3, "host_s": 1.0e-3}},
    )
    v = judge(r)
    assert v.level == "invalid"
    assert v.reasons[0] == (
        "the device timer read 2 ms for a sample the host clock saw take 1 ms: a timer that "
        "outruns the wall clock is wrong, whatever the device did; measure again with "
        "--timing e2e"
    )
    # within the clocks' drift and an event's resolution: no fault
    r.extra = {"timer_check": {"timer_s": 1.005e-3, "host_s": 1.0e-3}}
    assert judge(r).level == "ok"
