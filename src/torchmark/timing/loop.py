"""The measuring loop: warm-up, calls grouped into samples, a stopping rule."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from torchmark.devices.base import Device, TimingMode
from torchmark.timing.stats import Measurement
from torchmark.timing.stopping import Adaptive, StoppingRule

Clock = Callable[[], float]


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
        warm up for >= warmup_s and >= warmup_calls     # estimates the cost of one call
        k = ceil(min_sample_s / per_call)               # one sample >= 10 ms CPU / 1 ms GPU
        repeat:
            timer.start(); fn() k times; t = timer.stop()    # stop() waits for the device
            samples.append(t / k)
        until rule.decide(samples, elapsed) names a reason

    ``timing="device"`` uses the device's own clock where it has one (CUDA events);
    ``"e2e"`` is the host clock with a synchronize, what a caller waiting on results sees.
    ``clock`` is the host clock for the time budget; tests pass a fake one.
    ``on_sample(index, t_start, t_end)`` is told the host-clock span of each sample, so
    telemetry can be matched to samples.
    """
    from torchmark.devices import resolve

    dev = device if isinstance(device, Device) else resolve(device or "cpu")[0]
    rule = rule or Adaptive()
    timer = dev.timer(timing)
    min_sample_s = dev.min_sample_s if min_sample_s is None else min_sample_s

    t_begin = clock()
    timer.start()
    fn()
    first_call_s = timer.stop()

    # Warm-up, timed in growing groups so a fast op does not spend the budget on timer calls.
    n_warm, warm_time, group = 0, 0.0, 1
    w0 = clock()
    while n_warm < warmup_calls or clock() - w0 < warmup_s:
        timer.start()
        for _ in range(group):
            fn()
        warm_time += timer.stop()
        n_warm += group
        group = min(group * 2, 1 << 16)
    per_call = warm_time / max(n_warm, 1)

    if calls_per_sample is None:
        calls_per_sample = max(1, math.ceil(min_sample_s / per_call)) if per_call > 0 else 1
    k = calls_per_sample

    samples: list[float] = []
    t_samples = clock()
    while True:
        s0 = clock()
        timer.start()
        for _ in range(k):
            fn()
        t = timer.stop()
        samples.append(t / k)
        if on_sample is not None:
            on_sample(len(samples) - 1, s0, clock())
        reason = rule.decide(samples, clock() - t_samples)
        if reason:
            break

    return Measurement(
        samples_s=tuple(samples),
        calls_per_sample=k,
        first_call_s=first_call_s,
        warmup_calls=n_warm,
        warmup_s=t_samples - t_begin,
        stop_reason=reason,
        rule=rule.describe(),
        timing=timing if dev.is_accelerator else "e2e",
    )
