"""``torchmark profile``: one case measured unprofiled, then profiled, stored as a run.

case      = the first planned case on the chosen device (the selectors of ``run``)
session   = open_run("profile", cfg, ...)          # the lifecycle every run shares
ceilings  = measure_ceilings(...)                  # cached per device fingerprint
result    = run_case(...)                          # the unprofiled median, as `run` does
capture   = capture(prepare(case).fn, ...)         # wait, warm-up, active steps
record.payload.profile = breakdown, rules, top ops, overhead, verdict

Its config is ``RunConfig``: a profile selects its case with ``run``'s options. No case
loop: one case, measured by ``run_case`` as ``run`` measures it, then profiled in the same
session (``--check`` measures each suggested variant the same way).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchmark import format as fmt
from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, InputError
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.advice import advise
from torchmark.kinds.profile.capture import (
    ACTIVE_BUDGET_S,
    LONG_STEP_S,
    MAX_ACTIVE,
    MAX_EVENTS,
    Capture,
    ProfileError,
    capture,
    check_active,
    lead_steps,
    reduced_note,
)
from torchmark.kinds.profile.ops import device_busy_us, gemm_rows, top_ops, under_load, verdict
from torchmark.results import Result, RunRecord
from torchmark.results.payloads import Checked, ProfilePayload, ProfileSummary
from torchmark.run.case import run_case
from torchmark.run.config import RunConfig, validate
from torchmark.run.plan import plan, select_workloads
from torchmark.run.record import open_run
from torchmark.run.runner import check_reuse, measure_ceilings
from torchmark.run.session import Events, Session
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.user.inputs import InputFactory
from torchmark.workloads import Case, PlanOptions, Workload

Target = tuple[Workload, Case, list[str]]  # the workload, its case, notes on the choice


def builtin_target(cfg: RunConfig) -> Target:
    """The built-in case to profile, its workload, and notes on how it was chosen."""
    validate(cfg)
    devices = resolve(cfg.devices)
    device = _prefer_accelerator(devices)
    workloads = select_workloads(cfg)
    cases = plan(workloads, [device], cfg)
    if not cases:
        raise InputError(
            f"no case of {', '.join(workloads)} matches these options on {device.name}; "
            "see `torchmark run --dry-run` with the same options"
        )
    notes = []
    if len(devices) > 1:
        notes.append(f"profiling on {device.name} (choose another with --device)")
    if len(cases) > 1:
        notes.append(
            f"profiling the first of {len(cases)} matching cases (narrow with --workload, "
            "--scenario, --precision, --batch)"
        )
    return workloads[cases[0].workload], cases[0], notes


def _prefer_accelerator(devices: list[Device]) -> Device:
    return next((d for d in devices if d.is_accelerator), devices[0])


def user_target(model: Any, factory: InputFactory, label: str, cfg: RunConfig) -> Target:
    """The user's model (``torchmark model``'s SPEC and inputs) as the case to profile: the
    first requested batch (default 1), timed as ``model`` times it on that device."""
    from torchmark.run.watchdog import call_bound
    from torchmark.timing import preset
    from torchmark.user.inputs import per_batch
    from torchmark.user.workload import UserModel, _eval, preflight

    _eval(model)
    device = _prefer_accelerator(resolve(cfg.devices))
    batch = cfg.batches[0] if cfg.batches else 1
    rule = cfg.rule or "model"
    factory = per_batch(factory)
    pf = preflight(model, factory, [device], batch, call_bound(preset(rule).max_time_s))
    if device.name in pf.failed:
        raise ProfileError(f"cannot profile {label} on {device.name}: {pf.failed[device.name]}")
    workload = UserModel(label, factory, [batch], pf, rule, measure_energy=False)
    case = workload.cases(device, PlanOptions())[0]
    return workload, case, [f"profiling batch {batch} (choose another with --batch)"]


def profile(
    cfg: RunConfig,
    store: ResultStore | None,
    events: Events | None = None,
    *,
    active: int = 5,
    trace_path: Path | None = None,
    max_events: int = MAX_EVENTS,
    target: Target | None = None,
    memory: bool = True,
    check: bool = False,
    user_spec: str | None = None,
    budget_s: float = ACTIVE_BUDGET_S,
    say: Callable[[str], None] | None = None,
) -> tuple[RunRecord, Path | None]:
    """Measure the case unprofiled, profile it, store both as one ``profile`` run.
    ``target``: default, the built-in case ``cfg`` selects (``builtin_target``);
    ``memory``: also a pass of torch's memory profiler (memory by category at the peak);
    ``check``: measure each variant the advice names (built-in workloads only);
    ``user_spec``: the user's model as SPEC and input options, for the ``tune`` command;
    ``budget_s``: wall time for the active steps (fewer for long steps, stated);
    ``say``: progress lines while long steps are profiled."""
    check_active(active)
    if check and user_spec is not None:
        raise InputError(
            f"--check measures the variants of built-in workloads; for your model run "
            f"`torchmark tune {user_spec}`, which tries each against the baseline"
        )
    workload, case, notes = target or builtin_target(cfg)
    check_reuse(cfg, [case.device], store)  # --ceilings RUN|quiet: before the run opens
    session = open_run("profile", cfg, [case.device], store, events)
    session.planned([case])
    saved = None
    # other processes' load over the whole measurement, as `run`'s verdict reads it: a
    # profile of a tiny op is a few milliseconds, too short for a reading of its own
    load = OtherLoad(count_processes=True).start()
    with session:
        ceilings = measure_ceilings([case.device], session, cfg)[case.device.name]
        session.case_started(case)
        if say:
            say(f"profiling: measuring {case.label} unprofiled first (its stopping rule)")
        result = run_case(workload, case, ceilings, cfg, session)
        session.add(case, result)
        if result.status != "ok":
            raise ProfileError(f"cannot profile {case.label}: {result.reason}")
        if say:
            wait, warmup = lead_steps(result.median_s)
            say(
                f"profiling: {wait} wait, {warmup} warm-up and up to {active} active step(s) "
                f"of {fmt.duration(result.median_s or 0.0)} unprofiled (active steps kept "
                f"within {budget_s:.0f} s)"
            )
        try:
            prepared = workload.prepare(case)
        except CaseSkipped as e:
            raise ProfileError(f"cannot profile {case.label}: {e}") from None
        mem = None
        try:
            cap = capture(
                prepared.fn,
                case.device,
                active,
                max_events,
                step_s=result.median_s,
                budget_s=budget_s,
                say=say,
            )
            load.stop()
            if memory:
                from torchmark.kinds.profile.memory import WARMUP as MEMORY_WARMUP
                from torchmark.kinds.profile.memory import capture_memory

                long_step = (result.median_s or 0.0) > LONG_STEP_S
                if say and long_step:
                    say("profiling: one more step for memory by category (--no-memory skips it)")
                mem = capture_memory(prepared.fn, case.device, 0 if long_step else MEMORY_WARMUP)
        finally:
            if prepared.teardown:
                prepared.teardown()
        matmul = result.ceiling.key if result.ceiling and result.ceiling.unit == "FLOP/s" else None
        p = summary(
            case, result, cap, ceilings, matmul, notes, max_events, budget_s, load.facts(),
            session.record.environment.get("precision"),
        )  # fmt: skip
        p["memory"] = mem
        p["advice"] = [
            a.as_dict()
            for a in advise(p, case.param_dict, case.workload, case.device.name, user_spec)
        ]
        payload = session.record.payload
        assert isinstance(payload, ProfilePayload)
        payload.profile = found = ProfileSummary.model_validate(p)
        if check:
            base = Baseline(result, cfg, session, ceilings)
            for a in found.advice:
                if a.workload:  # the same case on an aligned twin (gpt2-padded)
                    twin = select_workloads(replace(cfg, workloads=(a.workload,)))
                    same = replace(case, workload=a.workload, sweep=None)
                    a.checked = Checked.model_validate(against(twin[a.workload], same, base))
                elif a.kind == "variant":
                    a.checked = Checked.model_validate(
                        check_variant(workload, case, a.variant, base)
                    )
        if trace_path is not None:
            from torchmark.kinds.profile.capture import save_trace

            saved = save_trace(cap.trace, trace_path)
            found.trace_file = str(saved)
    return session.record, saved


@dataclass(frozen=True)
class Baseline:
    """What ``--check`` judges each suggestion against: the profiled case's unprofiled
    result, measured in this run's session against its ceilings."""

    result: Result
    cfg: RunConfig
    session: Session
    ceilings: dict[str, Any]


def check_variant(workload: Workload, case: Case, variant: str, base: Baseline) -> dict[str, Any]:
    """The profiled case measured again with ``variant``, judged against its unprofiled
    baseline (``comparison.independent``: FASTER / SLOWER / SAME / UNCLEAR vs the noise)."""
    from torchmark import variants

    cfg, params = base.cfg, case.param_dict
    want = {**params, "precision": variants.parse(variant)}
    opts = replace(
        cfg,
        precisions=(variant,),
        batches=(params["batch"],) if "batch" in params else cfg.batches,
        scenarios=(params["scenario"],) if "scenario" in params else cfg.scenarios,
    )
    try:
        planned = [
            k
            for k in workload.cases(case.device, opts.plan_options)
            if {**k.param_dict, "precision": variants.parse(k.param_dict.get("precision", "fp32"))}
            == want
        ]
    except InputError as e:
        return {"status": "skipped", "reason": str(e)}
    if not planned:
        return {"status": "skipped", "reason": f"{variant} is not a variant of {case.workload}"}
    return against(workload, planned[0], base)


def against(workload: Workload, candidate: Case, base: Baseline) -> dict[str, Any]:
    """``candidate`` measured, stored in the run, and judged against the baseline."""
    from torchmark.judge.comparison import independent

    session = base.session
    session.case_started(candidate)
    result = run_case(workload, candidate, base.ceilings, base.cfg, session)
    session.add(candidate, result)
    if result.status != "ok":
        return {"status": result.status, "reason": result.reason or ""}
    j = independent(base.result.measurement, result.measurement)
    if isinstance(j, str):
        return {"status": "ok", "verdict": "UNCLEAR", "speed": None, "why": j}
    return {"status": "ok", "verdict": j.verdict, "speed": j.speed, "why": j.why}


def rel_iqr_pct(values: list[float]) -> float | None:
    """IQR / median of step times, %: robust to one slow step (the first profiled step, a
    preemption), where a max-min or standard-deviation spread would be set by it. None
    under 4 values: their quartiles are the values themselves."""
    import numpy as np

    if len(values) < 4:
        return None
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float(100 * (q3 - q1) / med) if med > 0 else None


def spreads(result: Result, step_us: list[float]) -> dict[str, float | None]:
    """Relative spreads (IQR / median, %) of the profiled steps and the unprofiled samples,
    and the larger: an overhead smaller than that is noise (a loaded machine moved
    linear10's unprofiled median from 9 to 43 µs between two runs here)."""
    profiled = rel_iqr_pct(step_us)
    m = result.measurement if result.ok else None
    plain = 100 * m.rel_iqr if m is not None and m.spread_known and m.median > 0 else None
    known = [v for v in (profiled, plain) if v is not None]
    return {
        "spread_pct": max(known) if known else None,
        "profiled_spread_pct": profiled,
        "unprofiled_spread_pct": plain,
    }


def launch_summary(bd: c.Breakdown) -> dict[str, float] | None:
    """GPU: launches per step, the host's launch call and the wait before the GPU starts."""
    if not bd.launch_us:
        return None
    return {
        "per_step": len(bd.launch_us) / bd.steps,
        "launch_us_median": statistics.median(bd.launch_us),
        "queue_us_median": statistics.median(bd.queue_us),
    }


def step_memory(cap: Capture) -> dict[str, Any] | None:
    """The device allocator's peaks per active step (each step's peak reset before it):
    the largest and the smallest step, so that a step that grows memory shows."""
    if not cap.step_memory:
        return None
    alloc = [m.allocated_bytes for m in cap.step_memory]
    reserved = [m.reserved_bytes for m in cap.step_memory if m.reserved_bytes is not None]
    return {
        "steps": [
            {"allocated_bytes": m.allocated_bytes, "reserved_bytes": m.reserved_bytes}
            for m in cap.step_memory
        ],
        "peak_allocated_bytes": max(alloc),
        "peak_reserved_bytes": max(reserved) if reserved else None,
        "smallest_allocated_bytes": min(alloc),
        "largest_step": alloc.index(max(alloc)) + 1,
    }


def summary(
    case: Case,
    result: Result,
    cap: Capture,
    ceilings: dict[str, Any],
    matmul_key: str | None,
    notes: list[str],
    max_events: int = MAX_EVENTS,
    budget_s: float = ACTIVE_BUDGET_S,
    load: dict[str, Any] | None = None,
    precision: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What is stored with the run: plain JSON, enough to render without the trace.
    ``load``: other processes' load while the case was measured and profiled
    (``OtherLoad.facts``): under load the verdict is "can't tell", and nothing is advised;
    ``precision``: the run's precision switches (each op's peak is its dtype's)."""
    bd = cap.breakdown
    # the overhead compares medians (one slow step on a busy machine moved a mean 14x here);
    # the breakdown's step is the mean, so that its categories add up to it
    profiled_s = statistics.median(bd.step_us) / 1e6
    unprofiled_s = result.median_s
    order = c.CPU_ORDER if bd.kind == "cpu" else c.GPU_ORDER
    return {
        "case": case.label,
        "workload": case.workload,
        "device": case.device.name,
        "kind": bd.kind,
        "schedule": {
            "wait": cap.schedule.get("wait"),
            "warmup": cap.schedule.get("warmup"),
            "active": bd.steps,
            "requested": cap.schedule.get("requested"),
        },
        "steps": bd.steps,
        "wall_us": bd.wall_us,
        "step_us": bd.step_us,
        "profiled_step_s": profiled_s,
        "profiled_mean_s": bd.wall_us / bd.steps / 1e6,
        "unprofiled_median_s": unprofiled_s,
        "overhead_pct": 100 * (profiled_s / unprofiled_s - 1) if unprofiled_s else None,
        **spreads(result, bd.step_us),
        "categories": [
            {"name": k, "us_per_step": bd.categories[k] / bd.steps, "share": bd.shares()[k]}
            for k in order
        ],
        "rules": c.rules_text(bd.kind),
        "ops": [
            r.as_dict()
            for r in top_ops(
                bd,
                cap.flops,
                ceilings,
                matmul_key,
                flops_by_call=cap.flops_by_call,
                precision=precision,
            )
        ],
        "gemms": gemm_rows(bd),
        "verdict": verdict(bd, unprofiled_s, load),
        "load": load,
        "under_load": under_load(load, case.device.is_accelerator) is not None,
        "device_busy_s": device_busy_us(bd) / 1e6 if bd.kind == "gpu" else None,
        "launches": launch_summary(bd),
        # on the CPU the device's peak is the process's RSS peak: said once, as host RSS
        "device_peak_bytes": cap.device_peak_bytes if case.device.is_accelerator else None,
        "host_rss_peak_bytes": cap.host_rss_peak_bytes,
        "step_memory": step_memory(cap),
        "notes": [
            *notes,
            *filter(None, [reduced_note(cap.schedule, budget_s)]),
            "each profiled step ends with a device sync; the unprofiled median is the same "
            "case measured by `run`'s loop just before",
            f"trace caps: {MAX_ACTIVE} active steps, {max_events:,} events; the active "
            f"steps are kept within {budget_s:.0f} s and {cap.schedule.get('events_budget'):,} "
            "events",
        ],
    }
