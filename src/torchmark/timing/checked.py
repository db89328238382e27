"""``torchmark.measure``: the measuring loop, with the machine's load read as ``run`` reads it.

The CLI judges every result against what the machine did meanwhile (``telemetry``); a
caller of the public API got the loop alone, and under other processes' load read medians
730x and 9x too slow with no flag (the CLI flagged 16 of 16 such cases in the same
sitting). Here the same checks run around the loop: other processes' CPU time over the
measurement, and on a CPU with more torch threads than cores left free, the samples'
clusters and the one-thread check (``timing.loop.one_thread_s``), as ``run`` does. What is
found comes back on the Measurement: ``flags`` (``competing_load``, ``stalled``) and
``notes`` in words, also in its repr.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from torchmark.devices.base import Device
from torchmark.stats.measurement import Measurement
from torchmark.telemetry.host import OtherLoad
from torchmark.timing import loop


def measure(fn: Callable[[], Any], device: Device | str | None = None, **kw: Any) -> Measurement:
    """Time ``fn()`` on ``device`` (``timing.loop.measure``'s protocol and options) and
    flag what competing load did to it: ``competing_load`` when other processes used half
    a core or more (a GPU: all but one and a half of the host's cores), ``stalled`` when
    the time is the scheduler's (``Measurement.notes`` say why and what to do)."""
    from torchmark.devices import resolve

    dev = device if isinstance(device, Device) else resolve(device or "cpu")[0]
    with OtherLoad() as load:
        m = loop.measure(fn, dev, **kw)
    return checked(m, fn, dev, load.facts(), kw.get("clock", time.perf_counter))


def checked(
    m: Measurement,
    fn: Callable[[], Any],
    device: Device,
    load: dict[str, Any],
    clock: Callable[[], float],
) -> Measurement:
    """``m`` with the load's flags and words, as ``telemetry.verdict`` would judge it."""
    from torchmark.judge.load import competing
    from torchmark.judge.validity import (
        THREAD_STALL_FACTOR,
        _dur,
        _load,
        clusters,
        load_words,
        oversubscribed,
    )

    facts = {
        **load,
        "torch_threads": torch.get_num_threads(),
        "accelerator": device.is_accelerator,
    }
    if not competing(facts, device.is_accelerator):
        return m
    flags, notes = ["competing_load"], [f"{load_words(facts)} during the measurement"]
    threads = oversubscribed(facts)  # the verdict's own test: more threads than free cores
    if threads is not None:
        free = _load(facts)[1]
        fix = f"measure with torch.set_num_threads({free}) (the free cores) or on a quiet machine"
        found = clusters(m.kept)
        one = None if found else loop.one_thread_s(fn, device, m, threads, clock)
        if found:
            fast, slow, share = found
            flags.append("stalled")
            notes.append(
                f"samples split into two clusters, {_dur(fast)} and {_dur(slow)} ({share:.0%} "
                f"slow): the scheduler's time, not the hardware; {fix}"
            )
        elif one and m.median >= THREAD_STALL_FACTOR * one:
            flags.append("stalled")
            notes.append(
                f"{_dur(m.median)} a call with {threads} threads, {m.median / one:.0f}x the "
                f"{_dur(one)} it took with one thread right after: {threads} threads waiting "
                f"for time slices, not the hardware; {fix}"
            )
    return dataclasses.replace(m, extra_flags=tuple(flags), notes=tuple(notes))
