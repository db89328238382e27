"""A case's step time on a machine it was not measured on, from its work and the machine's
measured ceilings and cases: terms, a combination, a dominant term.

    work (per kernel: family, dtype, FLOPs, bytes; calls that launch; bytes over the link)
      -> terms on machine M:
           compute   = sum F_k / (peak_M[dtype_k] * e_c)   kernels with F/peak >= B/bw
           memory    = sum B_k / (bandwidth_M * e_m)       the others
           launch    = launches * h_M                      host: Python, dispatch, launch
           transfer  = bytes over the link / its rate (+ fresh host memory filled)
      -> GPU, device-timed: T = max(compute + memory, launch) + transfer
             (the host enqueues ahead of the device: the slower side sets the pace)
         CPU:               T = compute + memory + launch + transfer
      -> dominant term: the one that sets T.

Learned from M's own run, never set per model: e_c per dtype from its matmul cases, e_m
from add/triad, h (host seconds per launch) from its launch-bound model cases.

Anchored (the case was measured on a source machine S of the same side), the way every
reference case is predicted in the leave-one-out:
    GPU, launch-bound on S: the measured time is host time (and its copies),
          T_M = max((T_S - transfer_S) / r_host, device_M) + transfer_M
    GPU, device-bound on S: T_M = max(T_S * device_M / device_S, launch_S / r_host)
    GPU, transfer-bound on S: T_M = (T_S - busy_S) * transfer_M / transfer_S + busy_M
          (busy: the slower of device work and launches)
    CPU: T_M = T_S * [compute_M + memory_M + launch_S / r_host + transfer_M] / total_S
so what the terms leave out (a kernel's real efficiency, Python between ops) is carried over
with the term that binds the case on S, and a one-term case reduces exactly to the ratio of
the ceilings that bound it. The device side on M takes S's efficiencies but M's own GEMM ones
where M's run measured them (its matmul cases): a model's GEMMs move by the measured matmul
rates, not the peaks. Fresh host memory a step fills (seed-add intended) is priced by no
ceiling, so it is part of what the terms leave out: it moves with the binding term (on a GPU
the copy over the link, on a CPU the memory term), the naive ceiling ratio's rule; no proxy
either run measures (the host CPUs' bandwidth, their dispatch floor) tracks it.

r_host, how much faster M's host runs a launch-bound step than S's: protocol "B", M's own
launch-bound model cases of *other* workloads measured on both (the ratio of their host
parts: on a CPU the measured time less its roofline work, on a GPU all of it), a geometric
mean weighted by how alike they are to the predicted case in op families and in launch
count (its host time mixes Python with per-kernel driver work in proportions that go with it),
never the predicted workload itself; protocol "A", the ratio of the dispatch ceilings alone.

Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

from torchmark.kinds.predict.machine import Calibration, Case, CaseKey, Machine
from torchmark.kinds.predict.work import Side, Work

TERMS = ("compute", "memory", "launch", "transfer")
# A model case is launch-bound (its time is host time) where its roofline device time is
# under this share of what it measured.
LAUNCH_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class Terms:
    compute: float
    memory: float
    launch: float
    transfer: float
    side: Side

    @property
    def busy(self) -> float:
        """The device's own work: the roofline floor of the step."""
        return self.compute + self.memory

    @property
    def total(self) -> float:
        if self.side == "gpu":
            return max(self.busy, self.launch) + self.transfer
        return self.busy + self.launch + self.transfer

    @property
    def dominant(self) -> str:
        if self.side == "gpu":
            side: dict[str, float] = (
                {"launch": self.launch}
                if self.launch >= self.busy
                else {"compute": self.compute, "memory": self.memory}
            )
            side["transfer"] = self.transfer
        else:
            side = {t: getattr(self, t) for t in TERMS}
        return max(side, key=lambda t: side[t])

    def scaled(self, f: float) -> Terms:
        return Terms(self.compute * f, self.memory * f, self.launch * f, self.transfer * f,
                     self.side)  # fmt: skip

    def as_dict(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}


def terms(work: Work, m: Machine, h: float | None, cal: Calibration | None = None) -> Terms:
    """``work``'s terms on ``m`` with ``h`` host seconds per launch (a bare op pays the
    dispatch ceiling) and ``cal``'s efficiencies (default: ``m``'s own)."""
    cal = cal or m.calib
    bw = m.bandwidth
    compute = memory = 0.0
    for k in work.kernels:
        peak, key = m.peak(k), m.peak_key(k)
        e_c = cal.e_c.get(key.removeprefix("matmul:"), 1.0) if key else 1.0
        tc = k.flops / (peak * e_c) if peak and k.flops else 0.0
        tm = k.bytes / (bw * cal.e_m) if k.bytes and bw else 0.0
        if tc >= tm:
            compute += tc
        else:
            memory += tm
    transfer = 0.0
    for direction, nbytes in (("h2d", work.h2d_bytes), ("d2h", work.d2h_bytes)):
        if nbytes:
            link = m.link(direction, work.pinned)
            transfer += nbytes / link if link else math.nan
    per_call = (m.dispatch or 0.0) if work.bare else (h or 0.0)
    return Terms(compute, memory, work.launches * per_call, transfer, work.side)


# -- calibration ------------------------------------------------------------------------


def calibrate(m: Machine, works: Mapping[CaseKey, Work], exclude: str | None = None) -> Calibration:
    """``m``'s efficiencies and host time per launch, from its run's cases (``exclude``: a
    workload left out, the predicted one)."""
    e_c: dict[str, list[float]] = {}
    e_m: list[float] = []
    for c in m.cases.values():
        r = c.result
        if r.workload == exclude:
            continue
        if r.workload == "matmul" and r.work.flops and (peak := m.ceiling(f"matmul:{r.variant}")):
            e_c.setdefault(r.variant, []).append(r.work.flops / c.median_s / peak)
        elif r.workload in ("add", "triad") and r.work.bytes and m.bandwidth:
            e_m.append(r.work.bytes / c.median_s / m.bandwidth)
    cal = Calibration(
        {d: statistics.median(v) for d, v in e_c.items()},
        statistics.median(e_m) if e_m else 1.0,
    )
    per_launch, names = [], []
    for key, c in m.cases.items():
        w = works.get(key)
        if w is None or c.workload == exclude or not c.is_model or not w.launches:
            continue
        t = terms(w, m, None, cal)
        if t.busy < LAUNCH_BOUND_SHARE * c.median_s:  # launch-bound by the roofline
            rest = c.median_s - (t.busy if m.side == "cpu" else 0.0)
            per_launch.append(rest / w.launches)
            names.append(c.label)
    if per_launch:
        cal.h = math.exp(sum(map(math.log, per_launch)) / len(per_launch))
        cal.h_cases = tuple(names)
    return cal


def calibrated(m: Machine, works: Mapping[CaseKey, Work], exclude: str | None = None) -> Machine:
    """``m`` with its calibration learned from its run (``exclude`` left out)."""
    return replace(m, calib=calibrate(m, works, exclude))


def own_gemm(own: Calibration, other: Calibration) -> Calibration:
    """``other`` (the anchor's calibration) with ``own``'s GEMM efficiencies for every dtype
    ``own``'s run measured: a GEMM's rate at a model's shapes is the machine's (its BLAS,
    its threads), which its own matmul cases measure; the streaming efficiency carries, as
    the bandwidth ceiling is itself a streaming kernel's rate."""
    return replace(other, e_c={**other.e_c, **own.e_c})


# -- the host ratio ---------------------------------------------------------------------


@dataclass(frozen=True)
class HostRatio:
    value: float  # target host speed / source host speed (> 1: target faster)
    low: float
    high: float
    basis: str


# How fast alikeness falls off with the ratio of two steps' launch counts: at e (2.7x the
# launches) a case weighs 1/e. One width for every case and side, never set per model.
LAUNCH_WIDTH = 1.0


def host_part(measured_s: float, w: Work, m: Machine) -> float:
    """What of a launch-bound case's measured time is host time on ``m``: on a CPU the
    measured time less its roofline device work at ``m``'s own efficiencies (the two add
    up there); on a GPU all of it (the host sets the pace, the device waits). NaN where
    nothing is left."""
    if m.side == "gpu":
        return measured_s
    rest = measured_s - terms(w, m, None).busy
    return rest if rest > 0 else math.nan


def launch_likeness(a: Work, b: Work) -> float:
    """How alike two launch-bound steps are in length, in (0, 1]: 1 at the same launch
    count, 1/e at LAUNCH_WIDTH (natural log) apart. A step's host time mixes Python, which
    follows the host CPU, with per-kernel driver and library work, which need not (the
    H200 run's GPU dispatch floor is slower than the H100 run's, its Python faster); on
    the reference runs the one-to-five-launch steps sped up 1.5-1.6x, the 27-174-launch
    ones 1.14-1.16x. Steps alike in length are taken to share that mix: an empirical rule,
    one width for all."""
    la, lb = max(a.launches, 1), max(b.launches, 1)
    return math.exp(-abs(math.log(la) - math.log(lb)) / LAUNCH_WIDTH)


def host_ratio(
    work: Work,
    src: Machine,
    tgt: Machine,
    protocol: str,
    works_src: Mapping[CaseKey, Work],
    exclude: str,
) -> HostRatio | None:
    if protocol == "B":
        logs, ws, vals = [], [], []
        for key, p in src.cases.items():
            q = tgt.cases.get(key)
            w = works_src.get(key)
            if q is None or w is None or p.workload == exclude or not p.is_model:
                continue
            if terms(w, src, src.calib.h).dominant != "launch":
                continue
            r = host_part(p.median_s, w, src) / host_part(q.median_s, w, tgt)
            if not (math.isfinite(r) and r > 0):
                continue
            weight = max(work.similarity(w), 0.05) * launch_likeness(work, w)
            logs.append(weight * math.log(r))
            ws.append(weight)
            vals.append(r)
        if ws:
            return HostRatio(
                math.exp(sum(logs) / sum(ws)), min(vals), max(vals),
                f"{len(vals)} launch-bound case(s) of other workloads measured on both",
            )  # fmt: skip
    ds, dt = src.dispatch, tgt.dispatch
    if ds and dt:
        return HostRatio(ds / dt, ds / dt, ds / dt, "the dispatch ceilings")
    return None


# -- predictions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    seconds: float
    dominant: str
    terms: Terms  # on the target, scaled so that they add up (GPU: the binding side)
    basis: str
    host: HostRatio | None = None
    refused: str | None = None
    floor_s: float = 0.0  # the roofline device time: no step is faster


def predict_anchored(
    case: Case,
    work: Work,
    src: Machine,
    tgt: Machine,
    protocol: str,
    works_src: Mapping[CaseKey, Work],
) -> Prediction:
    """``case`` measured on ``src``; its time on ``tgt`` (module docstring). ``src`` and
    ``tgt`` calibrated without the case's workload."""
    exclude = case.workload
    hr = host_ratio(work, src, tgt, "A" if work.bare else protocol, works_src, exclude)
    r = hr.value if hr else 1.0
    h_src = src.calib.h
    ts = terms(work, src, h_src)
    # the target's device side: the source's efficiencies (the anchor carries them) but
    # the target's own GEMM efficiencies where its run measured them (its matmul cases,
    # never the predicted workload), so a compute term moves by the ratio of the two
    # machines' measured matmul rates, not of their peaks
    tt = terms(work, tgt, h_src / r if h_src else None, own_gemm(tgt.calib, src.calib))
    basis = f"anchored on {src.name}; host ratio from {hr.basis if hr else 'nothing (1.0)'}"
    if work.host_fill_bytes:
        basis += (
            f"; its fresh host memory ({work.host_fill_bytes / 1e9:.2f} GB filled a call) is "
            f"priced by no ceiling: its time moves with the {ts.dominant} term that binds the "
            "case, as the naive ceiling ratio moves it"
        )
    if work.side == "gpu":
        if ts.dominant == "transfer":
            # the copy over the link binds the case: what the terms leave unexplained (fresh
            # host memory filled, a copy slower than its ceiling) is taken as part of it and
            # moves by the ratio of the two machines' measured links, not the device's
            other = max(ts.busy, ts.launch)
            a = max(case.median_s - other, 0.0) / ts.transfer
            t = Terms(tt.compute, tt.memory, ts.launch / r, tt.transfer * a, "gpu")
            return Prediction(t.total, t.dominant, t, basis, hr, floor_s=tt.busy)
        if ts.launch >= ts.busy:  # the source measured host time (and its copies)
            host = max(case.median_s - ts.transfer, 0.0) / r
            t = Terms(tt.compute, tt.memory, host, tt.transfer, "gpu")
            return Prediction(max(host, tt.busy) + tt.transfer, t.dominant, t, basis, hr,
                              floor_s=tt.busy)  # fmt: skip
        a = (case.median_s - ts.transfer) / ts.busy if ts.busy else 1.0
        t = Terms(tt.compute * a, tt.memory * a, ts.launch / r, tt.transfer, "gpu")
        return Prediction(t.total, t.dominant, t, basis, hr, floor_s=tt.busy)
    a = case.median_s / ts.total if ts.total else 1.0
    t = Terms(tt.compute, tt.memory, ts.launch / r, tt.transfer, "cpu").scaled(a)
    return Prediction(t.total, t.dominant, t, basis, hr, floor_s=tt.busy)


def predict_unanchored(work: Work, tgt: Machine) -> Prediction:
    """A case never measured on a machine like ``tgt``: its work and ``tgt``'s ceilings
    and calibration alone. Refused where ``tgt`` has no launch-bound model case to learn
    its host time per launch from."""
    if tgt.calib.h is None:
        t = terms(work, tgt, None)
        return Prediction(
            math.nan, "-", t, "from the profile",
            refused=f"{tgt.name} has no launch-bound model case to learn its host time per "
            "launch from",
            floor_s=t.busy,
        )  # fmt: skip
    t = terms(work, tgt, tgt.calib.h)
    cases = ", ".join(tgt.calib.h_cases)
    basis = (
        f"from its profile and {tgt.name}'s run: its measured ceilings, its matmul and "
        f"add/triad efficiencies, its host time per launch ({tgt.calib.h * 1e6:.2f} µs) "
        f"from {cases}"
    )
    return Prediction(t.total, t.dominant, t, basis, floor_s=t.busy)


# -- intervals --------------------------------------------------------------------------


@dataclass(frozen=True)
class Residual:
    case: str
    dominant: str
    ratio: float  # measured / predicted


def residuals(tgt: Machine, works: Mapping[CaseKey, Work], exclude: str | None) -> list[Residual]:
    """Each of ``tgt``'s model cases (but ``exclude``'s workload) predicted as ``predict``
    predicts a model, from the rest of ``tgt``'s run without its own workload: how far
    measured lands from predicted, per dominant term."""
    out = []
    for key, c in tgt.cases.items():
        w = works.get(key)
        if w is None or not c.is_model or c.workload == exclude:
            continue
        held_out = {k: v for k, v in works.items() if tgt.cases.get(k) is None
                    or tgt.cases[k].workload not in (exclude, c.workload)}  # fmt: skip
        m = calibrated(tgt, held_out, exclude=c.workload)
        p = predict_unanchored(w, m)
        if p.refused is None and p.seconds > 0:
            out.append(Residual(c.label, p.dominant, c.median_s / p.seconds))
    return out


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    basis: str


def interval(p: Prediction, found: list[Residual]) -> Interval | None:
    """Where the measured time should fall: the prediction (but its copies over the link)
    scaled by the measured/predicted ratios of the held-out cases with the same dominant
    term (all of them where fewer than two share it), never below the roofline floor; None
    with no held-out case to learn it from."""
    same = [r for r in found if r.dominant == p.dominant]
    use = same if len(same) >= 2 else found
    if not use:
        return None
    ratios = [r.ratio for r in use]
    # the held-out cases hold no copy over the link: its term (the measured link rate) is
    # added as predicted, the rest scaled by their ratios
    copy = p.terms.transfer if math.isfinite(p.terms.transfer) else 0.0
    rest = p.seconds - copy
    low = max(rest * min([*ratios, 1.0]), p.floor_s) + copy
    high = max(rest * max([*ratios, 1.0]) + copy, low)
    which = f"the {p.dominant}-bound ones" if use is same else "all of them"
    return Interval(
        low, high,
        f"the measured/predicted ratios of {len(found)} held-out model case(s) of the target "
        f"({which}: {min(ratios):.2f}-{max(ratios):.2f}), never below the roofline floor",
    )  # fmt: skip
