"""The straggler rule, one for every report: the scaling ladder names the rank, the
verdict of a distributed result warns about it (judge/validity.py), and the result
carries the ``straggler`` flag (kinds/ranks/rank.py). Torch-free: report commands import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchmark import format as fmt
from torchmark.judge.comparison import PRACTICAL
from torchmark.results import Result
from torchmark.stats.measurement import Measurement

FLAG = "straggler"


@dataclass(frozen=True)
class RankTimes:
    rank: int
    p50_s: float
    p95_s: float
    rel_iqr: float
    compute_s: float | None  # DDP's forward + backward compute on this rank


@dataclass(frozen=True)
class Straggler:
    rank: int
    p50_s: float
    others_s: float  # median of the other ranks' step p50
    noise: float  # the relative difference it had to exceed

    @property
    def excess(self) -> float:
        return self.p50_s / self.others_s - 1

    def text(self) -> str:
        """'rank 1: step p50 ... (+22 %, noise 4 %)', as the scaling ladder prints it."""
        return (
            f"rank {self.rank}: step p50 {fmt.duration(self.p50_s)} vs "
            f"{fmt.duration(self.others_s)} on the others (+{fmt.pct(100 * self.excess)}"
            f", noise {fmt.pct(100 * self.noise)})"
        )

    def reason(self) -> str:
        """The verdict's words."""
        return (
            f"rank {self.rank} straggles: step p50 {fmt.duration(self.p50_s)} vs "
            f"{fmt.duration(self.others_s)} on the others (+{fmt.pct(100 * self.excess)}, "
            f"beyond the {fmt.pct(100 * self.noise)} noise)"
        )


def rank_times(result: Result) -> tuple[RankTimes, ...]:
    """Each rank's own step times (every rank's raw samples, gathered on rank 0)."""
    per = result.extra.get("per_rank") or [{"rank": 0, "samples_s": result.samples_s}]
    out = []
    for r in per:
        m = Measurement(tuple(r.get("samples_s") or ()))
        if not m.n:
            continue
        p50, p95 = m.median, m.quantile(0.95)
        ddp = r.get("ddp") or {}
        compute = (  # printed, not judged: see find()
            ddp["forward_s"] + ddp["backward_compute_s"]
            if "forward_s" in ddp and "backward_compute_s" in ddp
            else None
        )
        out.append(RankTimes(int(r["rank"]), p50, p95, m.rel_iqr if p50 else 0, compute))
    return tuple(out)


def find(ranks: Sequence[RankTimes]) -> Straggler | None:
    """The slowest rank, when its step p50 exceeds the median of the others' by more than
    the noise (the largest relative IQR of the ranks' step times, at least 2 %).

    In lockstep a rank that waits for a straggler waits inside the gradient all_reduce, so
    a mild straggler shows little here; DDP's per-rank compute timers would show it, but
    they average the first ten iterations (warm-up) with every 100th, and on this 2-core
    machine they put rank 0 at 4x rank 1 on a short run with equal step times: they are
    printed per rank, not judged."""
    if len(ranks) < 2:
        return None
    slowest = max(ranks, key=lambda r: r.p50_s)
    others = float(np.median([r.p50_s for r in ranks if r is not slowest]))
    noise = max(PRACTICAL, max(r.rel_iqr for r in ranks))
    if others <= 0 or slowest.p50_s <= others * (1 + noise):
        return None
    return Straggler(slowest.rank, float(slowest.p50_s), others, float(noise))


def of_result(result: Result) -> Straggler | None:
    """The straggler among a distributed result's ranks; None for one process."""
    if not result.ok or len(result.extra.get("per_rank") or []) < 2:
        return None
    return find(rank_times(result))


__all__ = ["FLAG", "PRACTICAL", "RankTimes", "Straggler", "find", "of_result", "rank_times"]
