"""Training in a distributed run: the model wrapped in DistributedDataParallel.

Weak scaling: every rank trains its own batch of the case's size, so a case's items/s is
per rank and the run's total is world size x that. Outside a process group the model is
trained as it is (no DDP): `torchmark run` alone is the no-DDP row, `torchrun
--nproc-per-node 1 -m torchmark run` the DDP-on-one-rank row (DDP's own overhead).
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

    ids: Any = [device.torch_device] if device.kind == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def efficiency(per_rank_n: float, single: float) -> float:
    """Weak-scaling efficiency: items/s per rank on N ranks over items/s on one."""
    if single <= 0:
        raise ValueError(f"the one-rank rate must be > 0, got {single}")
    return per_rank_n / single


__all__ = ["data_parallel", "efficiency", "world_size"]
