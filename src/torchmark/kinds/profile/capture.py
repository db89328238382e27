"""Run a prepared step under ``torch.profiler`` with a schedule: wait, warm-up, active steps.

Never inside a timed measurement: the profiler adds its own cost to every op (measured and
stated by the caller against an unprofiled median of the same case).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchmark.devices import Device
from torchmark.devices.base import MemoryStats
from torchmark.errors import InputError, TorchmarkError
from torchmark.kinds.profile import categories as c

WAIT, WARMUP = 1, 2  # steps skipped, then steps profiled and thrown away (allocator, caches)
MAX_ACTIVE = 20  # active steps allowed: bounds the trace before it is recorded
# Events kept from one trace: resnet50 train records ~3,000 per step on the CPU, so 20 steps
# stay far below; past this the trace (and the JSON saved with --trace) is too large to use.
MAX_EVENTS = 1_000_000
# Wall time the active steps may take, from the profiled warm-up step's time. gpt2 decode b=1
# (128 tokens, ~30,000 ops a step) took 5.2 s a step unprofiled on this 2-core CPU and did
# not finish within 45 s on an H100 at 5 active steps: a long step gets fewer, stated.
ACTIVE_BUDGET_S = 30.0
# An unprofiled step longer than this skips the wait step and keeps one warm-up step: the
# unprofiled measurement just ran it warm, and one profiled step absorbs the profiler's own
# start-up (CUPTI's first step); two more 5 s steps would add 10 s and tell nothing new.
LONG_STEP_S = 1.0
# Events the active steps may record together. Reading a trace costs ~140 µs an event here
# (300,000 events of a 6,000-op CPU loop: 6 s for the profiler to stop, 21 s to export and
# load the JSON, 13 s for the breakdown), so this keeps it near 30 s; a step that records
# more gets one active step.
EVENTS_BUDGET = 200_000


class ProfileError(TorchmarkError):
    """A profile that could not be taken or read: nothing to break down."""


@dataclass
class Capture:
    trace: dict[str, Any]  # the Chrome trace torch.profiler exported
    breakdown: c.Breakdown
    flops: dict[str, float]  # per step, by op name (torch's with_flops counter)
    flops_by_call: dict[str, float]  # per call, by categories.call_key (name, input shapes)
    device_peak_bytes: int | None
    host_rss_peak_bytes: int | None
    schedule: dict[str, Any] = field(default_factory=dict)  # wait, warmup, active, why reduced
    step_memory: list[MemoryStats] = field(default_factory=list)  # per active step, in order


def check_active(active: int) -> None:
    if not 1 <= active <= MAX_ACTIVE:
        raise InputError(f"--steps {active}: give 1 to {MAX_ACTIVE} active steps")


def lead_steps(step_s: float | None) -> tuple[int, int]:
    """(wait, warm-up) steps before the active ones, from the unprofiled step time."""
    if step_s is not None and step_s > LONG_STEP_S:
        return 0, 1
    return WAIT, WARMUP


def active_steps(profiled_step_s: float, requested: int, budget_s: float) -> int:
    """Active steps that fit ``budget_s`` at the profiled warm-up step's time; at least one
    (a step longer than the budget is still profiled once, and said to be)."""
    if profiled_step_s <= 0:
        return requested
    return max(1, min(requested, int(budget_s // profiled_step_s)))


def steps_for_events(step_events: int | None, requested: int, events_budget: int) -> int:
    """Active steps whose events fit ``events_budget``, at least one."""
    if not step_events:
        return requested
    return max(1, min(requested, events_budget // step_events))


def reduced_note(sched: dict[str, Any], budget_s: float) -> str | None:
    if sched["active"] >= sched["requested"]:
        return None
    why = []
    if sched.get("by_time", sched["requested"]) < sched["requested"]:
        why.append(
            f"a profiled step took {sched['warm_step_s']:.3g} s and the active steps are "
            f"kept within {budget_s:.0f} s"
        )
    if sched.get("by_events", sched["requested"]) < sched["requested"]:
        why.append(
            f"a step records {sched['step_events']:,} events and the active steps are kept "
            f"within {sched['events_budget']:,} (reading a trace costs time per event)"
        )
    return (
        f"{sched['active']} active step(s) instead of {sched['requested']}: "
        + "; ".join(why or ["the step is long"])
        + " (ask for fewer --steps to silence this)"
    )


def capture(
    fn: Callable[[], object],
    device: Device,
    active: int = 5,
    max_events: int = MAX_EVENTS,
    *,
    step_s: float | None = None,
    budget_s: float = ACTIVE_BUDGET_S,
    events_budget: int = EVENTS_BUDGET,
    clock: Callable[[], float] = time.perf_counter,
    say: Callable[[str], None] | None = None,
) -> Capture:
    """Profile up to ``active`` steps of ``fn`` (each ended by a device sync, so a step's GPU
    work lies inside its window). ``step_s``: the unprofiled step time, which sets the lead
    steps; the last warm-up step's time on ``clock`` sets how many active steps fit
    ``budget_s``. A first pass of one step counts its FLOPs and its events, which bound the
    active steps' events by ``events_budget``: FLOPs come from torch's ``key_averages``,
    which costs ~140 µs an event to build (41 s for 300,000 here), so one step is enough.
    ``say``: progress lines, for steps long enough to leave the user waiting."""
    import torch.profiler as tp

    check_active(active)
    wait, warmup = lead_steps(step_s)
    lead = wait + warmup
    talk = say if say is not None and step_s is not None and step_s > LONG_STEP_S else None
    flops, by_call, step_events = count_flops(fn, device)
    by_events = steps_for_events(step_events, active, events_budget)
    plan: dict[str, Any] = {
        "wait": wait,
        "warmup": warmup,
        "active": by_events,
        "requested": active,
        "by_events": by_events,
        "step_events": step_events,
        "events_budget": events_budget,
    }
    if talk:
        talk(f"profiling: one step counted (FLOPs, {step_events or 'unknown'} events)")

    def schedule(step: int) -> tp.ProfilerAction:  # asked as step ``step`` (from 0) starts
        k = step - lead
        if step < wait:
            return tp.ProfilerAction.NONE
        if k < 0:
            return tp.ProfilerAction.WARMUP
        if k < plan["active"] - 1:
            return tp.ProfilerAction.RECORD
        return (
            tp.ProfilerAction.RECORD_AND_SAVE if k == plan["active"] - 1 else tp.ProfilerAction.NONE
        )

    activities = [tp.ProfilerActivity.CPU, *device.profiler_activities()]
    device.reset_peak_memory()
    overall = device.memory_stats()
    step_memory: list[MemoryStats] = []
    with (
        step_failures_said(device),
        kineto_chatter_filtered(),
        tp.profile(activities=activities, schedule=schedule, record_shapes=True) as prof,
    ):
        n = 0
        while n < lead + plan["active"]:
            device.reset_peak_memory()
            t0 = clock()
            fn()
            device.synchronize()
            took = clock() - t0
            stats = device.memory_stats()
            if n >= lead and stats is not None:
                step_memory.append(stats)
            overall = _larger(overall, stats)
            if n == lead - 1:
                plan["warm_step_s"] = took
                plan["by_time"] = active_steps(took, active, budget_s)
                plan["active"] = min(plan["by_time"], by_events)
                if talk:
                    talk(
                        f"profiling: a profiled step takes {took:.3g} s; recording "
                        f"{plan['active']} active step(s)"
                    )
            elif talk and n >= lead:
                talk(f"profiling: active step {n - lead + 1}/{plan['active']} took {took:.3g} s")
            n += 1
            prof.step()
    counted = _event_count(prof)
    if counted is not None and counted > max_events:
        raise ProfileError(
            f"the profile recorded {counted:,} events, above the cap of {max_events:,}; "
            "profile fewer --steps"
        )
    if talk:
        talk(f"profiling: reading the trace ({counted or 'an unknown number of'} events)")
    trace = _export(prof)
    events = trace.get("traceEvents") or []
    if len(events) > max_events:
        raise ProfileError(
            f"the trace has {len(events):,} events, above the cap of {max_events:,}; "
            "profile fewer --steps"
        )
    gpu = any(e.get("cat") in c.GPU_CATS for e in events)
    bd = c.gpu_breakdown(events) if gpu else c.cpu_breakdown(events)
    if bd.steps == 0 or bd.wall_us <= 0:
        raise ProfileError(
            "the profile captured no steps (no ProfilerStep events in the trace); "
            "run again, or report it with `torchmark env`"
        )
    peak = overall.allocated_bytes if overall is not None else device.peak_memory_bytes()
    return Capture(trace, bd, flops, by_call, peak, _rss_peak(), plan, step_memory)


def count_flops(
    fn: Callable[[], object], device: Device
) -> tuple[dict[str, float], dict[str, float], int | None]:
    """One step profiled with torch's FLOP counter: FLOPs by op name (the step's), by call
    (``categories.call_key``: each call's), and the events the step recorded."""
    with step_failures_said(device):
        prof = record_one_step(fn, device, record_shapes=True, with_flops=True)
    events = _event_count(prof)
    # one grouping pass (by name and shapes) gives both: a name's FLOPs are its calls' sum
    flops: dict[str, float] = {}
    by_call = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if getattr(e, "flops", 0) and e.flops > 0 and e.count:
            flops[e.key] = flops.get(e.key, 0) + e.flops
            by_call[c.call_key(e.key, e.input_shapes)] = e.flops / e.count
    return flops, by_call, events


def record_one_step(
    fn: Callable[[], object], device: Device, warmup: int = 0, **options: Any
) -> Any:
    """``warmup`` profiler warm-up steps of ``fn`` (each ended by a device sync), then one
    recorded; the stopped profiler. ``options``: ``torch.profiler.profile``'s (what to
    record). torch's own ``schedule()`` warns at warm-up 0; this one does not."""
    import torch.profiler as tp

    def sched(step: int) -> tp.ProfilerAction:
        if step < warmup:
            return tp.ProfilerAction.WARMUP
        return tp.ProfilerAction.RECORD_AND_SAVE if step == warmup else tp.ProfilerAction.NONE

    activities = [tp.ProfilerActivity.CPU, *device.profiler_activities()]
    with (
        kineto_chatter_filtered(),
        tp.profile(activities=activities, schedule=sched, **options) as prof,
    ):
        for _ in range(warmup + 1):
            fn()
            device.synchronize()
            prof.step()
    return prof


def _larger(a: MemoryStats | None, b: MemoryStats | None) -> MemoryStats | None:
    """The element-wise larger of two peaks (the whole capture's, over per-step resets)."""
    if a is None or b is None:
        return a or b
    reserved = [r for r in (a.reserved_bytes, b.reserved_bytes) if r is not None]
    return MemoryStats(max(a.allocated_bytes, b.allocated_bytes), max(reserved, default=None))


def _event_count(prof: Any) -> int | None:
    """Events the profiler holds, counted before the (slow) JSON export; None where this
    torch keeps them elsewhere."""
    try:
        return len(prof.profiler.kineto_results.events())
    except (AttributeError, TypeError):
        return None


# Kineto (torch 2.13) writes a "USDT:... profiler_start/stop" line to the process's stderr
# (fd 2, from C++) around every profile: chatter, not a message for the user. With
# profile_memory the CPU allocator warns of every block allocated before profiling started
# (the model's weights): the memory report says so once, in words (kinds/profile/memory.py).
KINETO_CHATTER = re.compile(
    r"^USDT:.*profiler_(start|stop)\s*$"
    r"|^\[W\d+ [\d:.]+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated "
    r"before the profiling started"
)


@contextlib.contextmanager
def step_failures_said(device: Device) -> Iterator[None]:
    """A step that fails under the profiler becomes one ProfileError line (out of memory
    said as such); torchmark's own errors pass through."""
    try:
        yield
    except TorchmarkError:
        raise
    except Exception as e:
        if device.is_out_of_memory(e):
            raise ProfileError(f"out of memory while profiling: {e}") from None
        raise ProfileError(f"the step failed under the profiler: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def kineto_chatter_filtered() -> Iterator[None]:
    """fd 2 goes to a temporary file while the profiler runs; every line but Kineto's
    start/stop chatter is written back to stderr afterwards (nothing else is hidden)."""
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (an embedded interpreter): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stderr.flush()
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [
                line
                for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                if not KINETO_CHATTER.match(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))


def _export(prof: Any) -> dict[str, Any]:
    fd, name = tempfile.mkstemp(suffix=".json", prefix="torchmark-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        with open(name, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ProfileError(f"cannot read the profiler's trace: {e}") from None
    finally:
        Path(name).unlink(missing_ok=True)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _rss_peak() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    # ru_maxrss is in KiB on Linux (bytes on macOS): the process's peak, not the step's
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if os.uname().sysname == "Darwin" else int(peak) * 1024


def save_trace(trace: dict[str, Any], path: Path) -> Path:
    """The raw Chrome/Perfetto trace, gzipped (Perfetto and chrome://tracing open .json.gz)."""
    if path.suffix != ".gz":
        path = path.with_name(path.name + ".gz")
    try:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(trace, f)
    except OSError as e:
        raise InputError(f"cannot write --trace {path}: {e.strerror}") from None
    return path
