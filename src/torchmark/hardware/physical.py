"""Bounds no measurement can pass: where no datasheet row gives one (a CPU, an unlisted
accelerator), what the hardware physically could at most do.

The leaderboard refuses a submitted rate beyond them (``web.plausible``); a run's verdict
calls a result whose working set fits the cache (``results.cache``) a measurement error only
beyond ``cache_bound``: the memory ceiling does not bound cache traffic, these do.
Torch-free: the server and the verdicts read them.
"""

from __future__ import annotations

from typing import Any

from torchmark.hardware import datasheet
from torchmark.results import Ceiling

# CPUs: no datasheet row, so a bound from the core count: every core at 6 GHz (above any
# shipped boost clock) doing 64 FP32 FLOP a cycle (two AVX-512 FMA units) or 2,048 in a low
# precision (AMX: 1,024 bf16/int8 multiply-adds a cycle), moving 192 bytes a cycle (two
# 64-byte loads and a store from L1).
CPU_HZ = 6e9
CPU_FLOP_PER_CYCLE = {"fp32": 64, "low": 2048}
CPU_BYTES_PER_CYCLE = 192
CPU_CORES_UNKNOWN = 512  # a document without a core count: two 256-core sockets
# Accelerators not in the datasheet table: above every one shipped by 2026 (B200: 8 TB/s,
# 4.5 dense int8 POPS).
ACCELERATOR_BPS = 10e12
ACCELERATOR_FLOPS = 5e15
# An L2-resident working set reads faster than the memory's datasheet figure (~2x on
# H100/A100): a case whose bytes per call fit 8x the device's L2 gets this factor more.
IN_CACHE_FACTOR = 4.0


def cpu_bytes_bound(cores: int | None) -> tuple[float, str]:
    """(B/s, in words) no CPU of ``cores`` logical cores moves, from any cache level."""
    n = cores or CPU_CORES_UNKNOWN
    return n * CPU_HZ * CPU_BYTES_PER_CYCLE, (
        f"{n} cores at {CPU_HZ / 1e9:g} GHz moving {CPU_BYTES_PER_CYCLE} B a cycle from L1"
        + ("" if cores else ", the core count unknown")
    )


def cache_bound(ceiling: Ceiling, accelerator: bool, cores: int | None) -> tuple[float, str]:
    """(B/s, in words) the most a working set held in the cache can move on the device the
    bandwidth ``ceiling`` was measured on: on a CPU the cores' L1 bound (``cpu_bytes_bound``),
    on an accelerator ``IN_CACHE_FACTOR`` x its memory's datasheet figure, else x the
    measured ceiling."""
    if not accelerator:
        return cpu_bytes_bound(cores)
    if ceiling.theoretical:
        return ceiling.theoretical * IN_CACHE_FACTOR, (
            f"{IN_CACHE_FACTOR:g}x the datasheet's memory bandwidth"
        )
    return ceiling.value * IN_CACHE_FACTOR, f"{IN_CACHE_FACTOR:g}x the measured memory ceiling"


def flops_bound(key: str, info: dict[str, Any], accelerator: bool) -> tuple[float, str]:
    """(FLOP/s, in words) no op placed against the ``matmul:<dtype>`` peak ``key`` can run
    at on the device ``info`` describes (its environment record): a GPU's datasheet figure
    for that dtype (the fastest accelerator where it has no row), a CPU's cores at
    ``CPU_HZ`` (``CPU_FLOP_PER_CYCLE``: fp32, else a low precision's)."""
    dtype = key.partition(":")[2]
    if not accelerator:
        cores = info.get("physical_cores") or info.get("logical_cores") or CPU_CORES_UNKNOWN
        per = CPU_FLOP_PER_CYCLE["fp32" if dtype in ("float32", "float64") else "low"]
        return cores * CPU_HZ * per, (
            f"{cores} cores at {CPU_HZ / 1e9:g} GHz doing {per} FLOP a cycle"
        )
    spec = datasheet.lookup(str(info.get("model") or ""), info.get("memory_bytes"))
    peak = spec.peak(key) if spec is not None else None
    if spec is not None and peak:
        return peak, f"{spec.model}'s datasheet {dtype} peak"
    return ACCELERATOR_FLOPS, "no datasheet row: the fastest accelerator"
