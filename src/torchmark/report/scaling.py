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
  and the share of the step time lost (vs DDP x1, and DDP x1's own overhead vs no DDP)
  that it explains, judged against the noise;
- DDP's backward-comm figure beside all_reduce timed alone at the model's own bucket
  sizes (launch/buckets.py), and whether they agree within the noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import RenderableType

from torchmark import format as fmt
from torchmark.judge import verdicts
from torchmark.judge.stragglers import RankTimes, rank_times
from torchmark.judge.stragglers import find as find_straggler
from torchmark.judge.worlds import is_training, result_world, rung_size
from torchmark.kinds.ranks.comm import CommCheck, comm_check, comm_check_text
from torchmark.report.layout import Col, FitTable
from torchmark.results import Result, RunRecord

UNCLEAR_MARK = "?"
OVER_MARK = "!"  # an exposed-comm share above 100 % of the step


# -- one ladder ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Efficiency:
    value: float
    verdict: str  # comparison's FASTER / SLOWER / SAME / UNCLEAR
    ci: tuple[float, float] | None = None  # 95 % CI of ``value`` (None: too few samples)

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
    comm: CommCheck | None = None

    @property
    def total(self) -> float | None:
        return None if self.per_rank is None else self.per_rank * self.world_size


def straggler(ranks: Sequence[RankTimes]) -> str | None:
    """'rank 1: step p50 ...', the rule in ``stats.stragglers.find`` (the verdict's too)."""
    found = find_straggler(ranks)
    return found.text() if found else None


def efficiency(base: Rung | None, r: Result, per_rank_items: float) -> Efficiency | None:
    """Per-rank (per-GPU) rate over the baseline's (same items per rank), with the verdict
    on the step times: weak scaling keeps the work per rank, so the ratio of median step
    times is the ratio of per-rank rates."""
    from torchmark.judge.comparison import independent

    if base is None or not (verdicts.may(base.result, "compare") and verdicts.may(r, "compare")):
        return None  # a side its verdict keeps from comparisons (invalid under load, ...)
    if _items_per_rank(base.label, base.result) != per_rank_items:
        return None
    b = base.result
    j = independent(b.measurement, r.measurement)
    if isinstance(j, str):  # too few samples to judge
        return Efficiency((b.median_s or 0) / (r.median_s or 1), "UNCLEAR")
    return Efficiency(j.speed, j.verdict, j.ci)


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
                    comm=comm_check(ddp, r.measurement.rel_iqr) if r.ok else None,
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
        out.append(overhead_line(plain, ddp1))
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
    for g in rungs:
        if g.comm is not None:
            out.append(f"{g.label}: {comm_check_text(g.comm)}")
    return out


def overhead_line(plain: Rung, ddp1: Rung) -> str:
    """DDP x1's step time over no DDP's, split in points of no DDP's step: exposed
    communication (DDP's timers) and the rest, the rest judged against the CI of the
    change (a rest whose CI reaches 0 is not called one)."""
    eff = ddp1.vs_plain
    assert eff is not None
    cost = 1 / eff.value - 1 if eff.value > 0 else None
    head = f"DDP x1 vs no DDP (DDP's own overhead): step time {fmt.signed_pct(cost)}"
    base = plain.result.median_s or 0.0
    if eff.verdict != "SLOWER" or cost is None or cost <= 0:
        return head + _told(eff.verdict)
    ci = _cost_ci(eff.ci)
    if ci is not None:
        head += f" (95 % CI {_pp(ci[0])} to {_pp(ci[1])} %)"
    if ddp1.exposed_s is None or base <= 0:
        return f"{head}; DDP's timers not recorded: not split"
    comm = ddp1.exposed_s / base
    said = f"exposed communication {fmt.duration(ddp1.exposed_s)} is {_pp(comm)[1:]} points"
    if comm >= cost:
        return (
            f"{head}: {said}, covering all of it (DDP's timers average sampled steps, "
            "warm-up included)"
        )
    rest = f"the other {_pp(cost - comm)} points"
    if ci is None:
        return f"{head}: {said} of it; {rest} (no CI: too few samples) are not split"
    rest += f" (CI {_pp(ci[0] - comm)} to {_pp(ci[1] - comm)})"
    if ci[0] - comm <= 0:
        return f"{head}: {said} of it; {rest} can't be told from the noise"
    return (
        f"{head}: {said} of it; {rest} are not communication: DDP's own work outside its "
        "comm timers (a hook per parameter, gradients copied into buckets, buffers broadcast "
        "each forward), which weighs most on a step that waits on the host"
    )


def _cost_ci(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    """The speed ratio's CI as a step-time change's (speed 0.8 -> +25 %)."""
    if ci is None or not all(np.isfinite(x) and x > 0 for x in ci):
        return None
    return (1 / ci[1] - 1, 1 / ci[0] - 1)


def _pp(x: float) -> str:
    """A change of no DDP's step time in percentage points, signed: '+1.90'."""
    return f"{'+' if x >= 0 else '-'}{fmt.sig(abs(100 * x))}"


def _share(share: float | None) -> str:
    if share is None:
        return ""
    return fmt.pct(100 * share) + (OVER_MARK if share > 1 else "")


def _told(verdict: str) -> str:
    """What the comparison's verdict says of a step-time change."""
    return {
        "SAME": ", the same within 2 %",
        "UNCLEAR": ", can't tell from the noise",
        "FASTER": ", faster: no loss",
    }.get(verdict, "")


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
    # the runs', not a case's: the same in every table
    backend = next((rec.config.get("distributed", {}).get("backend") for rec in records[1:]), None)
    for rungs in ladder(records, labels).values():
        r0 = rungs[0].result
        unit = r0.work.item_unit or "items"
        t = FitTable(
            Col("rung"),
            Col("per rank", justify="right"),
            Col("total", justify="right"),
            Col("vs no DDP", justify="right"),
            Col("vs x1", justify="right"),
            # the step time follows from the rate per rank; the exposed communication
            # from nothing else printed: it stays (stacked) where the step goes
            Col("step", justify="right", drop=1),
            Col("exp. comm", justify="right", drop=2, vital=True),
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
                _share(g.exposed_share),
                g.straggler.split(":")[0] if g.straggler else ("none" if len(g.ranks) > 1 else ""),
            )
        out.append(t)
        notes = [
            "step: median step time, each sample the slowest rank's; vs x1: vs DDP x1",
            "exp. comm: DDP's backward communication not overlapped with compute, % of step",
        ]
        if any((g.exposed_share or 0) > 1 for g in rungs):
            notes.append(
                f"{OVER_MARK}: exposed comm above the median step: DDP's timers average "
                "sampled steps (the first ones, warm-up, in), the step is a median"
            )
        if any(g.comm for g in rungs):
            notes.append(
                "timed alone: after the case, every bucket's all_reduce in turn on the idle "
                "process group, slowest rank's time; median of the rounds"
            )
        if any(e and e.verdict == "UNCLEAR" for g in rungs for e in (g.vs_plain, g.vs_ddp1)):
            notes.append(f"{UNCLEAR_MARK}: efficiency the noise cannot tell from 100 %")
        lines = rank_lines(rungs) + loss_lines(rungs) + notes
        out.append(Text("\n".join(lines)))
    return out
