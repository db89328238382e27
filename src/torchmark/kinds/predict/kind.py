"""``torchmark predict MODEL --on TARGET``: your model's step time on a machine you don't
have, from its op profile here and a measured run of that machine.

    target   = a run of the machine (a committed reference run, a stored run, a file)
    machine  = its ceilings, its matmul and add/triad efficiencies, its host time per
               launch from its launch-bound model cases (``terms.calibrate``), the
               predicted workload's own cases left out
    profile  = each case's step recorded here, as that side would launch it (``profile``)
    for each case: refused (an op family or dtype no reference covers, memory that does not
               fit) or predicted (``terms.predict_unanchored``), with the interval the
               target's held-out model cases give (``terms.residuals``) and its dominant term
    measured = the same case in the target's run or a run of the same device: predicted vs
               measured
    here     = with a run of your model on this CPU: CPU (measured) vs target (predicted),
               and the break-even batch

Stored as a run of kind ``predict`` that holds no results: a prediction is not a
measurement (``judge.verdicts``: never ranked, compared as faster or slower, averaged or
submitted). No case loop: nothing is measured here (``--here``'s run is ``model``'s own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchmark.devices.cpu import CPUDevice
from torchmark.errors import CaseSkipped, InputError, UnknownNameError
from torchmark.hardware import kernels
from torchmark.kinds.predict import here as here_mod
from torchmark.kinds.predict import profile as prof_mod
from torchmark.kinds.predict.machine import CaseKey, Machine, machine
from torchmark.kinds.predict.terms import (
    calibrated,
    interval,
    predict_unanchored,
    residuals,
)
from torchmark.kinds.predict.work import Side, side_of, unknown_families
from torchmark.results import RunRecord
from torchmark.results.payloads import Measured, PredictedCase, PredictPayload, PredictTarget
from torchmark.run.record import open_run

if TYPE_CHECKING:
    from torch import nn

    from torchmark.run.session import Events
    from torchmark.store.base import ResultStore
    from torchmark.user.inputs import InputFactory

DEFAULT_BATCHES = (1, 8, 64)


@dataclass(frozen=True)
class PredictConfig:
    """What a ``predict`` run was asked, as its record stores it (``as_dict``)."""

    model: str  # a built-in model workload, or the user's model's name
    target: str  # as given
    side: str = "auto"  # gpu: the target's first accelerator; cpu: its host; auto: gpu if any
    batches: tuple[int, ...] = ()
    scenario: str = "infer"
    precision: str = "fp32"
    threads: int | None = None  # a CPU target at this many threads (only its own is known)
    given: Mapping[str, Any] = field(default_factory=dict)  # the caller's own (CLI: SPEC)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["batches"] = list(self.batches)
        d.update(d.pop("given"))
        return d


@dataclass(frozen=True)
class YourModel:
    """The user's model: the module, its inputs and its name in tables."""

    module: nn.Module
    factory: InputFactory
    name: str


def builtin_models() -> list[str]:
    """The built-in model workloads a prediction can profile here."""
    from torchmark.workloads import load_builtins
    from torchmark.workloads.base import WORKLOADS

    load_builtins()
    return [n for n in WORKLOADS.names() if WORKLOADS.get(n).group == "model"]


def choose_side(target: RunRecord, asked: str) -> Side:
    sides = {side_of(c.device) for c in target.ceilings} | {
        side_of(r.device) for r in target.results
    }
    if asked == "auto":
        return "gpu" if "gpu" in sides else "cpu"
    if asked not in ("gpu", "cpu"):
        raise InputError(
            f"--device {asked!r}: write gpu (the target's accelerator) or cpu (its host)"
        )
    if asked not in sides:
        what = "no accelerator" if asked == "gpu" else "no host CPU result or ceiling"
        raise InputError(
            f"the target run has {what}: nothing to predict on ({', '.join(sorted(sides))})"
        )
    return asked


def predict(
    cfg: PredictConfig,
    target: RunRecord,
    source: str,
    *,
    user: YourModel | None = None,
    measured: Sequence[tuple[str, RunRecord]] = (),
    here: RunRecord | None = None,
    store: ResultStore | None = None,
    events: Events | None = None,
    name: str | None = None,
) -> RunRecord:
    """Predict ``cfg.model`` (``user``'s model when given) on ``target``'s machine; store it
    as a ``predict`` run. ``source``: where the target run came from, in words;
    ``measured``: (where, run) of measurements to hold the prediction against (the target's
    own run is always one); ``here``: a ``model`` run of the user's model on this CPU;
    ``name``: the target's name in tables (default: as given)."""
    side = choose_side(target, cfg.side)
    tgt0 = machine(target, side, name or cfg.target)
    assert tgt0 is not None  # choose_side found the side
    session = open_run("predict", cfg, [CPUDevice()], store, events)
    with session:
        payload = session.record.payload
        assert isinstance(payload, PredictPayload)
        payload.model = user.name if user is not None else cfg.model
        workload = payload.model
        own = None if user is not None else cfg.model  # the predicted workload: left out
        works, said = _reference_works(tgt0)
        payload.notes += said
        tgt = calibrated(tgt0, works, exclude=own)
        payload.target = _target(cfg, target, source, tgt)
        found = residuals(tgt0, works, exclude=own)
        batches = cfg.batches or _default_batches(tgt, own)
        for b in batches:
            payload.cases += _cases(cfg, b, side, tgt, found, user)
        payload.measured = _measured(payload.cases, [("the target's run", target), *measured], tgt)
        if here is not None:
            payload.here = here_mod.compare(payload.cases, here, workload)
            payload.here_run = here.run_id
            payload.break_even = here_mod.break_even(payload.here, tgt.model)
        if not any(c.predicted for c in payload.cases):
            payload.refused = "no case could be predicted: " + "; ".join(
                dict.fromkeys(c.refused or "" for c in payload.cases)
            )
    return session.record


def _default_batches(tgt: Machine, own: str | None) -> tuple[int, ...]:
    """A built-in model: the batches the target measured it at (so that predicted meets
    measured), else ``DEFAULT_BATCHES``."""
    if own is not None:
        mine = sorted({int(c.result.params["batch"]) for c in tgt.cases.values()
                       if c.workload == own and c.is_model})  # fmt: skip
        if mine:
            return tuple(mine)
    return DEFAULT_BATCHES


def _reference_works(m: Machine) -> tuple[dict[CaseKey, Any], list[str]]:
    """The Work of the target's built-in model cases, recorded here: what its host time
    per launch and the intervals are learned from."""
    names = set(builtin_models())
    cases = [(k, c.workload, dict(c.result.params)) for k, c in m.cases.items()
             if c.is_model and c.workload in names]  # fmt: skip
    return prof_mod.reference_works(cases)


def _target(cfg: PredictConfig, record: RunRecord, source: str, m: Machine) -> PredictTarget:
    cpu = record.environment.get("devices", {}).get("cpu", {})
    return PredictTarget(
        name=m.name, source=source, run_id=record.run_id, fingerprint=record.fingerprint,
        side=m.side, device=m.device, model=m.model,
        host=cpu.get("model") if isinstance(cpu, dict) else None,
        threads=m.threads, memory_bytes=m.memory_bytes,
        calibration={"e_c": m.calib.e_c, "e_m": m.calib.e_m, "h_s": m.calib.h,
                     "h_cases": list(m.calib.h_cases)},
    )  # fmt: skip


def _cases(
    cfg: PredictConfig, batch: int, side: Side, tgt: Machine, found: Any, user: YourModel | None
) -> list[PredictedCase]:
    """One batch's cases: a built-in's one view (device-timed on a GPU, as ``run`` times
    it); your model's device-only and end-to-end views on a GPU (one on a CPU)."""
    if user is None:
        params = {"scenario": cfg.scenario, "precision": cfg.precision, "batch": batch}
        base = PredictedCase(case=f"{cfg.model}/{cfg.scenario} {cfg.precision} b={batch}",
                             workload=cfg.model, variant=cfg.scenario, params=params, side=side,
                             items=batch)  # fmt: skip
        try:
            prof = prof_mod.builtin(cfg.model, params, side)
        except (CaseSkipped, InputError, UnknownNameError) as e:
            return [base.model_copy(update={"refused": f"not profiled here: {e}"})]
        return [_one(base, prof, "device", tgt, found, cfg)]
    if cfg.precision != "fp32" or cfg.scenario != "infer":
        why = "your model is predicted as `torchmark model` measures it: infer, fp32"
        return [
            PredictedCase(
                case=f"{user.name} b={batch}",
                workload=user.name,
                variant="e2e",
                params={"batch": batch},
                side=side,
                items=batch,
                refused=why,
            )
        ]
    prof = prof_mod.user(user.module, user.factory, batch, user.name, side)
    views = ("device", "e2e") if side == "gpu" else ("e2e",)
    return [
        _one(PredictedCase(case=f"{user.name} b={batch} ({view})", workload=user.name,
                           variant=view, params={"batch": batch}, side=side, items=batch),
             prof, view, tgt, found, cfg)
        for view in views
    ]  # fmt: skip


def _one(
    base: PredictedCase,
    prof: prof_mod.Profiled,
    view: str,
    tgt: Machine,
    found: Any,
    cfg: PredictConfig,
) -> PredictedCase:
    w = prof.work(view)
    pc = base.model_copy(update={"profile": prof.summary()})
    why = _refusal(w, prof, tgt, cfg)
    if why is None:
        p = predict_unanchored(w, tgt)
        why = p.refused
    if why is not None:
        return pc.model_copy(update={"refused": why})
    iv = interval(p, found)
    if iv is None:
        return pc.model_copy(update={
            "refused": f"{tgt.name} holds no other model workload to check a prediction "
            "against (the interval is learned from them)"})  # fmt: skip
    return pc.model_copy(
        update={
            "seconds": p.seconds, "low": iv.low, "high": iv.high, "dominant": p.dominant,
            "terms": p.terms.as_dict(), "floor_s": p.floor_s, "basis": p.basis,
            "interval_basis": iv.basis,
        }
    )  # fmt: skip


def _refusal(w: Any, prof: prof_mod.Profiled, tgt: Machine, cfg: PredictConfig) -> str | None:
    """Why a case cannot be predicted honestly on ``tgt``, or None."""
    odd = unknown_families(w)
    if odd:
        return (
            f"op family {', '.join(sorted(odd))}: no reference run measures kernels like "
            "these (attention, custom or library ops), so nothing teaches their price"
        )
    for k in w.kernels:
        if k.flops and k.family in kernels.DENSE and tgt.peak(k) is None:
            key = tgt.peak_key(k) or f"matmul:{k.dtype}"
            return (
                f"no {key} ceiling on {tgt.name}'s {tgt.device}: its {k.dtype} FLOPs have no "
                "measured peak to price them at"
            )
    if tgt.memory_bytes and prof.memory_bytes > tgt.memory_bytes:
        return (
            f"does not fit: it needs at least {prof.memory_bytes / 2**30:.1f} GiB (parameters, "
            f"buffers, inputs) of the {tgt.memory_bytes / 2**30:.1f} GiB on {tgt.model}"
        )
    if tgt.side == "cpu" and cfg.threads and tgt.threads and cfg.threads != tgt.threads:
        return (
            f"a CPU at {cfg.threads} threads: {tgt.name}'s host was measured at {tgt.threads}, and "
            "no ceiling says how its host time or GEMM efficiency change with threads"
        )
    return None


def _same(r: Any, c: PredictedCase) -> bool:
    """The measured result is the predicted case: same workload, view and parameters."""
    if r.workload != c.workload or r.variant != c.variant:
        return False
    return all(str(r.params.get(k)) == str(v) for k, v in c.params.items())


def _measured(
    cases: Sequence[PredictedCase], runs: Sequence[tuple[str, RunRecord]], tgt: Machine
) -> list[Measured]:
    """Each predicted case against a measurement of the same case on the same device
    model (the target's own run first)."""
    out: list[Measured] = []
    for c in cases:
        if not c.predicted:
            continue
        for where, run in runs:
            m = machine(run, tgt.side, where)
            if m is None or m.model != tgt.model:
                continue
            hit = next((x for x in m.cases.values() if _same(x.result, c)), None)
            if hit is None:
                continue
            assert c.low is not None and c.high is not None and c.seconds is not None
            same = run.fingerprint == tgt.record.fingerprint
            out.append(
                Measured(
                    case=c.case, measured_s=hit.median_s, run_id=run.run_id,
                    source=where if same else f"{where} (another machine with a {m.model})",
                    inside=c.low <= hit.median_s <= c.high,
                    error_pct=100 * (c.seconds / hit.median_s - 1),
                )
            )  # fmt: skip
            break
    return out
