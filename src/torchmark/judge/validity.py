"""Validity verdicts: can a number be trusted, and if not, why - in words.

``judge(result)`` is a pure function of a stored Result (its samples, flags and telemetry
summary), so an imported run is judged exactly as it was when measured. ``judge_run``
is the worst of its results plus what concerns the run as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from torchmark.format import binary_bytes, result_label
from torchmark.hardware.physical import cache_bound
from torchmark.hardware.throttle import POWER_REASONS, THERMAL_REASONS
from torchmark.judge import stragglers
from torchmark.judge.load import MIN_KEPT_SAMPLES, competing, free_cores, load_words
from torchmark.judge.verdicts import TIMED_OUT_OK_PCT
from torchmark.results import Result, RunRecord, Verdict, is_host
from torchmark.stats.measurement import timer_excess

Level = Literal["ok", "warn", "invalid"]
ORDER: dict[str, int] = {"ok": 0, "warn": 1, "invalid": 2}

# Warm-up matters to a user only when it costs real time: a 40x first call of a 50 µs op is
# 2 ms, invisible in any job; a 40x first call of a 1 s step is 40 s before the first result.
FIRST_CALL_RATIO = 10.0
FIRST_CALL_EXCESS_S = 1.0
STEAL_CORES = 0.2
RUN_REASONS_MAX = 12


def worst(*levels: Level) -> Level:
    return max(levels, key=lambda x: ORDER[x])


class _Reasons:
    def __init__(self) -> None:
        self.level: Level = "ok"
        self.found: list[tuple[Level, str]] = []

    def add(self, level: Level, text: str) -> None:
        self.level = worst(self.level, level)
        self.found.append((level, text))

    @property
    def reasons(self) -> list[str]:
        return [text for _, text in self.found]

    def verdict(self) -> Verdict:
        """Most severe reasons first (stable within a level): the verdict's level is the
        first reason's."""
        ranked = sorted(self.found, key=lambda lt: -ORDER[lt[0]])
        return Verdict(level=self.level, reasons=[text for _, text in ranked])


# Two clusters of samples, the slow one's median >= 3x the fast one's, split by a gap of
# >= 1.5x between neighbouring sorted samples: under competing load that is the scheduler
# (on this 2-core machine with one other busy process, Linear(10,1) on (1000,10) read
# 7.99 ms instead of 17 µs, samples snapping to 8 / 16 / 64 ms). Unimodal timing noise,
# even at 30 % spread, leaves no 1.5x gap between neighbours past the outer 5 %.
CLUSTER_RATIO = 3.0
CLUSTER_GAP = 1.5
CLUSTER_MIN_SHARE = 0.05


def clusters(samples: Sequence[float] | np.ndarray) -> tuple[float, float, float] | None:
    """(fast median, slow median, share of slow samples) when the samples split in two
    clusters ``CLUSTER_RATIO`` apart; None when they do not."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    k = max(2, math.ceil(CLUSTER_MIN_SHARE * n))  # each cluster at least this many samples
    if n < 2 * k or not x[0] > 0:
        return None
    logs = np.log(x)
    gaps = logs[k : n - k + 1] - logs[k - 1 : n - k]  # gap before x[i], i = k .. n-k
    i = k + int(np.argmax(gaps))
    fast, slow = float(np.median(x[:i])), float(np.median(x[i:]))
    if x[i] < CLUSTER_GAP * x[i - 1] or slow < CLUSTER_RATIO * fast:
        return None
    return fast, slow, (n - i) / n


# A one-op CPU call (micro workloads) slower than this many times its roofline floor (its
# bytes at the measured bandwidth or its FLOPs at the best measured matmul peak, plus the
# dispatch floor) while torch's threads outnumber the free cores: the time is threads
# waiting for time slices. On this 2-core machine with one other busy process a 768 KB add
# took 7.99 ms a call (1,010x its floor; 7.3 µs on the quiet machine), every sample alike,
# so no second cluster told. Quiet, the slowest micro case here runs at 18x its floor
# (seed-add intended: fresh allocations pay page faults).
STALL_FACTOR = 50.0


def _load(t: dict[str, Any]) -> tuple[str, int]:
    """(the competing load in words, the cores it left free for torch's threads)."""
    other = float(t.get("other_cores") or 0.0)
    return load_words(t), free_cores(other, t.get("logical_cores"))


def _fewer(free: int) -> str:
    """The fix for more threads than free cores."""
    return (
        f"measure again with --threads {free} (the free cores; --threads auto picks them) "
        "or on a quiet machine"
    )


def _threads(result: Result) -> Any:
    """torch's thread count in the result's telemetry, else its ``--threads``."""
    return (result.telemetry or {}).get("torch_threads") or result.params.get("threads")


# One thread this many times faster than the run's threads, on the same case right after
# it: the threads' time is the scheduler's (N threads can be at most N times faster than one,
# and a quiet machine's tiny ops lose < 2x to threading overhead). A tiny MLP under one
# other busy process on 2 cores: 15 ms a call with 2 threads, 0.02 ms with one.
THREAD_STALL_FACTOR = 3.0


def oversubscribed(summary: dict[str, Any]) -> int | None:
    """torch's thread count where it outnumbers the cores other processes left free for a
    CPU result (the case for the one-thread check); None otherwise."""
    if not summary or summary.get("accelerator") or not competing(summary, False):
        return None
    threads = summary.get("torch_threads")
    return int(threads) if threads is not None and int(threads) > _load(summary)[1] else None


def _stalled(result: Result) -> tuple[Level, str] | None:
    """A CPU result under competing load, with more threads than free cores, far slower
    than its work allows at this machine's measured ceilings, or than the same case ran
    with one thread right after it: the scheduler's time."""
    t = result.telemetry or {}
    median = result.median_s
    if t.get("accelerator") or not competing(t, False) or not median:
        return None
    load, free = _load(t)
    threads = _threads(result)
    if threads is None or int(threads) <= free:
        return None
    fix = f"{threads} threads waiting for time slices, not the hardware; {_fewer(free)}"
    floor, one = result.extra.get("floor_s"), result.extra.get("one_thread_s")
    if floor and median >= STALL_FACTOR * floor:
        return (
            "invalid",
            f"{_dur(median)} a call, {median / floor:.0f}x the {_dur(floor)} its work needs "
            f"at this machine's measured ceilings, while {load}: {fix}",
        )
    if one and median >= THREAD_STALL_FACTOR * one:
        return (
            "invalid",
            f"{_dur(median)} a call with {threads} threads, {median / one:.0f}x the "
            f"{_dur(one)} it took with one thread right after, while {load}: {fix}",
        )
    return None


def _scheduler_artefact(result: Result) -> tuple[Level, str] | None:
    """A CPU result under competing load whose samples split into clusters: the time is
    the scheduler's. Invalid with more threads than free cores (the fix: fewer threads);
    a warning for one thread (a descheduled thread, and the median is still its own)."""
    t = result.telemetry or {}
    if t.get("accelerator") or not competing(t, False):
        return None
    found = clusters(result.measurement.kept)
    if found is None:
        return None
    fast, slow, share = found
    load, free = _load(t)
    threads = _threads(result)
    what = (
        f"samples split into two clusters, {_dur(fast)} and {_dur(slow)} ({share:.0%} slow), "
        f"while {load}"
    )
    if threads is not None and int(threads) <= 1:
        return ("warn", f"{what}: one thread descheduled now and then; use a quiet machine")
    return (
        "invalid",
        f"{what}: a scheduler artefact of {threads or 'several'} threads competing for the "
        f"cores, not the hardware; {_fewer(free)}",
    )


def judge(result: Result) -> Verdict:
    """Validity verdict of one result from its flags, timings and telemetry."""
    v = _Reasons()
    if result.status == "wrong":
        v.add("invalid", f"wrong result: {result.reason}")
        return v.verdict()
    if not result.ok:
        return v.verdict()  # skipped: its reason is stored beside it, nothing was measured
    m, flags = result.measurement, result.flags
    if "in_cache" in flags:
        v.add(*_in_cache(result))
    if "above_ceiling" in flags and result.ceiling is not None:
        v.add(
            "invalid",
            f"above 100 % of the measured ceiling ({result.pct_of_ceiling:.0f} % of "
            f"{result.ceiling.key}): measurement error; if this machine's speed drifts (VMs "
            f"do), re-measure with --remeasure-ceilings",
        )
    if "few_samples" in flags:
        # no spread figure where the spread is not known: "spread 20 % of the median: noisy"
        # read beside "only 3 samples: the spread is not known"; that they scatter is said
        scatter = next((f for f in ("unreliable", "noisy") if f in flags), None)
        said = f", and they scatter ({scatter})" if scatter else ""
        v.add("warn", f"only {m.n} sample{_s(m.n)}{said}: the spread is not known")
    elif "unreliable" in flags and m.rel_iqr > 1:  # "spread 1077 %" says no more than this
        v.add("warn", f"spread larger than the median (IQR {m.rel_iqr:.1f}x it): unreliable")
    elif "unreliable" in flags:
        v.add("warn", f"spread {100 * m.rel_iqr:.0f} % of the median: unreliable")
    elif "noisy" in flags:
        v.add("warn", f"spread {100 * m.rel_iqr:.0f} % of the median: noisy")
    if "timed_out" in flags or "out_of_reach" in flags:
        # The flag always stays on the result; a warning only when the median is not pinned
        # to within ±2 % (the model-suite target): a time-out at ±1.4 % is a usable number.
        # Out of reach: stopped before its time-out, which could not have met the target.
        how = "timed out" if "timed_out" in flags else "stopped"
        why = "" if "timed_out" in flags else ", its target out of reach"
        lo, hi = m.ci
        half = 50 * (hi - lo) / m.median if math.isfinite(lo + hi) and m.median > 0 else None
        if half is None:
            v.add("warn", f"{how} before the median converged{why} (too few samples to bound it)")
        elif half > 100:  # "known to ±3,503 %" is no bound
            v.add("warn", f"{how} before the median converged{why} (its 95 % CI is wider than it)")
        elif half > TIMED_OUT_OK_PCT:
            v.add("warn", f"{how} before the median converged{why} (known to ±{half:.1f} %)")
    fault = _timer_fault(result)
    if fault:
        v.add("invalid", fault)
    first = _first_call(result)
    if first:
        v.add("warn", first)
    late = stragglers.of_result(result)  # a distributed run: every rank's samples gathered
    if late:
        v.add("warn", late.reason())
    if result.telemetry:
        artefact = _scheduler_artefact(result) or _stalled(result)
        if artefact:
            v.add(*artefact)
        for level, text in telemetry_reasons(result.telemetry, len(result.excluded)):
            v.add(level, text)
    return v.verdict()


def _in_cache(result: Result) -> tuple[Level, str]:
    """A memory-bound result whose working set fits the last-level cache measured the
    cache (``results.cache``): above the memory's ceiling is expected, and only a rate above
    what a cache could move (``ceilings.physical.cache_bound``) is a measurement error."""
    found, ceiling = result.in_cache, result.ceiling
    assert found is not None and ceiling is not None  # the in_cache flag implies both
    t, d = result.telemetry or {}, ceiling.details
    accelerator = t.get("accelerator", d.get("accelerator", not is_host(result.device)))
    bound, how = cache_bound(ceiling, bool(accelerator), t.get("logical_cores") or d.get("cores"))
    rate = result.rate("bytes") or 0.0
    pct = f"{result.pct_of_ceiling or 0:.0f} % of {ceiling.key}"
    fits = (
        f"working set {binary_bytes(found.working_set)} fits the "
        f"{binary_bytes(found.cache)} last-level cache"
    )
    if rate > bound:
        return (
            "invalid",
            f"{rate / 1e9:,.0f} GB/s is above even a cache's {bound / 1e9:,.0f} GB/s ({how}; "
            f"{fits}): measurement error",
        )
    if (result.pct_of_ceiling or 0) > 100:
        return "warn", f"in cache: above the DRAM ceiling is expected ({fits}; {pct})"
    return "warn", f"in cache: {fits}, so {pct} is cache bandwidth, not DRAM's"


def _timer_fault(result: Result) -> str | None:
    """Why the result's timer cannot be right: it read a sample longer than the host clock
    around it did (``timing.loop`` keeps the worst such sample); None where it did not."""
    check = result.extra.get("timer_check")
    if not check:
        return None
    timer_s, host_s = check["timer_s"], check["host_s"]
    if timer_excess(timer_s, host_s) <= 0:
        return None
    return (
        f"the {result.timing} timer read {_dur(timer_s)} for a sample the host clock saw "
        f"take {_dur(host_s)}: a timer that outruns the wall clock is wrong, whatever the "
        "device did; measure again with --timing e2e"
    )


def _first_call(result: Result) -> str | None:
    m = result.measurement
    if m.first_call_s is None or not m.median > 0:
        return None
    step = m.median  # per call, as is first_call_s
    ratio = m.first_call_s / step
    excess = m.first_call_s - step
    if ratio < FIRST_CALL_RATIO or excess < FIRST_CALL_EXCESS_S:
        return None
    return (
        f"first call {ratio:.0f}x slower than steady state ({_dur(m.first_call_s)} vs "
        f"{_dur(step)}): warm-up dominated in a job of fewer than {math.ceil(ratio)} steps"
    )


def _dur(s: float) -> str:
    if s >= 1:
        return f"{s:.1f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"


def _pct_of(tags: list[list[str]], words: frozenset[str]) -> float:
    return 100 * sum(1 for t in tags if words & set(t)) / len(tags) if tags else 0.0


def telemetry_reasons(t: dict[str, Any], excluded: int = 0) -> list[tuple[Level, str]]:
    """Reasons from a telemetry summary (``Result.telemetry``); ``excluded``: how many
    samples the result set aside from its median."""
    out: list[tuple[Level, str]] = []
    accel = bool(t.get("accelerator"))
    proc = "GPU" if accel else "CPU"
    tags: list[list[str]] = t.get("sample_tags") or []
    used = {w for tag in tags for w in tag}
    temps = t.get("temp_c")
    hot = f"; up to {temps[1]:.0f} C" if temps else ""

    def group(words: frozenset[str], text: str, suffix: str = "") -> None:
        hit = sorted(words & used)
        if hit:
            pct = _pct_of(tags, frozenset(hit))
            out.append(("warn", f"{text} in {pct:.0f} % of samples ({', '.join(hit)}{suffix})"))

    group(POWER_REASONS, f"{proc} power-throttled")
    if t.get("at_power_limit_pct"):
        limit = t.get("power_limit_w")
        watts = f" of {limit:.0f} W" if limit else ""
        out.append(
            (
                "ok",
                f"{proc} at its default power limit{watts} in {t['at_power_limit_pct']:.0f} % "
                "of samples: the speed dense work sustains on this card, kept in the median",
            )
        )
    group(THERMAL_REASONS, f"{proc} thermally throttled", hot)
    group(frozenset({"HW slowdown"}), f"{proc} slowed by hardware", hot)
    if "low clock" in used:
        clock = "SM clock" if accel else "CPU clock"
        pct = _pct_of(tags, frozenset({"low clock"}))
        out.append(("warn", f"{clock} below 75 % of its base clock in {pct:.0f} % of samples"))
    throttled = t.get("throttled_samples") or []
    if throttled and excluded:
        out.append(
            ("warn", f"throttled samples set aside: median of {len(tags) - excluded} unthrottled")
        )
    elif throttled and len(tags) - len(throttled) < MIN_KEPT_SAMPLES:
        out.append(("warn", "too few unthrottled samples: the median is the throttled speed"))
    other = t.get("other_cores")
    if other is not None and competing(t, accel):
        cores = t.get("logical_cores")
        of = f" of {cores}" if cores else ""
        out.append(("warn", f"other processes used {other:.1f}{of} cores during the run"))
    steal = t.get("steal_cores")
    if not accel and steal is not None and steal >= STEAL_CORES:
        out.append(("warn", f"the hypervisor took {steal:.1f} cores (steal time) during the run"))
    for name, s in (t.get("sources") or {}).items():
        if s.get("present") and s.get("reason"):
            out.append(("warn", f"{name} telemetry {s['reason']}: later samples not checked"))
    return out


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def judge_run(record: RunRecord, extra: list[tuple[Level, str]] | None = None) -> Verdict:
    """The run's verdict: the worst of its results; reasons most severe first, run-level
    reasons before per-result ones of the same level.

    ``extra`` carries reasons only the caller knows (a soak's falling throughput curve).
    """
    v = _Reasons()
    if record.status == "incomplete":
        n = len(record.results)
        v.add("warn", f"run incomplete: interrupted after {n} result{_s(n)}")
    if record.results and not any(r.ok for r in record.results):
        v.add("warn", "no case could run: every result is skipped or wrong")
    for level, text in extra or []:
        v.add(level, text)
    bad: list[tuple[Level, str]] = []
    for r in record.results:
        rv = r.verdict or judge(r)
        if rv.level != "ok":
            bad.append((rv.level, f"{result_label(r)}: {'; '.join(rv.reasons)}"))
    for level, text in bad[:RUN_REASONS_MAX]:
        v.add(level, text)
    for level, _ in bad[RUN_REASONS_MAX:]:
        v.level = worst(v.level, level)
    if len(bad) > RUN_REASONS_MAX:
        # "ok" ranks it last; the level above already counts these results
        v.add("ok", f"... and {len(bad) - RUN_REASONS_MAX} more results with warnings")
    return v.verdict()
