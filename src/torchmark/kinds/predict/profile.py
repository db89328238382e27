"""A model's step as this machine runs it, op by op (``workloads.oplist``), for the side a
prediction is for: on the CPU as the CPU runs it; for a GPU with the optimizers a CUDA run
gets (foreach), so the op list is the one a GPU would launch. Built-in workloads step
exactly as ``torchmark run`` times them; your model as ``torchmark model`` does (eval,
``torch.no_grad()``, fp32), its inputs copied in and its outputs back for the end-to-end
view."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchmark.devices.cpu import CPUDevice
from torchmark.errors import CaseSkipped, InputError
from torchmark.kinds.predict.machine import CaseKey
from torchmark.kinds.predict.work import Kernel, Side, Work, from_ops
from torchmark.user.inputs import InputFactory, tensors_in
from torchmark.workloads.oplist import Op, accelerator_optimizers, record

# Calls before the recorded one: lazy initialisation (an optimizer's state, cuDNN-like
# plans on the CPU) is not the steady step's work.
WARM_CALLS = 2


@dataclass
class Profiled:
    """One case's step recorded here."""

    label: str
    workload: str
    side: Side
    params: dict[str, Any]
    ops: list[Op]
    h2d_bytes: float = 0.0  # inputs copied in per call (end-to-end view)
    d2h_bytes: float = 0.0  # outputs copied back
    memory_bytes: float = 0.0  # at least: parameters, buffers, inputs (train: grads, state)
    notes: list[str] = field(default_factory=list)

    def work(self, view: str = "device") -> Work:
        """Its Work: ``device`` (inputs resident) or ``e2e`` (copied in and out)."""
        rows = [asdict(o) for o in self.ops]
        e2e = view == "e2e" and self.side == "gpu"
        return from_ops(
            rows, self.label, self.workload, self.side,
            h2d_bytes=self.h2d_bytes if e2e else 0.0, d2h_bytes=self.d2h_bytes if e2e else 0.0,
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        k = [o for o in self.ops if o.kernel]
        fam: dict[str, int] = {}
        for o in k:
            fam[o.family] = fam.get(o.family, 0) + 1
        return {
            "launches": len(k),
            "flops": sum(o.flops for o in k),
            "bytes": sum(o.bytes for o in k),
            "families": fam,
            "dtypes": sorted({o.dtype for o in k if o.flops and o.dtype}),
        }


@contextlib.contextmanager
def _for(side: Side) -> Iterator[None]:
    with accelerator_optimizers() if side == "gpu" else contextlib.nullcontext():
        yield


def _recorded(step: Callable[[], Any]) -> tuple[Any, list[Op]]:
    for _ in range(WARM_CALLS):
        step()
    return record(step)


def _nbytes(x: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors_in(x)))


def builtin(workload: str, params: dict[str, Any], side: Side) -> Profiled:
    """A built-in model case (``torchmark run``'s step at these params) recorded here."""
    from torchmark.workloads import load_builtins
    from torchmark.workloads.base import WORKLOADS, Case

    load_builtins()
    w = WORKLOADS.get(workload)()
    scenario = str(params.get("scenario", "infer"))
    case = Case(workload, scenario, CPUDevice(), tuple(params.items()))
    with _for(side):
        prepared = w.prepare(case)  # CaseSkipped: the variant does not run here
    try:
        _, ops = _recorded(prepared.fn)
    finally:
        if prepared.teardown:
            prepared.teardown()
    label = f"{workload}/{scenario} b={params.get('batch')}"
    return Profiled(label, workload, side, dict(params), ops)


def user(
    model: torch.nn.Module, factory: InputFactory, batch: int, name: str, side: Side
) -> Profiled:
    """Your model at ``batch`` as ``torchmark model`` steps it: eval, no_grad, fp32."""
    host = factory(batch)

    def step() -> Any:
        with torch.no_grad():
            return host.call(model)

    try:
        out, ops = _recorded(step)
    except Exception as e:
        raise InputError(f"the model failed at batch {batch} here: {type(e).__name__}: {e}") from e
    inputs = _nbytes(host.args) + _nbytes(host.kwargs)
    state = _nbytes([*model.parameters(), *model.buffers()])
    return Profiled(
        f"{name} b={batch}", name, side, {"batch": batch}, ops,
        h2d_bytes=inputs, d2h_bytes=_nbytes(out), memory_bytes=state + inputs,
    )  # fmt: skip


def reference_works(
    cases: list[tuple[CaseKey, str, dict[str, Any]]],
) -> tuple[dict[CaseKey, Work], list[str]]:
    """The Work of a target run's built-in model cases ((key, workload, params) each),
    recorded here; and why a case could not be (the run then learns nothing from it)."""
    out: dict[CaseKey, Work] = {}
    said: list[str] = []
    for key, workload, params in cases:
        try:
            out[key] = _builtin_work(workload, tuple(sorted(params.items())), key[0])
        except (CaseSkipped, InputError, KeyError, RuntimeError) as e:
            said.append(f"{workload} {params}: not profiled here ({type(e).__name__}: {e})")
    return out, said


@functools.cache
def _builtin_work(workload: str, params: tuple[tuple[str, Any], ...], side: Any) -> Work:
    """A built-in case's Work, recorded once per install (kept in the user cache directory,
    keyed by the code that records it): the same op list every time, and a reference run's
    resnet50 takes seconds to build and record on 2 cores."""
    key = f"{workload}|{side}|{json.dumps(params)}"
    path = _cache_file(workload)
    kept: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
    if isinstance(kept.get(key), dict):
        with contextlib.suppress(TypeError, KeyError):
            w = kept[key]
            return Work(**{**w, "kernels": tuple(Kernel(**k) for k in w["kernels"])})
    work = builtin(workload, dict(params), side).work()
    kept[key] = dataclasses.asdict(work)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next call
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kept))
        tmp.replace(path)
    return work


def _cache_file(workload: str) -> Path:
    """Per install: torch's and torchmark's versions, and the recorder's and the workload's
    code (their files' change times)."""
    import platformdirs

    from torchmark import __version__
    from torchmark.workloads import oplist
    from torchmark.workloads.base import WORKLOADS

    files = [Path(oplist.__file__), Path(__file__)]
    with contextlib.suppress(KeyError, TypeError, OSError):
        files.append(Path(inspect.getfile(WORKLOADS.get(workload))))
    h = hashlib.sha1(f"{torch.__version__}|{__version__}".encode())
    for f in files:
        with contextlib.suppress(OSError):
            h.update(f"{f}:{f.stat().st_mtime_ns}".encode())
    return (
        Path(platformdirs.user_cache_dir("torchmark")) / f"predict-works-{h.hexdigest()[:16]}.json"
    )
