"""How a result was run: alone, under DDP/FSDP over N ranks, DataParallel over N GPUs, or
as N ranks of collectives; and why two results of one case run in different worlds are not
like for like. Pure rules on a result's fields (torch-free): the comparison, the ranks' run
and the scaling report share them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchmark.results import Result


def is_training(r: Result) -> bool:
    return "optimizer" in r.extra


def world_label(info: Mapping[str, Any]) -> str:
    """'DDP x2' (or 'FSDP x2') for a training run over 2 ranks, '2 ranks' for collectives."""
    n, s = info.get("world_size"), info.get("strategy")
    return f"{s.upper()} x{n}" if s else f"{n} ranks"


def result_world(r: Result) -> str | None:
    """How a result was run: 'no DDP' (training alone), 'DDP x2', 'FSDP x2', 'DP x2'
    (DataParallel over 2 GPUs), '2 ranks'; None for a case outside any process group that
    trains nothing."""
    s = r.extra.get("strategy")
    if s == "dp":
        return f"DP x{r.extra.get('gpus')}"
    n = r.extra.get("world_size")
    if n is None:
        return "no DDP" if is_training(r) else None
    return f"{(s or 'ddp').upper()} x{n}" if is_training(r) else f"{n} ranks"


def rung_size(label: str) -> int:
    """'DDP x2' -> 2; 'no DDP' -> 1."""
    head, _, n = label.rpartition(" x")
    return int(n) if head and n.isdigit() else 1


def world_difference(a: Result, b: Result) -> str | None:
    """Why A and B of one case are not like for like: they ran at different world sizes.
    Said beside every comparison of them (``compare``), never a silent match."""
    wa, wb = result_world(a), result_world(b)
    if wa == wb or (wa is None and wb is None):
        return None
    sides = f"A ran {wa or 'on one process'}, B {wb or 'on one process'}"
    if is_training(a) or is_training(b):
        na, nb = rung_size(wa or ""), rung_size(wb or "")
        return (
            f"{sides}: weak scaling, so the speed is per rank (B's total is {nb}x its per-rank "
            f"rate, A's {na}x); speed below 1 is the scaling loss"
        )
    return f"{sides}: the times are of different collectives"
