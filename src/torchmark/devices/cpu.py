"""The host CPU."""

from __future__ import annotations

import functools
import os
import resource
from typing import Any, ClassVar

import psutil
import torch

from torchmark.devices import host
from torchmark.devices.base import Device

# ISA features that decide which kernels PyTorch can use on a CPU.
ISA_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "sve",
    "neon",
    "asimd",
)


_llc_bytes = host.llc_bytes  # a module global: tests pretend another cache size here

# torch's threads as this process began: torchmark sets threads only through
# CPUDevice.set_threads, after this module is imported (`env` shows these, not a run's).
DEFAULT_THREADS = (torch.get_num_threads(), torch.get_num_interop_threads())


class CPUDevice(Device):
    kind: ClassVar[str] = "cpu"
    min_sample_s: ClassVar[float] = 0.010

    def __init__(self, index: int | None = None) -> None:
        super().__init__(None)

    def synchronize(self) -> None:
        return None  # CPU ops return when done

    @functools.cache  # noqa: B019 - one CPUDevice per process; info is static
    def info(self) -> dict[str, Any]:
        ci = host.cpu_facts()
        flags = set(ci.get("flags", []))
        llc = _llc_bytes()
        return {
            "kind": "cpu",
            "model": ci.get("brand_raw") or "unknown CPU",
            "arch": ci.get("arch_string_raw") or os.uname().machine,
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "threads": torch.get_num_threads(),
            "isa": sorted(f for f in ISA_FLAGS if f in flags),
            "llc_bytes": llc,
            "memory_bytes": psutil.virtual_memory().total,
            "max_mhz": (psutil.cpu_freq().max if psutil.cpu_freq() else None) or None,
            "capability": torch.backends.cpu.get_cpu_capability(),
        }

    def label(self) -> str:
        return host.label()

    def supports_compile(self) -> str | None:
        import shutil

        # inductor writes C++ for the CPU and builds it with the host compiler
        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return "torch.compile on CPU needs a C++ compiler (g++ or clang++) on PATH"
        return None

    def total_memory_bytes(self) -> int | None:
        return int(psutil.virtual_memory().total)

    def cache_bytes(self) -> int | None:
        return _llc_bytes()

    def available_memory_bytes(self) -> int | None:
        return int(psutil.virtual_memory().available)

    def cores(self) -> int | None:
        return psutil.cpu_count(logical=True)

    def peak_memory_bytes(self) -> int | None:
        # ru_maxrss is the process high-water mark in KiB on Linux; it cannot be reset, so it
        # is an upper bound for the case, stated as host RSS peak.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def is_out_of_memory(self, exc: BaseException) -> bool:
        # The CPU allocator raises a plain RuntimeError with its own wording.
        return super().is_out_of_memory(exc) or (
            isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
        )

    def set_threads(self, n: int) -> None:
        torch.set_num_threads(n)

    def energy_counter(self) -> Any:
        from torchmark.telemetry.energy import rapl

        return rapl()  # RAPL package zones: the whole CPU package
