"""Apple MPS and Intel XPU, through the same interface (no events: end-to-end timing)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from torchmark.devices.base import Device, TorchAccelerator


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


class XPUDevice(TorchAccelerator):
    kind: ClassVar[str] = "xpu"
    min_sample_s: ClassVar[float] = 0.001
