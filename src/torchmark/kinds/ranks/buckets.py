"""all_reduce timed alone at the model's own DDP bucket sizes, after a case is measured.

DDP's ``avg_backward_comm_time`` is a window (first bucket's all_reduce launched -> last
one done) that also holds the waits for gradients still being computed; the same buckets
reduced back to back on an idle process group say what the communication alone costs.
Every rank calls this with rank 0's sizes (broadcast) and the same stopping decisions
(rank 0's clock), so no rank waits in a collective the others never call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

# Rounds of the whole bucket list: at least MIN_ROUNDS for a noise estimate, then until
# BUDGET_S has passed or MAX_ROUNDS. GPT-2's 500 MB of fp32 gradients take ~1 s a round
# over gloo on 2 shared cores; resnet50's 100 MB on NCCL a few ms.
MIN_ROUNDS, MAX_ROUNDS, BUDGET_S = 5, 20, 2.0


def bucket_sizes(timings: dict[str, Any] | None) -> tuple[list[int], str | None]:
    """Rank 0's bucket sizes and gradient dtype, the same on every rank afterwards."""
    t = timings or {}
    mine: list[Any] = [(list(t.get("bucket_sizes_bytes") or []), t.get("grad_dtype"))]
    dist.broadcast_object_list(mine, src=0)
    sizes, name = mine[0]
    return sizes, name


def time_alone(
    sizes: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
    clock: Callable[[], float],
    sync: Callable[[], None],
) -> list[float]:
    """Seconds per round of all_reduce over every bucket in turn, each the slowest rank's.

    ``clock`` returns the same value on every rank (a collective itself); ``sync`` waits
    for the device (NCCL returns before the reduction is done)."""
    size = torch.empty((), dtype=dtype).element_size()
    # zeros: a sum of zeros stays finite over any number of rounds
    buckets = [torch.zeros(max(1, -(-b // size)), dtype=dtype, device=device) for b in sizes]
    slowest = torch.zeros(1, dtype=torch.float64, device=device)

    def one_round() -> float:
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        for b in buckets:
            dist.all_reduce(b)
        sync()
        slowest.fill_(time.perf_counter() - t0)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest.item())

    one_round()  # warm-up: the first all_reduce of a size sets up the backend's buffers
    rounds: list[float] = []
    start = clock()
    while len(rounds) < MAX_ROUNDS and (len(rounds) < MIN_ROUNDS or clock() - start < BUDGET_S):
        rounds.append(one_round())
    return rounds


def check(
    timings: dict[str, Any] | None,
    device: torch.device,
    clock: Callable[[], float],
    sync: Callable[[], None],
) -> dict[str, Any] | None:
    """What a rank records: the sizes, dtype and rounds (None when rank 0 has no DDP
    buckets, e.g. a collectives case or a skipped one). Every rank must call it."""
    sizes, name = bucket_sizes(timings)
    dtype = getattr(torch, name or "", None)
    if not sizes or not isinstance(dtype, torch.dtype):
        return None
    rounds = time_alone(sizes, dtype, device, clock, sync)
    return {"sizes_bytes": sizes, "dtype": name, "samples_s": rounds}


__all__ = ["BUDGET_S", "MAX_ROUNDS", "MIN_ROUNDS", "bucket_sizes", "check", "time_alone"]
