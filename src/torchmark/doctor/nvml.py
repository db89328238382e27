"""NVIDIA facts: what NVML reads per GPU, and a PCIe load to read the link under."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torchmark.doctor.base import Facts
from torchmark.telemetry.nvml import _text


def _q(
    fn: Callable[..., Any],
    *args: Any,
    scale: float | None = None,
    conv: Callable[[Any], Any] | None = None,
) -> Any:
    """One NVML query: None when the GPU does not support it (or it fails)."""
    try:
        v = fn(*args)
    except Exception:
        return None
    if scale is not None:
        v = v * scale
    return conv(v) if conv else v


def read_nvml() -> Facts:
    from torchmark.hardware.throttle import decode_reasons

    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as e:
        return {"ok": False, "error": str(e), "gpus": []}
    try:
        cuda = _q(nv.nvmlSystemGetCudaDriverVersion)
        out: Facts = {
            "ok": True,
            "driver": _q(nv.nvmlSystemGetDriverVersion, conv=_text),
            "cuda_driver": None if cuda is None else [cuda // 1000, (cuda % 1000) // 10],
            "gpus": [],
        }
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = _q(nv.nvmlDeviceGetMemoryInfo, h)
            procs = _q(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
            mig = _q(nv.nvmlDeviceGetMigMode, h)
            ecc = _q(nv.nvmlDeviceGetEccMode, h)
            reasons = _q(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            out["gpus"].append(
                {
                    "index": i,
                    "name": _q(nv.nvmlDeviceGetName, h, conv=_text),
                    "uuid": _q(nv.nvmlDeviceGetUUID, h, conv=_text),
                    "persistence": _q(nv.nvmlDeviceGetPersistenceMode, h, conv=bool),
                    "sm_mhz": _q(nv.nvmlDeviceGetClockInfo, h, 1),
                    "max_sm_mhz": _q(nv.nvmlDeviceGetMaxClockInfo, h, 1),
                    "power_limit_w": _q(nv.nvmlDeviceGetEnforcedPowerLimit, h, scale=1e-3),
                    "default_power_limit_w": _q(
                        nv.nvmlDeviceGetPowerManagementDefaultLimit, h, scale=1e-3
                    ),
                    "temp_c": _q(nv.nvmlDeviceGetTemperature, h, 0),
                    "reasons": None if reasons is None else decode_reasons(int(reasons)),
                    "pcie_gen": _q(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_gen_max": _q(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "pcie_width": _q(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "pcie_width_max": _q(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "ecc": None if ecc is None else [bool(ecc[0]), bool(ecc[1])],
                    "mig": None if mig is None else [bool(mig[0]), bool(mig[1])],
                    "memory_total": None if mem is None else int(mem.total),
                    "memory_used": None if mem is None else int(mem.used),
                    "processes": [
                        {"pid": p.pid, "used_bytes": getattr(p, "usedGpuMemory", None) or 0}
                        for p in procs
                    ],
                }
            )
        return out
    except Exception as e:
        return {"ok": False, "error": f"NVML failed while reading GPUs: {e}", "gpus": []}
    finally:
        _q(nv.nvmlShutdown)


@contextlib.contextmanager
def pcie_busy(cuda_ok: bool) -> Iterator[bool]:
    """Queue ~0.2 s of pinned host->device copies on every GPU (64 MiB x 16 at ~25 GB/s)."""
    if not cuda_ok:
        yield False
        return
    import torch

    try:
        src = torch.empty(16 * 2**20, dtype=torch.float32).pin_memory()
        src.uniform_()
        for i in range(torch.cuda.device_count()):
            dst = torch.empty_like(src, device=f"cuda:{i}")
            for _ in range(16):
                dst.copy_(src, non_blocking=True)
    except Exception:  # a GPU that cannot copy fails the tiny-op check; here just no load
        yield False
        return
    try:
        yield True
    finally:
        for i in range(torch.cuda.device_count()):
            _q(torch.cuda.synchronize, i)
