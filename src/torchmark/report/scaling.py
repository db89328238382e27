"""The DDP scaling ladder: no-DDP -> DDP x1 -> DDP xN, one row per rung (weak scaling).

Pure functions of stored runs (one run per rung, ``torchmark run --scaling 1,2``):

- items/s per rank is the case's headline (the slowest rank's lockstep step time); the
  total is world size x that;
- efficiency vs no-DDP and vs DDP x1 is the per-rank rate over the baseline's, i.e. the
  ratio of median step times, judged against the noise of both (comparison.independent):
  a ratio the noise cannot tell from 1 is marked ``?``, never called a loss;
- per-rank p50/p95 of each rank's own step times; the straggler is the rank whose
  compute is slower than the others' by more than the noise (see ``straggler``);
- exposed communication (comm - overlap, from DDP's own timers) as a share of the step,
  and the share of the step time lost vs DDP x1 that it explains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import RenderableType

from torchmark import format as fmt
from torchmark.report.layout import Col, FitTable
from torchmark.results import Result, RunRecord

# Below a 2 % difference no straggler is named, whatever the noise (comparison.PRACTICAL).
PRACTICAL = 0.02
UNCLEAR_MARK = "?"


def is_training(r: Result) -> bool:
    return "optimizer" in r.extra


def world_label(info: Mapping[str, Any]) -> str:
    """'DDP x2' (or 'FSDP x2') for a training run over 2 ranks, '2 ranks' for collectives."""
    n, s = info.get("world_size"), info.get("strategy")
    return f"{s.upper()} x{n}" if s else f"{n} ranks"


def result_world(r: Result) -> str | None:
    """How a result was run: 'no DDP' (training alone), 'DDP x2', 'FSDP x2', 'DP x2'
    (DataParallel over 2 GPUs), '2 ranks'; None for a case outside any process group that
    trains nothing."""
    s = r.extra.get("strategy")
    if s == "dp":
        return f"DP x{r.extra.get('gpus')}"
    n = r.extra.get("world_size")
    if n is None:
        return "no DDP" if is_training(r) else None
    return f"{(s or 'ddp').upper()} x{n}" if is_training(r) else f"{n} ranks"


def rung_size(label: str) -> int:
    """'DDP x2' -> 2; 'no DDP' -> 1."""
    head, _, n = label.rpartition(" x")
    return int(n) if head and n.isdigit() else 1


def world_difference(a: Result, b: Result) -> str | None:
    """Why A and B of one case are not like for like: they ran at different world sizes.
    Said beside every comparison of them (``compare``), never a silent match."""
    wa, wb = result_world(a), result_world(b)
    if wa == wb or (wa is None and wb is None):
        return None
    sides = f"A ran {wa or 'on one process'}, B {wb or 'on one process'}"
    if is_training(a) or is_training(b):
        na, nb = rung_size(wa or ""), rung_size(wb or "")
        return (
            f"{sides}: weak scaling, so the speed is per rank (B's total is {nb}x its per-rank "
            f"rate, A's {na}x); speed below 1 is the scaling loss"
        )
    return f"{sides}: the times are of different collectives"


# -- one ladder ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RankTimes:
    rank: int
    p50_s: float
    p95_s: float
    rel_iqr: float
    compute_s: float | None  # DDP's forward + backward compute on this rank


@dataclass(frozen=True)
class Efficiency:
    value: float
    verdict: str  # comparison's FASTER / SLOWER / SAME / UNCLEAR

    def text(self) -> str:
        mark = UNCLEAR_MARK if self.verdict == "UNCLEAR" else ""
        return f"{fmt.pct(100 * self.value)}{mark}"


@dataclass(frozen=True)
class Rung:
    label: str  # "no DDP", "DDP x1", "DDP x2"
    world_size: int
    result: Result
    per_rank: float | None  # items/s
    vs_plain: Efficiency | None
    vs_ddp1: Efficiency | None
    ranks: tuple[RankTimes, ...]
    straggler: str | None
    exposed_s: float | None
    exposed_share: float | None

    @property
    def total(self) -> float | None:
        return None if self.per_rank is None else self.per_rank * self.world_size


def rank_times(result: Result) -> tuple[RankTimes, ...]:
    """Each rank's own step times (every rank's raw samples, gathered on rank 0)."""
    per = result.extra.get("per_rank") or [{"rank": 0, "samples_s": result.samples_s}]
    out = []
    for r in per:
        s = np.asarray(r.get("samples_s") or [], dtype=float)
        if not s.size:
            continue
        q25, p50, q75, p95 = np.percentile(s, [25, 50, 75, 95])
        ddp = r.get("ddp") or {}
        compute = (  # printed, not judged: see straggler()
            ddp["forward_s"] + ddp["backward_compute_s"]
            if "forward_s" in ddp and "backward_compute_s" in ddp
            else None
        )
        out.append(RankTimes(int(r["rank"]), p50, p95, (q75 - q25) / p50 if p50 else 0, compute))
    return tuple(out)


def straggler(ranks: Sequence[RankTimes]) -> str | None:
    """The slowest rank, when its step p50 exceeds the median of the others' by more than
    the noise (the largest relative IQR of the ranks' step times, at least 2 %).

    In lockstep a rank that waits for a straggler waits inside the gradient all_reduce, so
    a mild straggler shows little here; DDP's per-rank compute timers would show it, but
    they average the first ten iterations (warm-up) with every 100th, and on this 2-core
    machine they put rank 0 at 4x rank 1 on a short run with equal step times: they are
    printed per rank, not judged."""
    if len(ranks) < 2:
        return None
    slowest = max(ranks, key=lambda r: r.p50_s)
    others = float(np.median([r.p50_s for r in ranks if r is not slowest]))
    noise = max(PRACTICAL, max(r.rel_iqr for r in ranks))
    if others <= 0 or slowest.p50_s <= others * (1 + noise):
        return None
    return (
        f"rank {slowest.rank}: step p50 {fmt.duration(slowest.p50_s)} vs "
        f"{fmt.duration(others)} on the others (+{fmt.pct(100 * (slowest.p50_s / others - 1))}"
        f", noise {fmt.pct(100 * noise)})"
    )


def efficiency(base: Rung | None, r: Result, per_rank_items: float) -> Efficiency | None:
    """Per-rank (per-GPU) rate over the baseline's (same items per rank), with the verdict
    on the step times: weak scaling keeps the work per rank, so the ratio of median step
    times is the ratio of per-rank rates."""
    from torchmark.comparison import independent

    if base is None or not (base.result.ok and r.ok):
        return None
    if _items_per_rank(base.label, base.result) != per_rank_items:
        return None
    b = base.result
    j = independent(b.measurement, r.measurement)
    if isinstance(j, str):  # too few samples to judge
        return Efficiency((b.median_s or 0) / (r.median_s or 1), "UNCLEAR")
    return Efficiency(j.speed, j.verdict)


def case_key(r: Result, label: str) -> tuple[Any, ...]:
    """A case across rungs: the device is left out (rank 0 measures cuda:0, the plain run
    may say cuda), and a DataParallel row's batch is per GPU (it splits N x the batch)."""
    params = dict(r.params)
    if label.startswith("DP ") and "batch" in params:
        params["batch"] = int(params["batch"]) // rung_size(label)
    return (r.workload, r.variant, tuple(sorted((k, str(v)) for k, v in params.items())))


ORDER = ("no", "DDP", "FSDP", "DP")


def _items_per_rank(label: str, r: Result) -> float:
    """A rank's (a GPU's) items per step: DataParallel splits its batch over its GPUs."""
    return r.work.items / (rung_size(label) if label.startswith("DP ") else 1)


def ladder(
    records: Sequence[RunRecord], labels: Sequence[str] | None = None
) -> dict[tuple[Any, ...], list[Rung]]:
    """One ladder per training case found in the runs: no DDP, DDP x1..xN, then FSDP and
    DataParallel rows. ``labels``: each record's rung where the caller knows it (a rung
    whose case was skipped records no strategy); else read from the results."""
    found: dict[tuple[Any, ...], list[tuple[str, Result]]] = {}
    for i, rec in enumerate(records):
        for r in rec.results:
            if not (is_training(r) or r.params.get("scenario") == "train"):
                continue
            label = labels[i] if labels else (result_world(r) or "no DDP")
            found.setdefault(case_key(r, label), []).append((label, r))
    out = {}
    for key, results in found.items():
        results.sort(key=lambda x: (ORDER.index(x[0].split()[0]), rung_size(x[0])))
        rungs: list[Rung] = []
        for label, r in results:
            n = rung_size(label)
            plain = next((g for g in rungs if g.label == "no DDP"), None)
            ddp1 = next((g for g in rungs if g.label == "DDP x1"), None)
            ranks = rank_times(r) if r.ok else ()
            ddp = r.extra.get("ddp") or {}
            rate, items = r.rate("items"), _items_per_rank(label, r)
            rungs.append(
                Rung(
                    label=label,
                    world_size=n,
                    result=r,
                    per_rank=None if rate is None else rate * items / (r.work.items or 1),
                    vs_plain=efficiency(plain, r, items),
                    vs_ddp1=None if label == "DDP x1" else efficiency(ddp1, r, items),
                    ranks=ranks,
                    straggler=straggler(ranks),
                    exposed_s=ddp.get("exposed_comm_s"),
                    exposed_share=ddp.get("exposed_comm_share"),
                )
            )
        out[key] = rungs
    return out


def loss_lines(rungs: Sequence[Rung]) -> list[str]:
    """Where the step time lost vs DDP x1 went: exposed communication, and the rest."""
    out = []
    plain = next((g for g in rungs if g.label == "no DDP"), None)
    ddp1 = next((g for g in rungs if g.label == "DDP x1"), None)
    if ddp1 is not None and ddp1.vs_plain is not None and plain is not None:
        cost = 1 / ddp1.vs_plain.value - 1 if ddp1.vs_plain.value > 0 else None
        out.append(
            f"DDP x1 vs no DDP (DDP's own overhead): step time {_signed(cost)}"
            + _told(ddp1.vs_plain.verdict)
        )
    for g in rungs:
        if g.world_size < 2 or g.vs_ddp1 is None or ddp1 is None or not g.result.ok:
            if not g.result.ok:
                out.append(f"{g.label} {g.result.status}: {g.result.reason or 'no reason given'}")
            continue
        lost_s = (g.result.median_s or 0) - (ddp1.result.median_s or 0)
        head = f"{g.label} vs DDP x1: step {_signed_s(lost_s)}"
        if g.vs_ddp1.verdict != "SLOWER" or lost_s <= 0:
            out.append(head + _told(g.vs_ddp1.verdict))
            continue
        if g.exposed_s is None or ddp1.exposed_s is None:
            out.append(f"{head}; DDP's timers not recorded: the loss is not split")
            continue
        comm = g.exposed_s - ddp1.exposed_s
        if comm >= lost_s:
            # DDP's timers average sampled steps (warm-up in), the loss compares medians
            out.append(
                f"{head}: exposed communication {_signed_s(comm)} covers all of it "
                "(DDP's timers average sampled steps, warm-up included)"
            )
            continue
        share = max(0.0, comm / lost_s)
        out.append(
            f"{head}: exposed communication {_signed_s(comm)} explains "
            f"{fmt.pct(100 * share)} of it; the other {fmt.pct(100 * (1 - share))} is not "
            "communication (compute slowed by shared cores, stragglers, waiting)"
        )
    return out


def _told(verdict: str) -> str:
    """What the comparison's verdict says of a step-time change."""
    return {
        "SAME": ", the same within 2 %",
        "UNCLEAR": ", can't tell from the noise",
        "FASTER": ", faster: no loss",
    }.get(verdict, "")


def _signed(x: float | None) -> str:
    return "?" if x is None else f"{'+' if x >= 0 else '-'}{fmt.pct(100 * abs(x))}"


def _signed_s(x: float) -> str:
    return f"{'+' if x >= 0 else '-'}{fmt.duration(abs(x))}"


def rank_lines(rungs: Sequence[Rung]) -> list[str]:
    out = []
    for g in rungs:
        if len(g.ranks) < 2:
            continue
        each = " · ".join(
            f"r{t.rank} {fmt.duration(t.p50_s)}/{fmt.duration(t.p95_s)}" for t in g.ranks
        )
        out.append(f"{g.label} step p50/p95 per rank: {each}")
        if all(t.compute_s is not None for t in g.ranks):
            each = " · ".join(f"r{t.rank} {fmt.duration(t.compute_s or 0)}" for t in g.ranks)
            out.append(f"{g.label} DDP compute per rank (sampled steps, warm-up in): {each}")
        if g.straggler:
            out.append(f"{g.label} straggler: {g.straggler}")
    return out


def ladder_renderables(
    records: Sequence[RunRecord], labels: Sequence[str] | None = None
) -> list[RenderableType]:
    """A table per training case: one row per rung; then per-rank times and the loss."""
    from rich.text import Text

    out: list[RenderableType] = []
    for rungs in ladder(records, labels).values():
        r0 = rungs[0].result
        unit = r0.work.item_unit or "items"
        backend = next(
            (rec.config.get("distributed", {}).get("backend") for rec in records[1:]), None
        )
        t = FitTable(
            Col("rung"),
            Col("per rank", justify="right"),
            Col("total", justify="right"),
            Col("vs no DDP", justify="right"),
            Col("vs x1", justify="right"),
            Col("step", justify="right", drop=2),
            Col("exp. comm", justify="right", drop=1),
            Col("straggler", drop=3),
            title=(
                f"scaling of {fmt.result_label(r0, device=False)}: {unit}/s, weak "
                f"({r0.work.items:g} per rank a step)" + (f", {backend}" if backend else "")
            ),
        )
        for g in rungs:
            t.row(
                g.label,
                fmt.si(g.per_rank) if g.per_rank else (g.result.status),
                fmt.si(g.total) if g.total else "",
                g.vs_plain.text() if g.vs_plain else "",
                g.vs_ddp1.text() if g.vs_ddp1 else "",
                fmt.duration(g.result.median_s) if g.result.ok else "",
                fmt.pct(100 * g.exposed_share) if g.exposed_share is not None else "",
                g.straggler.split(":")[0] if g.straggler else ("none" if len(g.ranks) > 1 else ""),
            )
        out.append(t)
        notes = [
            "step: median step time, each sample the slowest rank's; vs x1: vs DDP x1",
            "exp. comm: DDP's backward communication not overlapped with compute, % of step",
        ]
        if any(e and e.verdict == "UNCLEAR" for g in rungs for e in (g.vs_plain, g.vs_ddp1)):
            notes.append(f"{UNCLEAR_MARK}: efficiency the noise cannot tell from 100 %")
        lines = rank_lines(rungs) + loss_lines(rungs) + notes
        out.append(Text("\n".join(lines)))
    return out


__all__ = [
    "Efficiency",
    "RankTimes",
    "Rung",
    "ladder",
    "ladder_renderables",
    "loss_lines",
    "result_world",
    "straggler",
    "world_difference",
    "world_label",
]
