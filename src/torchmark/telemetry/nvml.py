"""NVIDIA GPU telemetry through NVML (nvidia-ml-py's ``pynvml``).

Per tick: SM and memory clocks, temperature, power draw, utilisation, memory used, the
active clock-event ("throttle") reasons decoded into words, and the total energy counter.
A field the GPU does not support reads as None; any other NVML error marks the source dead
for the rest of the run (the caller records why) - values are never invented.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from torchmark.hardware.throttle import decode_reasons
from torchmark.telemetry.base import Reading, Source, SourceUnavailable


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NVMLSource(Source):
    """One NVIDIA GPU, found by UUID (survives CUDA_VISIBLE_DEVICES renumbering) or index."""

    role = "device"

    def __init__(self, index: int, uuid: str | None = None) -> None:
        self.name = "nvml"
        self.index, self.uuid = index, uuid
        self._nv: Any = None
        self._handle: Any = None
        self.unsupported: set[str] = set()

    def open(self) -> dict[str, Any]:
        try:
            import pynvml
        except ImportError as e:  # nvidia-ml-py is a dependency, but a broken env may lack it
            raise SourceUnavailable(f"pynvml not importable ({e})") from None
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SourceUnavailable(f"NVML not available ({_text(e)})") from None
        try:
            self._handle = self._find_handle()
            static = {
                "name": _text(pynvml.nvmlDeviceGetName(self._handle)),
                "max_sm_mhz": self._get("max_sm_mhz", pynvml.nvmlDeviceGetMaxClockInfo, 1),
                "max_mem_mhz": self._get("max_mem_mhz", pynvml.nvmlDeviceGetMaxClockInfo, 2),
                # The default applications clock is the base clock on NVIDIA's data-centre
                # cards (H100 SXM: 1590 of 1980 MHz); the 75 % rule is taken against it.
                "base_sm_mhz": self._get(
                    "base_sm_mhz", pynvml.nvmlDeviceGetDefaultApplicationsClock, 1
                ),
                "power_limit_w": _scale(
                    self._get("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit), 1e-3
                ),
                # Equal to the enforced limit on a card nobody capped: then "SW power cap"
                # is the card's normal state under dense work, not a fault (see trace.py).
                "default_power_limit_w": _scale(
                    self._get(
                        "default_power_limit_w", pynvml.nvmlDeviceGetPowerManagementDefaultLimit
                    ),
                    1e-3,
                ),
            }
        except SourceUnavailable:
            self.close()
            raise
        return static

    def _find_handle(self) -> Any:
        nv = self._nv
        try:
            if self.uuid:
                uuid = self.uuid if self.uuid.startswith(("GPU-", "MIG-")) else f"GPU-{self.uuid}"
                try:
                    return nv.nvmlDeviceGetHandleByUUID(uuid)
                except nv.NVMLError:
                    pass  # older drivers spell UUIDs differently; fall back to the index
            return nv.nvmlDeviceGetHandleByIndex(self.index)
        except nv.NVMLError as e:
            raise SourceUnavailable(f"NVML has no GPU {self.index} ({_text(e)})") from None

    def _get(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML query; 'not supported' / 'no permission' -> None, anything else is fatal."""
        if field in self.unsupported:
            return None
        nv = self._nv
        try:
            return fn(self._handle, *args)
        except nv.NVMLError as e:
            soft = (
                nv.NVML_ERROR_NOT_SUPPORTED,
                nv.NVML_ERROR_NO_PERMISSION,
                nv.NVML_ERROR_FUNCTION_NOT_FOUND,  # a driver older than the binding
            )
            if getattr(e, "value", None) in soft:
                self.unsupported.add(field)
                return None
            raise SourceUnavailable(f"NVML error reading {field} ({_text(e)})") from None

    def read(self) -> Reading:
        nv = self._nv
        util = self._get("util", nv.nvmlDeviceGetUtilizationRates)
        mem = self._get("memory", nv.nvmlDeviceGetMemoryInfo)
        # Renamed from "throttle" to "event" reasons in nvidia-ml-py 12.535; same bits.
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons_fn = reasons_fn or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._get("reasons", reasons_fn)
        return {
            "sm_mhz": self._get("sm_mhz", nv.nvmlDeviceGetClockInfo, 1),
            "mem_mhz": self._get("mem_mhz", nv.nvmlDeviceGetClockInfo, 2),
            "temp_c": self._get("temp_c", nv.nvmlDeviceGetTemperature, 0),
            "power_w": _scale(self._get("power_w", nv.nvmlDeviceGetPowerUsage), 1e-3),
            "util_pct": None if util is None else util.gpu,
            "mem_util_pct": None if util is None else util.memory,
            "mem_used_bytes": None if mem is None else mem.used,
            "reasons": None if mask is None else decode_reasons(int(mask)),
            "energy_j": _scale(self._get("energy_j", nv.nvmlDeviceGetTotalEnergyConsumption), 1e-3),
        }

    def close(self) -> None:
        if self._nv is not None:
            # NVML counts init/shutdown pairs; a library that already failed has nothing to free
            with contextlib.suppress(Exception):
                self._nv.nvmlShutdown()
            self._nv = None


def _scale(v: Any, factor: float) -> float | None:
    return None if v is None else float(v) * factor
