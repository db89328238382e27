"""The sampler thread and the trace it fills: readings from each source, matched to samples.

A ``Recording`` is plain data (readings per source, sample spans, static facts) - what a
fixture file holds - and ``summarize`` is a pure function of it, so recorded traces from a
throttling GPU can be replayed through the same tagging and verdict code as a live run.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchmark.hardware.throttle import THROTTLE_REASONS
from torchmark.judge.load import MIN_KEPT_SAMPLES, flags_of
from torchmark.telemetry.base import Reading, Source, SourceUnavailable

# METHOD.md §2.10: a sample taken below 75 % of the base clock is throttled.
LOW_CLOCK_FRACTION = 0.75
TIMELINE_ROWS = 120


@dataclass
class SourceState:
    present: bool
    role: str
    reason: str | None = None  # why absent, or why it stopped
    static: dict[str, Any] = field(default_factory=dict)
    failed_after: int | None = None  # readings taken before it failed mid-run

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Recording:
    """Everything a trace saw: the raw material for ``summarize`` (and for fixtures)."""

    device: str
    accelerator: bool
    torch_threads: int | None = None
    sources: dict[str, SourceState] = field(default_factory=dict)
    readings: dict[str, list[tuple[float, Reading]]] = field(default_factory=dict)
    marks: list[tuple[int, float, float]] = field(default_factory=list)
    interval_s: float = 0.1
    overhead_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "accelerator": self.accelerator,
            "torch_threads": self.torch_threads,
            "sources": {k: s.as_dict() for k, s in self.sources.items()},
            "readings": {k: [[t, r] for t, r in v] for k, v in self.readings.items()},
            "marks": [list(m) for m in self.marks],
            "interval_s": self.interval_s,
            "overhead_s": self.overhead_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recording:
        return cls(
            device=d["device"],
            accelerator=d["accelerator"],
            torch_threads=d.get("torch_threads"),
            sources={k: SourceState(**s) for k, s in d["sources"].items()},
            readings={k: [(float(t), r) for t, r in v] for k, v in d["readings"].items()},
            marks=[(int(i), float(a), float(b)) for i, a, b in d["marks"]],
            interval_s=d.get("interval_s", 0.1),
            overhead_s=d.get("overhead_s", 0.0),
        )


class Sampler:
    """Background thread reading every source about every ``interval_s``.

    Adaptive: the interval grows so that reading stays under 1 % of one core
    (100x the measured cost of a reading) and so a long region keeps about 1,000 readings
    per source (elapsed / 1000), whichever is longest.
    """

    def __init__(
        self,
        sources: Sequence[Source],
        rec: Recording,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.rec, self.clock, self.base_interval = rec, clock, interval_s
        self.live: list[Source] = []
        for src in sources:
            try:
                static = src.open()
            except SourceUnavailable as e:
                rec.sources[src.name] = SourceState(False, src.role, reason=str(e))
                continue
            rec.sources[src.name] = SourceState(True, src.role, static=static)
            rec.readings[src.name] = []
            self.live.append(src)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchmark-telemetry", daemon=True)
        self._ticks = 0
        self._t0 = clock()

    def start(self) -> None:
        self.tick()  # a reading before the first sample, so every span is bracketed
        if self.live:
            self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        self.tick()  # and one after the last
        for src in self.live:
            src.close()
        self.live = []

    def interval(self) -> float:
        cost = self.rec.overhead_s / max(self._ticks, 1)
        elapsed = self.clock() - self._t0
        interval = max(self.base_interval, 100 * cost, elapsed / 1000)
        self.rec.interval_s = max(self.rec.interval_s, interval)
        return interval

    def _run(self) -> None:
        while not self._stop.wait(self.interval()):
            self.tick()

    def tick(self) -> None:
        for src in list(self.live):
            t0 = self.clock()
            try:
                reading = src.read()
            except Exception as e:  # NVML error mid-run, sensor gone: the run goes on
                self.live.remove(src)
                state = self.rec.sources[src.name]
                state.reason = f"stopped mid-run: {e}"
                state.failed_after = len(self.rec.readings[src.name])
                src.close()
                continue
            t1 = self.clock()
            self.rec.readings[src.name].append(((t0 + t1) / 2, reading))
            self.rec.overhead_s += t1 - t0
        self._ticks += 1


# ---------------------------------------------------------------------------------------
# Pure functions of a Recording
# ---------------------------------------------------------------------------------------


def _nearest(
    readings: list[tuple[float, Reading]], times: list[float], t0: float, t1: float, max_gap: float
) -> list:
    """Readings inside [t0, t1], else the one nearest the span if within ``max_gap``.
    ``times`` are the readings' times, built once per summary (a soak has ~7,000 marks)."""
    lo, hi = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1)
    if hi > lo:
        return [r for _, r in readings[lo:hi]]
    best = None
    for j in (lo - 1, lo):
        if 0 <= j < len(readings):
            gap = t0 - times[j] if times[j] < t0 else times[j] - t1
            if gap <= max_gap and (best is None or gap < best[0]):
                best = (gap, readings[j][1])
    return [best[1]] if best else []


def at_default_power_limit(static: dict[str, Any]) -> bool:
    """True when the enforced power limit is the card's default (within 1 W).

    On a lent H100 at its default 700 W, every GEMM of n >= 4096 ran with "SW power cap"
    set in 42-100 % of samples: that is the speed dense work sustains on that card, so
    setting those samples aside would report a burst the card cannot hold. A limit below
    the default (someone capped the card) still counts as throttling."""
    limit, default = static.get("power_limit_w"), static.get("default_power_limit_w")
    return limit is not None and default is not None and limit >= default - 1


def _throttle_tags(r: Reading, static: dict[str, Any], role: str, default_cap: bool) -> list[str]:
    """Why the reading counts as throttled: NVML reason words, or "low clock".
    ``default_cap``: ``at_default_power_limit(static)``, fixed per device."""
    tags = [w for w in r.get("reasons") or [] if w in THROTTLE_REASONS]
    power_bound = "SW power cap" in tags and default_cap
    if power_bound:
        tags.remove("SW power cap")
    if role == "device":
        clock, ref = r.get("sm_mhz"), static.get("base_sm_mhz") or static.get("max_sm_mhz")
        idle = "GPU idle" in (r.get("reasons") or [])  # idle clocks are not throttling
    else:  # a CPU's max clock is its 1-core turbo; only the base clock is a fair reference
        clock, ref, idle = r.get("clock_mhz"), static.get("base_mhz"), False
    # Under its own default power cap the clock drops by design (an H100 whose default
    # applications clock is its 1980 MHz maximum ran fp16 GEMMs at ~1,570 MHz mean).
    if clock and ref and not idle and not power_bound and clock < LOW_CLOCK_FRACTION * ref:
        tags.append("low clock")
    return tags


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _bracket(
    readings: list[tuple[float, Reading]], start: float, end: float
) -> tuple[tuple[float, Reading], tuple[float, Reading]] | None:
    """The last reading at or before ``start`` and the first at or after ``end``."""
    if len(readings) < 2:
        return None
    times = [t for t, _ in readings]
    a = max(bisect.bisect_right(times, start) - 1, 0)
    b = min(bisect.bisect_left(times, end), len(readings) - 1)
    return (readings[a], readings[b]) if b > a else None


def cpu_load(
    readings: list[tuple[float, Reading]], start: float, end: float
) -> dict[str, float] | None:
    """Cores used over [start, end] by this process, by other processes, and stolen."""
    pair = _bracket(readings, start, end)
    if pair is None:
        return None
    (ta, a), (tb, b) = pair
    dt = tb - ta
    # psutil's CPU times tick in 10 ms jiffies: below 0.2 s the split is mostly rounding.
    if dt < 0.2:
        return None
    own, other = _own_other(a, b, dt)
    return {
        "own_cores": round(own, 2),
        "other_cores": round(other, 2),
        "steal_cores": round(max((b["steal_s"] - a["steal_s"]) / dt, 0.0), 2),
        "span_s": round(dt, 3),
    }


def _own_other(a: Reading, b: Reading, dt: float) -> tuple[float, float]:
    """Cores this process and all other processes used between two host readings."""
    own = (b["proc_s"] - a["proc_s"]) / dt
    return own, max((b["busy_s"] - a["busy_s"]) / dt - own, 0.0)


def timeline(
    readings: list[tuple[float, Reading]],
    role: str,
    t_origin: float,
    cores: int | None,
    host: list[tuple[float, Reading]] | None = None,
) -> dict[str, Any]:
    """Compact (t, clock, temp, power, util, other cores) rows for reports, at most
    TIMELINE_ROWS. ``host``: the host's readings, whose CPU times give the cores other
    processes used up to each row (the run's own never count)."""
    rows = []
    host = host if host is not None else (readings if role != "device" else [])
    host_times = [t for t, _ in host]
    for j, (t, r) in enumerate(readings):
        if role == "device":
            clock, util = r.get("sm_mhz"), r.get("util_pct")
        else:
            clock, util = r.get("clock_mhz"), None
            if j and cores:
                tp, p = readings[j - 1]
                if t > tp:
                    util = 100 * (r["busy_s"] - p["busy_s"]) / (t - tp) / cores
        other = _other_cores(host, host_times, t)
        rows.append(
            [round(t - t_origin, 3), clock, r.get("temp_c"), r.get("power_w"), _r1(util), other]
        )
    step = max(1, math.ceil(len(rows) / TIMELINE_ROWS))
    columns = ["t_s", "clock_mhz", "temp_c", "power_w", "util_pct", "other_cores"]
    return {"columns": columns, "rows": rows[::step]}


# psutil's CPU times tick in 10 ms jiffies: other load is read over >= 0.2 s (as cpu_load)
OTHER_WINDOW_S = 0.2


def _other_cores(host: list[tuple[float, Reading]], times: list[float], t: float) -> float | None:
    """Cores other processes used over the >= 0.2 s of host readings up to ``t``."""
    b = bisect.bisect_right(times, t + 1e-9) - 1
    if b < 1:
        return None
    a = bisect.bisect_right(times, times[b] - OTHER_WINDOW_S) - 1
    if a < 0:
        return None
    try:
        return round(_own_other(host[a][1], host[b][1], times[b] - times[a])[1], 2)
    except (KeyError, TypeError):
        return None  # a host source without CPU times


def _r1(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def summarize(rec: Recording) -> dict[str, Any]:
    """Per-sample throttle tags and what the result stores (JSON-able).

    A soak summarizes while the sampler thread still appends readings: each source's list is
    copied once here, so the times and the readings read below are the same list (a reading
    appended between the two made a bisect index past the times' end: IndexError in CI)."""
    readings_of = {k: list(v) for k, v in rec.readings.items()}
    out: dict[str, Any] = {
        "device": rec.device,
        "accelerator": rec.accelerator,
        "sources": {
            k: {"present": s.present, "reason": s.reason, "missing": s.static.get("missing", {})}
            for k, s in rec.sources.items()
        },
        "interval_s": round(rec.interval_s, 4),
        "readings": sum(len(v) for v in readings_of.values()),
        "overhead_s": round(rec.overhead_s, 6),
        "n_samples": len(rec.marks),
    }
    # The source whose readings say whether a sample was throttled: the GPU's own (NVML),
    # or for a CPU result the host. An accelerator without NVML is not checked.
    dev_name = next(
        (k for k, s in rec.sources.items() if s.role == "device" and readings_of.get(k)), None
    )
    if dev_name is None and not rec.accelerator and readings_of.get("host"):
        dev_name = "host"
    host = readings_of.get("host", [])
    cores = rec.sources["host"].static.get("logical_cores") if "host" in rec.sources else None
    marks = sorted(rec.marks)
    start = marks[0][1] if marks else None
    end = marks[-1][2] if marks else None

    tags: list[list[str]] = [[] for _ in marks]
    throttled: list[int] = []
    reason_counts: dict[str, int] = {}
    if dev_name is not None:
        state, readings = rec.sources[dev_name], readings_of[dev_name]
        role = state.role
        max_gap = max(1.0, 3 * rec.interval_s)
        times = [t for t, _ in readings]
        capped, default_cap = 0, at_default_power_limit(state.static)
        for pos, (i, t0, t1) in enumerate(marks):
            words: list[str] = []
            near = _nearest(readings, times, t0, t1, max_gap)
            for r in near:
                new = _throttle_tags(r, state.static, role, default_cap)
                words += [w for w in new if w not in words]
            if default_cap and any("SW power cap" in (r.get("reasons") or []) for r in near):
                capped += 1
            tags[pos] = words
            if words:
                throttled.append(i)
            for w in words:
                reason_counts[w] = reason_counts.get(w, 0) + 1
        if capped:
            out["at_power_limit_pct"] = round(100 * capped / len(marks), 1)
    n = len(marks)
    # A host without an exposed base clock (VMs, containers) cannot say "low clock".
    out["throttle_checked"] = dev_name is not None and (
        rec.sources[dev_name].role == "device" or bool(rec.sources[dev_name].static.get("base_mhz"))
    )
    out["throttle_source"] = dev_name
    out["sample_tags"] = tags
    out["throttled_samples"] = throttled
    out["throttled_pct"] = round(100 * len(throttled) / n, 1) if n else 0.0
    out["throttle_reasons_pct"] = {w: round(100 * c / n, 1) for w, c in reason_counts.items()}
    kept = n - len(throttled)
    out["excluded"] = throttled if throttled and kept >= MIN_KEPT_SAMPLES else []

    if dev_name is not None and start is not None and end is not None:
        state, readings = rec.sources[dev_name], readings_of[dev_name]
        times = [t for t, _ in readings]
        inside = [r for t, r in readings if start <= t <= end] or [
            r for _, t0, t1 in marks for r in _nearest(readings, times, t0, t1, 1.0)
        ]
        key = "sm_mhz" if state.role == "device" else "clock_mhz"
        cmax = state.static.get("max_sm_mhz" if state.role == "device" else "max_mhz")
        clock = _mean([r.get(key) for r in inside])
        temps = [r["temp_c"] for r in inside if r.get("temp_c") is not None]
        out["clock_mhz_mean"] = _r1(clock)
        out["clock_max_mhz"] = cmax
        out["clock_base_mhz"] = state.static.get(
            "base_sm_mhz" if state.role == "device" else "base_mhz"
        )
        out["clock_pct_of_max"] = _r1(100 * clock / cmax) if clock and cmax else None
        out["temp_c"] = [min(temps), max(temps)] if temps else None
        out["power_w_mean"] = _r1(_mean([r.get("power_w") for r in inside]))
        out["power_limit_w"] = state.static.get("power_limit_w")
        out["util_pct_mean"] = _r1(_mean([r.get("util_pct") for r in inside]))
        pair = _bracket(readings, start, end)
        if pair and pair[0][1].get("energy_j") is not None and pair[1][1].get("energy_j"):
            out["energy_j"] = round(pair[1][1]["energy_j"] - pair[0][1]["energy_j"], 3)
    if start is not None and end is not None:
        load = cpu_load(host, start, end)
        if load is not None:
            out.update(load)
    out["logical_cores"] = cores
    out["torch_threads"] = rec.torch_threads
    tl_name = dev_name or ("host" if host else None)
    if tl_name and start is not None:
        out["timeline"] = timeline(
            readings_of[tl_name], rec.sources[tl_name].role, start, cores, host
        )
    out["flags"] = flags_of(out, rec.accelerator)
    return out


__all__ = [
    "Recording",
    "Sampler",
    "SourceState",
    "cpu_load",
    "summarize",
]
