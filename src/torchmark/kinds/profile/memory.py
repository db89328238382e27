"""Memory by what it holds (parameters, gradients, optimizer state, activations, inputs,
other) at the step's peak, from torch's memory profiler.

torch.profiler with ``profile_memory``, ``record_shapes`` and ``with_stack`` records every
allocation; its ``MemoryProfile`` follows each tensor through the autograd graph and the
optimizer and names its role. ``at_peak`` is the pure part: given that timeline (bytes per
role after each event), the instant with the most bytes live and what they were, so the
categories sum to the peak. The capture is a pass of its own, after the timed breakdown:
stack recording costs more per op than the breakdown's profile, and would inflate it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchmark.devices import Device

WARMUP = 1

PARAMETERS = "parameters"
GRADIENTS = "gradients"
OPTIMIZER = "optimizer state"
ACTIVATIONS = "activations"
INPUTS = "inputs"
OTHER = "other"
ORDER = (PARAMETERS, GRADIENTS, OPTIMIZER, ACTIVATIONS, INPUTS, OTHER)
# torch's roles (torch.profiler._memory_profiler.Category names; None: not known)
ROLES = {
    "PARAMETER": PARAMETERS,
    "GRADIENT": GRADIENTS,
    "OPTIMIZER_STATE": OPTIMIZER,
    "ACTIVATION": ACTIVATIONS,
    "INPUT": INPUTS,
}
OTHER_NOTE = (
    f"{OTHER}: temporaries, autograd's own buffers and tensors torch could not place "
    "(allocated before profiling, or by a library call it does not trace)"
)


@dataclass(frozen=True)
class MemoryAtPeak:
    peak_bytes: int
    at_peak: dict[str, int]  # category -> bytes live at the peak instant (sums to peak_bytes)
    largest: dict[str, int]  # category -> its own largest, at any instant

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "categories": [
                {"name": k, "bytes": self.at_peak[k], "largest_bytes": self.largest[k]}
                for k in ORDER
            ],
            "note": OTHER_NOTE,
        }


def at_peak(columns: Sequence[str | None], rows: Sequence[Sequence[int]]) -> MemoryAtPeak:
    """``rows[i][j]``: bytes of role ``columns[j]`` live after event ``i``."""
    if not rows:
        raise ValueError("no memory events")
    cats = [ROLES.get(c, OTHER) if c else OTHER for c in columns]

    def grouped(row: Sequence[int]) -> dict[str, int]:
        out = dict.fromkeys(ORDER, 0)
        for cat, b in zip(cats, row, strict=True):
            out[cat] += int(b)
        return out

    per_row = [grouped(r) for r in rows]
    peak = max(per_row, key=lambda g: sum(g.values()))
    largest = {k: max(g[k] for g in per_row) for k in ORDER}
    return MemoryAtPeak(sum(peak.values()), peak, largest)


def capture_memory(
    fn: Callable[[], object], device: Device, warmup: int = WARMUP
) -> dict[str, Any]:
    """One profiled step with memory recording, after warm-up; its memory at the peak.
    Never raises for the profiler's own faults (a private torch API): the reason is
    returned as ``{"error": ...}`` and said in the report."""
    from torchmark.kinds.profile.capture import record_one_step

    try:
        from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline
    except ImportError as e:
        return {"error": f"torch's memory profiler is not available here ({e})"}

    # the step ran warm just before (the breakdown's pass): one profiler warm-up step, then
    # one recorded (a resnet50 train step at b=2 took 13 s on this loaded 2-core machine);
    # a long step (``warmup`` 0) is recorded at once: only its memory is read, not its time
    try:
        prof = record_one_step(
            fn, device, warmup, record_shapes=True, profile_memory=True, with_stack=True
        )
        timeline = MemoryProfileTimeline(prof._memory_profile())
        _, rows = timeline._coalesce_timeline(str(device.torch_device))
    except Exception as e:  # a private API: its faults are reported, not raised
        return {"error": f"torch's memory profiler failed: {type(e).__name__}: {e}"}
    # _coalesce_timeline: column 0 unused, then one per category in _CATEGORY_TO_INDEX order
    columns: list[str | None] = [None] * (len(_CATEGORY_TO_INDEX) + 1)
    for cat, i in _CATEGORY_TO_INDEX.items():
        columns[i + 1] = cat.name if cat is not None else None
    if not rows:
        return {"error": f"torch's memory profiler saw no allocation on {device.name}"}
    return at_peak(columns, rows).as_dict()
