"""Training in a distributed run: the model wrapped in DistributedDataParallel.

Weak scaling: every rank trains its own batch of the case's size, so a case's items/s is
per rank and the run's total is world size x that. Outside a process group the model is
trained as it is (no DDP): `torchmark run` alone is the no-DDP row, `torchmark run
--nproc-per-node 1` the DDP-on-one-rank row (DDP's own overhead), and `--scaling 1,2,...`
runs them all in turn (launch/ladder.py).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torchmark.devices.base import Device


def world_size() -> int | None:
    """The process group's size, None outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return None


def data_parallel(module: nn.Module, device: Device) -> nn.Module:
    """``module`` in DDP inside a process group, else unchanged."""
    if world_size() is None or any(p.is_meta for p in module.parameters()):
        return module  # FLOPs are counted on a meta copy: DDP would sync it with peers
    from torch.nn.parallel import DistributedDataParallel

    global _last
    ids: Any = [device.torch_device] if device.kind == "cuda" else None
    _last = DistributedDataParallel(module, device_ids=ids)
    return _last


# The DDP module of the case being measured, until its rank reads its logging data: the
# case's own step function is gone by then (run_case drops it).
_last: nn.Module | None = None
NS = 1e-9


def take_logging_data() -> dict[str, Any] | None:
    """DDP's own timings of the last wrapped module, in seconds (None without one).

    DDP samples its timers on some iterations (every 100th after the first few) and
    averages them: these are the averages over the case's calls, warm-up included."""
    global _last
    module, _last = _last, None
    get = getattr(module, "_get_ddp_logging_data", None)
    if get is None:
        return None
    d = get()
    keys = {
        "forward_s": "avg_forward_compute_time",
        "backward_compute_s": "avg_backward_compute_time",
        "backward_comm_s": "avg_backward_comm_time",
        "overlap_s": "avg_backward_compute_comm_overlap_time",
    }
    out: dict[str, Any] = {k: float(d[v]) * NS for k, v in keys.items() if v in d}
    sizes = str(d.get("rebuilt_bucket_sizes") or d.get("bucket_sizes") or "")
    out["bucket_sizes_bytes"] = [int(x) for x in sizes.replace(",", " ").split() if x.isdigit()]
    return out


def explain(timings: dict[str, Any], step_s: float) -> dict[str, float] | None:
    """Exposed communication (comm - overlap, never below 0) and its share of the step."""
    if "backward_comm_s" not in timings or "overlap_s" not in timings or step_s <= 0:
        return None
    exposed = max(0.0, timings["backward_comm_s"] - timings["overlap_s"])
    return {"exposed_comm_s": exposed, "exposed_comm_share": exposed / step_s}


def efficiency(per_rank_n: float, single: float) -> float:
    """Weak-scaling efficiency: items/s per rank on N ranks over items/s on one."""
    if single <= 0:
        raise ValueError(f"the one-rank rate must be > 0, got {single}")
    return per_rank_n / single


__all__ = ["data_parallel", "efficiency", "explain", "take_logging_data", "world_size"]
