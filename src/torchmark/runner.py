"""plan cases -> for each: set up, guard, measure (telemetry watching), record -> run.

No formatting here: the caller passes ``Events`` to hear about progress.
"""

from __future__ import annotations

import dataclasses
import gc
import shlex
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from torchmark import __version__, environment, telemetry
from torchmark.config import RunConfig, validate
from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, OutOfMemory, RunInterrupted, WrongResultError
from torchmark.results import Ceiling, Result, RunRecord, Status, utcnow
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.timing import measure, preset
from torchmark.workloads import WORKLOADS, Case, Workload, load_builtins


class Events(Protocol):
    def planned(self, cases: Sequence[Case]) -> None: ...
    def ceilings(self, device: Device, cached: bool) -> None: ...
    def case_started(self, case: Case) -> None: ...
    def case_done(self, case: Case, result: Result) -> None: ...


class Quiet:
    def planned(self, cases: Sequence[Case]) -> None: ...
    def ceilings(self, device: Device, cached: bool) -> None: ...
    def case_started(self, case: Case) -> None: ...
    def case_done(self, case: Case, result: Result) -> None: ...


def select_workloads(cfg: RunConfig) -> dict[str, Workload]:
    load_builtins()
    names = list(cfg.workloads) or [
        n
        for n in WORKLOADS.names()
        if WORKLOADS.get(n).group != "user" and (cfg.suite != "quick" or WORKLOADS.get(n).in_quick)
    ]
    return {n: WORKLOADS.get(n)() for n in names}  # get() names the valid choices


def plan(workloads: dict[str, Workload], devices: list[Device], cfg: RunConfig) -> list[Case]:
    return [c for d in devices for w in workloads.values() for c in w.cases(d, cfg.plan_options)]


def planned(cfg: RunConfig) -> list[Case]:
    """The cases ``run`` would measure, without measuring (``torchmark run --dry-run``)."""
    validate(cfg)
    return plan(select_workloads(cfg), resolve(cfg.devices), cfg)


def run(
    cfg: RunConfig, store: ResultStore, events: Events | None = None, kind: str = "run"
) -> RunRecord:
    """Run every planned case and store each result as it lands."""
    events = events or Quiet()
    validate(cfg)
    devices = resolve(cfg.devices)
    workloads = select_workloads(cfg)
    if cfg.threads:
        for d in devices:
            d.set_threads(cfg.threads)
    record = new_record(kind, cfg.as_dict(), devices)
    cases = plan(workloads, devices, cfg)
    events.planned(cases)
    record.run_id = store.begin_run(record)
    try:
        ceilings = measure_ceilings(devices, record.environment, store, cfg, events)
        record.ceilings = [c for cs in ceilings.values() for c in cs.values()]
        store.set_ceilings(record.run_id, record.ceilings)
        oom_sweeps: dict[str, str] = {}
        second_looks: set[Device] = set()
        for case in cases:
            events.case_started(case)
            if case.sweep in oom_sweeps:
                result = skipped(case, oom_sweeps[case.sweep])
            else:
                result = run_case(workloads[case.workload], case, ceilings[case.device.name], cfg)
                if case.sweep and OUT_OF_MEMORY in result.flags:
                    oom_sweeps[case.sweep] = f"sweep stopped: {result.reason}"
                if "above_ceiling" in result.flags and case.device not in second_looks:
                    second_looks.add(case.device)
                    result = second_look(result, case.device, ceilings, record, store, cfg)
            store.add_result(record.run_id, result)
            record.results.append(result)
            events.case_done(case, result)
        record.status = "complete"
    except KeyboardInterrupt:
        raise RunInterrupted(record, record.run_id) from None
    finally:  # what was measured stays stored, marked incomplete unless the plan finished
        if record.status == "running":
            record.status = "incomplete"
        record.finished_utc = utcnow()
        record.verdict = telemetry.judge_run(record)
        store.finish_run(record.run_id, record)
    return record


def new_record(
    kind: str, config: dict[str, Any], devices: list[Device], **fields: Any
) -> RunRecord:
    """A self-describing run: tool version, command, UTC time, environment, fingerprint."""
    env = environment.collect(devices)
    return RunRecord(
        tool_version=__version__,
        kind=kind,
        command=shlex.join(sys.argv),
        config=config,
        environment=env,
        fingerprint=environment.machine_fingerprint(env),
        **fields,
    )


def measure_ceilings(
    devices: list[Device], env: dict[str, Any], store: ResultStore, cfg: RunConfig, events: Events
) -> dict[str, dict[str, Ceiling]]:
    """Each device's ceilings, measured once per device fingerprint and cached in the store."""

    out: dict[str, dict[str, Ceiling]] = {}
    for d in devices:
        found: list[Ceiling] = []
        if cfg.ceilings:
            fp = environment.device_fingerprint(d, env)
            cached = None if cfg.remeasure_ceilings else store.cached_ceilings(fp, d.name)
            events.ceilings(d, bool(cached))
            if cached:
                found = cached
            else:  # an empty list is no cache: measure again
                found, quiet = measure_device_ceilings(d, cfg)
                if quiet and found:
                    store.cache_ceilings(fp, d.name, found)
        out[d.name] = {c.key: c for c in found}
    return out


def measure_device_ceilings(device: Device, cfg: RunConfig) -> tuple[list[Ceiling], bool]:
    """The device's ceilings, and whether the machine was quiet enough to cache them."""
    from torchmark import ceilings

    with OtherLoad() as load:
        found = ceilings.measure(device, quick=cfg.suite == "quick")
    if load.cores is not None and load.cores > COMPETING_CORES:
        return [under_load(c, load.cores) for c in found], False
    return found, True


def second_look(
    result: Result,
    device: Device,
    ceilings: dict[str, dict[str, Ceiling]],
    record: RunRecord,
    store: ResultStore,
    cfg: RunConfig,
) -> Result:
    """A result beat its device's ceiling: measure the ceilings once more and keep the better
    of each. A ceiling is the best measured, so the order of looks must not matter; on a
    machine whose speed drifts (this project's dev VM: 55 -> 110 GB/s within seconds) the
    first look can be low. A result still above the better ceiling stays invalid."""
    fresh, quiet = measure_device_ceilings(device, cfg)
    current = ceilings[device.name]
    for c in fresh:
        old = current.get(c.key)
        if old is None or c.value > old.value:
            first = f"{old.value:.4g} {old.unit}" if old else "none"
            current[c.key] = c.model_copy(
                update={
                    "method": f"{c.method}; second look (a result beat the first: {first})",
                    "details": {**c.details, "first_look": old.value if old else None},
                }
            )
    record.ceilings = [c for cs in ceilings.values() for c in cs.values()]
    if record.run_id:
        store.set_ceilings(record.run_id, record.ceilings)
    if quiet:
        fp = environment.device_fingerprint(device, record.environment)
        store.cache_ceilings(fp, device.name, list(current.values()))
    assert result.ceiling is not None  # above_ceiling implies one
    better = current.get(result.ceiling.key, result.ceiling)
    if better.value == result.ceiling.value:
        return result
    looked = result.model_copy(
        update={
            "ceiling": better,
            "notes": [
                *result.notes,
                f"above the first measured {better.key} ceiling "
                f"({result.ceiling.value:.4g} {better.unit}); it was measured again",
            ],
        }
    )
    looked.verdict = telemetry.judge(looked)
    return looked


# Other processes using more than half a core while ceilings are measured: they may be low.
COMPETING_CORES = 0.5


def under_load(c: Ceiling, cores: float) -> Ceiling:
    note = f"; measured while other processes used {cores:.1f} cores: may be low, not cached"
    return c.model_copy(
        update={"method": c.method + note, "details": {**c.details, "competing_load_cores": cores}}
    )


# Flag of a result skipped because it did not fit: its sweep stops there.
OUT_OF_MEMORY = "out_of_memory"


def skipped(case: Case, reason: str, status: Status = "skipped", oom: bool = False) -> Result:
    return Result(
        workload=case.workload,
        variant=case.variant,
        device=case.device.name,
        params=case.param_dict,
        status=status,
        reason=reason,
        extra_flags=[OUT_OF_MEMORY] if oom else [],
    )


def run_case(
    workload: Workload, case: Case, ceilings: dict[str, Ceiling], cfg: RunConfig
) -> Result:
    """Set up, guard, measure under telemetry, record. Never raises for a case that fails."""
    device = case.device
    try:
        prepared = workload.prepare(case)
    except CaseSkipped as e:
        return skipped(case, str(e), oom=isinstance(e, OutOfMemory))
    except Exception as e:
        if device.is_out_of_memory(e):
            return skipped(case, f"out of memory at {case.label}", oom=True)
        raise
    try:
        notes = prepared.check() if prepared.check else []
        device.reset_peak_memory()
        with telemetry.watch(device, enabled=cfg.telemetry) as trace:
            m = measure(
                prepared.fn,
                device,
                rule=preset(cfg.rule or prepared.rule),
                timing=prepared.timing if cfg.timing == "device" else "e2e",
                on_sample=trace.mark,
            )
        peak = device.peak_memory_bytes()
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
    result = Result(
        workload=case.workload,
        variant=case.variant,
        device=device.name,
        params=case.param_dict,
        samples_s=list(m.samples_s),
        calls_per_sample=m.calls_per_sample,
        first_call_s=m.first_call_s,
        warmup_calls=m.warmup_calls,
        stop_reason=m.stop_reason,
        rule=m.rule,
        timing=m.timing,
        excluded=list(m.excluded),
        work=prepared.work,
        headline=prepared.headline,
        ceiling=ceilings.get(prepared.ceiling) if prepared.ceiling else None,
        notes=prepared.notes + notes,
        extra={
            **prepared.extra,
            **(prepared.summarize(m) if prepared.summarize else {}),
            "peak_memory_bytes": peak,
        },
        telemetry=trace.summary(),
    )
    result.verdict = telemetry.judge(result)
    return result
