"""The measuring loop: warm-up, calls grouped into samples, a stopping rule."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from torchmark.devices.base import Device, TimingMode
from torchmark.stats.measurement import Measurement, timer_excess
from torchmark.timing.stopping import Adaptive, StoppingRule

Clock = Callable[[], float]

# Warm-up groups double so a ~50 ns op does not spend its 25 ms on timer calls: 17 groups
# reach 65,536 calls (~3 ms of a 50 ns op); larger groups would only overshoot warmup_s.
MAX_WARMUP_GROUP = 1 << 16
# A Python call costs >= ~30 ns, so a real 10 ms sample needs <= ~330k calls. The cap only
# bounds a timer that reads ~0 (a fake clock, a broken device timer): 1M calls, not 1e10.
MAX_CALLS_PER_SAMPLE = 1 << 20
# Last-resort bound for a rule that never stops: 1M floats are 8 MB. Both shipped rules stop
# far earlier (Adaptive at max_samples = 10,000, Fixed at its count).
HARD_MAX_SAMPLES = 1_000_000
# No timer resolves less than ~1 ns; a per-call time under 1 fs is a timer that read ~0.
UNRESOLVED_S = 1e-15


def measure(
    fn: Callable[[], Any],
    device: Device | str | None = None,
    *,
    rule: StoppingRule | None = None,
    timing: TimingMode = "device",
    warmup_s: float = 0.025,
    warmup_calls: int = 3,
    min_sample_s: float | None = None,
    calls_per_sample: int | None = None,
    clock: Clock = time.perf_counter,
    on_sample: Callable[[int, float, float], None] | None = None,
) -> Measurement:
    """Time ``fn()`` on ``device`` and return a :class:`Measurement`.

    The protocol (METHOD.md §2), as pseudo-code::

        first_call_s = timed(fn())                     # stored apart: lazy init, autotune ...
        warm up in doubling groups for >= warmup_s and >= warmup_calls
        per_call = time of the last (largest, warmest) warm-up group / its size
        k = ceil(min_sample_s / per_call)               # one sample >= 10 ms CPU / 1 ms GPU
        repeat:
            timer.start(); fn() k times; t = timer.stop()    # stop() waits for the device
            samples.append(t / k)
        until rule.decide(samples, elapsed) names a reason

    A call slower than the rule's time-out cuts the warm-up short (at least one call,
    flagged ``short_warmup`` below 3) and still ends with one sample, flagged ``timed_out``.

    ``timing="device"`` uses the device's own clock where it has one (CUDA events);
    ``"e2e"`` is the host clock with a synchronize, what a caller waiting on results sees.
    ``clock`` is the host clock for the time budget; tests pass a fake one.
    ``on_sample(index, t_start, t_end)`` is told the host-clock span of each sample, so
    telemetry can be matched to samples.
    """
    from torchmark.devices import resolve

    dev = device if isinstance(device, Device) else resolve(device or "cpu")[0]
    rule_: StoppingRule = rule or Adaptive()
    timer = dev.timer(timing)
    min_sample_s = dev.min_sample_s if min_sample_s is None else min_sample_s

    timer.start()
    fn()
    first_call_s = timer.stop()

    n_warm, per_call, group = 0, 0.0, 1
    w0 = clock()
    while True:
        timer.start()
        for _ in range(group):
            fn()
        t = timer.stop()
        n_warm += group
        per_call = t / group
        spent = clock() - w0
        left = rule_.max_time_s - spent  # the warm-up never outlasts the rule's time-out
        if (n_warm >= warmup_calls and spent >= warmup_s) or left <= 0:
            break
        if per_call < UNRESOLVED_S:
            if group >= MAX_WARMUP_GROUP:
                break  # 65,536 calls the timer cannot see: nothing left to warm up
            group *= 2
            continue
        # Double, but no further than the warm-up still needs, nor past the time budget.
        need = max(warmup_calls - n_warm, math.ceil((warmup_s - spent) / per_call), 1)
        fits = int(left / per_call)
        if fits < 1:
            break
        group = min(group * 2, MAX_WARMUP_GROUP, need, fits)
    warmup_s_spent = clock() - w0

    if calls_per_sample is None:
        k = math.ceil(min_sample_s / per_call) if per_call >= UNRESOLVED_S else 1
        calls_per_sample = max(1, min(k, MAX_CALLS_PER_SAMPLE))
    k = calls_per_sample

    samples: list[float] = []
    over: tuple[float, float] | None = None  # the timer furthest past the host clock
    t_samples = clock()
    while True:
        s0 = clock()
        timer.start()
        for _ in range(k):
            fn()
        t = timer.stop()
        samples.append(t / k)
        s1 = clock()
        if t > s1 - s0 and (over is None or timer_excess(t, s1 - s0) > timer_excess(*over)):
            over = (t, s1 - s0)
        if on_sample is not None:
            on_sample(len(samples) - 1, s0, s1)
        reason = rule_.decide(samples, s1 - t_samples)
        if reason:
            break
        if len(samples) >= HARD_MAX_SAMPLES:
            reason = "max_samples"
            break

    return Measurement(
        samples_s=tuple(samples),
        calls_per_sample=k,
        first_call_s=first_call_s,
        warmup_calls=n_warm,
        warmup_s=warmup_s_spent,
        stop_reason=reason,
        rule=rule_.describe(),
        timing=timing if dev.is_accelerator else "e2e",
        timer_over_host=over,
    )


# The one-thread check's budget: a stalled case (more torch threads than free cores under
# other load) is timed again at one thread for at most this long, then its threads restored.
ONE_THREAD_BUDGET_S = 1.0


def one_thread_s(
    fn: Callable[[], object],
    device: Device,
    m: Measurement,
    threads: int,
    clock: Callable[[], float],
) -> float | None:
    """The median time of ``fn`` at one thread (3 to 25 calls after a warm one, within
    ``ONE_THREAD_BUDGET_S``), ``threads`` restored after; None where one thread could take
    longer than the budget allows (``threads`` x the median a call)."""
    if m.median * threads > ONE_THREAD_BUDGET_S / 4:
        return None
    device.set_threads(1)
    try:
        fn()  # the first call at one thread
        device.synchronize()
        times: list[float] = []
        end = clock() + ONE_THREAD_BUDGET_S
        while len(times) < 25 and (len(times) < 3 or clock() < end):
            t0 = clock()
            fn()
            device.synchronize()
            times.append(clock() - t0)
        return statistics.median(times)
    finally:
        device.set_threads(threads)
