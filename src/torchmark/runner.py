"""plan cases -> for each: set up, guard, measure (telemetry watching), record -> run.

No formatting here: the caller passes ``Events`` to hear about progress. The run's
lifecycle (store, signals, store failures, the watchdog) is the ``Session``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchmark import __version__, environment, telemetry
from torchmark.config import RunConfig, validate
from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, OutOfMemory, StoreError, WrongResultError
from torchmark.results import Ceiling, CeilingSource, Result, RunRecord, Work, utcnow
from torchmark.session import (
    CALL_TIMED_OUT,
    OUT_OF_MEMORY,
    CallTimedOut,
    Events,
    Quiet,
    Session,
    call_bound,
    measured,
    skipped,
)
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.telemetry.verdict import oversubscribed
from torchmark.timing import measure, preset
from torchmark.timing.loop import one_thread_s
from torchmark.workloads import WORKLOADS, Case, Prepared, Workload, load_builtins

__all__ = [
    "OUT_OF_MEMORY",
    "Events",
    "Plan",
    "Quiet",
    "Session",
    "make_plan",
    "measure_ceilings",
    "new_record",
    "plan",
    "planned",
    "run",
    "run_case",
    "run_planned",
    "select_workloads",
    "skipped",
]


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


@dataclasses.dataclass(frozen=True)
class Plan:
    """The suite planned once: workloads built, devices resolved, cases listed. The CLI
    checks the options against it, shows it (--dry-run) or runs it, without planning again."""

    cfg: RunConfig
    workloads: dict[str, Workload]
    devices: list[Device]
    cases: list[Case]

    def cases_for(self, cfg: RunConfig) -> list[Case]:
        """The cases under other selectors (``ignored_options`` clears one at a time), from
        the same built workloads and devices; the planned config gives the planned list."""
        return self.cases if cfg == self.cfg else plan(self.workloads, self.devices, cfg)

    def set_threads(self) -> None:
        """Apply ``--threads`` to every planned device (before measuring, and before a
        resume collects the environment it compares: the thread count is part of it)."""
        if self.cfg.threads:
            for d in self.devices:
                d.set_threads(self.cfg.threads)


def make_plan(
    cfg: RunConfig,
    devices: list[Device] | None = None,
    workloads: dict[str, Workload] | None = None,
) -> Plan:
    """``cfg`` checked and planned: its workloads built, its devices resolved, its cases
    listed. ``devices``/``workloads``: already chosen (tests' fakes); by default ``cfg``
    chooses them."""
    validate(cfg)
    workloads = workloads if workloads is not None else select_workloads(cfg)
    devices = devices if devices is not None else resolve(cfg.devices)
    return Plan(cfg, workloads, devices, plan(workloads, devices, cfg))


def planned(cfg: RunConfig) -> list[Case]:
    """The cases ``run`` would measure, without measuring (``torchmark run --dry-run``)."""
    return make_plan(cfg).cases


def run(
    cfg: RunConfig,
    store: ResultStore | None,
    events: Events | None = None,
    kind: str = "run",
    json_path: Path | None = None,
    suite: Plan | None = None,
) -> RunRecord:
    """Run every planned case and store each result as it lands (``suite``: ``cfg`` planned
    already by ``make_plan``)."""
    p = suite if suite is not None and suite.cfg == cfg else make_plan(cfg)
    p.set_threads()
    record = new_record(kind, cfg.as_dict(), p.devices)
    session = Session(record, store, events, json_path=json_path)
    return run_planned(session, p.cases, p.workloads, cfg)


def run_planned(
    session: Session,
    cases: Sequence[Case],
    workloads: dict[str, Workload],
    cfg: RunConfig,
    stopped: dict[str, str] | None = None,
) -> RunRecord:
    """The main loop: ceilings per device, then each planned case measured and recorded.

    ``stopped``: sweeps already stopped by an earlier part of a resumed run (sweep -> why)."""
    devices = list(dict.fromkeys(c.device for c in cases))
    # a resumed run's ceilings had their second look already where one says "first_look"
    second_looks = {
        d
        for d in devices
        for c in session.record.ceilings
        if c.device == d.name and "first_look" in c.details
    }
    session.planned(cases)
    with session:
        ceilings = measure_ceilings(devices, session, cfg)
        stopped = dict(stopped or {})  # sweep -> why its larger cases are skipped
        for case in cases:
            session.case_started(case)
            if case.sweep in stopped:
                result = skipped(case, stopped[case.sweep])
            else:
                w, found = workloads[case.workload], ceilings[case.device.name]
                result = run_case(w, case, found, cfg, session)
                if case.sweep and OUT_OF_MEMORY in result.flags:
                    stopped[case.sweep] = f"sweep stopped: {result.reason}"
                if "above_ceiling" in result.flags and case.device not in second_looks:
                    second_looks.add(case.device)
                    result = second_look(result, case.device, ceilings, session, cfg)
                if "above_ceiling" in result.flags:  # still: plausible raises the ceiling
                    result = raise_ceiling(result, case.device, ceilings, session)
            session.add(case, result)
    return session.record


def command_line(argv: list[str]) -> str:
    """The command as the user would type it: ``python -m torchmark`` and the installed
    script both read ``torchmark ...`` (argv[0] is then a path to __main__.py or the script)."""
    name = os.path.basename(argv[0]) if argv else ""
    if name in ("__main__.py", "torchmark", "torchmark.exe"):
        argv = ["torchmark", *argv[1:]]
    return shlex.join(argv)


def new_record(
    kind: str, config: dict[str, Any], devices: list[Device], **fields: Any
) -> RunRecord:
    """A self-describing run: tool version, command, UTC time, environment, fingerprint."""
    env = environment.collect(devices)
    return RunRecord(
        tool_version=__version__,
        kind=kind,
        command=command_line(sys.argv),
        config=config,
        environment=env,
        fingerprint=environment.machine_fingerprint(env),
        **fields,
    )


def measure_ceilings(
    devices: list[Device], session: Session, cfg: RunConfig
) -> dict[str, dict[str, Ceiling]]:
    """Each device's ceilings, measured once per device fingerprint and cached in the store.
    A resumed run keeps the ceilings it has: its results are all judged against the same."""
    out: dict[str, dict[str, Ceiling]] = {}
    store, env = session.store, session.record.environment
    kept = session.record.ceilings
    out.update({d.name: {c.key: c for c in kept if c.device == d.name} for d in devices})
    for d in devices:
        found: list[Ceiling] = []
        if out[d.name]:
            session.events.ceilings(d, True)
            continue
        if cfg.ceilings:
            fp = environment.device_fingerprint(d, env)
            cached = None
            if store is not None and not cfg.remeasure_ceilings:
                with contextlib.suppress(StoreError):  # a store that is down caches nothing
                    cached = store.cached_ceilings(fp, d.name)
            session.events.ceilings(d, bool(cached))
            if cached:
                found = cached
            else:  # an empty list is no cache: measure again
                found, quiet = measure_device_ceilings(d, cfg)
                found = stamped(found, session.record)
                if quiet and found:
                    _cache(store, fp, d.name, found)
        out[d.name] = {c.key: c for c in found}
    others = [c for c in kept if c.device not in out]  # a device this part does not use
    session.set_ceilings(others + [c for cs in out.values() for c in cs.values()])
    return out


def _cache(store: ResultStore | None, fp: str, device: str, found: list[Ceiling]) -> None:
    if store is not None:
        with contextlib.suppress(StoreError):  # the cache only saves time: never fatal
            store.cache_ceilings(fp, device, found)


def measure_device_ceilings(device: Device, cfg: RunConfig) -> tuple[list[Ceiling], bool]:
    """The device's ceilings, and whether the machine was quiet enough to cache them. Each
    carries its source (when, under what load, with which torch; ``stamped`` adds the run),
    so a later run that reuses them from the cache says where they came from."""
    from torchmark import ceilings

    with OtherLoad() as load:
        found = ceilings.measure(device, quick=cfg.suite == "quick")
    source = ceiling_source(None, load.cores)
    found = [c.model_copy(update={"provenance": source}) for c in found]
    if load.cores is not None and load.cores > COMPETING_CORES:
        return [under_load(c, load.cores) for c in found], False
    return found, True


def ceiling_source(record: RunRecord | None, other_cores: float | None) -> CeilingSource:
    """Measured now, by ``record``'s run, while other processes used ``other_cores``."""
    import torch

    return CeilingSource(
        measured_utc=utcnow(),
        run_id=record.run_id if record is not None else None,
        other_cores=None if other_cores is None else round(other_cores, 2),
        torch=torch.__version__,
        tool_version=__version__,
    )


def stamped(found: list[Ceiling], record: RunRecord) -> list[Ceiling]:
    """Ceilings just measured, their source naming the run that measured them."""
    return [
        c.model_copy(
            update={"provenance": c.provenance.model_copy(update={"run_id": record.run_id})}
        )
        if c.provenance is not None and c.provenance.run_id is None
        else c
        for c in found
    ]


def second_look(
    result: Result,
    device: Device,
    ceilings: dict[str, dict[str, Ceiling]],
    session: Session,
    cfg: RunConfig,
) -> Result:
    """A result beat its device's ceiling: measure the ceilings once more and keep the better
    of each. A ceiling is the best measured, so the order of looks must not matter; on a
    machine whose speed drifts (this project's dev VM: 55 -> 110 GB/s within seconds) the
    first look can be low. A result still above the better ceiling goes to
    ``raise_ceiling``."""
    fresh, quiet = measure_device_ceilings(device, cfg)
    fresh = stamped(fresh, session.record)
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
    session.set_ceilings([c for cs in ceilings.values() for c in cs.values()])
    if quiet:
        fp = environment.device_fingerprint(device, session.record.environment)
        _cache(session.store, fp, device.name, list(current.values()))
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


def raise_ceiling(
    result: Result,
    device: Device,
    ceilings: dict[str, dict[str, Ceiling]],
    session: Session,
) -> Result:
    """A result still above its ceiling after the second look: where it is plausible
    (``ceilings.raised``) the device's ceiling is raised to its rate, said in one line on
    the result, and the result judged again; else it stays as judged (invalid)."""
    from torchmark.ceilings.raised import raised

    other = (result.telemetry or {}).get("other_cores")
    now = ceiling_source(session.record, other if isinstance(other, int | float) else None)
    found = raised(result, result.ceiling, now) if result.ceiling is not None else None
    if found is None:
        return result
    up, line = found
    ceilings[device.name][up.key] = up
    session.set_ceilings([c for cs in ceilings.values() for c in cs.values()])
    out = result.model_copy(update={"ceiling": up, "notes": [*result.notes, line]})
    out.verdict = telemetry.judge(out)
    return out


# Other processes using more than half a core while ceilings are measured: they may be low.
COMPETING_CORES = 0.5


def under_load(c: Ceiling, cores: float) -> Ceiling:
    note = f"; measured while other processes used {cores:.1f} cores: may be low, not cached"
    return c.model_copy(
        update={"method": c.method + note, "details": {**c.details, "competing_load_cores": cores}}
    )


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
    guarded = dog.armed if dog is not None else _unguarded
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
    ceiling = ceilings.get(prepared.ceiling) if prepared.ceiling else None
    return measured(
        case, m, prepared, ceiling=ceiling, notes=notes, extra=extra, telemetry=trace.summary()
    )


@contextlib.contextmanager
def _unguarded(bound_s: float, what: str) -> Any:
    yield
