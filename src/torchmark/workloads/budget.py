"""What a plan will cost before it runs: wall time from the stopping rules' bounds, peak
memory from the cases' sizes and the buffers the ceilings hold. ``--dry-run`` prints it,
called an estimate: setting a case up (building a model, writing a data set, compiling) is
not in it, nor the memory of a model's weights and activations.

Per case the loop (timing/loop.py) spends a first call, a warm-up of >= 25 ms and >= 3
calls (cut at the rule's time-out), then samples until its rule stops: at the least
``min_time_s`` and ``min_samples`` samples of ``min_sample_s`` each, at the most
``max_time_s``. A call longer than that is one sample, so a case's ceiling is twice the
time-out plus its first call and check, which no plan knows ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchmark.devices.base import Device
from torchmark.timing.stopping import StoppingRule, preset
from torchmark.workloads.base import WORKLOADS, Case

WARMUP_S = 0.025  # measure()'s default warm-up
# Rules a workload uses where its cases do not name one (Prepared's default, models').
GROUP_RULE = {"model": "model", "micro": "micro"}


@dataclass(frozen=True)
class Budget:
    low_s: float  # measuring the cases at the least: each settles at its rule's least ...
    high_s: float  # ... and at the most, by their rules: warm-up and samples time out
    timeout_s: float  # each case's samples run to the time-out, its warm-up short
    ceilings_s: float  # ceilings at the most (0: cached, or not measured)
    peak_bytes: int  # largest buffers held at once (ceilings or one case)
    peak_what: str
    unknown: int  # cases whose memory is not known ahead (models)


def rule_of(case: Case, override: str | None) -> StoppingRule:
    if override or case.rule:
        return preset(override or case.rule or "")
    group = WORKLOADS.get(case.workload).group if case.workload in WORKLOADS else "micro"
    return preset(GROUP_RULE.get(group, "micro"))


def case_bounds(rule: StoppingRule, device: Device) -> tuple[float, float]:
    """(least, most) seconds of one case's warm-up and samples under ``rule``."""
    samples = getattr(rule, "min_samples", getattr(rule, "samples", 1))
    least = WARMUP_S + max(getattr(rule, "min_time_s", 0.0), samples * device.min_sample_s)
    return least, 2 * rule.max_time_s


def estimate(
    cases: Sequence[Case],
    *,
    rule: str | None = None,
    ceilings: bool = True,
    quick: bool = False,
    cached: frozenset[str] = frozenset(),
) -> Budget:
    """``cached``: devices whose ceilings are cached already (not measured, not counted)."""
    from torchmark import ceilings as ceiling_parts
    from torchmark.ceilings.base import rule as ceiling_rule_for
    from torchmark.format import case_label

    low = high = timeout = 0.0
    peak, what, unknown = 0, "nothing", 0
    for c in cases:
        case_rule = rule_of(c, rule)
        lo, hi = case_bounds(case_rule, c.device)
        low, high = low + lo, high + hi
        timeout += WARMUP_S + case_rule.max_time_s
        w = WORKLOADS.get(c.workload)() if c.workload in WORKLOADS else None
        need = w.memory_bytes(c) if w is not None else None
        if need is None:
            unknown += 1
        elif need > peak:
            peak, what = need, f"{c.workload} {case_label(c.variant, c.params)} on {c.device.name}"
    spent = 0.0
    if ceilings:
        ceiling_rule = ceiling_rule_for(quick)
        for d in dict.fromkeys(c.device for c in cases if c.device.name not in cached):
            timed, held = ceiling_parts.planned(d, quick=quick)
            spent += timed * case_bounds(ceiling_rule, d)[1]
            if held > peak:
                peak, what = held, f"the ceilings' buffers on {d.name}"
    return Budget(low, high, timeout, spent, peak, what, unknown)


def wall_time(n: int, b: Budget, ceiling_part: str = "") -> str:
    """The wall time's bounds, each with what it assumes: each case settling at its rule's
    least (quick calls, steady timings), each running to its time-out (timings that never
    settle: other load), and the most (calls of seconds: the warm-up times out too)."""
    from torchmark.format import plural

    most = ""
    if b.high_s > b.timeout_s * 1.05:  # said apart only where it tells something
        most = f"; {span(b.high_s)} at the most (calls of seconds: warm-up times out too)"
    return (
        f"estimate of wall time: {plural(n, 'case')} take {span(b.low_s)} if each settles at "
        f"its stopping rule's least (quick calls, steady timings); {span(b.timeout_s)} if "
        f"each runs to its time-out (timings that never settle, as under other load)"
        f"{most}{ceiling_part}; setting cases up (models, data, compiling) adds to it"
    )


def span(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


# What the standard suite leaves to ``extended`` on a GPU (workloads.base.trimmed).
EXTENDED = (
    "on a GPU the standard suite leaves to --suite extended: batch sweeps' 2x steps (4x "
    "here), fp32 batches past a quarter of the cap, amp-fp16, transfer's in-between sizes, "
    "the input pipeline's worker sweep and input-tokens"
)


def lines(
    cases: Sequence[Case],
    *,
    rule: str | None = None,
    ceilings: bool = True,
    quick: bool = False,
    process_bytes: int | None = None,
    suite: str | None = None,
    cached: frozenset[str] = frozenset(),
) -> list[str]:
    """The plan's estimate in words: sizing per device, wall time, peak memory, and (the
    standard suite on a GPU) what it leaves to ``extended``."""
    from torchmark.devices.cache import sizing
    from torchmark.format import binary_bytes, plural

    b = estimate(cases, rule=rule, ceilings=ceilings, quick=quick, cached=cached)
    out = [f"sizes: {sizing(d)}" for d in dict.fromkeys(c.device for c in cases)]
    ceiling_part = (
        f"; plus up to {span(b.ceilings_s)} for ceilings not cached yet" if b.ceilings_s else ""
    )
    out.append(wall_time(len(cases), b, ceiling_part))
    now = f"{binary_bytes(process_bytes)} this process now + " if process_bytes else ""
    total = (process_bytes or 0) + b.peak_bytes
    left_out = (
        f"; {plural(b.unknown, 'case')} known only once built (models) not counted"
        if b.unknown
        else ""
    )
    out.append(
        f"estimate of peak memory: {binary_bytes(total)} ({now}{binary_bytes(b.peak_bytes)} "
        f"for {b.peak_what}{left_out})"
    )
    if suite == "standard" and any(c.device.is_accelerator for c in cases):
        out.append(EXTENDED)
    return out
