"""Apple MPS and Intel XPU, through the same interface (no events: end-to-end timing)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from torchmark.devices.base import Device, MemoryStats


class MPSDevice(Device):
    kind: ClassVar[str] = "mps"
    is_accelerator: ClassVar[bool] = True
    min_sample_s: ClassVar[float] = 0.002

    def __init__(self, index: int | None = None) -> None:
        super().__init__(None)

    def synchronize(self) -> None:
        torch.mps.synchronize()

    def info(self) -> dict[str, Any]:
        return {"kind": "mps", "model": "Apple GPU (MPS)"}

    def supports(self, dtype: torch.dtype) -> str | None:
        if dtype == torch.float64:
            return "MPS has no float64"
        return None

    def peak_memory_bytes(self) -> int | None:
        return int(torch.mps.driver_allocated_memory())

    def empty_cache(self) -> None:
        torch.mps.empty_cache()


class XPUDevice(Device):
    kind: ClassVar[str] = "xpu"
    is_accelerator: ClassVar[bool] = True
    min_sample_s: ClassVar[float] = 0.001

    def __init__(self, index: int | None = 0) -> None:
        super().__init__(0 if index is None else index)

    def synchronize(self) -> None:
        torch.xpu.synchronize(self.torch_device)

    def info(self) -> dict[str, Any]:
        p = torch.xpu.get_device_properties(self.torch_device)
        return {"kind": "xpu", "model": p.name, "memory_bytes": int(p.total_memory)}

    def total_memory_bytes(self) -> int | None:
        return int(torch.xpu.get_device_properties(self.torch_device).total_memory)

    def reset_peak_memory(self) -> None:
        torch.xpu.reset_peak_memory_stats(self.torch_device)

    def memory_stats(self) -> MemoryStats | None:
        return MemoryStats(
            int(torch.xpu.max_memory_allocated(self.torch_device)),
            int(torch.xpu.max_memory_reserved(self.torch_device)),
        )

    def empty_cache(self) -> None:
        torch.xpu.empty_cache()
