"""The search: the highest arrival rate whose p99 stays within the bound, and the batching
setting that reaches it, for one fleet (a device, or on the CPU one split of its cores).

    single-stream: one request at a time -> its p99 over the bound: no rate can meet it
    offline:       all requests queued, per max batch -> the most it serves per second
                   (no rate above that is sustainable: the bracket's top)
    first setting (the largest batch, no wait): bisect the rate between the highest point
                   within the bound and the lowest over it, until they are within 5 %
    every other setting: one point just above the best so far; only a setting that passes
                   there is bisected further (a setting that cannot beat the best costs one
                   point)
    a point where the generator fell behind ends the climb: the answer is then "at least"
    the whole search stops at its time budget, keeping every point measured
    re-confirmation: the highest rate within is run once more, as one long point (3x the
                   minimum duration, bounded by the budget, whose time for it is kept
                   aside); a rate that fails it is not the answer: 10 % lower is tried,
                   3 tries at most, and the answer is the rate that held (none held: the
                   highest rate within below them all, flagged unconfirmed)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from torchmark.kinds.serving import stats
from torchmark.kinds.serving.clock import Clock
from torchmark.kinds.serving.fleet import Fleet
from torchmark.kinds.serving.point import LoadPoint, PointPlan, run_point
from torchmark.kinds.serving.server import Batching, Requests
from torchmark.results.serving import FAILED_ALL, ms, per_s


class EnergyRegion(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def summary(self, calls: int, items: float) -> dict[str, Any]: ...


SINGLE_STREAM_N = 200
OFFLINE_BATCHES = 8  # batches per offline measurement, at least
OFFLINE_S = 0.25
# ... and at most this long each (the requests served by then give the rate): a CPU whose
# threads stall under other load ran 1 request in 4 ms where single-stream said 0.08 ms
# here, and three offline sizes spent a 30 s search budget.
OFFLINE_MAX_S = 1.0
OFFLINE_MAX = 20_000
# The offline rate is measured on a few batches: the true capacity may be a little higher,
# and the first unverified top of the bracket sits this much above it.
CAPACITY_SLACK = 1.05
# No rate under this share of the capacity meets the bound: stop looking lower.
FLOOR_SHARE = 1 / 64
# The answer's re-confirmation: one point this many times the minimum duration; a rate that
# fails it is stepped down by STEP_DOWN, CONFIRM_TRIES times at most.
CONFIRM_TIMES = 3
STEP_DOWN = 0.10
CONFIRM_TRIES = 3


class _Measured(Protocol):
    @property
    def rate(self) -> float: ...
    @property
    def outcome(self) -> str: ...


P = TypeVar("P", bound=_Measured)


def bracket_of(
    points: Sequence[P], setting: Callable[[P], Hashable]
) -> tuple[int | None, P | None]:
    """The bracket's ends among measured points (a search's or a stored fleet's): the index
    of the highest rate within the bound (ties: the first measured), and the lowest rate
    above it with the same batching setting that was not within (None where none was).
    Where a rate held its re-confirmation the highest such rate is the best; where every
    re-confirmation failed, the highest rate within below them all (unconfirmed)."""
    confirms = [i for i, p in enumerate(points) if getattr(p, "confirm", False)]
    within = [i for i in confirms if points[i].outcome == "within"]
    if not within:  # none held its re-confirmation: a rate under every one that failed
        failed = min((points[i].rate for i in confirms), default=math.inf)
        within = [i for i, p in enumerate(points) if p.outcome == "within" and p.rate < failed]
    if not within:
        return None, None
    i = max(within, key=lambda j: (points[j].rate, -j))
    best = points[i]
    above = [
        p
        for p in points
        if p.rate > best.rate and setting(p) == setting(best) and p.outcome != "within"
    ]
    return i, min(above, key=lambda p: p.rate) if above else None


@dataclass(frozen=True)
class SearchPlan:
    point: PointPlan
    batches: tuple[int, ...] = (1, 8, 32)  # max batch sizes tried
    wait_shares: tuple[float, ...] = (0.0, 0.1)  # max wait, as shares of the bound
    tolerance: float = 0.05  # stop when the bracket's top is within 5 % of its bottom
    budget_s: float = 60.0
    single_stream_n: int = SINGLE_STREAM_N

    def settings(self) -> list[Batching]:
        """Largest batch first, no wait first: the likeliest winner sets the bar early."""
        out: list[Batching] = []
        for b in sorted(set(self.batches), reverse=True):
            for share in self.wait_shares if b > 1 else (0.0,):
                s = Batching(b, share * self.point.bound_s)
                if s not in out:
                    out.append(s)
        return out


@dataclass
class Search:
    """Everything one fleet's search measured, and what it found."""

    label: str  # e.g. "1 process x 2 threads"
    bound_s: float
    single: Requests
    offline: dict[int, float]  # max batch -> requests/s with every request queued
    points: list[LoadPoint] = field(default_factory=list)
    stop_reason: str = ""
    elapsed_s: float = 0.0
    confirmation: str = ""  # what the re-confirmation found, in words
    # the host's pace (``pace``) before the fleet started and after it closed: raw seconds
    # (timed by the caller with none of the fleet's processes running)
    pace: list[float] = field(default_factory=list)
    pace_end: list[float] = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        best = self.best
        return best is not None and best.confirm

    @property
    def best(self) -> LoadPoint | None:
        """The highest rate within the bound (ties: the first measured)."""
        i, _ = bracket_of(self.points, lambda p: p.batching)
        return self.points[i] if i is not None else None

    @property
    def over_above(self) -> LoadPoint | None:
        """The lowest rate above the best one measured over the bound (or behind) with the
        best's setting: the bracket's top."""
        return bracket_of(self.points, lambda p: p.batching)[1]

    @property
    def bracket(self) -> tuple[float, float]:
        """(highest rate within, lowest rate over) with the best setting; the true limit
        lies between (the top is inf where nothing above was measured)."""
        best, over = self.best, self.over_above
        return (best.rate if best else 0.0, over.rate if over else math.inf)

    @property
    def generator_bound(self) -> bool:
        """The climb ended where the generator fell behind: the answer is a lower bound."""
        over = self.over_above
        return over is not None and over.outcome == "generator_behind"

    @property
    def single_p99_s(self) -> float:
        return stats.percentile(self.single.latency, stats.TAIL)


def search(
    fleet: Fleet,
    plan: SearchPlan,
    clock: Clock,
    label: str = "",
    seed: int = 0,
    on_point: Callable[[LoadPoint], None] | None = None,
    stop: Callable[[], bool] | None = None,
    energy: Callable[[], EnergyRegion] | None = None,
) -> Search:
    """The search of the module docstring. ``on_point`` hears each point as it lands (the
    caller stores it); ``stop()`` true ends the search after the current point;
    ``energy()`` gives a fresh counter region (``telemetry.energy.Region``) per point."""
    t0 = clock.now()
    bound = plan.point.bound_s
    single = fleet.single_stream(plan.single_stream_n, min(plan.point.max_point_s, plan.budget_s))
    s = Search(label, bound, single, {})
    if single.failed.all():
        s.stop_reason = FAILED_ALL
        return _done(s, clock, t0)
    if s.single_p99_s > bound:
        s.stop_reason = (
            f"one request at a time already takes {ms(s.single_p99_s)} at the "
            f"p99 (> {ms(bound)}): no arrival rate meets the bound"
        )
        return _done(s, clock, t0)
    single_s = stats.percentile(single.latency, 0.5)
    for b in sorted(set(plan.batches)):
        # at least OFFLINE_BATCHES batches and ~OFFLINE_S of work (a batch takes at least
        # one request's time): 8 batches of one request read SimpleNet's rate 4x low here
        batches = max(OFFLINE_BATCHES, min(OFFLINE_MAX, math.ceil(OFFLINE_S / single_s)))
        reqs, took = fleet.offline(b, b * batches, min(OFFLINE_MAX_S, plan.point.max_point_s))
        s.offline[b] = len(reqs) / took if took > 0 else math.nan

    def left() -> float:
        return plan.budget_s - (clock.now() - t0)

    confirm_s = CONFIRM_TIMES * plan.point.shortest_s
    # the search keeps the re-confirmation's time aside (and one shorter try 10 % lower),
    # never more than half its budget
    aside = min(confirm_s + plan.point.shortest_s, plan.budget_s / 2)

    n_probe = 0

    def probe(rate: float, batching: Batching, point: PointPlan | None = None) -> LoadPoint:
        nonlocal n_probe
        n_probe += 1
        region = energy() if energy is not None else None
        if region is not None:
            region.start()
        if point is None:  # a search point ends where the re-confirmation's time begins
            room = max(plan.point.shortest_s, left() - aside)
            point = dataclasses.replace(plan.point, max_point_s=min(plan.point.max_point_s, room))
            confirm = False
        else:
            confirm = True
        p = run_point(fleet, rate, batching, point, seed=seed * 1000 + n_probe)
        p.confirm = confirm
        if region is not None:
            region.stop()
            p.energy = region.summary(p.batches, p.served)
        s.points.append(p)
        if on_point is not None:
            on_point(p)
        return p

    def over_time() -> bool:
        short = left() - aside < plan.point.shortest_s
        return short or (stop is not None and stop())

    behind_at = math.inf  # the lowest rate where the generator fell behind
    for batching in plan.settings():
        cap = s.offline.get(batching.max_batch, math.nan)
        if not math.isfinite(cap) or cap <= 0:
            continue
        best = s.best
        lo = best.rate if best else 0.0
        hi = min(CAPACITY_SLACK * cap, behind_at)
        if best is not None:
            r = lo * (1 + plan.tolerance)
            if r >= hi or over_time():
                continue
            p = probe(r, batching)
            if p.outcome == "generator_behind":
                behind_at = min(behind_at, r)
                continue
            if p.outcome != "within":
                continue
            lo = r
        verified = False  # a point at hi was measured over the bound
        while not over_time():
            if lo == 0 and hi < FLOOR_SHARE * cap:
                break
            if lo > 0 and hi - lo <= plan.tolerance * lo:
                if verified:
                    break
                r = hi  # tight against a top never measured: measure it
            else:
                r = (lo + hi) / 2 if lo > 0 else hi / 2
            p = probe(r, batching)
            if p.outcome == "within":
                lo = r
                if r == hi:  # the capacity guess was low: look higher
                    hi = min(hi * 1.5, behind_at)
                    verified = False
                    if hi <= lo:  # where the generator fell behind: no higher rate to try
                        break
            else:
                hi, verified = r, True
                if p.outcome == "generator_behind":
                    behind_at = min(behind_at, r)
        if over_time():
            break
    spent = left() - aside < plan.point.shortest_s
    s.confirmation = _reconfirm(s, plan, left, probe, stop)
    why = _why(s, plan, -1.0 if spent else left(), behind_at)
    s.stop_reason = "; ".join(x for x in (why, s.confirmation) if x)
    return _done(s, clock, t0)


def _reconfirm(
    s: Search,
    plan: SearchPlan,
    left: Callable[[], float],
    probe: Callable[[float, Batching, PointPlan], LoadPoint],
    stop: Callable[[], bool] | None,
) -> str:
    """The answer run once more as one long point; stepped down where it fails (module
    docstring). What happened, in words."""
    best = s.best
    if best is None:
        return ""
    want = CONFIRM_TIMES * plan.point.shortest_s
    rate, failed = best.rate, list[str]()
    for _ in range(CONFIRM_TRIES):
        seconds = min(want, left())
        if seconds < plan.point.shortest_s or (stop is not None and stop()):
            why = "the time budget was spent" if not failed else "the time budget ran out"
            tried = f" ({'; '.join(failed)})" if failed else ""
            return f"not re-confirmed: {why}{tried}"
        p = probe(rate, best.batching, plan.point.longer(seconds))
        if p.outcome == "within":
            said = f"re-confirmed at {per_s(rate)} req/s for {p.span_s:.3g} s ({p.why})"
            return said + (f" after {'; '.join(failed)}" if failed else "")
        failed.append(f"{per_s(rate)} failed: {p.why}")
        rate *= 1 - STEP_DOWN
    return f"no rate held for its re-confirmation: {'; '.join(failed)}"


def _why(s: Search, plan: SearchPlan, left: float, behind_at: float) -> str:
    lo, hi = s.bracket
    spent = f"time budget ({plan.budget_s:.3g} s) spent" if left < 0 else ""
    if s.best is None:
        if s.confirmation:  # rates met the bound, none held for its re-confirmation
            return spent
        return f"{spent} before any rate met the bound" if spent else "no rate met the bound"
    if s.generator_bound:
        over = s.over_above  # the point that ended the climb: a re-confirmation, maybe
        at = behind_at if math.isfinite(behind_at) or over is None else over.rate
        return (
            (f"{spent}; " if spent else "")
            + f"the generator fell behind at {per_s(at)}/s: the limit is at least "
            f"{per_s(lo)}/s (a faster or quieter host would say more)"
        )
    if spent:
        if hi == math.inf:  # nothing above it was measured over the bound
            return f"{spent}: the limit is at least {per_s(lo)}/s (no higher rate was tried)"
        return f"{spent}: the limit lies between {per_s(lo)} and {per_s(hi)}"
    return f"bracketed within {100 * plan.tolerance:g} %"


def _done(s: Search, clock: Clock, t0: float) -> Search:
    s.elapsed_s = clock.now() - t0
    return s
