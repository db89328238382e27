"""What a ``torch.profiler`` trace says before any categorising: its complete events as
spans, the profiled steps' windows, and what an op call's recorded shapes tell (its call
key, a GEMM's operands and dtype, the bytes its inputs hold)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GEMM_OPERANDS",
    "STEP",
    "Event",
    "GemmTime",
    "Span",
    "call_key",
    "call_name",
    "gemm_key",
    "spans",
    "steps",
    "tensor_bytes",
]

Event = Mapping[str, Any]

STEP = re.compile(r"^ProfilerStep#\d+$")


@dataclass(frozen=True)
class Span:
    start: float  # µs
    end: float
    name: str
    cat: str
    tid: Any = None
    correlation: int | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dur(self) -> float:
        return self.end - self.start


def spans(events: Iterable[Event]) -> list[Span]:
    """The complete ("X") events, as spans."""
    out = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        ts, args = float(e["ts"]), e.get("args") or {}
        corr = args.get("correlation")
        out.append(
            Span(
                ts,
                ts + float(e["dur"]),
                str(e.get("name", "")),
                str(e.get("cat", "")),
                e.get("tid"),
                int(corr) if corr is not None else None,
                args,
            )
        )
    return out


def steps(all_spans: Sequence[Span]) -> list[Span]:
    """The profiled steps' windows, in order: the host's ``ProfilerStep#N`` annotations.
    On CUDA, Kineto also writes each as a ``gpu_user_annotation`` on the GPU's timeline
    (first to last kernel the step launched); counting those too made 10 steps of 5 on an
    H100, each GPU span also counted as wall time."""
    return sorted(
        (s for s in all_spans if STEP.match(s.name) and not s.cat.startswith("gpu_")),
        key=lambda s: s.start,
    )


# The GEMM ops whose operand shapes set tensor-core alignment, with the positions of their
# two matrix operands among the inputs (addmm's first input is the bias). Convolutions and
# attention are left out: cuDNN and the attention kernels pad odd sizes themselves.
GEMM_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::bmm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::baddbmm": (1, 2),
    "aten::addbmm": (1, 2),
    "aten::_addmm_activation": (1, 2),
}


@dataclass
class GemmTime:
    """One GEMM op at one operand shape and dtype: its calls and time over the steps."""

    op: str
    dims: list[list[int]]  # the two matrix operands' shapes, e.g. [[16384, 768], [768, 50257]]
    dtype: str  # as record_shapes names it: "c10::BFloat16", "float"
    calls: int = 0
    us: float = 0.0


def gemm_key(name: str, args: Mapping[str, Any]) -> tuple[str, GemmTime] | None:
    """A GEMM op call (record_shapes args) by its operand shapes and dtype; None for any
    other op, or when its shapes were not recorded."""
    pos = GEMM_OPERANDS.get(name)
    dims, types = args.get("Input Dims"), args.get("Input type")
    if pos is None or not dims or not types or len(dims) <= max(pos) or len(types) <= pos[0]:
        return None
    mats = [dims[i] for i in pos]
    if not all(
        isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d) for d in mats
    ):
        return None
    dtype = str(types[pos[0]])
    return f"{call_key(name, mats)}|{dtype}", GemmTime(name, mats, dtype)


def call_key(name: str, dims: Any) -> str:
    """An op call by name and input shapes, as torch's ``key_averages(group_by_input_shape)``
    tells its FLOPs apart: ``aten::mm|[[64,32],[32,16]]``."""
    return f"{name}|{json.dumps(dims, separators=(',', ':'))}"


def call_name(key: str) -> str:
    return key.split("|", 1)[0]


ITEMSIZE = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::qint8": 1,
    "c10::quint8": 1,
}


def input_dtype(args: Mapping[str, Any]) -> str | None:
    """The first tensor input's type as record_shapes names it (``float``, ``c10::Half``):
    the dtype a GEMM's or convolution's FLOPs run in; None where shapes were not recorded."""
    for t in args.get("Input type") or []:
        if t in ITEMSIZE:
            return str(t)
    return None


def tensor_bytes(args: Mapping[str, Any]) -> float | None:
    """Bytes of an op's tensor inputs (record_shapes): what it must at least read."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types:
        return None
    total, known = 0.0, False
    for d, t in zip(dims, types, strict=False):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and t in ITEMSIZE:
            n = 1
            for x in d:
                n *= x
            total += n * ITEMSIZE[t]
            known = True
    return total if known else None
