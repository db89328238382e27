"""Where a step's wall time goes: categories that add up, as pure functions over trace events.

The input is the ``traceEvents`` list of a Chrome trace as ``torch.profiler`` writes it
(complete events: ``ph`` "X", ``ts``/``dur`` in µs). A step is the window of one
``ProfilerStep#N`` annotation. Every instant of the window gets exactly one category, so the
categories sum to the window's wall time by construction:

- CPU: the innermost event covering the instant on the step's thread decides, its name
  matched against ``CPU_RULES`` in order (the first match wins); no event: Python.
- GPU: every activity on any stream is considered at once and the highest of
  ``GPU_PRIORITY`` that is active wins (overlap counts once); no activity: idle, split by the
  next activity's launch (``IDLE_RULES``). Sync events are not activity (HTA counts
  ``cudaStreamSynchronize``'s GPU-side event as compute; it only waits).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchmark.kinds.profile.events import (
    GEMM_OPERANDS,
    STEP,
    Event,
    GemmTime,
    Span,
    call_key,
    gemm_key,
    input_dtype,
    spans,
    steps,
    tensor_bytes,
)

# CPU: (category, regex on the innermost event's name), tried in this order.
MATMUL = "matmul/conv"
REDUCTION = "reductions"
MEMORY = "memory ops"
ELEMENTWISE = "elementwise"
DATA = "data loading"
FRAMEWORK = "framework overhead"
PYTHON = "python (outside ops)"
OTHER = "other ops"
CPU_RULES: tuple[tuple[str, str], ...] = (
    (DATA, r"DataLoader"),
    (
        MATMUL,
        r"^aten::(mm|addmm|bmm|baddbmm|addmv|mv|dot|vdot|_addmm_activation|_int_mm|_scaled_mm"
        r"|mkldnn_convolution|_mkldnn_convolution\w*|mkldnn_linear|_slow_conv2d_\w+"
        r"|_nnpack_spatial_convolution|convolution_backward|cudnn_convolution\w*"
        r"|_scaled_dot_product_\w+|_flash_attention\w*|_efficient_attention\w*)$"
        r"|^(quantized|fbgemm|mkldnn)::\w*(linear|conv)\w*$",
    ),
    (
        REDUCTION,
        r"^aten::(sum|mean|prod|amax|amin|max|min|argmax|argmin|var|std|var_mean|std_mean"
        r"|norm|linalg_vector_norm|_softmax|_log_softmax|_softmax_backward_data"
        r"|_log_softmax_backward_data|native_layer_norm\w*|native_batch_norm\w*"
        r"|_native_batch_norm_legit\w*|batch_norm_\w+|native_group_norm\w*|topk|sort|cumsum"
        r"|logsumexp|nll_loss\w*|mse_loss\w*|max_pool\w+|avg_pool\w+|adaptive_\w+pool\w*"
        r"|_adaptive_\w+pool\w*|max_pool2d_with_indices\w*)$",
    ),
    (
        MEMORY,
        r"^aten::(copy_|_to_copy|clone|contiguous|cat|stack|empty|empty_like|empty_strided"
        r"|zeros|zeros_like|ones|ones_like|full|full_like|fill_|zero_|index|index_select"
        r"|index_put_|_index_put_impl_|gather|scatter\w*|embedding|embedding_dense_backward"
        r"|constant_pad_nd|masked_fill_|_foreach_zero_|to|resize_|narrow_copy|repeat)$",
    ),
    (
        ELEMENTWISE,
        r"^aten::(add|add_|sub|sub_|mul|mul_|div|div_|neg|relu|relu_|threshold\w*|gelu\w*"
        r"|silu\w*|sigmoid\w*|tanh\w*|hardtanh\w*|exp|log|pow|sqrt|rsqrt|reciprocal|clamp\w*"
        r"|where|addcmul_?|addcdiv_?|lerp_?|native_dropout\w*|dropout|abs|sign|sin|cos|erf"
        r"|maximum|minimum|eq|ne|lt|gt|le|ge|bitwise_\w+|logical_\w+|_foreach_\w+"
        r"|_fused_\w+|masked_fill|softplus\w*|leaky_relu\w*)$",
    ),
    # Metadata-only ops, autograd bookkeeping and annotations: no data touched.
    (
        FRAMEWORK,
        r"^aten::(view|_unsafe_view|reshape|t|transpose|permute|expand|as_strided|squeeze"
        r"|unsqueeze|select|slice|detach|detach_|alias|resolve_conj|resolve_neg|flatten"
        r"|numpy_T|_reshape_alias|lift_fresh|linear|matmul|conv2d|convolution|_convolution"
        r"|batch_norm|_batch_norm_impl_index|layer_norm|softmax|log_softmax|dropout_|chunk"
        r"|split|split_with_sizes|unbind|result_type|item|_local_scalar_dense|set_|zeros_?)$"
        r"|^autograd::|^torch::autograd::|^Optimizer\.|^nn\.Module|^Torch-Compiled"
        r"|^##|^record_param_comms",
    ),
)
CPU_RULES_NOTE = (
    f"a wrapper's own time (an op that calls other ops, e.g. aten::linear) is {FRAMEWORK}; "
    f"time on the step's thread inside no op is {PYTHON}; an op no rule names is {OTHER}"
)
_CPU = [(cat, re.compile(rx)) for cat, rx in CPU_RULES]

# GPU: the category of an instant is the highest of these active on any stream.
COMPUTE = "compute kernels"
COMM = "communication"
MEMCPY = "memcpy"
MEMSET = "memset"
HOST_WAIT = "idle: host-wait"
KERNEL_WAIT = "idle: kernel-wait"
IDLE_UNKNOWN = "idle: launch unknown"
GPU_PRIORITY = (COMPUTE, COMM, MEMCPY, MEMSET)
COMM_RX = r"nccl|rccl|ncclDevKernel|all_?reduce|all_?gather|reduce_?scatter"
SYNC_RX = r"Synchronize|cudaStreamWaitEvent|hipStreamWaitEvent"
_COMM, _SYNC = re.compile(COMM_RX, re.I), re.compile(SYNC_RX)
IDLE_RULES = (
    f"{HOST_WAIT}: the next GPU activity was launched by the host after the GPU went idle "
    "(or nothing followed in the step): the GPU waited for the CPU",
    f"{KERNEL_WAIT}: it was launched before the GPU went idle (queued work not yet started: "
    "launch latency, a dependency on another stream)",
    f"{IDLE_UNKNOWN}: its launch is not in the trace (no correlation id)",
)
GPU_CATS = {"kernel": COMPUTE, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}


def rules_text(kind: str) -> list[str]:
    """The rules a breakdown used, in words and regexes, for the report."""
    if kind == "cpu":
        lines = [f"{i}. {cat}: name matches /{rx}/" for i, (cat, rx) in enumerate(CPU_RULES, 1)]
        return [
            "each instant of the step goes to the innermost op on the step's thread; "
            "its name is tried against these rules in order:",
            *lines,
            CPU_RULES_NOTE,
        ]
    return [
        f"each instant of the step goes to the highest active of: {' > '.join(GPU_PRIORITY)} "
        f"(any stream; a kernel matching /{COMM_RX}/i is {COMM})",
        f"sync events (cat cuda_sync, names matching /{SYNC_RX}/) are never activity",
        *IDLE_RULES,
    ]


def cpu_category(name: str, has_children: bool) -> str:
    for cat, rx in _CPU:
        if rx.search(name):
            return cat
    return FRAMEWORK if has_children else OTHER


def self_segments(
    nested: Sequence[Span], lo: float, hi: float
) -> list[tuple[float, float, Span | None, bool]]:
    """[lo, hi] cut into pieces, each with its innermost span (None: none) and whether that
    span has children. Spans on one thread nest; a child that ends past its parent (clock
    rounding, ~1 µs) is clipped to it."""
    evs = sorted(
        (s for s in nested if s.end > lo and s.start < hi), key=lambda s: (s.start, -s.end)
    )
    stack: list[tuple[Span, float]] = []  # span, its end clipped to its parent's
    parents: set[int] = set()
    out: list[tuple[float, float, Span | None]] = []
    cur = lo

    def emit(until: float) -> None:
        nonlocal cur
        if until > cur:
            out.append((cur, until, stack[-1][0] if stack else None))
            cur = until

    def pop_until(t: float) -> None:
        while stack and stack[-1][1] <= t:
            emit(stack[-1][1])
            stack.pop()

    for s in evs:
        start = max(s.start, lo)
        pop_until(start)
        emit(start)
        if stack:
            parents.add(id(stack[-1][0]))
        stack.append((s, min(s.end, hi, stack[-1][1] if stack else hi)))
    pop_until(hi)
    emit(hi)
    return [(a, b, p, p is not None and id(p) in parents) for a, b, p in out]


@dataclass
class Breakdown:
    """Time per category over the profiled steps (µs), and per op's self time."""

    kind: str  # "cpu" or "gpu"
    steps: int
    wall_us: float
    categories: dict[str, float]
    ops: dict[str, OpTime]
    step_us: list[float]
    # GPU: per launched activity, the host's launch call and its wait before starting (µs)
    launch_us: list[float] = field(default_factory=list)
    queue_us: list[float] = field(default_factory=list)
    # GEMM calls by operand shapes and dtype (``gemm_key``): CPU, the op's self time; GPU,
    # the time of every kernel it launched
    gemms: dict[str, GemmTime] = field(default_factory=dict)

    def shares(self) -> dict[str, float]:
        return {k: 100 * v / self.wall_us for k, v in self.categories.items() if self.wall_us}


@dataclass
class OpTime:
    category: str
    calls: int = 0
    self_us: float = 0.0
    bytes_read: float | None = None  # input tensors, where their dims and dtype are known
    # names of the ops that called it, with how many of its calls each enclosed
    ancestors: dict[str, int] = field(default_factory=dict)
    # GPU kernel: the host op call that launched it and its callers (``call_key``s,
    # innermost first), with how many of its calls it was the longest kernel of that
    # launch, i.e. the one doing the op's work
    work_of: dict[tuple[str, ...], int] = field(default_factory=dict)
    # its (CPU) or its launching op's (GPU) first tensor input's type, as record_shapes
    # names it: the peak a matmul or convolution is placed against is its dtype's
    dtype: str | None = None


def _gemm(gemms: dict[str, GemmTime], span: Span) -> GemmTime | None:
    found = gemm_key(span.name, span.args)
    if found is None:
        return None
    return gemms.setdefault(found[0], found[1])


CPU_ORDER = (MATMUL, ELEMENTWISE, REDUCTION, MEMORY, DATA, FRAMEWORK, PYTHON, OTHER)
GPU_ORDER = (COMPUTE, COMM, MEMCPY, MEMSET, HOST_WAIT, KERNEL_WAIT, IDLE_UNKNOWN)


def cpu_breakdown(events: Iterable[Event]) -> Breakdown:
    """Host time of each step by the kind of op running, on the thread that ran the step."""
    all_spans = spans(events)
    windows = steps(all_spans)
    cats = dict.fromkeys(CPU_ORDER, 0.0)
    ops: dict[str, OpTime] = {}
    gemms: dict[str, GemmTime] = {}
    for w in windows:
        nested = [
            s
            for s in all_spans
            if s.tid == w.tid
            and s is not w
            and s.cat in ("cpu_op", "user_annotation")
            and not STEP.match(s.name)
        ]
        for a, b, s, kids in self_segments(nested, w.start, w.end):
            cat = PYTHON if s is None else cpu_category(s.name, kids)
            cats[cat] += b - a
            if s is not None:
                ops.setdefault(s.name, OpTime(cat)).self_us += b - a
                if s.name in GEMM_OPERANDS and (g := _gemm(gemms, s)) is not None:
                    g.us += b - a
        stack: list[Span] = []
        for s in sorted(nested, key=lambda s: (s.start, -s.end)):
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if w.start <= s.start < w.end:
                op = ops.setdefault(s.name, OpTime(cpu_category(s.name, False)))
                op.calls += 1
                for name in dict.fromkeys(a.name for a in stack):
                    op.ancestors[name] = op.ancestors.get(name, 0) + 1
                read = tensor_bytes(s.args)
                if read is not None:
                    op.bytes_read = (op.bytes_read or 0.0) + read
                op.dtype = op.dtype or input_dtype(s.args)
                if s.name in GEMM_OPERANDS and (g := _gemm(gemms, s)) is not None:
                    g.calls += 1
            stack.append(s)
    wall = sum(w.dur for w in windows)
    steps_us = [w.dur for w in windows]
    return Breakdown("cpu", len(windows), wall, cats, ops, steps_us, gemms=gemms)


def gpu_breakdown(events: Iterable[Event]) -> Breakdown:
    """GPU time of each step: activity by priority over all streams, idle by its cause."""
    all_spans = spans(events)
    windows = steps(all_spans)
    acts = [s for s in all_spans if s.cat in GPU_CATS and not _SYNC.search(s.name)]
    launches = {
        s.correlation: s
        for s in all_spans
        if s.cat in ("cuda_runtime", "cuda_driver") and s.correlation is not None
    }
    host = _host_ops(all_spans)
    cats = dict.fromkeys(GPU_ORDER, 0.0)
    ops: dict[str, OpTime] = {}
    launch_us: list[float] = []
    queue_us: list[float] = []
    gemms: dict[str, GemmTime] = {}
    for w in windows:
        inside = [s for s in acts if s.end > w.start and s.start < w.end]
        called: set[int] = set()  # the GEMM op calls whose kernels ran in this step
        for s in inside:
            launched = launches.get(s.correlation) if s.correlation is not None else None
            if launched is not None and w.start <= s.start < w.end:
                launch_us.append(launched.dur)
                queue_us.append(max(0.0, s.start - launched.end))
        for a, b, cat in _activity_segments(inside, w.start, w.end):
            if cat is None:
                cat = _idle_cause(a, b, inside, launches)
            cats[cat] += b - a
        main: dict[int, Span] = {}  # per launching host op: its longest kernel
        for s in inside:
            if w.start <= s.start < w.end:
                op = ops.setdefault(s.name, OpTime(_gpu_cat(s)))
                op.calls += 1
                op.self_us += min(s.end, w.end) - s.start
                raw = s.args.get("External id")
                ext = int(raw) if raw is not None else None  # a trace may write it as text
                if ext is not None and (ext not in main or s.dur > main[ext].dur):
                    main[ext] = s
                gemm = host.gemms.get(ext) if ext is not None else None
                if gemm is not None:
                    key, like, call = gemm
                    g = gemms.setdefault(key, GemmTime(like.op, like.dims, like.dtype))
                    g.us += min(s.end, w.end) - s.start
                    g.calls += call not in called
                    called.add(call)
        for ext, s in main.items():
            if ext in host.chains:
                op = ops[s.name]
                chain = host.chains[ext]
                op.work_of[chain] = op.work_of.get(chain, 0) + 1
                read = tensor_bytes(host.args[ext])
                if read is not None:
                    op.bytes_read = (op.bytes_read or 0.0) + read
                op.dtype = op.dtype or input_dtype(host.args[ext])
    wall = sum(w.dur for w in windows)
    steps_us = [w.dur for w in windows]
    return Breakdown("gpu", len(windows), wall, cats, ops, steps_us, launch_us, queue_us, gemms)


@dataclass
class _HostOps:
    ops: list[Span]
    chains: dict[int, tuple[str, ...]]  # External id -> its op's call_key and its callers'
    args: dict[int, Mapping[str, Any]]
    # External id -> the innermost GEMM op enclosing that launch: its ``gemm_key``, shapes,
    # and which call it is (several launches inside one call count it once)
    gemms: dict[int, tuple[str, GemmTime, int]] = field(default_factory=dict)


def _host_ops(all_spans: Sequence[Span]) -> _HostOps:
    """The host's ops, and for each External id (what a kernel names its launching op by)
    the op's ``call_key`` with its enclosing ops', innermost first."""
    ops = sorted((s for s in all_spans if s.cat == "cpu_op"), key=lambda s: (s.start, -s.end))
    chains: dict[int, tuple[str, ...]] = {}
    args: dict[int, Mapping[str, Any]] = {}
    gemms: dict[int, tuple[str, GemmTime, int]] = {}
    # per thread, the open ops: each with its call_key and the innermost GEMM at or above
    # it, made once when it opens (not once per launch below it: a key is a json.dumps)
    stacks: dict[Any, list[tuple[Span, str, tuple[str, GemmTime, int] | None]]] = {}
    for s in ops:
        stack = stacks.setdefault(s.tid, [])
        while stack and stack[-1][0].end <= s.start:
            stack.pop()
        g = gemm_key(s.name, s.args)
        gemm = (*g, id(s)) if g is not None else stack[-1][2] if stack else None
        stack.append((s, call_key(s.name, s.args.get("Input Dims")), gemm))
        ext = s.args.get("External id")
        if ext is not None:
            chains[int(ext)] = tuple(key for _, key, _ in reversed(stack))
            args[int(ext)] = s.args
            if gemm is not None:
                gemms[int(ext)] = gemm
    return _HostOps(ops, chains, args, gemms)


def _gpu_cat(s: Span) -> str:
    cat = GPU_CATS[s.cat]
    return COMM if cat == COMPUTE and _COMM.search(s.name) else cat


def _activity_segments(
    inside: Sequence[Span], lo: float, hi: float
) -> list[tuple[float, float, str | None]]:
    marks: list[tuple[float, int, str]] = []
    for s in inside:
        c = _gpu_cat(s)
        marks += [(max(s.start, lo), 1, c), (min(s.end, hi), -1, c)]
    marks.sort(key=lambda m: (m[0], m[1]))
    active = dict.fromkeys(GPU_PRIORITY, 0)
    out: list[tuple[float, float, str | None]] = []
    cur = lo
    for t, d, c in marks:
        if t > cur:
            top = next((p for p in GPU_PRIORITY if active[p] > 0), None)
            out.append((cur, t, top))
            cur = t
        active[c] += d
    if hi > cur:
        out.append((cur, hi, None))
    return out


def _idle_cause(a: float, b: float, inside: Sequence[Span], launches: Mapping[int, Span]) -> str:
    nxt = [s for s in inside if s.start >= b]
    if not nxt:
        return HOST_WAIT  # nothing more on the GPU this step: the host still had work
    first = min(s.start for s in nxt)
    ids = [s.correlation for s in nxt if s.start == first and s.correlation is not None]
    known = [launches[i] for i in ids if i in launches]
    if not known:
        return IDLE_UNKNOWN
    return HOST_WAIT if min(k.start for k in known) >= a else KERNEL_WAIT
