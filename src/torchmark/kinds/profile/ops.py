"""Top ops by self time against the device's measured ceilings, and the step's verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from torchmark import format as fmt
from torchmark.hardware import kernels
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.events import call_name
from torchmark.results import Ceiling

# An op whose mean self time per call is under this many dispatch floors (the measured time
# of an empty op call, ~5-10 µs on this CPU) spends its time being dispatched, not working.
OVERHEAD_DISPATCHES = 3.0
# A step where this share or more is overhead (CPU: framework + Python; GPU: host-wait)
# is called overhead- or launch-bound.
BOUND_SHARE = 50.0


WORK_CATEGORIES = (c.MATMUL, c.ELEMENTWISE, c.REDUCTION, c.MEMORY, c.COMPUTE, c.MEMCPY, c.MEMSET)


@dataclass(frozen=True)
class OpRow:
    name: str
    category: str
    calls: float  # per step
    self_us: float  # per step
    share: float  # % of the step's wall time
    flops: float | None  # per step (torch's own counter: matmul, conv, add, mul)
    bytes: float | None  # per step, tensor inputs read (a lower bound)
    flop_rate: float | None  # FLOP/s over its self time
    byte_rate: float | None  # B/s
    pct_ceiling: float | None  # of the measured ceiling its bound names
    ceiling_key: str | None
    bound: str  # compute | memory | overhead | "" (not known)
    peak_key: str | None = None  # the matmul peak its FLOPs are placed against (its dtype's)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def top_ops(
    bd: c.Breakdown,
    flops: Mapping[str, float],
    ceilings: Mapping[str, Ceiling],
    matmul_key: str | None,
    n: int = 10,
    flops_by_call: Mapping[str, float] | None = None,
    precision: Mapping[str, Any] | None = None,
) -> list[OpRow]:
    """The ``n`` ops with the most self time per step. ``flops``: per step, by op name;
    ``flops_by_call``: per call, by ``categories.call_key`` (GPU kernels take theirs);
    ``matmul_key``: the case's peak, for an op whose dtype was not recorded; ``precision``:
    the run's precision switches (an fp32 convolution's peak on a GPU is TF32's)."""
    steps = max(bd.steps, 1)
    per_step_wall = bd.wall_us / steps
    bw, floor = ceilings.get("bandwidth"), ceilings.get("dispatch")
    rows = []
    ranked = sorted(bd.ops.items(), key=lambda kv: -kv[1].self_us)
    for name, op in ranked[:n]:
        self_us, calls = op.self_us / steps, op.calls / steps
        peak = op_peak(name, op, ceilings, matmul_key, bd.kind == "gpu", precision)
        # a view or a wrapper's own time touches no data: its shapes are not its work; only
        # a matmul or convolution runs its caller's FLOPs (a copy_ inside addmm does not)
        works = op.category in WORK_CATEGORIES
        f = flops.get(name) if works else None
        if works and not f and op.category == c.MATMUL:
            f = inherited(name, bd, flops)
        b = op.bytes_read / steps if op.bytes_read and works else None
        if op.work_of and works:
            f, b = kernel_work(name, bd, flops_by_call or {})
        t = self_us / 1e6
        f_rate = f / t if f and t > 0 else None
        b_rate = b / t if b and t > 0 else None
        if op.category == c.MATMUL and not f_rate:
            b_rate = None  # its inputs' bytes alone would call a convolution memory-bound
        bound, pct, key = (
            # a kernel's time is the device working; launch cost shows as host-wait instead
            _bound(self_us, calls, f_rate, b_rate, peak, bw, None if bd.kind == "gpu" else floor)
            if works
            else ("overhead", None, None)
        )
        share = 100 * self_us / per_step_wall if per_step_wall else 0.0
        rows.append(
            OpRow(
                name,
                op.category,
                calls,
                self_us,
                share,
                f,
                b,
                f_rate,
                b_rate,
                pct,
                key,
                bound,
                peak.key if peak is not None and f_rate else None,
            )
        )
    return rows


def dense_family(name: str, op: c.OpTime) -> str | None:
    """``gemm``, ``conv`` or ``attention`` for an op doing dense math: by its name (a host
    op), or by the op that launched it (a GPU kernel, ``work_of``); else None."""
    fam = kernels.family(name)
    if fam in kernels.DENSE:
        return fam
    for chain in op.work_of:
        for key in chain:
            fam = kernels.family(call_name(key))
            if fam in kernels.DENSE:
                return fam
    return "gemm" if op.category == c.MATMUL else None


def op_peak(
    name: str,
    op: c.OpTime,
    ceilings: Mapping[str, Ceiling],
    matmul_key: str | None,
    accelerator: bool,
    precision: Mapping[str, Any] | None,
) -> Ceiling | None:
    """The measured peak an op's FLOPs are placed against: its own dtype's (a user model's
    result names none; a bf16 model's fp32 softmax is not bf16), TF32 where the switches
    make an fp32 GEMM or convolution one; the case's where the dtype is not known."""
    fam = dense_family(name, op) or "elementwise"
    key = kernels.peak_key(fam, op.dtype, accelerator, precision)
    if key is not None and key in ceilings:
        return ceilings[key]
    return ceilings.get(matmul_key) if matmul_key else None


# GEMM shapes kept with a profile: a GPT-2 train step has 15 (4 linears and the LM head,
# forward and two backward each; layers share shapes); past 40 the tail is too small a
# share to call for padding, and the stored run stays small.
GEMM_ROWS = 40


def gemm_rows(bd: c.Breakdown, n: int = GEMM_ROWS) -> list[dict[str, Any]]:
    """The ``n`` GEMM shapes with the most time per step: op, operand shapes, dtype, calls
    and time per step, and share of the step's wall time (what ``advice`` reads)."""
    steps = max(bd.steps, 1)
    per_step_wall = bd.wall_us / steps
    ranked = sorted(bd.gemms.values(), key=lambda g: -g.us)[:n]
    return [
        {
            "op": g.op,
            "dims": g.dims,
            "dtype": g.dtype,
            "calls": g.calls / steps,
            "us_per_step": g.us / steps,
            "share": 100 * g.us / steps / per_step_wall if per_step_wall else 0.0,
        }
        for g in ranked
    ]


def kernel_work(
    name: str, bd: c.Breakdown, flops_by_call: Mapping[str, float]
) -> tuple[float | None, float | None]:
    """A GPU kernel's FLOPs and bytes per step: those torch counted on the host op call
    that launched it (or on the nearest enclosing call it counted: aten::conv2d over
    cudnn_convolution), by name and input shapes, for each launch where it was that call's
    longest kernel. Known only when it was so in every call (a cuDNN convolution also
    launches layout kernels such as nchwToNhwcKernel, which get none); bytes: the
    launching op's inputs."""
    op = bd.ops[name]
    if sum(op.work_of.values()) != op.calls:
        return None, None
    steps = max(bd.steps, 1)
    total = 0.0
    for chain, n in op.work_of.items():
        per_call = next((flops_by_call[k] for k in chain if flops_by_call.get(k)), None)
        if per_call is None:
            # a matmul's or convolution's inputs alone would call it memory-bound
            matmul = any(c.cpu_category(call_name(k), False) == c.MATMUL for k in chain)
            return None, (None if matmul else _per_step(op.bytes_read, steps))
        total += per_call * n
    return total / steps, _per_step(op.bytes_read, steps)


def _per_step(x: float | None, steps: int) -> float | None:
    return x / steps if x else None


def inherited(name: str, bd: c.Breakdown, flops: Mapping[str, float]) -> float | None:
    """FLOPs torch counted on the op that called this one: its counter names aten::conv2d,
    whose work runs in aten::mkldnn_convolution (CPU) or cudnn_convolution three calls
    down. Taken only from the one counted caller that enclosed every call of this op."""
    op = bd.ops[name]
    found = [
        flops[a]
        for a, n in op.ancestors.items()
        if flops.get(a) and n == op.calls and bd.ops[a].calls == op.calls
    ]
    return found[0] if len(found) == 1 else None


# FLOPs a kernel inherits from the op that launched it are wrong when they put it above
# the measured matmul peak: on an H100 GPT-2 train profile a cuBLAS GEMM read 1.38 PFLOP/s,
# 174 % of the 794 TFLOP/s bf16 ceiling (its op's FLOPs were split over several kernels).
ATTRIBUTION_LIMIT = 1.02


def _bound(
    self_us: float,
    calls: float,
    f_rate: float | None,
    b_rate: float | None,
    peak: Ceiling | None,
    bw: Ceiling | None,
    floor: Ceiling | None,
) -> tuple[str, float | None, str | None]:
    per_call_s = self_us / 1e6 / calls if calls else 0.0
    if floor is not None and floor.value > 0 and per_call_s < OVERHEAD_DISPATCHES * floor.value:
        return "overhead", None, None
    if f_rate and peak is not None and f_rate > ATTRIBUTION_LIMIT * peak.value:
        f_rate = None  # not all of the launching op's FLOPs ran in this kernel
    if f_rate and peak is not None and b_rate and bw is not None:
        # roofline: the op's intensity against the ridge point of the two measured ceilings
        if f_rate / b_rate >= peak.value / bw.value:
            return "compute", 100 * f_rate / peak.value, peak.key
        return "memory", 100 * b_rate / bw.value, bw.key
    if f_rate and peak is not None:
        return "compute", 100 * f_rate / peak.value, peak.key
    if b_rate and bw is not None:
        return "memory", 100 * b_rate / bw.value, bw.key
    return "", None, None


# Host-wait under the profiler is not launch-bound when the GPU's own work fills this share
# of the unprofiled step: on an H100 resnet50 train profiled at 57 ms per step (31.9 ms
# unprofiled) showed 45 % host-wait while its kernels took 29.8 ms, 93 % of 31.9.
BUSY_SHARE = 80.0


def device_busy_us(bd: c.Breakdown) -> float:
    """GPU: time per step with any activity on the device (compute, comm, memcpy, memset)."""
    busy = (c.COMPUTE, c.COMM, c.MEMCPY, c.MEMSET)
    return sum(bd.categories.get(k, 0.0) for k in busy) / max(bd.steps, 1)


def under_load(load: dict[str, Any] | None, accelerator: bool) -> str | None:
    """``can't tell under load: 3 other processes used 1.8 of 2 cores ...`` where other
    processes loaded the machine while the case was measured and profiled (as ``run``'s
    verdict reads load: ``judge.load.competing``); None on a quiet machine."""
    from torchmark.judge.load import competing
    from torchmark.judge.validity import load_words

    if not load or not competing(load, accelerator):
        return None
    return (
        f"can't tell under load: {load_words(load)} while the step was measured and "
        "profiled, so its shares are the scheduler's as much as the step's; profile again "
        "on a quiet machine"
    )


def verdict(
    bd: c.Breakdown, unprofiled_s: float | None = None, load: dict[str, Any] | None = None
) -> str:
    """The step in plain words, from the largest category. ``unprofiled_s``: the step's
    median without the profiler, which tells host-wait the profiler caused from real;
    ``load``: other processes' load (``OtherLoad.facts``): under load, can't tell."""
    busy = under_load(load, bd.kind == "gpu")
    if busy:
        return busy
    s = bd.shares()
    if bd.kind == "cpu":
        overhead = s.get(c.FRAMEWORK, 0.0) + s.get(c.PYTHON, 0.0)
        if overhead >= BOUND_SHARE:
            return (
                f"overhead-bound: {overhead:.0f} % of the step is framework and Python overhead "
                f"outside compute ({s.get(c.FRAMEWORK, 0):.0f} % {c.FRAMEWORK}, "
                f"{s.get(c.PYTHON, 0):.0f} % {c.PYTHON}); more work per call (a larger batch) "
                "or torch.compile removes it, a faster processor does not"
            )
        work = {k: s.get(k, 0.0) for k in (c.MATMUL, c.ELEMENTWISE, c.REDUCTION, c.MEMORY)}
        top = max(work, key=lambda k: work[k])
        kind = "compute" if top == c.MATMUL else "memory"
        return f"{kind}-heavy: {work[top]:.0f} % of the step is {top} (largest category)"
    wait = s.get(c.HOST_WAIT, 0.0)
    fill = 100 * device_busy_us(bd) / (unprofiled_s * 1e6) if unprofiled_s else None
    if wait >= BOUND_SHARE and fill is not None and fill >= BUSY_SHARE:
        return (
            f"GPU-busy: its work takes {fmt.duration(device_busy_us(bd) / 1e6)} per step, "
            f"{fill:.0f} % of the unprofiled step ({fmt.duration(unprofiled_s)}); the {wait:.0f} % "
            "host-wait seen here is the profiler's own cost (it traces every launch)"
        )
    if wait >= BOUND_SHARE:
        return (
            f"launch-bound: {wait:.0f} % of the step is host-wait (the GPU idle, waiting for "
            "the CPU to launch); try CUDA graphs or torch.compile"
        )
    top = max(bd.categories, key=lambda k: bd.categories[k])
    return f"{s.get(top, 0):.0f} % of the step is {top} (largest category)"
