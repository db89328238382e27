"""A machine as one of its runs teaches it: the measured ceilings of one side (its host CPU
or its first accelerator), its precision switches, threads and memory, and the cases it
measured, keyed so that the same case on two machines pairs up. Pure: no torch."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from torchmark.hardware import kernels
from torchmark.judge import verdicts
from torchmark.kinds.predict.work import Kernel, Side, side_of
from torchmark.results import Result, RunRecord

CaseKey = tuple[str, str, str, tuple[tuple[str, str], ...]]  # side, workload, variant, params


def case_key(side: Side, workload: str, variant: str, params: dict[str, Any]) -> CaseKey:
    return side, workload, variant, tuple(sorted((k, str(v)) for k, v in params.items()))


@dataclass(frozen=True)
class Case:
    """One result a machine measured, as the predictor reads it."""

    key: CaseKey
    result: Result
    median_s: float

    @property
    def workload(self) -> str:
        return self.result.workload

    @property
    def is_model(self) -> bool:
        """A model step (built-in or the user's: a batch of items), not a micro-benchmark."""
        return "batch" in self.result.params

    @property
    def label(self) -> str:
        p = {k: v for k, v in self.result.params.items() if k not in ("scenario", "precision")}
        short = ",".join(f"{k}={v}" for k, v in p.items())
        return f"{self.key[0]} {self.workload}/{self.result.variant} {short}".strip()


@dataclass
class Calibration:
    """What a run teaches about its own machine (one side)."""

    e_c: dict[str, float] = field(default_factory=dict)  # dtype -> large-GEMM efficiency
    e_m: float = 1.0  # streaming efficiency (add, triad)
    h: float | None = None  # host seconds per launch, from its launch-bound model cases
    h_cases: tuple[str, ...] = ()  # the cases h was learned from


@dataclass
class Machine:
    name: str  # "h100-quick cuda:0"
    side: Side
    device: str  # the device's name in its run: "cuda:0", "cpu"
    model: str  # "NVIDIA H100 80GB HBM3"
    ceilings: dict[str, float]
    cases: dict[CaseKey, Case]
    precision: dict[str, Any]
    threads: int | None
    memory_bytes: int | None
    record: RunRecord
    calib: Calibration = field(default_factory=Calibration)

    def ceiling(self, key: str) -> float | None:
        return self.ceilings.get(key)

    def peak_key(self, k: Kernel) -> str | None:
        return kernels.peak_key(k.family, k.dtype, self.side == "gpu", self.precision)

    def peak(self, k: Kernel) -> float | None:
        key = self.peak_key(k)
        return self.ceilings.get(key) if key else None

    @property
    def bandwidth(self) -> float | None:
        return self.ceilings.get("bandwidth")

    @property
    def dispatch(self) -> float | None:
        return self.ceilings.get("dispatch")

    def link(self, direction: str, pinned: bool) -> float | None:
        """The host-device copy rate (``h2d``/``d2h``), pageable or pinned; the other kind
        where one was not measured (a run judged against h2d:pinned only)."""
        want = f"{direction}:{'pinned' if pinned else 'pageable'}"
        other = f"{direction}:{'pageable' if pinned else 'pinned'}"
        return self.ceilings.get(want) or self.ceilings.get(other)


def machine(record: RunRecord, side: Side, name: str | None = None) -> Machine | None:
    """``record``'s machine, one side: its first accelerator (``gpu``) or its host CPU;
    None where the run measured no such device."""
    devices = [c.device for c in record.ceilings] + [r.device for r in record.results]
    found = next((d for d in dict.fromkeys(devices) if side_of(d) == side), None)
    if found is None:
        return None
    info = record.environment.get("devices", {}).get(found, {})
    info = info if isinstance(info, dict) else {}
    cases: dict[CaseKey, Case] = {}
    for r in record.results:
        # a number its own verdict rejects teaches nothing (invalid, WRONG, skipped)
        if r.device != found or not r.ok or not verdicts.may(r, "compare"):
            continue
        key = case_key(side, r.workload, r.variant, r.params)
        cases[key] = Case(key, r, statistics.median(r.samples_s))
    threads = (record.environment.get("threads") or {}).get("torch_num_threads")
    return Machine(
        name=name or f"{record.run_id or 'run'} {found}",
        side=side,
        device=found,
        model=str(info.get("model") or found),
        ceilings={c.key: c.value for c in record.ceilings if c.device == found},
        cases=cases,
        precision=dict(record.environment.get("precision") or {}),
        threads=threads if isinstance(threads, int) else None,
        memory_bytes=memory if isinstance(memory := info.get("memory_bytes"), int) else None,
        record=record,
    )
