"""One load point: the open loop at one arrival rate and one batching setting, run window
by window until its p99 is stable (Perf Analyzer's percentile mode), then judged.

    window length: enough requests that the last 3 windows hold the minimum count for the
                   p99's interval (stats.min_requests), within the point's time limit
    after each window:
        gave up (a queue without end)                -> over the bound, stop
        two windows running with p99 surely over     -> over the bound, stop
        last 3 windows' p99 and rate within 10 %,
        and the minimum count reached                -> stable, stop
        time limit                                   -> stop (flagged unstable / few)
    statistics over the last 3 windows: p50 .. p99.9, the p99's interval, failures,
    requests over the bound, the generator's lateness, the achieved rate

A point where the loop itself could not keep time (its lateness, not the device, explains
the tail) is marked ``generator_behind``: it says nothing about the device's limit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from torchmark.kinds.serving import stats
from torchmark.kinds.serving.fleet import Fleet, WindowData
from torchmark.kinds.serving.server import Batching, Requests
from torchmark.results.serving import ms

Outcome = Literal["within", "over", "generator_behind"]

# The loop woke late by more than this share of the bound at its p99: the host's timing,
# not the device, decides the tail there.
BEHIND_SHARE = 0.25
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


@dataclass(frozen=True)
class PointPlan:
    """How long a load point runs and how it is judged."""

    bound_s: float  # the p99 latency bound
    max_point_s: float = 10.0
    min_window_s: float = MIN_WINDOW_S
    min_requests: int = 0  # 0: stats.min_requests() (the p99's 95 % CI within +-0.5 pct)
    stability: float = stats.STABILITY

    @property
    def needed(self) -> int:
        return self.min_requests or stats.min_requests()

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
    instances: int
    windows: list[Window]
    kept: Requests  # the last STABLE_WINDOWS windows' requests
    span_s: float  # their schedule span
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
    failed_all: int = 0  # requests failed over the whole point: a failure anywhere counts

    @functools.cached_property
    def latencies(self) -> stats.Latencies:
        """Computed once: ``kept`` is fixed at construction, and outcome, why, flags and
        the stored document each ask for it (four sorts and a binomial interval a time)."""
        return stats.Latencies.of(self.kept.latency)

    @property
    def achieved_rate(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else math.nan

    @property
    def failed(self) -> int:
        return self.failed_all

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

    @property
    def outcome(self) -> Outcome:
        """within / over the bound; an "over" the generator explains is ``generator_behind``.
        A point within the bound counts whatever the loop's lateness: latency runs from the
        scheduled arrival, so a late loop can only have made it worse."""
        if self.failed:
            return "over"
        if not self.gave_up and self.kept.latency.size and self.latencies.p99 <= self.bound_s:
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
        return f"p99 {ms(lat.p99)} {rel} {ms(self.bound_s)}"

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
    max_windows = max(stats.STABLE_WINDOWS, math.floor(plan.max_point_s / window_s))
    windows: list[Window] = []
    data: list[WindowData] = []
    reason, stable = "time limit", False
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
            over = [x.p99_low_s > plan.bound_s for x in windows[-2:]]
            if len(over) == 2 and all(over):
                reason = "p99 surely over the bound in 2 windows running"
                break
            last = data[-stats.STABLE_WINDOWS :]
            enough = sum(len(x.requests) for x in last) >= plan.needed
            if (
                stats.stable([x.p99_s for x in windows], plan.stability)
                and stats.stable([x.completed_rate for x in windows], plan.stability)
                and enough
            ):
                reason, stable = "stable", True
                break
            if len(windows) >= max_windows:
                break
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    last = data[-stats.STABLE_WINDOWS :]
    return LoadPoint(
        rate=rate,
        batching=batching,
        instances=fleet.instances,
        windows=windows,
        kept=Requests.concat([x.requests for x in last]),
        span_s=(last[-1].t1 - last[0].t0) if last else 0.0,
        completed=sum(x.completed for x in last),
        stop_reason=reason,
        stable=stable,
        bound_s=plan.bound_s,
        needed=plan.needed,
        errors=dict(data[-1].errors) if data else {},
        gave_up=data[-1].gave_up if data else None,
        busy_s=sum(x.busy_s for x in last),
        idle_s=sum(x.idle_s for x in last),
        wall_s=sum(x.wall_s for x in last),
        served=sum(int(x.requests.served.sum()) for x in data),
        batches=sum(_batches(x.requests) for x in data),
        failed_all=sum(int(x.requests.failed.sum()) for x in data),
    )


def _batches(r: Requests) -> int:
    """Batches among these requests: each batch of n contributes n requests of size n."""
    ok = r.batch > 0
    return round(float(np.sum(1.0 / r.batch[ok]))) if ok.any() else 0


def _window(d: WindowData) -> Window:
    lat = d.requests.latency
    p99 = stats.percentile(lat, stats.TAIL)
    # the lower bound alone, from the binomial: cheap enough to run between windows
    low = stats.tail_low(lat)
    span = d.t1 - d.t0
    return Window(
        d.t0,
        d.t1,
        len(d.requests),
        int(d.requests.failed.sum()),
        d.completed / span if span > 0 else math.nan,
        p99,
        low,
    )
