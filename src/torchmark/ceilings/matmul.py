"""Dense compute peak per dtype: the best achieved by large square GEMMs (2n^3 per call)
and by 3x3 convolutions (2 x MACs of the direct algorithm, the count FlopCounterMode gives a
model), so a model's % of this peak uses the same FLOP convention.

This is "maximum achievable matmul FLOPS": on H100/A100 expect ~80-87 % of the datasheet
figure (METHOD.md §3). Convolutions join because the fastest kernels are not always GEMMs: on
the 2-core AMD EPYC this was written on, torch.mm fp32 (MKL) peaked at ~210 GFLOP/s while a
oneDNN 3x3 conv reached ~380, so ResNet-50 read 104 % of a GEMM-only "peak". The keys stay
``matmul:<dtype>``; the method says which kernel won. A conv above the datasheet peak (where
one is known) is left out: counted in direct FLOPs, Winograd or tensor cores beat the
hardware. int8 uses ``torch._int_mm`` (int8 x int8 -> int32), counted in operations like
FLOPs, with no conv.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from torchmark.ceilings.base import time_best
from torchmark.devices.base import Device
from torchmark.errors import first_line
from torchmark.hardware import datasheet
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


# (channels, height = width, batch): ResNet-like 3x3 layers, ~20 ms a call on 2 CPU cores
# in fp32; on a GPU the batch is scaled up so one call is long enough to time.
CONV_SHAPES = ((512, 14, 8), (256, 28, 4))
GPU_CONV_BATCH_SCALE = 32


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """Set the cuBLAS and cuDNN tf32 switches for the measurement (cuDNN allows TF32 by
    default, which would make an "fp32" conv a TF32 one) and restore the user's settings."""
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def conv_flops(channels: int, hw: int, batch: int) -> float:
    return 2.0 * batch * channels * channels * 9 * hw * hw


def time_convs(device: Device, p: Precision, quick: bool, budget_s: float) -> dict[str, float]:
    """Best FLOP/s of each 3x3 conv shape that fits the budget (none for int8)."""
    if p.dtype == torch.int8:
        return {}
    found: dict[str, float] = {}
    t0 = time.perf_counter()
    for channels, hw, batch in CONV_SHAPES:
        batch *= GPU_CONV_BATCH_SCALE if device.is_accelerator else 1
        dev = device.torch_device
        weight = torch.randn(channels, channels, 3, 3, dtype=p.dtype, device=dev) * 0.05
        x = torch.randn(batch, channels, hw, hw, dtype=p.dtype, device=dev)
        fn = functools.partial(torch.nn.functional.conv2d, x, weight, padding=1)
        per_call = probe(fn, device)
        if per_call * MIN_CALLS[quick] > budget_s - (time.perf_counter() - t0):
            break
        m = time_best(fn, device, quick)
        found[f"conv3x3 c={channels} {hw}x{hw} b={batch}"] = conv_flops(channels, hw, batch) / m.min
    return found


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
    device: Device, p: Precision, quick: bool, datasheet_peak: float | None = None
) -> tuple[Ceiling | None, dict[str, object]]:
    """The sweep for one precision: its ceiling (None if it cannot run) and what happened.

    A conv beats the GEMMs only within ``datasheet_peak`` where one is known: counted in
    direct-algorithm FLOPs, a conv that runs Winograd (fewer multiplies) or tensor cores can
    exceed the hardware. On an H100, fp32 3x3 convs with allow_tf32=False read 116-124
    TFLOP/s against the 67 TFLOP/s fp32 datasheet peak, while torch.mm fp32 reached 52."""
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
                return None, {"skipped": f"{type(e).__name__}: {first_line(e, 200)}"}
            if isinstance(m, str):
                notes.append(m)
                break
            per_size[str(n)] = flops(n) / m.min
            last = (n, m.median)
        try:
            convs = time_convs(device, p, quick, budget - (time.perf_counter() - t_start))
        except Exception as e:  # a backend without this conv: the GEMM figure stands alone
            if not device.is_out_of_memory(e):
                notes.append(f"conv not timed: {type(e).__name__}: {first_line(e, 120)}")
            convs = {}
    spent = time.perf_counter() - t_start
    if not per_size:
        return None, {"skipped": "; ".join(notes) or "no size ran"}
    best_n, best = max(per_size.items(), key=lambda kv: kv[1])
    best_conv = max(convs.items(), key=lambda kv: kv[1], default=None)
    shown = "/".join(per_size)
    mode = " with allow_tf32=True" if p.tf32 else ""
    if p.dtype == torch.float32 and not p.tf32:
        mode = " with allow_tf32=False" if device.is_accelerator else ""
    op = "torch._int_mm (int8 -> int32)" if p.dtype == torch.int8 else "torch.mm"
    winner = f"n={best_n}"
    conv_part = ""
    if best_conv is not None:
        conv_part = f" and {len(convs)} 3x3 conv2d shapes (2 x MACs)"
        if datasheet_peak is not None and best_conv[1] > datasheet_peak:
            notes.append(
                f"3x3 conv reached {best_conv[1] / 1e12:.4g} TFLOP/s in direct-algorithm "
                f"FLOPs, above the datasheet's {datasheet_peak / 1e12:.4g} TFLOP/s: it did fewer "
                "multiplies (Winograd/FFT) or used tensor cores, so it is not this dtype's "
                "ceiling"
            )
        elif best_conv[1] > best:
            winner, best = best_conv
    ceiling = Ceiling(
        device=device.name,
        key=f"matmul:{p.key}",
        value=best,
        unit="FLOP/s",
        method=(
            f"best of square {op} {p.dtype} n={shown}{mode} (2n^3 FLOPs){conv_part}; "
            f"best sample (here {winner})"
        ),
        details={
            "TFLOPs_by_conv": {k: round(v / 1e12, 4) for k, v in convs.items()},
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
    spec = datasheet.lookup(str(device.info().get("model") or ""), device.total_memory_bytes())
    for p in PRECISIONS:
        if p.accelerator_only and not device.is_accelerator:
            continue
        ceiling, why = measure_one(device, p, quick, spec.peak(f"matmul:{p.key}") if spec else None)
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
