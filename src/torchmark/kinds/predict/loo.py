"""Leave one out: every case of one run predicted from another run's results and this run's
ceilings and other cases (``terms.predict_anchored``), beside the naive predictor (each case
scaled by the ratio of the measured ceiling that bounds it); and every model case of a run
predicted as ``predict`` predicts a model it never measured (``terms.predict_unanchored``:
the run without that workload). What ``benchmarks/predict_loo.py`` prints. Pure: no torch;
the model cases' Work (their op profiles) is given."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from torchmark.kinds.predict.machine import Case, CaseKey, Machine, machine
from torchmark.kinds.predict.terms import calibrated, predict_anchored, predict_unanchored
from torchmark.kinds.predict.work import Side, Work, micro_work
from torchmark.results import RunRecord

# A key the target did not measure under the source's name: the link's figure (the H100 run
# judged seed-add intended against h2d:pageable, the H200 run against h2d:pinned).
FALLBACK = {"h2d:pageable": "h2d:pinned", "h2d:pinned": "h2d:pageable"}


def naive(c: Case, src: Machine, tgt: Machine) -> float | None:
    """The naive prediction: the source's time scaled by the ratio of the measured ceiling
    the source case was judged against (None where either machine lacks it)."""
    key = c.result.ceiling.key if c.result.ceiling else None
    if key is None:
        return None
    s, t = src.ceiling(key), tgt.ceiling(key)
    if t is None and key in FALLBACK:
        t = tgt.ceiling(FALLBACK[key])
    if not s or not t:
        return None
    if key == "dispatch":  # a time: scales with the ceiling itself
        return c.median_s * t / s
    return c.median_s * s / t  # a rate: time scales inversely


def error(predicted: float, measured: float) -> float:
    """Signed relative error of a prediction against the measured median."""
    return predicted / measured - 1.0


def works_for(m: Machine, model_works: Mapping[CaseKey, Work]) -> dict[CaseKey, Work]:
    """Each case of ``m`` with its Work: a micro-benchmark's from what it declares, a
    model's from ``model_works`` (its profile), where one is given."""
    out: dict[CaseKey, Work] = {}
    for key, c in m.cases.items():
        w = model_works.get(key) if c.is_model else micro_work(c.result)
        if w is not None:
            out[key] = w
    return out


def resized(src: Machine, tgt: Machine) -> Machine:
    """``src`` with its micro cases re-sized to ``tgt``'s sizes where ``tgt`` measured
    another size (a small machine's quick run sizes add/triad/seed-add to its memory):
    time, FLOPs and bytes scaled by the ratio of the work, which every micro term is
    linear in."""
    cases = dict(src.cases)
    for key, c in src.cases.items():
        if key in tgt.cases or c.is_model:
            continue
        for tk, t in tgt.cases.items():
            same = (t.key[0], t.workload, t.result.variant) == (c.key[0], c.workload,
                                                                c.result.variant)  # fmt: skip
            if not same or not c.result.work.bytes:
                continue
            f = t.result.work.bytes / c.result.work.bytes
            extra: dict[str, Any] = dict(c.result.extra)
            bd = extra.get("bytes_breakdown")
            if isinstance(bd, dict):
                extra["bytes_breakdown"] = {k: v * f for k, v in bd.items()}
            work = c.result.work.model_copy(
                update={"flops": c.result.work.flops * f, "bytes": c.result.work.bytes * f}
            )
            r = c.result.model_copy(
                update={"params": dict(t.result.params), "extra": extra, "work": work,
                        "samples_s": [s * f for s in c.result.samples_s]}
            )  # fmt: skip
            cases[tk] = Case(tk, r, c.median_s * f)
            del cases[key]
            break
    return replace(src, cases=cases)


@dataclass
class Row:
    """One case of the target predicted from the source."""

    direction: str
    case: str
    side: Side
    workload: str
    model: bool
    measured_s: float
    source_s: float
    naive_s: float | None
    predicted_s: dict[str, float] = field(default_factory=dict)  # protocol -> seconds
    dominant: dict[str, str] = field(default_factory=dict)
    basis: dict[str, str] = field(default_factory=dict)  # protocol -> how it was predicted
    probes: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    interval: dict[str, tuple[float, float]] = field(default_factory=dict)

    def covered(self, protocol: str) -> bool:
        lo, hi = self.interval.get(protocol, (0.0, 0.0))
        return lo <= self.measured_s <= hi


PROTOCOLS = ("A", "B")


def predict_pair(
    source: RunRecord,
    target: RunRecord,
    model_works: Mapping[CaseKey, Work],
    direction: str,
    sides: tuple[Side, ...] = ("cpu", "gpu"),
    names: tuple[str, str] = ("source", "target"),
) -> list[Row]:
    """Every case ``target`` shares with ``source``, predicted anchored on ``source``."""
    rows = []
    pairs = {side: (machine(source, side, names[0]), machine(target, side, names[1]))
             for side in ("cpu", "gpu")}  # fmt: skip
    both = {side: (resized(s, t), t) for side, (s, t) in pairs.items() if s and t}
    # every side's Work: a GPU case's host fill is learned from the host CPUs' cases
    ws_all = {k: w for s, _ in both.values() for k, w in works_for(s, model_works).items()}
    for side in sides:
        if side not in both:
            continue
        s0, t0 = both[side]
        ws, wt = ws_all, works_for(t0, model_works)
        for key, c in s0.cases.items():
            m, w = t0.cases.get(key), ws.get(key)
            if m is None or w is None:
                continue
            row = Row(direction, c.label, side, c.workload, c.is_model, m.median_s,
                      c.median_s, naive(c, s0, t0))  # fmt: skip
            for proto in PROTOCOLS:
                src = calibrated(s0, ws, exclude=c.workload)
                tgt = calibrated(t0, wt, exclude=c.workload)
                p = predict_anchored(c, w, src, tgt, proto, ws)
                row.predicted_s[proto] = p.seconds
                row.dominant[proto] = p.dominant
                row.basis[proto] = p.basis
                row.probes[proto] = None
                if p.dominant == "launch" and p.host and p.host.low != p.host.high:
                    # the host ratio's own spread: the same case at the extreme probes
                    row.probes[proto] = (c.median_s / p.host.high, c.median_s / p.host.low)
            rows.append(row)
    return rows


def add_intervals(rows: list[Row]) -> None:
    """Each prediction's interval: its probes' range, widened by the measured/predicted
    ratios of the *other* cases (not this case in either direction) on the same side with
    the same dominant term (the side's whole spread where fewer than two share it)."""
    for proto in PROTOCOLS:
        for r in rows:
            pred = r.predicted_s[proto]
            res = [q.measured_s / q.predicted_s[proto] for q in rows
                   if q.case != r.case and q.side == r.side
                   and q.dominant[proto] == r.dominant[proto]]  # fmt: skip
            if len(res) < 2:
                res = [q.measured_s / q.predicted_s[proto] for q in rows
                       if q.case != r.case and q.side == r.side]  # fmt: skip
            lo, hi = pred * min(res, default=1.0), pred * max(res, default=1.0)
            probes = r.probes[proto]
            if probes:
                lo, hi = min(lo, probes[0]), max(hi, probes[1])
            r.interval[proto] = (min(lo, pred), max(hi, pred))


@dataclass(frozen=True)
class Summary:
    """|error| figures of one predictor over a set of rows."""

    name: str
    n: int
    median_pct: float
    models: int
    models_within_15: int
    worst_model_pct: float | None
    worst_model: str | None
    micro_worse_than_naive: tuple[str, ...]
    covered: int | None  # measured inside the interval (None: the naive one has none)


def summary(rows: list[Row], name: str) -> Summary:
    def pred(r: Row) -> float | None:
        return r.naive_s if name == "naive" else r.predicted_s.get(name)

    have = [r for r in rows if pred(r)]
    errs = [abs(error(pred(r) or 0.0, r.measured_s)) for r in have]
    model = [(abs(error(pred(r) or 0.0, r.measured_s)), r) for r in have if r.model]
    worse = tuple(
        f"{r.case} ({r.direction})"
        for r in have
        if name != "naive" and not r.model and r.naive_s
        and abs(error(pred(r) or 0.0, r.measured_s)) > abs(error(r.naive_s, r.measured_s)) + 5e-4
    )  # fmt: skip
    worst = max(model, key=lambda x: x[0]) if model else None
    return Summary(
        name, len(errs), 100 * statistics.median(errs) if errs else float("nan"),
        len(model), sum(e <= 0.15 for e, _ in model),
        100 * worst[0] if worst else None,
        f"{worst[1].case}, {worst[1].direction}" if worst else None,
        worse,
        None if name == "naive" else sum(r.covered(name) for r in have),
    )  # fmt: skip


@dataclass(frozen=True)
class Unanchored:
    """A model case of a run predicted as ``predict`` predicts a model it never measured."""

    run: str
    case: str
    side: Side
    measured_s: float
    predicted_s: float | None
    dominant: str
    refused: str | None


def unanchored(
    record: RunRecord, model_works: Mapping[CaseKey, Work], name: str, sides: tuple[Side, ...]
) -> list[Unanchored]:
    """Each model case of ``record`` from its profile and the rest of ``record``'s run,
    without its own workload (what ``predict`` does for a model TARGET never measured)."""
    out = []
    for side in sides:
        m = machine(record, side, name)
        if m is None:
            continue
        works = works_for(m, model_works)
        for key, c in m.cases.items():
            if not c.is_model or key not in works:
                continue
            tgt = calibrated(m, works, exclude=c.workload)
            p = predict_unanchored(works[key], tgt)
            out.append(
                Unanchored(name, c.label, side, c.median_s,
                           None if p.refused else p.seconds, p.dominant, p.refused)
            )  # fmt: skip
    return out
