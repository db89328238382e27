"""One case: set up, guard, measure under telemetry, record; and the one place a Result is
made from a case (``measured``, ``skipped``).

A case that cannot run is skipped with its reason, never a crash: out of memory (its sweep
stops there), a wrong result, a call past the watchdog's bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from torchmark import telemetry
from torchmark.errors import CaseSkipped, OutOfMemory, WrongResultError
from torchmark.judge.validity import oversubscribed
from torchmark.results import Ceiling, Result, Status, Work
from torchmark.results.record import sample_fields
from torchmark.run.config import RunConfig
from torchmark.run.watchdog import CallTimedOut, call_bound
from torchmark.timing import Measurement, measure, preset
from torchmark.timing.loop import one_thread_s
from torchmark.workloads import Case, Prepared, Workload

if TYPE_CHECKING:
    from torchmark.results.extra import ResultExtra
    from torchmark.run.session import Session

__all__ = [
    "CALL_TIMED_OUT",
    "OUT_OF_MEMORY",
    "SWEEP_STOPPED",
    "call_floor_s",
    "measured",
    "repeatable",
    "run_case",
    "skipped",
    "sweep_stop",
]

# Flag of a result skipped because it did not fit: its sweep stops there.
OUT_OF_MEMORY = "out_of_memory"
# Flag of a case ended by the watchdog: one call ran past the bound.
CALL_TIMED_OUT = "call_timed_out"
# What the larger cases of a sweep stopped by out of memory say (``model``: its own words).
SWEEP_STOPPED = "sweep stopped"


def sweep_stop(case: Case, result: Result, says: str = SWEEP_STOPPED) -> str | None:
    """Why the rest of ``case``'s sweep is skipped after ``result``: it ran out of memory
    (larger sizes would too); None when the sweep goes on."""
    if case.sweep and OUT_OF_MEMORY in result.flags:
        return f"{says}: {result.reason}"
    return None


def skipped(
    case: Case, reason: str, status: Status = "skipped", oom: bool = False, flag: str | None = None
) -> Result:
    """A case that produced no measurement: skipped (with the reason) or wrong."""
    flags = [OUT_OF_MEMORY] if oom else []
    return Result(
        workload=case.workload,
        variant=case.variant,
        device=case.device.name,
        params=case.param_dict,
        status=status,
        reason=reason,
        extra_flags=flags + ([flag] if flag else []),
    )


def measured(
    case: Case,
    m: Measurement,
    prepared: Prepared,
    *,
    ceiling: Ceiling | None = None,
    notes: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
    telemetry: dict[str, Any] | None = None,
) -> Result:
    """The Result of one measured case, judged (ok / warn / invalid with reasons)."""
    from torchmark.judge.validity import judge

    result = Result(
        workload=case.workload,
        variant=case.variant,
        device=case.device.name,
        params=case.param_dict,
        **sample_fields(m),
        work=prepared.work,
        headline=prepared.headline,
        ceiling=ceiling,
        notes=[*prepared.notes, *notes],
        # the workload's and the loop's own keys: pydantic checks the typed ones
        extra=cast("ResultExtra", {**prepared.extra, **(extra or {})}),
        telemetry=telemetry,
    )
    result.verdict = judge(result)
    return result


def call_floor_s(work: Work, ceilings: dict[str, Ceiling]) -> float | None:
    """The least time one call's work can take on this device: its bytes at the measured
    bandwidth or its FLOPs at the best measured matmul peak, whichever is longer, plus the
    dispatch floor; None without those ceilings (or without counted work)."""
    bw, dispatch = ceilings.get("bandwidth"), ceilings.get("dispatch")
    peaks = [c.value for k, c in ceilings.items() if k.startswith("matmul:") and c.value > 0]
    times = []
    if work.bytes > 0 and bw is not None and bw.value > 0:
        times.append(work.bytes / bw.value)
    if work.flops > 0 and peaks:
        times.append(work.flops / max(peaks))
    if not times:
        return None
    return max(times) + (dispatch.value if dispatch is not None else 0.0)


def repeatable(prepared: Prepared) -> bool:
    """Whether ``prepared.fn`` may be called again after its measurement: not where it
    records its calls or is one rank's side of a collective (DDP's all-reduce in backward;
    a rank calling it alone would wait for the others for ever)."""
    import torch.distributed as dist

    return prepared.repeatable and not (dist.is_available() and dist.is_initialized())


def run_case(
    workload: Workload,
    case: Case,
    ceilings: dict[str, Ceiling],
    cfg: RunConfig,
    session: Session | None = None,
) -> Result:
    """Set up, guard, measure under telemetry, record. Never raises for a case that fails.

    In a ``session``: its telemetry sources (opened once per device per run) and its
    watchdog: a call running past ``call_bound`` of the rule ends the case as skipped
    (timed out, flagged ``call_timed_out``) and the run goes on."""
    device = case.device
    try:
        prepared = workload.prepare(case)
    except CaseSkipped as e:
        return skipped(case, str(e), oom=isinstance(e, OutOfMemory))
    except Exception as e:
        if device.is_out_of_memory(e):
            return skipped(case, f"out of memory at {case.label}", oom=True)
        raise
    rule = preset(cfg.rule or prepared.rule)
    bound = call_bound(rule.max_time_s)
    dog = session.watchdog if session is not None else None
    guarded = dog.armed if dog is not None else lambda bound_s, what: contextlib.nullcontext()
    clock = dog.beating(session.host_clock) if session and dog else time.perf_counter
    sources = session.sources(device) if session is not None and cfg.telemetry else None
    one: float | None = None
    try:
        with guarded(3 * bound, f"the correctness check of {case.label}"):
            notes = prepared.check() if prepared.check else []
        device.reset_peak_memory()
        with (
            telemetry.watch(device, enabled=cfg.telemetry, sources=sources) as trace,
            guarded(bound, f"a call of {case.label}"),
        ):
            m = measure(
                prepared.fn,
                device,
                rule=rule,
                timing=prepared.timing if cfg.timing == "device" else "e2e",
                on_sample=trace.mark,
                clock=clock,
            )
        peak = device.peak_memory_bytes()
        threads = oversubscribed(trace.summary() or {})
        if threads is not None and not device.is_accelerator and repeatable(prepared):
            with guarded(bound, f"a one-thread call of {case.label}"):
                one = one_thread_s(prepared.fn, device, m, threads, clock)
    except CallTimedOut as e:
        return skipped(case, str(e), flag=CALL_TIMED_OUT)
    except CaseSkipped as e:  # a guard may find the case cannot run here (e.g. no int8 op)
        return skipped(case, str(e), oom=isinstance(e, OutOfMemory))
    except WrongResultError as e:
        return skipped(case, str(e), status="wrong")
    except Exception as e:
        if device.is_out_of_memory(e):
            return skipped(case, f"out of memory at {case.label}", oom=True)
        raise
    finally:
        if prepared.teardown:
            prepared.teardown()
        del prepared.fn
        gc.collect()
        device.empty_cache()
    # figures derived from the measurement see the same samples as the headline median
    m = dataclasses.replace(m, excluded=tuple(trace.throttled_samples()))
    extra = {
        **(prepared.summarize(m) if prepared.summarize else {}),
        "peak_memory_bytes": peak,
    }
    # one op a call: its roofline floor is what it can take (a model's many small ops each
    # pay dispatch and Python, so its floor says little: simplenet train b=1 ran at 157x
    # its FLOPs' floor on the quiet machine)
    floor = call_floor_s(prepared.work, ceilings) if workload.group == "micro" else None
    if floor is not None:
        extra["floor_s"] = floor
    if one is not None:
        extra["one_thread_s"] = one
    if m.timer_over_host is not None:
        extra["timer_check"] = {"timer_s": m.timer_over_host[0], "host_s": m.timer_over_host[1]}
    ceiling = ceilings.get(prepared.ceiling) if prepared.ceiling else None
    return measured(
        case, m, prepared, ceiling=ceiling, notes=notes, extra=extra, telemetry=trace.summary()
    )
