"""What every ceiling measurement shares: stopping rules, buffer sizes, the best sample."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import torch

from torchmark.devices.base import Device, TimingMode
from torchmark.timing import Adaptive, Measurement, StoppingRule, measure

MiB = 2**20
TILE = 2**20  # elements of the random block random() repeats

# A ceiling is the best sample (METHOD.md §2.7), so it needs enough samples for one to land
# in a quiet moment, not a pinned median. With 5 samples in 0.6 s, a 2-core machine under
# competing load gave an fp32 matmul ceiling 27 % below the median of the same matmul timed
# a minute later; 8 samples over up to 1 s per kernel cost ~4 s more in quick mode.
# Never "out of reach": a noisy kernel keeps measuring to its time-out, for the best sample.
QUICK_RULE = cast(
    StoppingRule, Adaptive(min_samples=8, min_time_s=0.1, target=0.02, max_time_s=1.0, reach=0)
)
FULL_RULE = cast(
    StoppingRule, Adaptive(min_samples=10, min_time_s=0.3, target=0.01, max_time_s=2.0, reach=0)
)


def rule(quick: bool) -> StoppingRule:
    """The ceiling rule, never "out of reach" whatever rule is set here: a ceiling is the best
    sample, and a noisy kernel's best comes from measuring to its time-out."""
    chosen = QUICK_RULE if quick else FULL_RULE
    return dataclasses.replace(chosen, reach=0) if isinstance(chosen, Adaptive) else chosen


def time_best(
    fn: Callable[[], Any], device: Device, quick: bool, timing: TimingMode = "device"
) -> Measurement:
    """Time ``fn`` with the ceiling rule; callers read ``.min`` (best) or ``.median``."""
    return measure(fn, device, rule=rule(quick), timing=timing)


def random(n: int, device: Device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random inputs (never zeros/ones/empty: untouched pages read as zero pages).

    One random MiB-sized block tiled over the buffer: torch.rand is single-threaded on the
    CPU, 0.28 s CPU per 256 MiB buffer against 0.13 s tiled (page faults are most of that),
    and a streaming kernel's speed does not depend on whether the values repeat.
    """
    block = min(n, TILE)
    tile = torch.rand(block, dtype=dtype, device=device.torch_device)
    return tile.repeat(-(-n // block))[:n]
