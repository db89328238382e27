"""tune's findings as data: every candidate ranked, and one recommendation per device."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchmark import format as fmt
from torchmark import variants
from torchmark.judge import verdicts
from torchmark.kinds.tune.candidates import code_lines
from torchmark.kinds.tune.search import Tuner
from torchmark.results import RunRecord
from torchmark.results.payloads import BestThroughput, Candidate, Recommendation, TunePayload
from torchmark.variants.spec import tolerance_line


def summarise(record: RunRecord, tuners: Sequence[Tuner]) -> None:
    """The payload's ``candidates`` (ranked) and ``recommendation`` per device.

    Each candidate's ``speedup`` is ``items * baseline_ms / latency_ms`` of the same row:
    ``baseline_ms`` is the baseline's median over that candidate's own rounds (under drift
    it differs from the baseline row's latency, measured in rounds of its own)."""
    rank = {
        "baseline": 1,
        "faster": 0,
        "same": 2,
        "unclear": 3,
        "slower": 4,
        "over-budget": 5,
    }
    p = record.payload
    assert isinstance(p, TunePayload)
    candidates: list[Candidate] = []
    recommendation: dict[str, Recommendation] = {}
    for t in tuners:
        rows = sorted(t.measured, key=lambda m: (rank.get(m.status, 6), -(m.speedup or 0)))
        for m in rows:
            r = m.result
            candidates.append(
                Candidate(
                    device=t.device.name,
                    name=m.cand.name,
                    stage=m.cand.stage,
                    config=m.cand.config(),
                    status=m.status,
                    verdict=m.verdict,
                    speedup=m.speedup,
                    max_error=m.max_error,
                    tolerance=m.tolerance,
                    latency_ms=None if m.latency_s is None else m.latency_s * 1e3,
                    baseline_ms=None if m.baseline_s is None else m.baseline_s * 1e3,
                    items_ratio=m.items,
                    items_per_s=r.rate("items"),
                    rel_iqr=r.measurement.rel_iqr if r.ok and r.measurement.spread_known else None,
                    compile_s=r.extra.get("compile_s")
                    if variants.parse(m.cand.variant).compile
                    else None,
                    why=m.judgement.why if m.judgement else None,
                    reason=r.reason,
                )
            )
        recommendation[t.device.name] = Recommendation.model_validate(_recommend(t))
        base = t.baseline
        if base is not None and base.result.ok:
            bm = base.result.measurement
            spread = (
                f"spread (IQR) {bm.rel_iqr:.0%} of its median"
                if bm.spread_known
                else f"spread not known ({fmt.plural(bm.n, 'sample')})"
            )
            p.notes.append(
                f"{t.device.name}: baseline {(base.latency_s or 0) * 1e3:.3g} ms, {spread}; "
                "each speedup is the baseline's median over that candidate's own rounds "
                "divided by its latency"
            )
    p.candidates, p.recommendation = candidates, recommendation
    best_rates = {t.device.name: rate for t in tuners if (rate := _throughput(t)) is not None}
    p.throughput = {dev: BestThroughput.model_validate(best) for dev, best in best_rates.items()}
    tried = [m.cand.variant for t in tuners for m in t.measured if m.max_error is not None]
    if tried:
        p.notes.append(tolerance_line(tried))


def _recommend(t: Tuner) -> dict[str, Any]:
    base = t.baseline
    spread: dict[str, Any] = {}
    if base is not None and base.result.ok:
        spread = {
            "baseline_ms": (base.result.median_s or 0) * 1e3,
            "baseline_rel_iqr": base.result.measurement.rel_iqr
            if base.result.measurement.spread_known
            else None,
        }
    if t.stopped:
        return {"name": "no recommendation", "speedup": None, "reason": t.stopped, **spread}
    # without a latency bound this is the latency answer, at --batch: the larger batches
    # answer the throughput question (``_throughput``)
    at_batch = [m for m in t.measured if t.max_latency_s is not None or m.cand.stage != "batch"]
    best = t.best(at_batch)
    if best is not None:
        return {
            "name": best.cand.name,
            "speedup": best.speedup,
            "max_error": best.max_error,
            "config": best.cand.config(),
            "code": code_lines(best.cand, t.device),
            **spread,
        }
    if base is not None and t.max_latency_s is not None and not t.fits(base):
        return {
            "name": "nothing fits the budget",
            "speedup": None,
            "reason": f"no correct configuration measured runs within "
            f"{t.max_latency_s * 1e3:g} ms (the baseline takes "
            f"{(base.latency_s or 0) * 1e3:.3g} ms); raise --max-latency-ms or try a "
            "faster device",
            **spread,
        }
    unclear = sum(m.status == "unclear" for m in t.measured)
    why = "no candidate was faster beyond the noise and correct"
    if unclear:
        why += f" ({unclear} too noisy to tell: UNCLEAR)"
    return {
        "name": "keep the baseline",
        "speedup": 1.0,
        "reason": why,
        "config": base.cand.config() if base else None,
        "code": code_lines(base.cand, t.device) if base else [],
        **spread,
    }


def _throughput(t: Tuner) -> dict[str, Any] | None:
    """Without --max-latency-ms: the most items/s over every batch measured, FASTER per
    item than the baseline, with the latency each call then costs (the baseline's own when
    no larger batch beat it)."""
    base = t.baseline
    if t.max_latency_s is not None or t.stopped or base is None or not base.result.ok:
        return None
    faster = [m for m in t.measured if m.verdict == "FASTER" and m.speedup]
    # tune's paired test reads the rounds' order, not each side's own spread: a batch whose
    # samples spread 25 % of their median or more (227 % was picked once) is never the pick
    wins = [
        m
        for m in faster
        if verdicts.may(m.result, "recommend") and verdicts.kind_of(m.result) != "unreliable"
    ]
    # the fastest read that its own spread rejects, above the pick: passed over, said why
    best_fair = max((w.speedup or 0 for w in wins), default=0.0)
    over = [m for m in faster if m not in wins and (m.speedup or 0) > best_fair]
    passed = []
    if over:
        top = max(over, key=lambda m: m.speedup or 0)
        more = f" (and {len(over) - 1} more like it)" if len(over) > 1 else ""
        passed.append(
            f"{top.cand.name} read {top.speedup:.2f}x the baseline's items/s, but "
            f"{verdicts.says(top.result)}: not picked{more}"
        )
    pick = max(wins, key=lambda m: m.speedup or 0) if wins else base
    return {
        "name": pick.cand.name,
        "batch": pick.cand.batch,
        "speedup": pick.speedup if pick is not base else 1.0,
        "items_per_s": pick.result.rate("items"),
        "latency_ms": (pick.latency_s or 0) * 1e3,
        "baseline_latency_ms": (base.latency_s or 0) * 1e3,
        "baseline_batch": base.cand.batch,
        "config": pick.cand.config(),
        "code": code_lines(pick.cand, t.device),
        "passed_over": passed,
    }
