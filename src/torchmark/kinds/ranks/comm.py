"""DDP's backward-comm figure beside its buckets' all_reduce timed alone (launch/buckets.py):
the check, judged against the noise, and the sentence rank 0 and the scaling report print."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchmark import format as fmt
from torchmark.format import signed_pct
from torchmark.judge.comparison import PRACTICAL
from torchmark.stats.measurement import Measurement


@dataclass(frozen=True)
class CommCheck:
    """DDP's backward-comm window beside its buckets' all_reduce timed alone."""

    ddp_s: float  # DDP's avg_backward_comm_time: first bucket launched -> last one done
    alone_s: float  # median round of all_reduce over every bucket in turn, idle group
    alone_rel_iqr: float
    threshold: float  # the smallest relative difference called one (noise, at least 2 %)
    sizes_bytes: tuple[int, ...]
    dtype: str
    exposed_s: float | None

    @property
    def difference(self) -> float:
        return self.ddp_s / self.alone_s - 1


def comm_check(ddp: Mapping[str, Any], step_rel_iqr: float) -> CommCheck | None:
    """From a result's ``extra["ddp"]``; ``step_rel_iqr``: the step's noise, standing in for
    the noise of DDP's own figure (an average of sampled steps with no spread of its own)."""
    alone = ddp.get("alone") or {}
    m = Measurement(tuple(alone.get("samples_s") or ()))
    if "backward_comm_s" not in ddp or not m.n or not alone.get("sizes_bytes"):
        return None
    med, rel = m.median, m.rel_iqr
    if med <= 0:
        return None
    step = step_rel_iqr if np.isfinite(step_rel_iqr) else 0.0
    return CommCheck(
        ddp_s=float(ddp["backward_comm_s"]),
        alone_s=float(med),
        alone_rel_iqr=rel,
        threshold=max(PRACTICAL, float(np.hypot(rel, step))),
        sizes_bytes=tuple(int(b) for b in alone["sizes_bytes"]),
        dtype=str(alone.get("dtype") or "?"),
        exposed_s=ddp.get("exposed_comm_s"),
    )


def sizes_text(sizes: Sequence[int], most: int = 6) -> str:
    """'1.05 MB, 26.2 MB x3, 23.5 MB': runs of equal (as printed) sizes counted."""
    runs: list[list[Any]] = []
    for b in sizes:
        t = fmt.si(b, "B") if b >= 1000 else f"{b} B"
        if runs and runs[-1][0] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    out = [t if n == 1 else f"{t} x{n}" for t, n in runs[:most]]
    if len(runs) > most:
        out.append(f"... {len(runs) - most} more")
    return ", ".join(out)


def comm_check_text(c: CommCheck) -> str:
    """'DDP says backward comm X per step; all_reduce of its N buckets (...) timed alone:
    Y: <verdict>', the verdict judged against the noise."""
    n = len(c.sizes_bytes)
    head = (
        f"DDP says backward comm {fmt.duration(c.ddp_s)} per step; all_reduce of its "
        f"{fmt.plural(n, 'bucket')} ({sizes_text(c.sizes_bytes)}, {c.dtype}) timed alone: "
        f"{fmt.duration(c.alone_s)} (IQR {fmt.pct(100 * c.alone_rel_iqr, 2)})"
    )
    d, noise = c.difference, c.threshold
    within = f"±{fmt.pct(100 * noise, 2)}"
    if abs(d) <= noise:
        verdict = (
            f"they agree within {100 * PRACTICAL:g} %"
            if noise <= PRACTICAL
            else f"can't tell them apart ({signed_pct(d)} inside the {within} noise)"
        )
    elif d > 0:
        verdict = (
            f"DDP's figure is {fmt.duration(c.ddp_s - c.alone_s)} longer ({signed_pct(d)}, noise "
            f"{within}): its window runs from the first bucket's all_reduce "
            "to the last's end, so it also holds the waits for gradients still being computed"
        )
    else:
        verdict = (
            f"the all_reduce alone takes {fmt.duration(c.alone_s - c.ddp_s)} more than DDP's "
            f"window ({signed_pct(d)}, noise {within}): DDP reduced buckets "
            "concurrently, or its sampled timers (warm-up steps in) caught faster steps"
        )
    out = f"{head}: {verdict}"
    if c.exposed_s is not None and c.exposed_s > c.alone_s * (1 + noise):
        # the exposed tail is at most every bucket's all_reduce, when comm runs at full speed
        out += (
            f"; exposed comm {fmt.duration(c.exposed_s)} is more than all the buckets take "
            "alone: DDP counts more than communication as exposed (its work after the last "
            "bucket), or communication ran slower inside the step (sharing cores or links)"
        )
    elif c.exposed_s is not None:
        out += (
            f"; exposed comm {fmt.duration(c.exposed_s)} is within what all the buckets take alone"
        )
    return out
