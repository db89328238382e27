"""NVIDIA (and ROCm, which PyTorch exposes as ``cuda``) GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from torchmark.devices.base import SampleTimer, Streams, TimingMode, TorchAccelerator

# GPU cycles (~25 µs at 2 GHz) the stream sleeps before a sample's start event: longer than
# the host takes to launch the first kernel (the H100 host here: a 13.8 µs dispatch floor).
LEAD_CYCLES = 50_000


class EventTimer(SampleTimer):
    """CUDA events recorded on the current stream: device time, launch overhead hidden.

    The previous sample ended with a synchronize, so the GPU is idle when the next starts:
    a start event recorded then fires at once and the sample also counts the host's launch
    of the first kernel. On an H100 that read a 200 µs bf16 GEMM 4 % slow against a plain
    event loop (5 calls a sample). A short sleep kernel queued before the start event keeps
    the stream busy while the host queues the sample's first calls behind it."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._lead = getattr(torch.cuda, "_sleep", None)

    def start(self) -> None:
        # Record on cuda:N's own current stream, not the current device's (cuda:0 by default).
        stream = torch.cuda.current_stream(self._device)
        if self._lead is not None:
            with torch.cuda.stream(stream):
                self._lead(LEAD_CYCLES)
        self._start.record(stream)

    def stop(self) -> float:
        self._end.record(torch.cuda.current_stream(self._device))
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1e3


class CUDAStreams(Streams):
    """A second CUDA stream for host-to-device copies; CUDA events as marks."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.copy = torch.cuda.Stream(device)

    def mark(self) -> torch.cuda.Event:
        e = torch.cuda.Event(enable_timing=True)
        e.record(torch.cuda.current_stream(self.device))
        return e

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1e3

    def side(self) -> Any:
        return torch.cuda.stream(self.copy)

    def wait_side(self) -> None:
        torch.cuda.current_stream(self.device).wait_stream(self.copy)

    def keep(self, t: torch.Tensor) -> None:
        t.record_stream(torch.cuda.current_stream(self.device))


class CUDADevice(TorchAccelerator):
    kind: ClassVar[str] = "cuda"
    # A CUDA sync + event read costs ~10 µs, so a 1 ms sample keeps it under 1 %.
    min_sample_s: ClassVar[float] = 0.001

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda", self.index or 0)

    def timer(self, mode: TimingMode = "device") -> SampleTimer:
        if mode == "device":
            return EventTimer(self.torch_device)
        return super().timer(mode)

    def info(self) -> dict[str, Any]:
        p = torch.cuda.get_device_properties(self.torch_device)
        return {
            **self.described(p),
            "sm_count": int(p.multi_processor_count),
            "compute_capability": f"{p.major}.{p.minor}",
            "l2_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
            "clock_khz": getattr(p, "clock_rate", None),
            "memory_clock_khz": getattr(p, "memory_clock_rate", None),
            "memory_bus_width": getattr(p, "memory_bus_width", None),
            "uuid": str(getattr(p, "uuid", "")) or None,
            "hip": bool(getattr(torch.version, "hip", None)),
        }

    def supports(self, dtype: torch.dtype) -> str | None:
        major, _ = torch.cuda.get_device_capability(self.torch_device)
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return "bfloat16 needs compute capability 8.0 or newer"
        if dtype == torch.float8_e4m3fn and major < 9:
            return "float8 matmul needs compute capability 9.0 or newer"
        return None

    def supports_tf32(self) -> str | None:
        major, _ = torch.cuda.get_device_capability(self.torch_device)
        if getattr(torch.version, "hip", None) or major < 8:
            return "TF32 needs an NVIDIA GPU with compute capability >= 8.0"
        return None

    def supports_graphs(self) -> str | None:
        return None

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CUDA]

    def capture_graph(self, step: Callable[[], Any]) -> Callable[[], Any]:
        stream = torch.cuda.Stream(self.torch_device)
        stream.wait_stream(torch.cuda.current_stream(self.torch_device))
        with torch.cuda.stream(stream):  # warm-up on a side stream, as capture requires
            for _ in range(3):
                step()
        torch.cuda.current_stream(self.torch_device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = step()
        self.synchronize()

        def replay() -> Any:
            graph.replay()
            return static_out

        return replay

    def supports_async_copy(self) -> str | None:
        return None

    def streams(self) -> Streams:
        return CUDAStreams(self.torch_device)

    def supports_compile(self) -> str | None:
        from torch.utils._triton import has_triton

        return None if has_triton() else "torch.compile on CUDA needs triton (not installed)"

    def cache_bytes(self) -> int | None:
        return self.info().get("l2_bytes")

    def available_memory_bytes(self) -> int | None:
        return int(torch.cuda.mem_get_info(self.torch_device)[0])

    def telemetry_sources(self) -> list[Any]:
        """The host, and NVML for an NVIDIA GPU (ROCm GPUs have no NVML)."""
        sources = super().telemetry_sources()
        if not getattr(torch.version, "hip", None):
            from torchmark.telemetry.nvml import NVMLSource

            sources.insert(0, NVMLSource(self.index or 0, self.info().get("uuid")))
        return sources

    def energy_counter(self) -> Any:
        from torchmark.telemetry.energy import Unavailable

        # NVML's total-energy counter is read by the telemetry trace (one NVML session)
        return Unavailable(
            f"no separate energy counter for {self.label()} (its energy is read from the "
            "NVML telemetry)"
        )
