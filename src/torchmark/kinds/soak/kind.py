"""Stability mode: repeat one heavy step for a duration, throughput over time beside telemetry.

A cooling problem shows as a falling curve with the temperature and throttle reason that
caused it (the seed table's "Server GPU (Overheat)" ran at 55 it/s beside a healthy 300).

    pick the heaviest case whose first call fits the time budget
    with watch(device):                     # sampler thread, as in `torchmark run`
        until duration: time k calls (one chunk ~ 0.5 s), mark its span
    windows of chunks -> rate, clock, temperature, power, throttle reasons
    first vs last minute -> a verdict naming the cause of a fall

A soak has its own loop, not ``run_planned``'s: one case timed for a duration in chunks
(no stopping rule; a throttled stretch is what it looks for, so nothing is set aside), its
windows stored as they fill. Its session is opened like every run's (``run.open_run``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, InputError
from torchmark.judge.load import competing
from torchmark.judge.validity import Level, load_words
from torchmark.results import Result, RunRecord
from torchmark.results.payloads import SoakPayload, SoakSeries, SoakWindow
from torchmark.run.case import measured
from torchmark.run.record import open_run
from torchmark.run.session import Events
from torchmark.stats.measurement import Measurement
from torchmark.store.base import ResultStore
from torchmark.telemetry import Source, TelemetryTrace
from torchmark.telemetry.trace import Recording, cpu_load
from torchmark.workloads import Case, PlanOptions, Prepared, Workload

# A fall (or rise) of throughput smaller than this between the first and last segment is
# within what clocks and scheduling move on a healthy machine over minutes.
TREND_THRESHOLD = 0.10
SEGMENT_S = 60.0  # "the first minute" vs "the last minute"
CHUNK_S = 0.5  # one timed chunk: 0.5 s keeps ~1,200 points for 10 minutes
N_WINDOWS = 20


@dataclass(frozen=True)
class SoakConfig:
    """What a ``soak`` run repeated, as its record stores it (``as_dict``)."""

    duration_s: float
    device: str
    workload: str

    def as_dict(self) -> dict[str, Any]:
        return {"duration_s": self.duration_s, "device": self.device, "workload": self.workload}


@dataclass
class Chunk:
    t0: float  # seconds since the soak started (host clock)
    t1: float
    per_call_s: float


def choose(workload: Workload, device: Device, budget_s: float) -> tuple[Case, Prepared, float]:
    """The heaviest case of the workload whose first call takes at most ``budget_s``."""
    cases = workload.cases(device, PlanOptions(suite="standard"))
    cases.sort(key=lambda c: _weight(workload, c), reverse=True)
    reasons = []
    for case in cases:
        try:
            prepared = workload.prepare(case)
        except CaseSkipped as e:
            reasons.append(str(e))
            continue
        except Exception as e:
            if device.is_out_of_memory(e):
                reasons.append(f"out of memory at {case.label}")
                continue
            raise
        if prepared.check:
            prepared.check()
        timer = device.timer("e2e")
        timer.start()
        prepared.fn()
        first = timer.stop()
        if first <= budget_s or case is cases[-1]:
            return case, prepared, first
        if prepared.teardown:
            prepared.teardown()
    why = "; ".join(reasons) or "it plans no case here"
    raise InputError(f"workload {workload.name!r} cannot run on {device.name}: {why}")


def _weight(workload: Workload, case: Case) -> float:
    """Order cases by size without allocating them: the product of numeric params."""
    return math.prod(float(v) for _, v in case.params if isinstance(v, int | float)) or 0.0


def soak(
    workload: Workload,
    device: Device,
    duration_s: float,
    *,
    sources: Sequence[Source] | None = None,
    interval_s: float = 0.1,
    clock: Callable[[], float] = time.perf_counter,
    on_chunk: Callable[[float, float], None] | None = None,
    store: ResultStore | None = None,
    events: Events | None = None,
) -> RunRecord:
    """Run the soak and return a RunRecord(kind="soak").

    The windows are stored as each one fills (a kill loses at most the current window);
    Ctrl-C, SIGTERM or SIGHUP end it early: the soak so far is kept, stored incomplete, and
    RunInterrupted carries it."""
    from torchmark.telemetry import sources_for

    budget = max(0.05, min(2.0, duration_s / 20))
    case, prepared, first_call = choose(workload, device, budget)
    chunk_s = max(device.min_sample_s, min(CHUNK_S, duration_s / 200))
    timer = device.timer(prepared.timing)
    trace = TelemetryTrace(device, sources_for(device) if sources is None else sources, interval_s)
    chunks: list[Chunk] = []
    settings = SoakConfig(duration_s, device.name, workload.name)
    session = open_run("soak", settings, [device], store, events, reasons=_trend)
    record = session.record
    rule = f"soak(duration_s={duration_s:g})"
    assert isinstance(record.payload, SoakPayload)
    record.payload.soak = SoakSeries(case=case.label)
    session.planned([case])
    with session:
        session.case_started(case)
        trace.sampler.start()
        start = clock()
        every = duration_s / N_WINDOWS  # store the windows this often
        next_save = start + every
        k = 1
        try:
            # One chunk first to size k from a warm call rather than the cold first call.
            timer.start()
            prepared.fn()
            k = max(1, math.ceil(chunk_s / max(timer.stop(), 1e-9)))
            while clock() - start < duration_s:
                s0 = clock()
                timer.start()
                for _ in range(k):
                    prepared.fn()
                t = timer.stop()
                s1 = clock()
                trace.mark(len(chunks), s0, s1)
                chunks.append(Chunk(s0 - start, s1 - start, t / k))
                if on_chunk:
                    on_chunk(s1 - start, duration_s)
                if s1 >= next_save:
                    next_save = s1 + every
                    _so_far(record, case, prepared, chunks, k, first_call, rule, trace, start)
                    session.checkpoint()
        finally:  # a stopped soak still records what it measured, then stops as asked
            with session.held():  # a stop arriving now waits until the result is stored
                trace.sampler.stop()
                if prepared.teardown:
                    prepared.teardown()
                result = _so_far(record, case, prepared, chunks, k, first_call, rule, trace, start)
                session.add(case, result)
    return session.record


def _trend(record: RunRecord) -> list[tuple[Level, str]]:
    s = record.payload.soak if isinstance(record.payload, SoakPayload) else None
    if s is None:
        return []
    return trend_reasons(s.windows, s.elapsed_s, s.logical_cores, s.accelerator)


def _so_far(
    record: RunRecord,
    case: Case,
    prepared: Prepared,
    chunks: list[Chunk],
    k: int,
    first_call: float,
    rule: str,
    trace: TelemetryTrace,
    start: float,
) -> Result:
    """The soak's result from the chunks so far; its windows into the run's payload."""
    m = Measurement(
        samples_s=tuple(c.per_call_s for c in chunks),
        calls_per_sample=k,
        first_call_s=first_call,
        stop_reason="soak",
        rule=rule,
        timing=prepared.timing if case.device.is_accelerator else "e2e",
    )  # nothing excluded: a soak reports the throttled speed, that is its point
    result = measured(case, m, prepared, telemetry=trace.summary() or {})
    assert isinstance(record.payload, SoakPayload)
    rec = trace.recording
    host = rec.sources.get("host")
    record.payload.soak = SoakSeries(
        case=case.label,
        unit=result.throughput.unit if result.throughput else None,
        chunk_calls=k,
        elapsed_s=round(chunks[-1].t1, 3) if chunks else 0.0,
        windows=windows(chunks, result, rec, start),
        logical_cores=host.static.get("logical_cores") if host is not None else None,
        accelerator=rec.accelerator,
    )
    return result


def _per_call(result: Result) -> float:
    """Work per call in the unit ``Result.throughput`` reports (the unit `run` shows)."""
    tp, t = result.throughput, result.median_s
    return tp.value * t if tp is not None and t else 0.0


def windows(
    chunks: list[Chunk], result: Result, rec: Recording, start: float, n: int = N_WINDOWS
) -> list[SoakWindow]:
    """Throughput per time window with the telemetry of the same span beside it."""
    if not chunks:
        return []
    work = _per_call(result)
    nwin = max(1, min(n, len(chunks)))
    width = chunks[-1].t1 / nwin
    tags = (result.telemetry or {}).get("sample_tags") or [[] for _ in chunks]
    dev = next((k for k, s in rec.sources.items() if s.role == "device" and s.present), "host")
    readings = [(t - start, r) for t, r in rec.readings.get(dev, [])]
    host = rec.readings.get("host", [])  # CPU times: other processes' load per window
    members: list[list[int]] = [[] for _ in range(nwin)]
    for i, c in enumerate(chunks):
        members[min(int((c.t0 + c.t1) / 2 / width), nwin - 1)].append(i)
    out = []
    for w, idx in enumerate(members):
        lo, hi = w * width, (w + 1) * width
        if not idx:
            continue
        calls_time = sum(chunks[i].per_call_s for i in idx)
        inside = [r for t, r in readings if lo <= t < hi]
        reasons: dict[str, int] = {}
        for i in idx:
            for word in tags[i] if i < len(tags) else []:
                reasons[word] = reasons.get(word, 0) + 1
        clock_key = "sm_mhz" if dev != "host" else "clock_mhz"
        out.append(
            SoakWindow(
                t0_s=round(lo, 3),
                t1_s=round(hi, 3),
                rate=work * len(idx) / calls_time if calls_time > 0 else None,
                clock_mhz=_mean([r.get(clock_key) for r in inside]),
                temp_c=max(
                    (r["temp_c"] for r in inside if r.get("temp_c") is not None), default=None
                ),
                power_w=_mean([r.get("power_w") for r in inside]),
                throttle={k: round(100 * v / len(idx)) for k, v in reasons.items()},
                other_cores=(cpu_load(host, lo + start, hi + start) or {}).get("other_cores"),
            )
        )
    return out


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(sum(vals) / len(vals), 1) if vals else None


def trend_reasons(
    wins: Sequence[SoakWindow],
    elapsed_s: float,
    logical_cores: int | None = None,
    accelerator: bool = False,
) -> list[tuple[Level, str]]:
    """First vs last segment (a minute, or a fifth of a short soak): a fall names its cause.
    Where other processes loaded the machine in either segment (their CPU time over it, read
    as ``run`` and ``profile`` read load: ``judge.load.competing``) a change is not the device's
    (nor warm-up's) to be blamed for: "can't tell under load"."""
    if len(wins) < 3 or elapsed_s <= 0:
        return []
    seg = min(SEGMENT_S, elapsed_s / 5)
    first = [w for w in wins if w.t1_s <= wins[0].t0_s + seg + 1e-9] or wins[:1]
    last = [w for w in wins if w.t0_s >= elapsed_s - seg - 1e-9] or wins[-1:]
    r0 = sum(w.rate or 0.0 for w in first) / len(first)
    r1 = sum(w.rate or 0.0 for w in last) / len(last)
    if r0 <= 0:
        return []
    change = r1 / r0 - 1
    span = "minute" if seg == SEGMENT_S else f"{seg:.0f} s"
    if abs(change) < TREND_THRESHOLD:
        return []
    reasons: dict[str, int] = {}
    for w in last:
        for k, v in w.throttle.items():
            reasons[k] = reasons.get(k, 0) + v
    cause = max(reasons, key=lambda k: reasons[k]) if reasons else None  # the most often
    how = "rose" if change > 0 else "fell"
    text = f"throughput {how} {100 * abs(change):.0f} % from the first to the last {span}"
    loads = [_mean([w.other_cores for w in part]) for part in (first, last)]  # None: not read
    worst = max((x for x in loads if x is not None), default=None)
    summary = {"other_cores": worst, "logical_cores": logical_cores}
    if worst is not None and competing(summary, accelerator):
        # a soak under other load blamed "no throttle reason" on the device (a fall of 55 %
        # at load 2.5-5), or a rise on warming up where the other load eased
        at, other_at = ("last", "first") if loads[1] == worst else ("first", "last")
        other = loads[0] if at == "last" else loads[1]
        then = f" ({other:.1f} in the {other_at})" if other is not None else ""
        also = f"; {cause} was also active" if cause else ""
        return [
            (
                "warn",
                f"{text}: can't tell under load: {load_words(summary)} in the {at} {span}"
                f"{then}{also}; soak again on a quiet machine",
            )
        ]
    if change > 0:
        return [("warn", f"{text}: the start was still warming up")]
    temps = [w.temp_c for w in last if w.temp_c is not None]
    if cause:
        text += (
            f" while {cause} was active"
            if cause != "low clock"
            else " with clocks below 75 % of base"
        )
    else:
        text += " with no throttle reason reported"
    if temps:
        text += f"; temperature {max(temps):.0f} C"
    return [("warn", text)]
