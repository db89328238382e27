"""Serving runs on the board: checked, re-derived, listed and ranked among themselves.

A serving run (``torchmark serving``) has no timed cases: it answers "the most requests/s
each device serves within a p99 bound". So it is its own division, never ranked against a
run's or model's throughput, and ranked only among serving runs of the same model, inputs
and bound, where its verdict allows (``verdicts.kind_of_answer``).

    check(run)      bounds on what the client sent: latencies positive and bounded, the
                    percentiles re-derived from the stored latencies, each rate bounded by
                    its request count and the run's duration
    rederive(run)   each fleet's bracket, the answers and the verdict recomputed from the
                    points (the client's are not trusted)
    board(runs)     one table per (model, inputs, bound): ranked where the brackets of
                    the max rate tell two devices apart, shared ranks where they overlap
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from torchmark.judge import verdicts
from torchmark.kinds.serving import answer, deployed, stats
from torchmark.kinds.serving.answer import MAX_STORED
from torchmark.kinds.serving.point import MIN_POINT_S, MIN_WINDOW_S
from torchmark.results import RunRecord
from torchmark.results.serving import MAX_LATENCY_S, DeviceAnswer, PointDoc, ms, read, write
from torchmark.web.ranking import device_model

DIVISION = "serving"
MAX_FLEETS = 64
MAX_POINTS = 1_000  # per fleet: a 2-minute search measures a few dozen
MAX_RATE = 1e7  # requests/s: 100x what the Python load generator issued on time here
MAX_J_PER_REQUEST = 1e6
# Poisson counts: a window of the kept span at rate R holds R x span requests, give or take
# a few sqrt(R x span); a factor 2 only refuses what no real point produces.
COUNT_SLACK = 2.0
P99_ROUNDING_S = 1.5e-6  # stored latencies are whole microseconds


def refusal(run: RunRecord) -> str | None:
    """Why the board refuses a run, in one line, or None: a prediction (``verdicts``: a
    predicted figure is never ranked), an environment of the wrong types
    (``plausible.environment_shape``: the server tests the document for it first; the
    checks after it read the environment), out of its bounds (``ranking.check_bounds``), a
    figure no hardware reaches (``plausible.check``), or a serving run whose answers cannot
    be made again from its points (``check``). The server's rule (``web/api.py``) and
    ``submit --dry-run``'s preview of it, one function."""
    from torchmark.judge.verdicts import prediction_refusal
    from torchmark.web import plausible, ranking

    return (
        prediction_refusal(run, "rank")  # a prediction holds no measurement to rank
        or plausible.environment_shape({"environment": run.environment})
        or ranking.check_bounds(run)
        or plausible.check(run)
        or check(run)
    )


def check(run: RunRecord) -> str | None:
    """Why the server refuses this serving run (one line naming the field), else None."""
    if run.kind != DIVISION:
        return None
    p = read(run)
    if p is None:
        return "payload: a serving run without its serving document"
    if not (math.isfinite(p.bound_s) and 0 < p.bound_s <= MAX_LATENCY_S):
        return f"payload.serving.bound_s: {p.bound_s!r} is not a latency bound in (0, 1 h]"
    if len(p.fleets) > MAX_FLEETS:
        return f"payload.serving.fleets: {len(p.fleets)}; at most {MAX_FLEETS}"
    window = min(MIN_WINDOW_S, MIN_POINT_S / (stats.STABLE_WINDOWS + 1))  # 0.1 s
    implied = 0.0  # seconds of arrivals the kept requests take at their rates
    for i, f in enumerate(p.fleets):
        if len(f.points) > MAX_POINTS:
            return f"payload.serving.fleets.{i}.points: {len(f.points)}; at most {MAX_POINTS}"
        for j, pt in enumerate(f.points):
            bad = _point(pt, p.bound_s, window)
            if bad:
                return f"payload.serving.fleets.{i}.points.{j}: {bad}"
            implied += pt.n / pt.rate
    took = _duration(run)
    if took is not None and implied > COUNT_SLACK * took + 1.0:
        return (
            f"payload.serving: its points' requests take {implied:.3g} s at their rates, "
            f"more than the run's {took:.3g} s"
        )
    return None


def _duration(run: RunRecord) -> float | None:
    if run.finished_utc is None:
        return None
    return max(0.0, (run.finished_utc - run.created_utc).total_seconds())


def _point(pt: PointDoc, bound_s: float, window_s: float) -> str | None:
    if not (math.isfinite(pt.rate) and 0 < pt.rate <= MAX_RATE):
        return f"rate {pt.rate!r} is not in (0, {MAX_RATE:g}] requests/s"
    if pt.max_batch < 1 or not (math.isfinite(pt.max_wait_s) and pt.max_wait_s >= 0):
        return "max_batch >= 1 and max_wait_s >= 0"
    lat = pt.latency_us
    if pt.n < 0 or len(lat) != min(pt.n, MAX_STORED):
        return f"{len(lat)} latencies stored for n = {pt.n} (all of them, {MAX_STORED:,} at most)"
    if lat and not (min(lat) > 0 and max(lat) <= MAX_LATENCY_S * 1e6):
        return "latency_us: latencies are > 0 and at most an hour"
    tail = [pt.p50_s, pt.p90_s, pt.p99_s, pt.p999_s]
    known = [x for x in tail if x is not None]
    if any(not (math.isfinite(x) and 0 < x <= MAX_LATENCY_S) for x in known):
        return "p50_s .. p999_s: latencies are > 0 and at most an hour"
    if known != sorted(known):
        return "p50_s <= p90_s <= p99_s <= p999_s"
    if lat:
        seconds = [x * 1e-6 for x in lat]
        if pt.p99_s is None:
            return "p99_s missing where latencies are stored"
        if len(lat) == pt.n:  # every latency: the p99 is theirs
            p99 = stats.percentile(seconds, stats.TAIL)
            if abs(p99 - pt.p99_s) > P99_ROUNDING_S:
                return f"p99_s {pt.p99_s:.6g} is not the p99 of its latencies ({p99:.6g})"
        elif not min(seconds) - P99_ROUNDING_S <= pt.p99_s <= max(seconds) + P99_ROUNDING_S:
            return "p99_s outside its stored latencies"
    if pt.achieved_rate is not None and not (
        math.isfinite(pt.achieved_rate) and 0 <= pt.achieved_rate <= COUNT_SLACK * pt.rate + 10
    ):
        return f"achieved_rate {pt.achieved_rate!r} above what {pt.rate:.4g}/s offered"
    e = pt.energy or {}
    j = e.get("j_per_item") if e.get("available") else None
    if j is not None and not (isinstance(j, (int, float)) and 0 <= j <= MAX_J_PER_REQUEST):
        return f"energy.j_per_item {j!r} is not in [0, {MAX_J_PER_REQUEST:g}] J"
    if pt.outcome != "within":
        return None
    if pt.failed or pt.p99_s is None or pt.p99_s > bound_s:
        return f"within the bound with p99 {pt.p99_s!r} s > {bound_s:g} s or failures"
    if pt.valid is False or pt.holds is False:
        return "within the bound, but INVALID by LoadGen's rules or surely over in a third"
    if pt.duration_s is not None and pt.duration_s + 1e-6 < (pt.min_duration_s or 0.0):
        return f"within the bound after {pt.duration_s:.3g} s < its minimum duration"
    if len(pt.window_p99_s) < stats.STABLE_WINDOWS:
        n = len(pt.window_p99_s)
        return f"within the bound after {n} window(s); it takes {stats.STABLE_WINDOWS}"
    # the kept windows span at least 3 x the shortest window: so many requests at least
    span = stats.STABLE_WINDOWS * window_s
    short = pt.n * COUNT_SLACK < pt.rate * span
    held = f"its windows of >= {ms(window_s)} would hold ~{pt.rate * span:,.0f}"
    return f"{pt.n} requests cannot hold a p99 at {pt.rate:.4g}/s ({held})" if short else None


def rederive(run: RunRecord) -> RunRecord:
    """The run with its answers and verdict made again from its points (a checked run)."""
    p = read(run)
    if p is None:
        return run
    p = p.model_copy(deep=True)
    for f in p.fleets:
        answer.refresh(f)
    # prices are the user's to give (not measured): kept where they are prices at all
    given = [*p.answers, *p.capacity]
    prices = {a.device: x for a in given if (x := _price(a.price_per_hour)) is not None}
    p.energy_price = _price(p.energy_price)
    deployed.analyse(p, prices)  # as served where the run served it, else in process
    out = run.model_copy(deep=True)
    write(out, p)
    return out


def _price(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x >= 0 else None


# -- the board --------------------------------------------------------------------------------


@dataclass
class Row:
    """One device of one serving run: its max rate within the bound and the verdict's word."""

    run_id: str
    machine: str
    device: str
    model: str  # what the device is, as the run recorded it
    answer: DeviceAnswer
    kind: verdicts.Kind
    said: str  # the verdict's word and why, or how it is marked
    rank: str = ""  # "" where its verdict keeps it off the ranking
    vs_above: str = ""

    @property
    def ranked(self) -> bool:
        return verdicts.RULES[self.kind].allows("rank")

    @property
    def limit(self) -> str:
        """``27,589-28,650``, ``>= 3,458`` or ``none``: the bracket as the CLI says it."""
        a = self.answer
        if a.max_rate is None:
            return "none"
        low = f"{a.max_rate:,.0f}"
        if a.top is None or a.generator_bound:
            return f">= {low}"
        return f"{low}-{a.top:,.0f}"


@dataclass
class Group:
    model: str
    inputs: str
    bound_s: float
    served: str = ""  # "as served": the runs' answers are over HTTP, not in process
    rows: list[Row] = field(default_factory=list)

    @property
    def label(self) -> str:
        inputs = f" ({self.inputs})" if self.inputs else ""
        served = f", {self.served}" if self.served else ""
        return f"{self.model}{inputs} within p99 <= {ms(self.bound_s)}{served}"


def rows_of(run: RunRecord, machine: str) -> list[Row]:
    """A serving run's devices, each with the kind its verdict gives its max rate."""
    p = read(run)
    if p is None:
        return []
    level = run.verdict.level if run.verdict is not None else None
    out = []
    for a in p.answers:
        kind = verdicts.kind_of_answer(level, a.max_rate is not None, a.flags)
        reasons = a.flags or ([a.why_none] if a.max_rate is None and a.why_none else [])
        word = verdicts.RULES[kind].word
        said = f"{word}: {'; '.join(reasons)}" if reasons and kind != "ok" else word
        model = device_model(run, a.device)
        out.append(Row(run.run_id or "", machine, a.device, model, a, kind, said))
    return out


def board(runs: Iterable[tuple[RunRecord, str]]) -> list[Group]:
    """Every serving run's devices, one group per model, inputs and bound: ranked where the
    verdict allows, the rest listed after them.

    A row's rank is 1 + the rows whose bracket lies wholly above its own (the search resolves
    a limit to its bracket and no finer), shared (=N) where another row has the same: a row
    is ranked below another only where more rows are surely faster than it. It can still be
    ranked below a row it cannot be told from (no rank avoids that: overlap is not
    transitive): brackets B 150-160, C 120-130, A 100-200 read B =1, A =1, C 2, C below A
    though they overlap, as its ``vs_above`` says. Comparing each row with the row above
    only read B 1, C =2, A =2: A below B with no row surely faster than A."""
    from torchmark.report.serving import change

    groups: dict[tuple[str, str, float, str], Group] = {}
    for run, machine in runs:
        p = read(run)
        if p is None:
            continue
        # as served and in process are two questions: never ranked together
        how = "as served" if p.capacity else ""
        key = (p.model, p.inputs, p.bound_s, how)
        g = groups.setdefault(key, Group(p.model, p.inputs, p.bound_s, how))
        g.rows.extend(rows_of(run, machine))
    for g in groups.values():
        ranked = [r for r in g.rows if r.ranked]
        above = {  # each row's rows whose bracket lies wholly above its own, by id
            id(r): {id(o) for o in ranked if change(r.answer, o.answer)[0] == "FASTER"}
            for r in ranked
        }
        number = {id(r): 1 + len(above[id(r)]) for r in ranked}
        shared = Counter(number.values())
        ranked.sort(key=lambda r: (number[id(r)], -(r.answer.max_rate or 0.0)))
        for i, row in enumerate(ranked):
            n = number[id(row)]
            row.rank = f"={n}" if shared[n] > 1 else str(n)
            faster = above[id(row)]
            row.vs_above = "" if not i else _vs_above(row, id(ranked[i - 1]) in faster, len(faster))
        g.rows = ranked + [r for r in g.rows if not r.ranked]
    return sorted(groups.values(), key=lambda g: (g.model, g.inputs, g.bound_s, g.served))


def _vs_above(row: Row, below_prev: bool, faster: int) -> str:
    """The row against the one listed above it (``below_prev``: that one's bracket lies
    wholly above), and the rows that are surely faster."""
    top = f"{row.answer.top:,.0f}" if row.answer.top is not None else "?"
    if below_prev:
        return f"slower: over the bound at {top}/s, which the row above serves"
    if not faster:
        return "can't tell: the brackets overlap"
    rows = "the row" if faster == 1 else f"{faster} rows"
    return (
        f"can't tell from the row above (the brackets overlap); slower than {rows} higher "
        f"up: over the bound at {top}/s, which {'it serves' if faster == 1 else 'they serve'}"
    )


def group_json(g: Group) -> dict[str, Any]:
    """A group as ``/api/v1/serving`` gives it."""
    return {
        "model": g.model,
        "inputs": g.inputs,
        "p99_bound_s": g.bound_s,
        "as_served": bool(g.served),
        "rows": [
            {
                "rank": r.rank or None,
                "run_id": r.run_id,
                "machine": r.machine,
                "device": r.device,
                "model": r.model,
                "max_rate": r.answer.max_rate,
                "top": r.answer.top,
                "generator_bound": r.answer.generator_bound,
                "p99_s": r.answer.p99_s,
                "split": r.answer.split,
                "batching": r.answer.batching,
                "verdict": r.kind,
                "said": r.said,
                "vs_above": r.vs_above,
            }
            for r in g.rows
        ],
    }
