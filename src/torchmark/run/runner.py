"""plan cases -> for each: set up, guard, measure (telemetry watching), record -> run.

No formatting here: the caller passes ``Events`` to hear about progress. The run's
lifecycle (store, signals, store failures, the watchdog) is the ``Session``'s; one case is
``case.run_case``; what to measure is ``plan``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torchmark import __version__
from torchmark.devices import Device
from torchmark.errors import InputError, RunNotFoundError, StoreError
from torchmark.judge.ceilings import loaded_set
from torchmark.judge.load import competing
from torchmark.judge.validity import judge
from torchmark.results import Ceiling, CeilingSource, Result, RunRecord, utcnow
from torchmark.run import environment
from torchmark.run.case import SWEEP_STOPPED, run_case, skipped, sweep_stop
from torchmark.run.config import RunConfig
from torchmark.run.plan import Plan, make_plan
from torchmark.run.record import open_run
from torchmark.run.session import Events, Session
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.workloads import Case, Workload

__all__ = [
    "RunOne",
    "check_reuse",
    "measure_ceilings",
    "quiet_cached",
    "reused_ceilings",
    "run",
    "run_planned",
    "second_look",
]


def run(
    cfg: RunConfig,
    store: ResultStore | None,
    events: Events | None = None,
    json_path: Path | None = None,
    suite: Plan | None = None,
) -> RunRecord:
    """Run every planned case and store each result as it lands (``suite``: ``cfg`` planned
    already by ``make_plan``)."""
    p = suite if suite is not None and suite.cfg == cfg else make_plan(cfg)
    p.set_threads()
    check_reuse(cfg, p.devices, store)  # --ceilings RUN|quiet: before the run opens
    session = open_run("run", cfg, p.devices, store, events, json_path=json_path)
    return run_planned(session, p.cases, p.workloads, cfg)


# One case, measured: ``run_case`` or a kind's own wrapper of it (``model``'s no_grad).
RunOne = Callable[[Workload, Case, dict[str, Ceiling], RunConfig, Session], Result]


def run_planned(
    session: Session,
    cases: Sequence[Case],
    workloads: dict[str, Workload],
    cfg: RunConfig,
    *,
    run_one: RunOne = run_case,
    stopped: dict[str, str] | None = None,
    oom_says: str = SWEEP_STOPPED,
) -> RunRecord:
    """The main loop: ceilings per device, then each planned case measured and recorded.

    ``run_one``: how one case is measured (the kind's hook; default ``run_case``);
    ``stopped``: sweeps already stopped by an earlier part of a resumed run (sweep -> why);
    ``oom_says``: the words a sweep stopped by out of memory skips its larger cases with."""
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
                result = run_one(w, case, found, cfg, session)
                if (why := sweep_stop(case, result, oom_says)) is not None:
                    stopped[case.sweep or ""] = why
                if "above_ceiling" in result.flags and case.device not in second_looks:
                    second_looks.add(case.device)
                    result = second_look(result, case.device, ceilings, session, cfg)
                if "above_ceiling" in result.flags:  # still: plausible raises the ceiling
                    result = raise_ceiling(result, case.device, ceilings, session)
            session.add(case, result)
    return session.record


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
        if cfg.ceilings and cfg.ceilings_from:  # checked before the run: found
            found = reused_ceilings(cfg.ceilings_from, d, store, env)
            session.events.ceilings(d, True)
        elif cfg.ceilings:
            fp = environment.device_fingerprint(d, env)
            cached = None if cfg.remeasure_ceilings else quiet_cached(store, d, env)
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


def quiet_cached(
    store: ResultStore | None, device: Device, env: dict[str, Any]
) -> list[Ceiling] | None:
    """The cached quiet ceiling set of ``device`` on this machine (``env``: the run's
    environment, whose software and threads are part of the key), or None. Only quiet sets
    are ever cached: a set measured under other load stays with its run."""
    if store is None:
        return None
    with contextlib.suppress(StoreError):  # a store that is down caches nothing
        return store.cached_ceilings(environment.device_fingerprint(device, env), device.name)
    return None


def check_reuse(
    cfg: RunConfig, devices: Sequence[Device], store: ResultStore | None
) -> dict[str, list[Ceiling]]:
    """``--ceilings RUN|quiet`` checked before a run opens (a bad value: InputError, and
    no empty run left in the store): each device's stored quiet set; {} when not asked."""
    if not (cfg.ceilings and cfg.ceilings_from):
        return {}
    env = environment.collect(list(devices))
    return {d.name: reused_ceilings(cfg.ceilings_from, d, store, env) for d in devices}


def reused_ceilings(
    source: str, device: Device, store: ResultStore | None, env: dict[str, Any]
) -> list[Ceiling]:
    """``--ceilings quiet|RUN``: a stored quiet ceiling set of ``device`` on this machine,
    from the cache (``quiet``) or from a stored run; InputError naming the fix where there
    is none (no cache yet, no such run, the run's set loaded or from another machine)."""
    remeasure = "run once on a quiet machine, or drop --ceilings"
    if store is None:
        raise InputError(f"--ceilings {source} needs a result store; {remeasure}")
    if source == "quiet":
        found = quiet_cached(store, device, env)
        if not found:
            raise InputError(
                f"--ceilings quiet: no quiet ceilings of {device.name} cached on this machine "
                f"yet; {remeasure}"
            )
        return found
    try:
        run = store.load(source)
    except RunNotFoundError:
        raise InputError(
            f"--ceilings {source}: no such run; give quiet or a run id from `torchmark history`"
        ) from None
    found = [c for c in run.ceilings if c.device == device.name]
    if not found:
        raise InputError(
            f"--ceilings {source}: run {run.run_id} has no ceilings of {device.name}; "
            "give quiet or another run"
        )
    if (cores := loaded_set(found)) is not None:
        raise InputError(
            f"--ceilings {source}: run {run.run_id} measured its ceilings under other load "
            f"({cores:.1f} cores); give quiet or a quiet run"
        )
    here = environment.device_fingerprint(device, env)
    if environment.device_fingerprint(device, run.environment) != here:
        raise InputError(
            f"--ceilings {source}: run {run.run_id} measured {device.name} on another "
            "machine, software or thread count; give quiet or a run from this one"
        )
    return found


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
    # other load as the judge counts it on this kind of device (judge.load)
    seen = {"other_cores": load.cores, "logical_cores": getattr(load, "logical_cores", None)}
    if load.cores is not None and competing(seen, device.is_accelerator):
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
    looked.verdict = judge(looked)
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
    from torchmark.judge.raised import raised

    other = (result.telemetry or {}).get("other_cores")
    now = ceiling_source(session.record, other if isinstance(other, int | float) else None)
    found = raised(result, result.ceiling, now) if result.ceiling is not None else None
    if found is None:
        return result
    up, line = found
    ceilings[device.name][up.key] = up
    session.set_ceilings([c for cs in ceilings.values() for c in cs.values()])
    out = result.model_copy(update={"ceiling": up, "notes": [*result.notes, line]})
    out.verdict = judge(out)
    return out


def under_load(c: Ceiling, cores: float) -> Ceiling:
    note = f"; measured while other processes used {cores:.1f} cores: may be low, not cached"
    return c.model_copy(
        update={"method": c.method + note, "details": {**c.details, "competing_load_cores": cores}}
    )
