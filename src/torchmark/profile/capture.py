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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchmark.devices import Device
from torchmark.errors import InputError, TorchmarkError
from torchmark.profile import categories as c

WAIT, WARMUP = 1, 2  # steps skipped, then steps profiled and thrown away (allocator, caches)
MAX_ACTIVE = 20  # active steps allowed: bounds the trace before it is recorded
# Events kept from one trace: resnet50 train records ~3,000 per step on the CPU, so 20 steps
# stay far below; past this the trace (and the JSON saved with --trace) is too large to use.
MAX_EVENTS = 1_000_000


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


def check_active(active: int) -> None:
    if not 1 <= active <= MAX_ACTIVE:
        raise InputError(f"--steps {active}: give 1 to {MAX_ACTIVE} active steps")


def capture(
    fn: Callable[[], object], device: Device, active: int = 5, max_events: int = MAX_EVENTS
) -> Capture:
    """Profile ``active`` steps of ``fn`` (each ended by a device sync, so a step's GPU work
    lies inside its window)."""
    import torch.profiler as tp

    check_active(active)
    sched = tp.schedule(wait=WAIT, warmup=WARMUP, active=active, repeat=1)
    activities = [tp.ProfilerActivity.CPU, *device.profiler_activities()]
    device.reset_peak_memory()
    try:
        with (
            kineto_chatter_filtered(),
            tp.profile(
                activities=activities, schedule=sched, record_shapes=True, with_flops=True
            ) as prof,
        ):
            for _ in range(WAIT + WARMUP + active):
                fn()
                device.synchronize()
                prof.step()
    except TorchmarkError:
        raise
    except Exception as e:
        if device.is_out_of_memory(e):
            raise ProfileError(f"out of memory while profiling: {e}") from None
        raise ProfileError(f"the step failed under the profiler: {type(e).__name__}: {e}") from e
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
    flops = {
        e.key: e.flops / bd.steps
        for e in prof.key_averages()
        if getattr(e, "flops", 0) and e.flops > 0
    }
    by_call = {
        c.call_key(e.key, e.input_shapes): e.flops / e.count
        for e in prof.key_averages(group_by_input_shape=True)
        if getattr(e, "flops", 0) and e.flops > 0 and e.count
    }
    return Capture(trace, bd, flops, by_call, device.peak_memory_bytes(), _rss_peak())


# Kineto (torch 2.13) writes a "USDT:... profiler_start/stop" line to the process's stderr
# (fd 2, from C++) around every profile: chatter, not a message for the user. With
# profile_memory the CPU allocator warns of every block allocated before profiling started
# (the model's weights): the memory report says so once, in words (profile/memory.py).
KINETO_CHATTER = re.compile(
    r"^USDT:.*profiler_(start|stop)\s*$"
    r"|^\[W\d+ [\d:.]+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated "
    r"before the profiling started"
)


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
