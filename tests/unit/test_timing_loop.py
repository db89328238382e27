"""The measuring loop on a fake clock and a fake device: every figure is known in advance."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from torchmark.testing import FakeClock, FakeDevice, scripted
from torchmark.timing import Adaptive, Fixed, measure
from torchmark.timing.loop import MAX_WARMUP_GROUP

# Durations are powers of two so the fake clock (t = 1000 s + sums of them) adds exactly:
# with 1e-3 s steps 25 calls sum to 0.02499999... s and every count is off by one.
T10 = 2.0**-10  # ~0.98 ms
T12 = 2.0**-12  # ~244 µs
T13 = 2.0**-13  # ~122 µs
T23 = 2.0**-23  # ~119 ns


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def dev(clock: FakeClock) -> FakeDevice:
    return FakeDevice(clock)  # min_sample_s = 1 ms


def test_first_call_is_stored_apart(clock: FakeClock, dev: FakeDevice) -> None:
    # a 0.5 s first call (lazy init, autotune) must not reach the samples
    m = measure(scripted(clock, [0.5, 1e-3]), dev, clock=clock, rule=Fixed(samples=5))
    assert m.first_call_s == 0.5
    assert m.samples_s == pytest.approx([1e-3] * 5)
    assert m.median == pytest.approx(1e-3)


def test_warm_up_lasts_25_ms_in_doubling_groups(clock: FakeClock, dev: FakeDevice) -> None:
    m = measure(scripted(clock, [T10]), dev, clock=clock, rule=Fixed(samples=3))
    # groups of 1, 2, 4, 8 (15 calls, 14.6 ms), then the 11 that reach 25 ms: 26 calls
    assert m.warmup_calls == 26
    assert m.warmup_s == 26 * T10 >= 0.025


def test_warm_up_makes_at_least_three_calls(clock: FakeClock, dev: FakeDevice) -> None:
    # one 100 ms call already passes 25 ms; two more are made (one group of 2)
    m = measure(scripted(clock, [0.1]), dev, clock=clock, rule=Fixed(samples=2))
    assert m.warmup_calls == 3
    assert m.warmup_s == pytest.approx(0.3)
    assert "short_warmup" not in m.flags


def test_warm_up_of_an_extremely_fast_op_is_bounded(clock: FakeClock, dev: FakeDevice) -> None:
    # 119 ns a call, 25 ms = 209,715.2 calls: groups 1, 2, ... 65,536 (17 groups, 131,071
    # calls), one more of 65,536, then the 13,109 still missing: 19 timed groups, not
    # 209,716 timer reads. Samples hold ceil(1 ms / 119 ns) = 8,389 calls.
    m = measure(scripted(clock, [T23]), dev, clock=clock, rule=Fixed(samples=2))
    assert m.warmup_calls == 209_716
    assert m.warmup_s == 209_716 * T23 >= 0.025
    assert dev.syncs == 2 * (1 + 19 + 2)  # each timed region syncs at start and stop
    assert m.calls_per_sample == 8_389


def test_a_timer_that_reads_zero_cannot_spin(clock: FakeClock, dev: FakeDevice) -> None:
    # nothing ever advances the clock: the warm-up stops after a group of 65,536 calls,
    # one call per sample, and the rule's sample cap ends the loop
    m = measure(scripted(clock, [0.0]), dev, clock=clock, rule=Adaptive(max_samples=50))
    assert m.warmup_calls == 2 * MAX_WARMUP_GROUP - 1
    assert (m.calls_per_sample, m.n, m.stop_reason) == (1, 50, "max_samples")
    assert "unreliable" in m.flags


def test_a_call_slower_than_the_time_out_still_gives_one_sample(
    clock: FakeClock, dev: FakeDevice
) -> None:
    m = measure(scripted(clock, [20.0]), dev, clock=clock, rule=Adaptive(max_time_s=10.0))
    assert (m.first_call_s, m.warmup_calls, m.n) == (20.0, 1, 1)
    assert m.samples_s == (20.0,)
    assert m.stop_reason == "time_out"
    assert {"timed_out", "short_warmup", "few_samples"} <= set(m.flags)
    assert clock.t - 1000.0 == pytest.approx(60.0)  # first call + 1 warm-up + 1 sample


def test_warm_up_stops_before_overrunning_the_time_out(clock: FakeClock, dev: FakeDevice) -> None:
    # 4 s calls, 10 s time-out: a second warm-up call fits (8 s), a third would not
    m = measure(scripted(clock, [4.0]), dev, clock=clock, rule=Adaptive(max_time_s=10.0))
    assert m.warmup_calls == 2
    assert m.stop_reason == "time_out"
    assert m.n == 3  # 12 s >= 10 s


def test_calls_per_sample_from_the_warmest_estimate(clock: FakeClock, dev: FakeDevice) -> None:
    # warm-up's first call is 64x slower (7.8 ms): averaged over the ~142 warm-up calls
    # it gives ~0.18 ms a call and 6 calls a sample; the last, largest group says 122 µs,
    # so a 1 ms sample holds ceil(8.19) = 9 calls
    fn = scripted(clock, [0.5, 2.0**-7, T13])
    m = measure(fn, dev, clock=clock, rule=Fixed(samples=3))
    assert m.calls_per_sample == 9
    assert m.samples_s == (T13,) * 3


def test_calls_per_sample_follow_min_sample_s(clock: FakeClock, dev: FakeDevice) -> None:
    m = measure(scripted(clock, [T13]), dev, clock=clock, rule=Fixed(3), min_sample_s=0.01)
    assert m.calls_per_sample == 82  # ceil(10 ms / 122 µs) = ceil(81.92)
    fixed = measure(scripted(clock, [T13]), dev, clock=clock, rule=Fixed(3), calls_per_sample=7)
    assert fixed.calls_per_sample == 7
    slow = measure(scripted(clock, [5e-3]), dev, clock=clock, rule=Fixed(3))
    assert slow.calls_per_sample == 1


class LoggingDevice(FakeDevice):
    """Writes 'c' for a call, 's' for a synchronize, 'r' for a clock read."""

    def __init__(self, clock: FakeClock, log: list[str]) -> None:
        super().__init__(clock)
        self.log = log

    def synchronize(self) -> None:
        super().synchronize()
        self.log.append("s")


def test_every_sample_waits_for_the_device_before_reading_the_clock() -> None:
    log: list[str] = []

    class ReadLoggingClock(FakeClock):
        def __call__(self) -> float:
            log.append("r")
            return self.t

    clock = ReadLoggingClock()
    dev = LoggingDevice(clock, log)
    step = scripted(clock, [T12])

    def fn() -> None:
        log.append("c")
        step()

    m = measure(fn, dev, clock=clock, rule=Fixed(samples=4))
    timed = re.findall(r"s(r+)(c+)s(r)", "".join(log))
    # first call + warm-up groups + samples: every batch of calls is followed by a sync
    # and only then by a clock read; no call runs outside a timed region
    assert "".join(log).count("c") == sum(len(c) for _, c, _ in timed)
    assert len(timed) == dev.syncs / 2
    # samples of ceil(1 ms / 244 µs) = 5 calls
    assert [len(c) for _, c, _ in timed[-4:]] == [m.calls_per_sample] * 4 == [5] * 4
    assert log[-1] in "rs"


def test_on_sample_gets_each_sample_span(clock: FakeClock, dev: FakeDevice) -> None:
    spans: list[tuple[int, float, float]] = []
    m = measure(
        scripted(clock, [T10]),
        dev,
        clock=clock,
        rule=Fixed(samples=3),
        calls_per_sample=2,
        on_sample=lambda i, t0, t1: spans.append((i, t0, t1)),
    )
    assert [i for i, _, _ in spans] == [0, 1, 2]
    assert [t1 - t0 for _, t0, t1 in spans] == [2 * T10] * 3
    assert m.n == 3


# ---- each stop reason, reached through the loop with a crafted schedule ----------------


def per_sample(clock: FakeClock, durations: Callable[[int], float]) -> Callable[[], None]:
    """A 1-call-per-sample callable: the i-th call takes durations(i) seconds."""
    count = [0]

    def fn() -> None:
        clock.advance(durations(count[0]))
        count[0] += 1

    return fn


def test_stops_converged(clock: FakeClock, dev: FakeDevice) -> None:
    # steady: pinned at once, but never before min_time_s = 0.5 s = 256 samples of 2 calls
    m = measure(scripted(clock, [T10]), dev, clock=clock, rule=Adaptive())
    assert m.stop_reason == "converged"
    assert (m.n, m.calls_per_sample) == (256, 2)
    assert m.flags == []


def test_stops_stalled(clock: FakeClock, dev: FakeDevice) -> None:
    # every call 0.5 % slower than the last (a device heating up): the median's CI widens
    fn = per_sample(clock, lambda i: 1e-3 * 1.005**i)
    rule = Adaptive(min_time_s=0.0)
    m = measure(fn, dev, clock=clock, rule=rule, warmup_s=0.0, calls_per_sample=1)
    assert (m.stop_reason, m.n) == ("stalled", 64)
    assert m.flags == ["noisy"]  # the drift shows as spread: 1.005**64 = 1.38
    assert m.samples_s[-1] > m.samples_s[0] * 1.3


def test_stops_on_time_out(clock: FakeClock, dev: FakeDevice) -> None:
    noise = 1e-3 * np.exp(0.3 * np.random.default_rng(0).standard_normal(1000))
    fn = per_sample(clock, lambda i: float(noise[i % 1000]))
    rule = Adaptive(max_time_s=0.05, min_time_s=0.0, reach=0)  # the time-out alone
    m = measure(fn, dev, clock=clock, rule=rule, calls_per_sample=1)
    assert m.stop_reason == "time_out"
    assert "timed_out" in m.flags
    assert 30 < m.n < 80  # ~50 samples of ~1 ms in 50 ms


def test_stops_on_max_samples(clock: FakeClock, dev: FakeDevice) -> None:
    fn = per_sample(clock, lambda i: 1e-3 * (1 + 0.3 * (i % 2)))  # never pinned to 0.5 %
    rule = Adaptive(max_samples=30, min_time_s=0.0, reach=0)  # the count alone
    m = measure(fn, dev, clock=clock, rule=rule, calls_per_sample=1)
    assert (m.stop_reason, m.n) == ("max_samples", 30)


def test_stops_fixed(clock: FakeClock, dev: FakeDevice) -> None:
    m = measure(scripted(clock, [1e-3]), dev, clock=clock, rule=Fixed(samples=12))
    assert (m.stop_reason, m.n) == ("fixed", 12)
    assert "adaptive" not in m.rule
    assert m.rule == "fixed(samples=12, max_time_s=600.0)"
    assert m.timing == "device"  # FakeDevice is an accelerator with its own timer


class RunsFast(FakeDevice):
    """A device whose timer reads twice what the host clock around it saw: a broken timer
    (events recorded on another stream, a clock-rate bug)."""

    def timer(self, mode: str = "device") -> Any:
        inner = super().timer(mode)  # type: ignore[arg-type]

        class Double:
            def start(self) -> None:
                inner.start()

            def stop(self) -> float:
                return 2 * inner.stop()

        return Double()


def test_a_timer_that_outruns_the_host_clock_is_kept(clock: FakeClock) -> None:
    m = measure(scripted(clock, [T10]), RunsFast(clock), clock=clock, rule=Fixed(samples=3))
    assert m.timer_over_host is not None
    timer_s, host_s = m.timer_over_host
    assert timer_s == pytest.approx(2 * host_s)
    honest = measure(scripted(clock, [T10]), FakeDevice(clock), clock=clock, rule=Fixed(samples=3))
    assert honest.timer_over_host is None
