"""Training in a distributed run: the model wrapped in DistributedDataParallel (or FSDP).

Weak scaling: every rank trains its own batch of the case's size, so a case's items/s is
per rank and the run's total is world size x that. Outside a process group the model is
trained as it is (no DDP): `torchmark run` alone is the no-DDP row, `torchmark run
--nproc-per-node 1` the DDP-on-one-rank row (DDP's own overhead), and `--scaling 1,2,...`
runs them all in turn (launch/ladder.py).

Strategies (``using``): "ddp" (the default), "fsdp" (``fully_shard``, FSDP2: every block of
a ModuleList sharded, then the root), and "dp" (``nn.DataParallel`` over N GPUs in one
process, CUDA only: the ladder's DP rows).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped

STRATEGIES = ("ddp", "fsdp", "dp")
# The strategy of the run in this process and, for "dp", its GPU count (``using``).
_strategy: tuple[str, int] = ("ddp", 1)


@contextlib.contextmanager
def using(name: str, gpus: int = 1) -> Iterator[None]:
    """Train cases in this block under ``name``."""
    global _strategy
    old, _strategy = _strategy, (name, gpus)
    try:
        yield
    finally:
        _strategy = old


def describe() -> dict[str, Any]:
    """What a training result records of its strategy ({} for a plain run)."""
    name, gpus = _strategy
    if name == "dp":
        return {"strategy": "dp", "gpus": gpus}
    return {"strategy": name} if world_size() is not None else {}


def world_size() -> int | None:
    """The process group's size, None outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return None


def data_parallel(module: nn.Module, device: Device) -> nn.Module:
    """``module`` in DDP (or the strategy ``using`` chose) inside a process group, in
    DataParallel under "dp", else unchanged. A strategy that cannot run here raises
    CaseSkipped with the reason."""
    if any(p.is_meta for p in module.parameters()):
        return module  # FLOPs are counted on a meta copy: DDP would sync it with peers
    name, gpus = _strategy
    if name == "dp":
        return _data_parallel(module, device, gpus)
    if world_size() is None:
        return module
    if name == "fsdp":
        return _fully_shard(module, device)
    from torch.nn.parallel import DistributedDataParallel

    global _last
    ids: Any = [device.torch_device] if device.kind == "cuda" else None
    _last = DistributedDataParallel(module, device_ids=ids)
    return _last


def _data_parallel(module: nn.Module, device: Device, gpus: int) -> nn.Module:
    if device.kind != "cuda":
        raise CaseSkipped(
            f"nn.DataParallel splits a batch over CUDA GPUs; {device.name} is not one"
        )
    have = torch.cuda.device_count()
    if gpus > have:
        raise CaseSkipped(f"DP x{gpus} needs {gpus} GPUs; {have} here")
    return nn.DataParallel(module, device_ids=list(range(gpus)))


def _fully_shard(module: nn.Module, device: Device) -> nn.Module:
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        raise CaseSkipped(f"FSDP2 (fully_shard) is not in torch {torch.__version__}") from None
    n = world_size() or 1
    mesh = init_device_mesh(device.kind, (n,))
    blocks = [m for ml in module.modules() if isinstance(ml, nn.ModuleList) for m in ml]
    for block in blocks:  # one all-gather per block, overlapped with the previous one
        fully_shard(block, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module


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
    grads = [p for p in module.parameters() if p.requires_grad]  # type: ignore[union-attr]
    if grads:  # the buckets hold gradients of the parameters' dtype (fp32 under AMP)
        out["grad_dtype"] = str(grads[0].dtype).removeprefix("torch.")
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


__all__ = [
    "STRATEGIES",
    "data_parallel",
    "describe",
    "efficiency",
    "explain",
    "take_logging_data",
    "using",
    "world_size",
]
