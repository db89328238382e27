"""One load point: the open loop at one arrival rate and one batching setting, run window
by window for at least the minimum duration, then judged on every request it served.

    window length: enough requests that 3 windows hold the minimum count for the p99's
                   interval (stats.min_requests), within the point's time limit
    after each window:
        gave up (a queue without end)                -> over the bound, stop
        two windows running with p99 surely over     -> over the bound, stop
        the minimum duration reached, with the requests early stopping asks for
        (at least 459) and the p99 interval's count  -> stop
        ... or by then the p99 over the bound        -> over the bound, stop
        time limit                                   -> stop (too short: INVALID)
    statistics over the whole point: p50 .. p99.9, the p99's interval, failures,
    requests over the bound, the generator's lateness, the achieved rate

A rate is within only if it holds: the p99 over the whole point within the bound, the p99
of each third of the point within it too (a queue that grows over the point crosses the
bound in its last third, whatever its first two said), no failed request, and VALID in
MLPerf LoadGen's sense (``valid``: its p99, its early-stopping rule for the tail, and the
minimum duration met). Why a minimum duration: a rate a share e above what the device
serves builds a queue of e R D requests over D seconds, which delays a request by e D;
``MIN_DURATION_S`` = 5 s shows an overload of 1 % as 50 ms of queueing (the bound most
runs ask), where the 0.6 s the old three windows judged hid one of 8 %. LoadGen's own
minimum is 600 s: a figure for a submission, not for a search of ten points.

A point where the loop itself could not keep time (its lateness, not the device, explains
the tail) is marked ``generator_behind``: it says nothing about the device's limit.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from torchmark.kinds.serving import stats
from torchmark.kinds.serving.fleet import Fleet, WindowData
from torchmark.kinds.serving.server import Batching, Requests
from torchmark.results.serving import BEHIND_SHARE, bound_errors, ms
from torchmark.stats import early_stopping

Outcome = Literal["within", "over", "generator_behind"]

# The loop's own bookkeeping (neither serving nor asleep) above this share of its time: the
# generator, not the device, sets the pace (~3 µs a batch here, so at 20,000 batches/s).
LOOP_SHARE_MAX = 0.25
# An arrival the loop woke for this late (or 1 % of the bound, if more) counts as late.
LATE_S = 100e-6
MIN_WINDOW_S = 0.2
# The shortest load point: 4 windows of 0.1 s. The board bounds a point's rate by the
# requests its windows hold, so a window is never shorter than this over 4.
MIN_POINT_S = 0.4
WINDOW_SPARE = 1.2
# The shortest a point judged within runs (see the module docstring); --min-duration.
MIN_DURATION_S = 5.0
# A point is judged in this many consecutive parts of equal length: each must hold.
PARTS = 3


@dataclass(frozen=True)
class PointPlan:
    """How long a load point runs and how it is judged."""

    bound_s: float  # the p99 latency bound
    max_point_s: float = 30.0
    min_window_s: float = MIN_WINDOW_S
    min_requests: int = 0  # 0: stats.min_requests() (the p99's 95 % CI within +-0.5 pct)
    stability: float = stats.STABILITY
    min_duration_s: float = MIN_DURATION_S

    @property
    def needed(self) -> int:
        """Requests a point runs for: the interval's count, and never fewer than LoadGen's
        early stopping needs to call it VALID (459 with none over the bound): a point
        shorter than that is INVALID whatever its latencies."""
        return max(self.min_requests or stats.min_requests(), early_stopping.min_queries(0))

    @property
    def shortest_s(self) -> float:
        """The minimum duration a point of this plan is held to: a plan whose longest point
        is shorter than its minimum duration is judged by that length (the CLI refuses
        such a pair; a caller's own plan says what it wants)."""
        return min(self.min_duration_s, self.max_point_s)

    def longer(self, duration_s: float) -> PointPlan:
        """The same plan for one long point (a re-confirmation): at least ``duration_s``."""
        return dataclasses.replace(
            self, min_duration_s=duration_s, max_point_s=max(self.max_point_s, 2 * duration_s)
        )

    def window_s(self, rate: float) -> float:
        """3 windows hold the minimum count (with 20 % to spare: the count is Poisson), and
        4 fit in the point's time limit."""
        want = WINDOW_SPARE * self.needed / stats.STABLE_WINDOWS / rate
        return min(max(want, self.min_window_s), self.max_point_s / (stats.STABLE_WINDOWS + 1))


@dataclass(frozen=True)
class Window:
    t0: float
    t1: float
    n: int
    failed: int
    completed_rate: float  # requests finished inside the window, per second
    p99_s: float
    p99_low_s: float  # lower bound of the p99's interval (NaN: too few requests)


@dataclass
class LoadPoint:
    """One rate x batching setting, measured: the windows and the requests kept."""

    rate: float
    batching: Batching
    windows: list[Window]
    kept: Requests  # every window's requests: the whole point
    span_s: float  # their schedule span: the point's duration
    completed: int  # requests finished inside that span
    stop_reason: str
    stable: bool
    bound_s: float
    needed: int
    errors: dict[str, int] = field(default_factory=dict)
    gave_up: str | None = None
    busy_s: float = 0.0  # in the model, over the kept windows (summed over instances)
    idle_s: float = 0.0  # asleep, waiting for work
    wall_s: float = 0.0  # the loop's time on those windows
    energy: dict[str, object] | None = None
    served: int = 0  # requests served over the whole point (every window)
    batches: int = 0
    failed: int = 0  # requests failed over the whole point: a failure anywhere counts
    min_duration_s: float = 0.0  # the plan's minimum duration
    parts_p99_s: list[float] = field(default_factory=list)  # each third's p99
    parts_low_s: list[float] = field(default_factory=list)  # the low end of its interval
    confirm: bool = False  # a re-confirmation of the search's answer

    @functools.cached_property
    def latencies(self) -> stats.Latencies:
        """Computed once: ``kept`` is fixed at construction, and outcome, why, flags and
        the stored document each ask for it (four sorts and a binomial interval a time)."""
        return stats.Latencies.of(self.kept.latency)

    @property
    def achieved_rate(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else math.nan

    @property
    def over_bound(self) -> int:
        return int(np.count_nonzero(self.kept.latency > self.bound_s))

    @property
    def lateness(self) -> np.ndarray:
        x = self.kept.lateness
        return x[~np.isnan(x)]

    @property
    def late(self) -> int:
        return int(np.count_nonzero(self.lateness > max(LATE_S, 0.01 * self.bound_s)))

    @property
    def utilisation(self) -> float:
        """Share of the loop's time spent serving batches (the model, copies included)."""
        return self.busy_s / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def loop_share(self) -> float:
        """Share of the loop's time spent neither serving nor asleep: its own bookkeeping
        (admitting arrivals, forming batches, recording), which a real client costs no
        server."""
        if not self.wall_s > 0:
            return math.nan
        return max(0.0, self.wall_s - self.busy_s - self.idle_s) / self.wall_s

    @property
    def generator_behind(self) -> str | None:
        """Why this point says nothing about the device, or None: the loop woke late (the
        host's timing), or its own bookkeeping took a share of its time that a server fed
        by real clients would not spend."""
        late = self.lateness
        if late.size >= 20:
            p99 = stats.percentile(late, 0.99)
            if p99 > BEHIND_SHARE * self.bound_s:
                return (
                    f"the loop woke {ms(p99)} late at its p99 (> {BEHIND_SHARE:.0%} "
                    f"of the {ms(self.bound_s)} bound): the host's timing, not the "
                    "device, decides the tail here"
                )
        share = self.loop_share
        if share > LOOP_SHARE_MAX:
            return (
                f"the load generator's own bookkeeping took {share:.0%} of the loop's time "
                f"(> {LOOP_SHARE_MAX:.0%}) at {self.rate:.4g} arrivals/s: it, not the "
                "device, is the limit here"
            )
        return None

    @functools.cached_property
    def _sorted(self) -> np.ndarray:
        return np.sort(self.kept.latency)

    @functools.cached_property
    def loadgen_p99_s(self) -> float:
        """The p99 as LoadGen reports it (``sorted[floor(0.99 n)]``)."""
        return early_stopping.loadgen_percentile(self._sorted.tolist(), stats.TAIL)

    @functools.cached_property
    def early_p99_s(self) -> float:
        """LoadGen's early-stopping estimate of the p99: a latency the true p99 lies under
        at 99 % confidence (NaN: too few requests for one)."""
        return early_stopping.estimate(self._sorted.tolist(), stats.TAIL)

    @property
    def early_needed(self) -> int:
        """The requests LoadGen's early stopping asks for, with this point's over the bound."""
        return early_stopping.min_queries(self.over_bound, stats.TAIL)

    @property
    def holds(self) -> bool:
        """No third of the point has its p99 surely over the bound (the lower end of its
        interval above it): a queue that grows over the point crosses the bound in its last
        third, whatever the whole point's p99 says; a third's p99 a little over by chance
        (its interval reaching under the bound) does not count against the rate."""
        return bool(self.parts_low_s) and not any(x > self.bound_s for x in self.parts_low_s)

    @property
    def invalid_why(self) -> list[str]:
        """Why LoadGen's Server scenario would call this point INVALID (empty: VALID), with
        this run's minimum duration in place of LoadGen's 600 s."""
        out = []
        n = int(self.kept.latency.size)
        if self.failed:
            out.append(f"{self.failed} request(s) failed")
        if not n:
            return [*out, "no request finished"]
        if self.span_s + 1e-9 < self.min_duration_s:
            out.append(f"ran {self.span_s:.3g} s < the minimum {self.min_duration_s:g} s")
        if self.loadgen_p99_s > self.bound_s:
            out.append(f"p99 {ms(self.loadgen_p99_s)} > {ms(self.bound_s)}")
        if not early_stopping.met(n, self.over_bound, stats.TAIL):
            out.append(
                f"early stopping not met: {n:,} requests with {self.over_bound:,} over the "
                f"bound, {self.early_needed:,} needed"
            )
        return out

    @property
    def valid(self) -> bool:
        """VALID in MLPerf LoadGen's sense (see ``invalid_why``)."""
        return not self.invalid_why

    @property
    def outcome(self) -> Outcome:
        """within only if the rate holds (module docstring); an "over" the generator
        explains is ``generator_behind``. A point within the bound counts whatever the
        loop's lateness: latency runs from the scheduled arrival, so a late loop can only
        have made it worse."""
        if self.failed:
            return "over"
        if not self.gave_up and self.kept.latency.size and self.valid and self.holds:
            return "within"
        return "generator_behind" if self.generator_behind else "over"

    @property
    def why(self) -> str:
        """The outcome in words."""
        if self.outcome == "generator_behind":
            return self.generator_behind or ""
        if self.gave_up:
            return self.gave_up
        if self.failed:
            first = next(iter(self.errors), "an error")
            return f"{self.failed} request(s) failed: {first}"
        lat = self.latencies
        if not lat.n:
            return "no request finished"
        rel = "<=" if lat.p99 <= self.bound_s else ">"
        said = f"p99 {ms(lat.p99)} {rel} {ms(self.bound_s)}"
        if lat.p99 <= self.bound_s and not self.holds:
            worst = max(self.parts_p99_s, default=math.nan)
            return f"{said}, but surely over in a third of the point ({ms(worst)})"
        invalid = self.invalid_why
        if lat.p99 <= self.bound_s and invalid:
            return f"{said}, but INVALID: {invalid[0]}"
        return said

    @property
    def flags(self) -> list[str]:
        out = []
        if not self.stable and not self.gave_up and self.outcome != "over":
            out.append("unstable")
        if 0 < self.latencies.n < self.needed:
            out.append("few_requests")
        if self.outcome == "generator_behind":
            out.append("generator_behind")
        if self.failed:
            out.append("failed_requests")
        return out


def run_point(
    fleet: Fleet,
    rate: float,
    batching: Batching,
    plan: PointPlan,
    seed: int = 0,
    on_window: Callable[[Window], None] | None = None,
) -> LoadPoint:
    """The load point of the module docstring."""
    window_s = plan.window_s(rate)
    max_windows = max(PARTS, math.floor(plan.max_point_s / window_s))
    min_duration_s = min(plan.min_duration_s, max_windows * window_s)
    min_windows = max(PARTS, math.ceil(min_duration_s / window_s - 1e-9))
    windows: list[Window] = []
    data: list[WindowData] = []
    reason = "time limit"
    n = over = 0
    source = fleet.windows(rate, batching, window_s, plan.bound_s, seed)
    try:
        for d in source:
            w = _window(d)
            windows.append(w)
            data.append(d)
            if on_window is not None:
                on_window(w)
            if d.gave_up:
                reason = d.gave_up
                break
            surely = [x.p99_low_s > plan.bound_s for x in windows[-2:]]
            if len(surely) == 2 and all(surely):
                reason = "p99 surely over the bound in 2 windows running"
                break
            lat = d.requests.latency
            n += int(lat.size)
            over += int(np.count_nonzero(lat > plan.bound_s))
            if len(windows) >= min_windows and n >= plan.needed:
                if early_stopping.met(n, over, stats.TAIL):
                    reason = "minimum duration reached"
                    break
                if over >= n - math.floor(stats.TAIL * n):  # its p99 is over the bound
                    reason = "minimum duration reached, p99 over the bound"
                    break
            if len(windows) >= max_windows:
                break
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    parts = [p for p in np.array_split(np.arange(len(data)), PARTS) if p.size]
    part_reqs = [Requests.concat([data[i].requests for i in p]) for p in parts]
    parts_p99 = [stats.percentile(r.latency, stats.TAIL) for r in part_reqs]
    # a third too small for an interval: its p99 itself (its largest latency) decides
    parts_low = [
        low if math.isfinite(low := stats.tail_low(r.latency)) else p99
        for r, p99 in zip(part_reqs, parts_p99, strict=True)
    ]
    parts_rate = [
        sum(data[i].completed for i in p) / (data[p[-1]].t1 - data[p[0]].t0) for p in parts
    ]
    return LoadPoint(
        rate=rate,
        batching=batching,
        windows=windows,
        kept=Requests.concat([x.requests for x in data]),
        span_s=(data[-1].t1 - data[0].t0) if data else 0.0,
        completed=sum(x.completed for x in data),
        stop_reason=reason,
        stable=_steady(parts_p99, plan.stability) and stats.stable(parts_rate, plan.stability),
        bound_s=plan.bound_s,
        needed=plan.needed,
        errors=bound_errors(dict(data[-1].errors)) if data else {},
        gave_up=data[-1].gave_up if data else None,
        busy_s=sum(x.busy_s for x in data),
        idle_s=sum(x.idle_s for x in data),
        wall_s=sum(x.wall_s for x in data),
        served=sum(int(x.requests.served.sum()) for x in data),
        batches=sum(_batches(x.requests) for x in data),
        failed=sum(int(x.requests.failed.sum()) for x in data),
        min_duration_s=min_duration_s,
        parts_p99_s=parts_p99,
        parts_low_s=parts_low,
    )


def _steady(p99s: list[float], tolerance: float) -> bool:
    """The parts' p99 show no drift: they agree within ``tolerance`` of their mean, or do
    not climb part after part (a queue that grows raises each part's tail above the last;
    a busy period lifts one part's alone, and the tail of a queue near saturation moves
    more than its binomial interval says between parts of one steady point)."""
    if stats.stable(p99s, tolerance):
        return True
    if len(p99s) < PARTS or not all(math.isfinite(x) for x in p99s):
        return False
    climbs = all(b > a for a, b in itertools.pairwise(p99s))
    return not (climbs and p99s[-1] > (1 + tolerance) * p99s[0])


def _batches(r: Requests) -> int:
    """Batches among these requests: each batch of n contributes n requests of size n."""
    ok = r.batch > 0
    return round(float(np.sum(1.0 / r.batch[ok]))) if ok.any() else 0


def _window(d: WindowData) -> Window:
    lat = d.requests.latency
    span = d.t1 - d.t0
    return Window(
        d.t0,
        d.t1,
        len(d.requests),
        int(d.requests.failed.sum()),
        d.completed / span if span > 0 else math.nan,
        stats.percentile(lat, stats.TAIL),
        stats.tail_low(lat),  # the interval's lower end alone: no sort between windows
    )
