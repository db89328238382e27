"""`torchmark run --resume RUN`: finish an interrupted run in the same record.

    record = target(store, "latest")    # the newest incomplete `run` run, or one by id
    plan = prepare(record)              # refusals (kind, status, environment), then the
                                        #   stored options' plan less the cases done
    print(plan.line())                  # resuming run ID: 37 of 130 cases done, 93 to go
    run(plan, store, events)            # the one run path: Session + runner.run_planned

What a resumed run keeps: its id, its environment record (checked field by field against
this machine before anything is touched), its ceilings (every result judged against the
same) and its plan (re-made from the stored options; only cases without a result run).
What it cannot keep: the time between parts and the machine's state (temperature, clocks,
other load) at each start; ``payload.parts`` records each part's start, end, cases and load
so a report says "measured in 2 parts".
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchmark import format as fmt
from torchmark.errors import InputError, RunNotFoundError
from torchmark.results import Result, RunRecord, utcnow
from torchmark.results.payloads import Part, RunPayload

# torch (~2 s) is imported where a resume measures, not here: `torchmark show` asks
# `can_resume` of a stored run
if TYPE_CHECKING:
    from torchmark.devices import Device
    from torchmark.run.config import RunConfig
    from torchmark.run.session import Events
    from torchmark.store.base import ResultStore
    from torchmark.workloads import Case, Workload

__all__ = [
    "Resume",
    "can_resume",
    "case_key",
    "check_resumable",
    "environment_difference",
    "prepare",
    "result_key",
    "run",
    "stored_config",
    "target",
]

# Environment fields whose change makes two parts not one run: the machine, its software,
# devices, threads, precision flags and the environment variables torchmark records. Not
# compared: the pid, the load at start (each part records its own) and the interpreter path.
COMPARED = ("host", "os", "software", "devices", "threads", "precision", "env_vars")


def target(store: ResultStore, spec: str) -> RunRecord:
    """The run ``spec`` names; ``latest`` is the newest incomplete `torchmark run` run."""
    if spec != "latest":
        return store.load(spec)
    for r in store.list_runs():
        if r.kind == "run" and r.status == "incomplete":
            return store.load(r.run_id)
    raise RunNotFoundError(
        f"no incomplete `torchmark run` run in {store.url} to resume; "
        f"`torchmark history` lists the stored runs"
    )


def can_resume(record: RunRecord) -> str | None:
    """Why ``record`` cannot be resumed, in one line naming what to do; None when it can:
    only an incomplete, single-process `torchmark run` run can (``--resume`` refuses with
    this line; `show` hints the resume command only where it is None)."""
    rid = record.run_id
    if record.kind != "run":
        return f"run {rid} is a `{record.kind}` run; only `torchmark run` runs can be resumed"
    if "distributed" in record.config:
        return (
            f"run {rid} is a distributed run (ranks); only single-process `torchmark run` "
            f"runs can be resumed: run it again"
        )
    if record.status == "complete":
        return f"run {rid} is complete: nothing to resume (`torchmark report {rid}`)"
    if record.status == "running":
        return (
            f"run {rid} is still running (process {record.environment.get('pid')} on "
            f"{record.environment.get('host')}); wait for it or stop it, then resume"
        )
    return None


def check_resumable(record: RunRecord) -> None:
    """Only an incomplete, single-process `torchmark run` run can be resumed."""
    why = can_resume(record)
    if why is not None:
        raise InputError(why)


def stored_config(record: RunRecord) -> RunConfig:
    """The run's options as it stored them (JSON lists back to tuples)."""
    from torchmark.run.config import RunConfig

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(record.config) - fields)
    if unknown:
        raise InputError(
            f"run {record.run_id} has options this torchmark does not know "
            f"({', '.join(unknown)}); resume it with torchmark {record.tool_version}"
        )
    values: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in record.config.items()
    }
    return RunConfig(**values)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def environment_difference(then: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The first compared environment field that differs, in words; None when none does."""
    old_devices, new_devices = list(then.get("devices") or {}), list(now.get("devices") or {})
    if sorted(old_devices) != sorted(new_devices):
        return (
            f"the devices differ (the run measured {', '.join(old_devices) or 'none'}; "
            f"here: {', '.join(new_devices) or 'none'})"
        )
    for field in COMPARED:
        old, new = _flat(then.get(field), field), _flat(now.get(field), field)
        for key in sorted(set(old) | set(new)):
            a, b = old.get(key), new.get(key)
            if json.dumps(a, default=str) != json.dumps(b, default=str):
                return f"{key} differs (the run: {a}; here: {b})"
    return None


def result_key(r: Result) -> tuple[str, str, str, str]:
    """A result's case identity, params compared as JSON (a tuple is stored as a list)."""
    params = r.model_dump(mode="json", include={"params"})["params"]
    return (r.workload, r.variant, r.device, json.dumps(params, sort_keys=True))


def case_key(case: Case) -> tuple[str, str, str, str]:
    from torchmark.run.case import skipped

    return result_key(skipped(case, ""))


@dataclasses.dataclass
class Resume:
    """What a resumed run measures: the stored plan less the cases that have a result.

    ``planned``: the whole plan; ``todo``: the cases still to measure, in plan order;
    ``stopped``: sweeps an earlier part stopped (out of memory), so later sizes stay skipped.
    """

    record: RunRecord
    cfg: RunConfig
    planned: Sequence[Case]
    todo: list[Case]
    stopped: dict[str, str]
    workloads: dict[str, Workload]
    environment: dict[str, Any]  # this machine's, as collected for the comparison

    @property
    def done(self) -> int:
        return len(self.planned) - len(self.todo)

    def line(self) -> str:
        """``resuming run 12: 37 of 130 cases done, 93 to go``."""
        n = len(self.planned)
        return (
            f"resuming run {self.record.run_id}: {self.done} of {n} "
            f"case{'s' if n != 1 else ''} done, {len(self.todo)} to go"
        )


def filter_done(record: RunRecord, planned: Sequence[Case]) -> tuple[list[Case], dict[str, str]]:
    """Cases with no stored result yet (each stored result accounts for one planned case),
    and the sweeps stopped by an out-of-memory result."""
    from torchmark.run.case import sweep_stop

    keys = [result_key(r) for r in record.results]  # a model_dump each: once a result
    left, by_key = Counter(keys), dict(zip(keys, record.results, strict=True))
    todo, stopped = [], {}
    for case in planned:
        key = case_key(case)
        if left[key] > 0:
            left[key] -= 1
            if (why := sweep_stop(case, by_key[key])) is not None:
                stopped[case.sweep or ""] = why
        else:
            todo.append(case)
    strays = [r for r, k in zip(record.results, keys, strict=True) if left[k] > 0]
    if strays:  # the plan is not the one the run made (a torchmark changed under one version)
        raise InputError(
            f"cannot resume run {record.run_id}: {len(strays)} of its {len(keys)} stored results "
            f"match no case planned from its options now (first: {fmt.result_label(strays[0])}); "
            f"its parts would not be one plan: start a new run "
            f"(`{record.command or 'torchmark run'}`)"
        )
    return todo, stopped


def check_environment(record: RunRecord, now: dict[str, Any]) -> None:
    why = environment_difference(record.environment, now)
    if why is not None:
        raise InputError(
            f"cannot resume run {record.run_id} here: {why}; its parts would not be one run: "
            f"start a new one (`{record.command or 'torchmark run'}`)"
        )


def begin_part(record: RunRecord, now_env: dict[str, Any]) -> None:
    """Reopen ``record`` in memory for one more part: running, its parts noted."""
    p = record.payload
    assert isinstance(p, RunPayload)  # check_resumable: only `run` runs are resumed
    parts = p.parts
    if not parts:  # the first part, as the record kept it
        parts = [
            Part(
                started_utc=record.created_utc,
                finished_utc=record.finished_utc,
                results=len(record.results),
                pid=record.environment.get("pid"),
                load_at_start=record.environment.get("load_at_start"),
            )
        ]
    from torchmark.run.record import command_line

    parts.append(
        Part(
            started_utc=utcnow(),
            results=0,
            pid=os.getpid(),
            load_at_start=now_env.get("load_at_start"),
            command=command_line(sys.argv),
        )
    )
    p.parts = parts
    record.status, record.finished_utc, record.verdict = "running", None, None
    # `history` and the store tell a live run from a dead one by this pid
    record.environment["pid"] = os.getpid()


def end_part(record: RunRecord, before: int) -> None:
    """The part ends (complete or not): its end time and how many results it added."""
    assert isinstance(record.payload, RunPayload) and record.payload.parts
    part = record.payload.parts[-1]
    part.finished_utc = utcnow()
    part.results = len(record.results) - before


def _readings(memory: Any) -> dict[str, int | None] | None:
    """The stored readings, where they are what the run wrote (a name -> bytes mapping)."""
    if not isinstance(memory, dict):
        return None
    return {
        str(k): int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
        for k, v in memory.items()
    }


def prepare(
    record: RunRecord,
    devices: list[Device] | None = None,
    workloads: dict[str, Workload] | None = None,
) -> Resume:
    """Check and plan a resume without touching the store; refuses, one line naming the
    fix, a run that cannot be resumed here. ``devices``/``workloads``: tests' fakes (by
    default the stored options choose them, as ``runner.run`` does)."""
    from torchmark.run import environment
    from torchmark.run.plan import make_plan

    check_resumable(record)
    # sized from the memory the first part planned with: its stored results match the plan
    memory = record.environment.get("plan_memory_bytes")
    p = make_plan(stored_config(record), devices, workloads, memory=_readings(memory))
    p.set_threads()
    now = environment.collect(p.devices)
    check_environment(record, now)
    todo, stopped = filter_done(record, p.cases)
    return Resume(record, p.cfg, p.cases, todo, stopped, p.workloads, now)


def run(
    plan: Resume,
    store: ResultStore,
    events: Events | None = None,
    json_path: Path | None = None,
    host_clock: Callable[[], float] = time.perf_counter,
) -> RunRecord:
    """Measure the cases left through the one run path (``Session`` + ``run_planned``),
    appending to the same run id; complete when the plan finishes."""
    from torchmark.run.runner import run_planned
    from torchmark.run.session import Session

    record = plan.record
    assert record.run_id is not None  # loaded from the store
    before = len(record.results)
    begin_part(record, plan.environment)
    store.reopen_run(record.run_id, record)
    session = Session(
        record,
        store,
        events,
        analyse=lambda r: end_part(r, before),
        json_path=json_path,
        host_clock=host_clock,
        resumed=True,
    )
    return run_planned(session, plan.todo, plan.workloads, plan.cfg, stopped=plan.stopped)
