"""The answer: what was measured, as the stored documents, and what it means per device.

    per device: its best fleet (a CPU: the best split of its cores) -> the highest rate
                within the bound, the bracket above it, the batching that reached it,
                devices needed for --rate, cost per million requests, energy per request
    verdict:    "at R req/s within L ms: CPU x N or GPU x M, cheaper by K", or "can't tell"
                when the brackets of the two leave the cheaper one open

The true limit of a device lies in its bracket [highest rate within, lowest rate over]; every
count and cost is taken at both ends, and only a choice that holds at both is made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from torchmark.judge import pace
from torchmark.kinds.serving import stats
from torchmark.kinds.serving.point import LoadPoint
from torchmark.kinds.serving.search import Search, bracket_of
from torchmark.results.serving import DeviceAnswer, FleetDoc, PointDoc, batch_wait, ms, per_s
from torchmark.user.cost import cost_per_million


def _f(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def point_doc(p: LoadPoint, processes: int = 1, threads: int | None = None) -> PointDoc:
    lat = p.latencies
    late = p.lateness
    batch = p.kept.batch[p.kept.served]
    return PointDoc(
        rate=p.rate,
        max_batch=p.batching.max_batch,
        max_wait_s=p.batching.max_wait_s,
        processes=processes,
        threads=threads,
        outcome=p.outcome,
        why=p.why,
        flags=p.flags,
        stop_reason=p.stop_reason,
        stable=p.stable,
        window_p99_s=[_f(w.p99_s) for w in p.windows],
        window_rate=[_f(w.completed_rate) for w in p.windows],
        n=lat.n,
        needed=p.needed,
        failed=p.failed,
        errors=dict(p.errors),
        over_bound=p.over_bound,
        late=p.late,
        achieved_rate=_f(p.achieved_rate),
        p50_s=_f(lat.p50),
        p90_s=_f(lat.p90),
        p99_s=_f(lat.p99),
        p999_s=_f(lat.p999),
        p99_ci_s=(_f(lat.p99_ci[0]), _f(lat.p99_ci[1])),
        mean_s=_f(lat.mean),
        wait_mean_s=_f(float(p.kept.wait.mean())) if p.kept.wait.size else None,
        lateness_median_s=_f(float(np.median(late))) if late.size else None,
        lateness_p99_s=_f(stats.percentile(late, 0.99)) if late.size else None,
        utilisation=_f(p.utilisation),
        mean_batch=_f(float(batch.mean())) if batch.size else None,
        energy=p.energy,
        duration_s=p.span_s,
        min_duration_s=p.min_duration_s,
        valid=p.valid,
        invalid_why=p.invalid_why,
        loadgen_p99_s=_f(p.loadgen_p99_s),
        early_p99_s=_f(p.early_p99_s),
        early_needed=p.early_needed,
        parts_p99_s=[_f(x) for x in p.parts_p99_s],
        holds=p.holds,
        confirm=p.confirm,
        latency_us=_kept_latencies(p.kept.latency),
    )


# Raw latencies stored per point, at most: 20,000 (~140 kB of JSON) keeps a run of many
# points under the board's 8 MiB; a GPU point at 50,000 requests/s keeps 30,000 and more.
# Beyond it a seeded uniform sample is stored (the percentiles beside it are of them all).
MAX_STORED = 20_000


def _kept_latencies(lat_s: np.ndarray) -> list[int]:
    us = np.rint(lat_s * 1e6).astype(np.int64)
    if us.size > MAX_STORED:
        pick = np.random.default_rng(0).choice(us.size, MAX_STORED, replace=False)
        us = us[np.sort(pick)]
    return [int(x) for x in us]


def refresh(doc: FleetDoc) -> FleetDoc:
    """The fleet's bracket from its stored points: the highest rate within the bound, the
    lowest rate above it (same batching) that was not, and whether the generator ended the
    climb there. Kept current as points land, so an interrupted search still answers."""
    doc.best, first = bracket_of(doc.points, lambda p: (p.max_batch, p.max_wait_s))
    doc.top, doc.generator_bound = None, False
    if first is not None:
        doc.top, doc.generator_bound = first.rate, first.outcome == "generator_behind"
    doc.notes, doc.load_changed = consistency(doc)
    return doc


# A p99 this much lower at a higher rate of one setting, beyond both intervals, is the
# machine's load changing, not the queue: the intervals treat queued requests as
# independent (too narrow near saturation), and bigger batches at a higher rate can lower
# the tail a little; 45 % (13.7 ms at 95,587/s, 7.55 ms at 102,414/s) cannot be either.
P99_DROP = 0.25
# Offline batch 1 read under this share of what one request at a time implies (the fleet's
# instances over single-stream's mean): the two were measured at different moments of load.
OFFLINE_SHARE = 0.5


def consistency(f: FleetDoc) -> tuple[list[str], bool]:
    """Where a fleet's figures disagree, said rather than printed side by side in silence:
    offline batch 1 under what single-stream implies; a rate held above the offline
    capacity (the offline figure, a second or less of work, read low); the p99 falling as
    the rate rises, by over ``P99_DROP`` and beyond both intervals, for one setting (the
    machine's load changed during the search: its points are not one curve; the answer is
    flagged); the host's pace changed between the search's start and its end (``judge.pace``:
    flagged the same). And whether either was found."""
    notes: list[str] = []
    one = f.offline.get("1")
    if one and f.single_mean_s:
        implied = f.processes / f.single_mean_s
        if one < OFFLINE_SHARE * implied:
            notes.append(
                f"offline batch 1 read {per_s(one)}/s, under the {per_s(implied)}/s one "
                f"request at a time implies (mean {ms(f.single_mean_s)} x {f.processes} "
                "instance(s)): the two ran at different moments of the machine's load"
            )
    cap = max(f.offline.values(), default=0.0)
    held = [p for p in f.points if p.outcome == "within" and p.valid is not False]
    if cap and held:
        top = max(held, key=lambda p: p.rate)
        if top.rate > cap:
            notes.append(
                f"{per_s(top.rate)} req/s held for {top.duration_s or 0:.3g} s above the "
                f"offline capacity read before ({per_s(cap)}/s, under a second of work): "
                f"the offline figure read low; the capacity is at least {per_s(top.rate)}/s"
            )
    changed = False
    by_setting: dict[tuple[int, float], list[PointDoc]] = {}
    for p in f.points:
        if p.p99_ci_s[0] is not None and p.p99_ci_s[1] is not None:
            by_setting.setdefault((p.max_batch, p.max_wait_s), []).append(p)
    for pts in by_setting.values():
        pts.sort(key=lambda p: p.rate)
        for i, lo in enumerate(pts):
            for hi in pts[i + 1 :]:
                if (
                    hi.rate > lo.rate
                    and hi.p99_ci_s[1] < lo.p99_ci_s[0]  # type: ignore[operator]
                    and (hi.p99_s or 0) < (1 - P99_DROP) * (lo.p99_s or 0)
                ):
                    changed = True
                    notes.append(
                        f"p99 {ms(lo.p99_s or 0)} at {per_s(lo.rate)} req/s but "
                        f"{ms(hi.p99_s or 0)} at {per_s(hi.rate)}, beyond both intervals: "
                        "the machine's load changed during the search (its points are not "
                        "one curve)"
                    )
                    break
            if changed:
                break
    ratio = pace.changed(f.pace_s, f.pace_end_s)
    if ratio is not None:
        changed = True
        host = pace.sentence(f.pace_s, f.pace_end_s, "before the fleet started", "after it closed")
        notes.append(f"{host}: its rates are that host's at that moment")
    return notes, changed


def fleet_doc(
    s: Search, device: str, label: str, processes: int = 1, threads: int | None = None
) -> FleetDoc:
    single = s.single.latency
    doc = FleetDoc(
        device=device,
        label=label,
        processes=processes,
        threads=threads,
        single_n=int(single.size),
        single_p50_s=_f(stats.percentile(single, 0.5)),
        single_p99_s=_f(stats.percentile(single, stats.TAIL)),
        single_mean_s=_f(float(single.mean())) if single.size else None,
        offline={str(b): r for b, r in s.offline.items() if math.isfinite(r)},
        pace_s=s.pace,
        pace_end_s=s.pace_end,
        points=[point_doc(p, processes, threads) for p in s.points],
        stop_reason=s.stop_reason,
        elapsed_s=s.elapsed_s,
        confirmation=s.confirmation,
    )
    return refresh(doc)


def device_answer(
    device: str,
    label: str,
    fleets: Sequence[tuple[int, FleetDoc]],
    bound_s: float,
    rate: float | None = None,
    price_per_hour: float | None = None,
    energy_price: float | None = None,
) -> DeviceAnswer:
    """The device's best fleet (the highest rate within the bound) and what it means: the
    cost per million requests is the device-hour price's share at that rate plus, with
    ``energy_price`` (per kWh), the energy its requests used where a counter read it."""
    ranked = [(i, f) for i, f in fleets if f.best_point is not None]
    if not ranked:
        why = "; ".join(dict.fromkeys(f.stop_reason for _, f in fleets if f.stop_reason))
        a = DeviceAnswer(device=device, label=label, why_none=why or "no rate was measured")
        a.sentence = f"{device}: no arrival rate met p99 <= {ms(bound_s)} ({a.why_none})"
        return a
    i, f = max(ranked, key=lambda x: x[1].best_point.rate)  # type: ignore[union-attr]
    p = f.best_point
    assert p is not None
    a = DeviceAnswer(
        device=device,
        label=label,
        max_rate=p.rate,
        top=f.top,
        generator_bound=f.generator_bound,
        fleet=i,
        batching=batch_wait(p.max_batch, p.max_wait_s),
        split=f.split,
        p99_s=p.p99_s,
        p99_ci_s=p.p99_ci_s,
        flags=[f for f in p.flags if f != "generator_behind"]
        + (["unconfirmed"] if p.valid is not None and not p.confirm else [])
        + (["load_changed"] if f.load_changed else []),
        confirmed=p.confirm if p.valid is not None else None,
        valid=p.valid,
        duration_s=p.duration_s,
        confirmation=f.confirmation,
        price_per_hour=price_per_hour,
    )
    top = f.top if f.top is not None and not f.generator_bound else None
    if rate is not None:
        a.needed = math.ceil(rate / p.rate)
        a.needed_range = (math.ceil(rate / top) if top else a.needed, a.needed)
    energy = p.energy or {}
    if energy.get("available"):
        j = energy.get("j_per_item")
        a.j_per_request = float(j) if isinstance(j, (int, float)) else None
    else:
        a.energy_note = str(energy.get("reason") or "no energy counter read")
    if energy_price is not None:
        if a.j_per_request is not None:
            a.energy_cost_per_million = a.j_per_request * 1e6 / J_PER_KWH * energy_price
        else:
            a.energy_cost_note = f"no energy cost for {device}: {a.energy_note}"
    if price_per_hour is not None or a.energy_cost_per_million is not None:
        spent = a.energy_cost_per_million or 0.0  # per request, whatever the rate

        def cost(r: float) -> float:
            rent = cost_per_million(price_per_hour, 1 / r) if price_per_hour is not None else 0
            return rent + spent

        a.cost_per_million = cost(p.rate)
        a.cost_range = (cost(top) if top else a.cost_per_million, a.cost_per_million)
    a.sentence = _sentence(a, bound_s)
    return a


J_PER_KWH = 3.6e6


def _sentence(a: DeviceAnswer, bound_s: float) -> str:
    """``cpu: 545 req/s within p99 <= 50 ms, 600 not (2 processes x 1 thread, batch <= 32,
    wait 0 ms), 0.05 per million requests``: the bracket said as measured."""
    assert a.max_rate is not None
    procs, _, threads = a.split.partition(" x ")
    split = f"{procs} process{'es' if procs != '1' else ''} x {threads} thread" + (
        "s" if threads != "1" else ""
    )
    how = ", ".join(x for x in (a.split and split, a.batching) if x)
    within = f"within p99 <= {ms(bound_s)}"
    if a.generator_bound:
        limit = f"at least {per_s(a.max_rate)} req/s {within}"
    elif a.top is None:
        limit = f"at least {per_s(a.max_rate)} req/s {within} (no higher rate measured)"
    else:
        limit = f"{per_s(a.max_rate)} req/s {within}, {per_s(a.top)} not"
    text = f"{a.device}: {limit} ({how})"
    if a.cost_per_million is not None:
        text += f", {a.cost_per_million:.3g} per million requests"
        if a.energy_cost_per_million is not None:
            text += f" ({a.energy_cost_per_million:.3g} of it energy)"
    if a.generator_bound:
        text += "; above that the load generator fell behind, not the device"
    if a.flags:  # the max rate's point, as measured: a flag travels with its number
        text += f"; that point: {', '.join(FLAG_WORDS.get(f, f) for f in a.flags)}"
    if a.confirmed:
        text += f"; held for its re-confirmation ({a.duration_s or 0:.3g} s)"
    elif a.confirmed is False and a.confirmation:
        text += f" ({a.confirmation})"
    return text


FLAG_WORDS = {
    "unstable": "its p99 moved over 10 % across its last windows (unstable)",
    "few_requests": "fewer requests than its p99's interval asks (few_requests)",
    "unconfirmed": "not re-confirmed by a long point (unconfirmed)",
    "load_changed": "its search's p99 fell as the rate rose: the load changed (load_changed)",
}


def verdict(answers: Sequence[DeviceAnswer], rate: float | None, bound_s: float) -> str:
    """One sentence: which device serves ``rate`` within the bound, how many, the cheaper."""
    bound = f"within {ms(bound_s)}"
    serving = [a for a in answers if a.max_rate is not None]
    if not serving:
        return f"no device measured serves any rate {bound} at the p99"
    if rate is None:
        best = max(serving, key=lambda a: a.max_rate or 0.0)
        return (
            f"{bound} at the p99 the most is {per_s(best.max_rate or 0.0)} req/s per device "
            f"({best.device}); give --rate R to size for your traffic"
        )
    options = " or ".join(f"{a.device} x {_count(a)}" for a in serving)
    lead = f"at {per_s(rate)} req/s {bound}: {options}"
    cannot = [a.device for a in answers if a.max_rate is None]
    tail = f"; {', '.join(cannot)} cannot meet the bound" if cannot else ""
    if len(serving) < 2:
        return lead + tail
    priced = [
        a for a in serving if a.price_per_hour is not None or a.energy_cost_per_million is not None
    ]
    rented = {a.price_per_hour is not None for a in priced}
    if len(priced) < 2 or len(rented) > 1:  # one with its rent, one with energy alone
        return lead + " (give --price for each to compare cost)" + tail
    unknown = [a.device for a in serving if a.energy_cost_note]
    if unknown:  # one device's energy counted, another's not: no fair comparison
        return (
            lead
            + f", can't tell which is cheaper: no energy counter on {', '.join(unknown)}"
            + tail
        )
    return lead + ", " + _cheaper(priced, rate) + tail


def _count(a: DeviceAnswer) -> str:
    """N, or lo-hi across the bracket; at most N where the generator, not the device,
    ended the climb (the device may serve more, so fewer may do); with the hourly cost of
    that many where a price was given."""
    lo, hi = a.needed_range or (a.needed, a.needed)
    if a.generator_bound and (hi or 0) > 1:
        count = f"<= {hi}"
    else:
        count = str(hi) if lo == hi else f"{lo}-{hi}"
    if a.price_per_hour is not None and hi is not None:
        cost = fmt_cost(hi * a.price_per_hour)
        if lo != hi and not a.generator_bound and lo is not None:
            cost = f"{fmt_cost(lo * a.price_per_hour)}-{cost}"
        count += f" ({cost} an hour)"
    return count


def _energy_per_hour(a: DeviceAnswer, rate: float) -> float:
    """The energy cost of serving ``rate`` for an hour, whatever the device count."""
    return (a.energy_cost_per_million or 0.0) * rate * 3600 / 1e6


def fmt_cost(x: float) -> str:
    return f"{x:,.2f}" if x >= 0.01 else f"{x:.3g}"


def _cheaper(priced: Sequence[DeviceAnswer], rate: float) -> str:
    """The cheaper for the traffic only where it is cheaper at both ends of every bracket."""

    def hourly(a: DeviceAnswer) -> tuple[float, float]:
        lo, hi = a.needed_range or (a.needed or 0, a.needed or 0)
        price, spent = a.price_per_hour or 0.0, _energy_per_hour(a, rate)
        return lo * price + spent, hi * price + spent  # (best case, worst case)

    costs = {a.device: hourly(a) for a in priced}
    best = min(priced, key=lambda a: costs[a.device][1])
    worst_best = costs[best.device][1]
    others = [a for a in priced if a is not best]
    if any(costs[o.device][0] <= worst_best for o in others):
        return "can't tell which is cheaper: the search's brackets overlap in cost"
    k = min(costs[o.device][0] for o in others) / worst_best if worst_best > 0 else math.inf
    return f"{best.device} cheaper by {k:.2g}x"
