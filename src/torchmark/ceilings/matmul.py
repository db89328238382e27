"""Matmul peak per dtype: a sweep of large square GEMMs, the best achieved (2n^3 per call).

This is "maximum achievable matmul FLOPS": on H100/A100 expect ~80-87 % of the datasheet
figure (METHOD.md §3). int8 uses ``torch._int_mm`` (int8 x int8 -> int32), counted in
operations like FLOPs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from torchmark.ceilings.base import time_best
from torchmark.devices.base import Device
from torchmark.results import Ceiling
from torchmark.timing import Measurement

# GPU sizes reach the tensor-core plateau from 4096 up; 16384^3 fp32 is ~0.2 s on an H100.
GPU_SIZES = {True: (4096, 8192), False: (4096, 8192, 16384)}
# A 2-core CPU does ~100 GFLOP/s fp32: 1024^3 is ~20 ms, 2048^3 ~0.2 s a call.
CPU_SIZES = {True: (512, 1024), False: (1024, 2048)}
# Per dtype: stop the sweep when the next size would exceed this (seconds), so a dtype the
# hardware emulates (bf16 without AMX/AVX512-BF16) costs a bounded time.
BUDGET_S = {True: 4.0, False: 15.0}
# Calls the rule makes at the least: first call, >= 3 warm-up calls, >= 5-10 samples.
MIN_CALLS = {True: 10, False: 15}


@dataclass(frozen=True)
class Precision:
    key: str  # the part after "matmul:"
    dtype: torch.dtype
    tf32: bool = False
    accelerator_only: bool = False


PRECISIONS: tuple[Precision, ...] = (
    Precision("float32", torch.float32),
    Precision("tf32", torch.float32, tf32=True, accelerator_only=True),
    # fp16 GEMM on a CPU runs at ~1 GFLOP/s here (no native kernels): not a peak worth timing.
    Precision("float16", torch.float16, accelerator_only=True),
    Precision("bfloat16", torch.bfloat16),
    Precision("int8", torch.int8, accelerator_only=True),
)


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """Set cuBLAS's tf32 switch for the measurement and restore the user's setting after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def operands(
    n: int, dtype: torch.dtype, device: Device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random n x n inputs (int8: the full range) and a preallocated output."""
    dev = device.torch_device
    if dtype == torch.int8:
        a = torch.randint(-128, 128, (n, n), dtype=dtype, device=dev)
        b = torch.randint(-128, 128, (n, n), dtype=dtype, device=dev)
        return a, b, torch.empty(n, n, dtype=torch.int32, device=dev)
    a = torch.randn(n, n, dtype=dtype, device=dev)
    b = torch.randn(n, n, dtype=dtype, device=dev)
    return a, b, torch.empty(n, n, dtype=dtype, device=dev)


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> Callable[[], object]:
    if a.dtype == torch.int8:
        # _int_mm has no out= variant; the int32 result is allocated each call, which the
        # caching allocator serves from its pool on GPUs.
        return lambda: torch._int_mm(a, b)
    return lambda: torch.mm(a, b, out=out)


def probe(fn: Callable[[], object], device: Device) -> float:
    """Seconds for one warm call (the first one pays handle set-up and allocator growth)."""
    fn()
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    return time.perf_counter() - t0


def flops(n: int) -> float:
    return 2.0 * n**3


def sizes(device: Device, quick: bool) -> tuple[int, ...]:
    return GPU_SIZES[quick] if device.is_accelerator else CPU_SIZES[quick]


def time_size(
    device: Device, p: Precision, n: int, quick: bool, budget_s: float
) -> Measurement | str:
    """One size's measurement, or why it was not taken (too slow for what budget is left)."""
    a, b, out = operands(n, p.dtype, device)
    fn = gemm(a, b, out)
    per_call = probe(fn, device)
    if per_call * MIN_CALLS[quick] > budget_s:
        return f"stopped at n={n}: one call takes {per_call:.2g} s, over the time budget"
    return time_best(fn, device, quick)


def measure_one(
    device: Device, p: Precision, quick: bool
) -> tuple[Ceiling | None, dict[str, object]]:
    """The sweep for one precision: its ceiling (None if it cannot run) and what happened."""
    reason = device.supports(p.dtype) or (device.supports_tf32() if p.tf32 else None)
    if reason:
        return None, {"skipped": reason}
    per_size: dict[str, float] = {}
    notes: list[str] = []
    t_start, budget = time.perf_counter(), BUDGET_S[quick]
    last: tuple[int, float] | None = None  # (n, seconds per call)
    with tf32_mode(p.tf32):
        for n in sizes(device, quick):
            left = budget - (time.perf_counter() - t_start)
            if last is not None and last[1] * (n / last[0]) ** 3 * MIN_CALLS[quick] > left:
                notes.append(f"stopped before n={n}: predicted over the time budget")
                break
            try:
                m = time_size(device, p, n, quick, left)
            except Exception as e:  # an op this backend lacks: record why, keep the others
                if device.is_out_of_memory(e):
                    notes.append(f"out of memory at n={n}")
                    break
                return None, {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
            if isinstance(m, str):
                notes.append(m)
                break
            per_size[str(n)] = flops(n) / m.min
            last = (n, m.median)
    spent = time.perf_counter() - t_start
    if not per_size:
        return None, {"skipped": "; ".join(notes) or "no size ran"}
    best_n, best = max(per_size.items(), key=lambda kv: kv[1])
    shown = "/".join(per_size)
    mode = " with allow_tf32=True" if p.tf32 else ""
    if p.dtype == torch.float32 and not p.tf32:
        mode = " with allow_tf32=False" if device.is_accelerator else ""
    op = "torch._int_mm (int8 -> int32)" if p.dtype == torch.int8 else "torch.mm"
    ceiling = Ceiling(
        device=device.name,
        key=f"matmul:{p.key}",
        value=best,
        unit="FLOP/s",
        method=(
            f"best of square {op} {p.dtype} n={shown}{mode}; 2n^3 FLOPs per call; "
            f"best sample (here n={best_n})"
        ),
        details={
            "TFLOPs_by_size": {k: round(v / 1e12, 4) for k, v in per_size.items()},
            "best_size": int(best_n),
            "notes": notes,
            "seconds": round(spent, 2),
        },
    )
    return ceiling, {}


def measure(device: Device, *, quick: bool) -> list[Ceiling]:
    """``matmul:<dtype>`` for each precision that runs here; the others are named, with the
    reason, in the details of ``matmul:float32``."""
    found: list[Ceiling] = []
    left_out: dict[str, str] = {}
    for p in PRECISIONS:
        if p.accelerator_only and not device.is_accelerator:
            continue
        ceiling, why = measure_one(device, p, quick)
        if ceiling is None:
            left_out[p.key] = str(why.get("skipped"))
        else:
            found.append(ceiling)
    if left_out:
        found = [
            c.model_copy(update={"details": {**c.details, "not_measured": left_out}})
            if c.key == "matmul:float32"
            else c
            for c in found
        ]
    return found
