"""What one call of a case does, as the predictor sees it: its kernels (family, dtype, FLOPs,
bytes), the calls that launch them, and bytes over the host-device link.

A model's work is its op list recorded here (``workloads.oplist``, saved in a prediction as
plain rows); a micro-benchmark's is the work it declares (``Result.work``), one bare op.
Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from torchmark.hardware import kernels
from torchmark.results import Result, is_host

Side = Literal["cpu", "gpu"]  # the host CPU, or the machine's (first) accelerator


def side_of(device: str) -> Side:
    return "cpu" if is_host(device) else "gpu"


@dataclass(frozen=True)
class Kernel:
    family: str  # hardware.kernels.family
    dtype: str  # float32 / tf32 / float16 / bfloat16 / int8
    flops: float
    bytes: float


@dataclass(frozen=True)
class Work:
    """What one call of a case does on ``side``."""

    label: str
    workload: str
    side: Side
    kernels: tuple[Kernel, ...]
    launches: int  # op calls that launch work (on a GPU: >= 1 kernel each)
    h2d_bytes: float = 0.0  # host -> device per call (pageable unless ``pinned``)
    d2h_bytes: float = 0.0
    host_fill_bytes: float = 0.0  # fresh host memory written per call (allocation + fill)
    pinned: bool = False
    # ops called bare (a micro-benchmark): each pays the dispatch floor, not a module's
    # Python, so its host time is the dispatch ceiling's and scales as that ceiling does
    bare: bool = False

    def family_mix(self) -> dict[str, float]:
        counts: dict[str, float] = {}
        for k in self.kernels:
            counts[k.family] = counts.get(k.family, 0) + 1
        n = math.sqrt(sum(v * v for v in counts.values())) or 1.0
        return {f: v / n for f, v in counts.items()}

    def similarity(self, other: Work) -> float:
        """Cosine of the two op-family mixes: how alike two steps' host work is."""
        a, b = self.family_mix(), other.family_mix()
        return sum(a.get(f, 0.0) * b.get(f, 0.0) for f in a)

    @property
    def families(self) -> set[str]:
        return {k.family for k in self.kernels}


def from_ops(
    ops: Iterable[Mapping[str, Any]], label: str, workload: str, side: Side, **extra: Any
) -> Work:
    """A model step's Work from its recorded ops (``workloads.oplist.Op`` as dicts): each
    op that launches a kernel is one kernel and one launch."""
    ks = tuple(
        Kernel(str(o["family"]), str(o.get("dtype") or "float32"), float(o["flops"]),
               float(o["bytes"]))
        for o in ops
        if o.get("kernel")
    )  # fmt: skip
    return Work(label, workload, side, ks, len(ks), **extra)


def micro_work(r: Result) -> Work | None:
    """A micro-benchmark's Work from what it declares, as one bare op; None for a case no
    rule here describes (a model: its Work comes from its profile)."""
    side = side_of(r.device)
    label = f"{r.device} {r.workload}/{r.variant}"
    if r.workload == "matmul":
        k = Kernel("gemm", r.variant, r.work.flops, r.work.bytes)
        return Work(label, r.workload, side, (k,), 1, bare=True)
    if r.workload in ("add", "triad"):
        k = Kernel("elementwise", "float32", r.work.flops, r.work.bytes)
        return Work(label, r.workload, side, (k,), 1, bare=True)
    if r.workload == "seed-add":
        found = r.extra.get("bytes_breakdown")
        bd: dict[str, Any] = found if isinstance(found, dict) else {}
        if r.variant == "as-published":
            b = float(bd.get("self_add_read_write", r.work.bytes))
            return Work(label, r.workload, side, (Kernel("elementwise", "float32", 0.0, b),), 1,
                        bare=True)  # fmt: skip
        add = Kernel("elementwise", "float32", 0.0, float(bd.get("add_read_write", 0.0)))
        return Work(
            label, r.workload, side, (add,), 3, bare=True,
            h2d_bytes=float(bd.get("h2d_copy", 0.0)),
            host_fill_bytes=float(bd.get("host_fill_write", 0.0)),
        )  # fmt: skip
    return None


def unknown_families(w: Work) -> set[str]:
    """Families no reference run teaches a price for (attention kernels, custom ops)."""
    return w.families - kernels.KNOWN
