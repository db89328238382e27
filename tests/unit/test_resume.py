"""`torchmark run --resume` on a fake device and clock: a run stopped after k cases and
resumed ends with each planned case once, in the same run; every refusal touches nothing."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from torchmark.devices import Device
from torchmark.errors import InputError, RunInterrupted, RunNotFoundError
from torchmark.report.parts import parts_note
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.results.payloads import RunPayload
from torchmark.run import resume, runner
from torchmark.run.case import OUT_OF_MEMORY, skipped
from torchmark.run.config import RunConfig
from torchmark.run.record import new_record
from torchmark.run.session import Session
from torchmark.testing import FakeClock, FakeDevice, MemoryStore, scripted
from torchmark.workloads import Case, PlanOptions, Prepared, Workload

CFG = RunConfig(devices=("fake",), rule="test", ceilings=False, telemetry=False)


@pytest.fixture(autouse=True)
def _no_full_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_case's gc.collect() after each case costs ~0.35 s with torch loaded on this
    2-core VM; these fake cases allocate nothing worth collecting."""
    monkeypatch.setattr(gc, "collect", lambda *_: 0)


def stop() -> None:
    raise KeyboardInterrupt  # Ctrl-C in the middle of a case


class Counted(Workload):
    """Cases i=0..n-1 on a fake device (1 ms a call); ``actions[i]`` runs on case i's call,
    ``prepared`` counts how often each case was set up."""

    name: ClassVar[str] = "counted"
    summary: ClassVar[str] = "test workload"

    def __init__(self, clock: FakeClock, n: int) -> None:
        self.clock, self.n = clock, n
        self.actions: dict[int, Callable[[], None]] = {}
        self.prepared: list[int] = []

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("counted", "v", device, (("i", i),)) for i in range(self.n)]

    def prepare(self, case: Case) -> Prepared:
        i = case.param_dict["i"]
        self.prepared.append(i)
        step = scripted(self.clock, [0.001])

        def fn() -> None:
            action = self.actions.pop(i, None)
            if action is not None:
                action()
            step()

        return Prepared(fn=fn, work=Work(items=1), timing="e2e")


class Rig:
    """One fake machine: a clock, a device, the workload and an in-memory store."""

    def __init__(self, n: int = 5, cfg: RunConfig = CFG) -> None:
        self.clock = FakeClock()
        self.dev = FakeDevice(self.clock)
        self.w = Counted(self.clock, n)
        self.store = MemoryStore()
        self.cfg = cfg

    def first_part(self, stop_at: int | None) -> RunRecord:
        """A run stopped by Ctrl-C during case ``stop_at`` (None: it completes)."""
        if stop_at is not None:
            self.w.actions[stop_at] = stop
        record = new_record("run", self.cfg.as_dict(), [self.dev])
        session = Session(record, self.store, host_clock=self.clock)
        cases = self.w.cases(self.dev, PlanOptions())
        try:
            return runner.run_planned(session, cases, {"counted": self.w}, self.cfg)
        except RunInterrupted as e:
            return e.record  # type: ignore[return-value]

    def plan(self, run_id: str) -> resume.Resume:
        record = self.store.load(run_id)
        return resume.prepare(record, devices=[self.dev], workloads={"counted": self.w})

    def resume(self, run_id: str) -> RunRecord:
        return resume.run(self.plan(run_id), self.store, host_clock=self.clock)  # type: ignore[arg-type]


def cases_of(record: RunRecord) -> list[int]:
    return [r.params["i"] for r in record.results]


def test_a_run_stopped_after_k_cases_resumes_with_each_planned_case_once() -> None:
    rig = Rig(n=5)
    first = rig.first_part(stop_at=2)
    assert first.status == "incomplete" and cases_of(first) == [0, 1]
    run_id = first.run_id or ""
    plan = rig.plan(run_id)
    assert plan.line() == f"resuming run {run_id}: 2 of 5 cases done, 3 to go"
    assert [c.param_dict["i"] for c in plan.todo] == [2, 3, 4]
    rig.w.prepared.clear()
    done = rig.resume(run_id)
    assert done.run_id == run_id and done.status == "complete"
    assert rig.w.prepared == [2, 3, 4]  # only the cases without a result were measured
    stored = rig.store.runs[run_id]
    assert sorted(cases_of(stored)) == [0, 1, 2, 3, 4] and stored.status == "complete"
    assert all(r.median_s == pytest.approx(0.001) for r in stored.results)
    parts = stored.payload.parts
    assert [p.results for p in parts] == [2, 3]
    assert parts[1].pid == os.getpid() and parts[1].finished_utc is not None
    assert done.verdict is not None  # the finished run was judged, all five results


def test_interrupted_again_stays_resumable_until_the_plan_finishes() -> None:
    rig = Rig(n=6)
    run_id = rig.first_part(stop_at=1).run_id or ""
    rig.w.actions[3] = stop
    with pytest.raises(RunInterrupted):
        rig.resume(run_id)
    again = rig.store.runs[run_id]
    assert again.status == "incomplete" and sorted(cases_of(again)) == [0, 1, 2]
    assert rig.plan(run_id).line().endswith("3 of 6 cases done, 3 to go")
    done = rig.resume(run_id)
    assert done.status == "complete" and sorted(cases_of(done)) == list(range(6))
    assert [p.results for p in rig.store.runs[run_id].payload.parts] == [1, 2, 3]
    note = parts_note(rig.store.runs[run_id])
    assert note is not None and note.startswith("measured in 3 parts: 1 result ")


def test_a_run_killed_after_its_last_case_finishes_with_nothing_to_measure() -> None:
    rig = Rig(n=2)
    run_id = rig.first_part(stop_at=None).run_id or ""
    rig.store.runs[run_id].status = "incomplete"  # as if killed before it was marked done
    plan = rig.plan(run_id)
    assert plan.todo == [] and plan.line().endswith("2 of 2 cases done, 0 to go")
    assert rig.resume(run_id).status == "complete"
    assert cases_of(rig.store.runs[run_id]) == [0, 1]


def unchanged(rig: Rig, run_id: str, refusal: Callable[[], Any], says: str) -> None:
    before = rig.store.runs[run_id].model_dump_json()
    with pytest.raises((InputError, RunNotFoundError)) as e:
        refusal()
    assert says in str(e.value) and "\n" not in str(e.value)
    assert rig.store.runs[run_id].model_dump_json() == before  # nothing stored touched


def test_refusals_name_the_fix_and_touch_nothing() -> None:
    rig = Rig(n=3)
    run_id = rig.first_part(stop_at=1).run_id or ""
    done = rig.first_part(stop_at=None).run_id or ""
    unchanged(rig, done, lambda: rig.plan(done), "is complete: nothing to resume")
    unchanged(rig, run_id, lambda: rig.plan("no-such-run"), "no run 'no-such-run'")
    rig.store.runs[run_id].kind = "model"
    unchanged(
        rig,
        run_id,
        lambda: rig.plan(run_id),
        f"run {run_id} is a `model` run; only `torchmark run` runs can be resumed",
    )
    rig.store.runs[run_id].kind = "run"
    rig.store.runs[run_id].status = "running"
    unchanged(rig, run_id, lambda: rig.plan(run_id), "is still running")
    rig.store.runs[run_id].status = "incomplete"
    rig.store.runs[run_id].config["distributed"] = {"world_size": 2}
    unchanged(rig, run_id, lambda: rig.plan(run_id), "distributed run")
    del rig.store.runs[run_id].config["distributed"]
    assert rig.resume(run_id).status == "complete"  # the refusals left it resumable


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda env: env["software"].update(torch="2.0.0"), "software.torch differs"),
        (lambda env: env.update(host="other-host"), "host differs (the run: other-host"),
        (
            lambda env: env["devices"].update({"cuda:0": {"kind": "cuda"}}),
            "the devices differ (the run measured fake:0, cuda:0; here: fake:0)",
        ),
        (lambda env: env["threads"].update(torch_num_threads=999), "threads.torch_num_threads"),
    ],
)
def test_another_environment_is_refused_naming_the_field(
    change: Callable[[dict[str, Any]], None], says: str
) -> None:
    rig = Rig(n=3)
    run_id = rig.first_part(stop_at=1).run_id or ""
    change(rig.store.runs[run_id].environment)
    unchanged(rig, run_id, lambda: rig.plan(run_id), says)


def test_the_load_and_pid_of_another_part_are_not_a_different_environment() -> None:
    rig = Rig(n=2)
    run_id = rig.first_part(stop_at=1).run_id or ""
    env = rig.store.runs[run_id].environment
    env["pid"], env["load_at_start"] = 1, {"loadavg": [9.0, 9.0, 9.0]}
    assert rig.resume(run_id).status == "complete"


def test_latest_is_the_newest_incomplete_run_of_torchmark_run() -> None:
    rig = Rig(n=3)
    older = rig.first_part(stop_at=1).run_id
    newer = rig.first_part(stop_at=2).run_id
    rig.first_part(stop_at=None)  # complete: not resumable
    model = rig.first_part(stop_at=1)
    rig.store.runs[model.run_id or ""].kind = "model"
    assert resume.target(rig.store, "latest").run_id == newer  # type: ignore[arg-type]
    rig.resume(newer or "")
    assert resume.target(rig.store, "latest").run_id == older  # type: ignore[arg-type]
    rig.resume(older or "")
    with pytest.raises(RunNotFoundError, match="no incomplete `torchmark run` run"):
        resume.target(rig.store, "latest")  # type: ignore[arg-type]


def test_a_sweep_stopped_by_out_of_memory_stays_stopped() -> None:
    dev = FakeDevice(FakeClock())
    cases = [Case("s", "v", dev, (("b", b),), sweep="s") for b in (1, 2, 4, 8)]
    record = RunRecord(results=[Result(workload="s", variant="v", device=dev.name, params={})])
    record.results = [
        Result(workload="s", variant="v", device=dev.name, params={"b": 1}),
        skipped(cases[1], "out of memory at b=2", oom=True),
    ]
    assert OUT_OF_MEMORY in record.results[1].flags
    todo, stopped = resume.filter_done(record, cases)
    assert [c.param_dict["b"] for c in todo] == [4, 8]
    assert stopped == {"s": "sweep stopped: out of memory at b=2"}


def test_stored_results_the_plan_no_longer_makes_are_refused() -> None:
    """A torchmark changed under one version number (an editable install) can plan other
    cases from the same options: parts measured from two plans are not one run."""
    rig = Rig(n=4)
    run_id = rig.first_part(stop_at=2).run_id or ""
    rig.w.n = 1  # the plan now makes i=0 only; i=1 is stored
    unchanged(
        rig,
        run_id,
        lambda: rig.plan(run_id),
        f"cannot resume run {run_id}: 1 of its 2 stored results match no case planned from "
        "its options now (first: counted/v i=1 on fake:0)",
    )
    rig.w.n = 4
    assert cases_of(rig.resume(run_id)) == [0, 1, 2, 3]


def test_a_tuple_param_stored_as_a_list_is_the_same_case() -> None:
    dev = FakeDevice(FakeClock())
    case = Case("w", "v", dev, (("shape", (2, 3)),))
    stored = RunRecord.model_validate_json(
        RunRecord(results=[skipped(case, "x")]).model_dump_json()
    )
    assert stored.results[0].params["shape"] == [2, 3]
    assert resume.filter_done(stored, [case]) == ([], {})


def test_a_resumed_run_keeps_its_ceilings(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_again(*_: Any) -> Any:
        raise AssertionError("a resumed run's ceilings were measured again")

    monkeypatch.setattr(runner, "measure_device_ceilings", not_again)
    rig = Rig(n=2, cfg=RunConfig(devices=("fake",), rule="test", telemetry=False))
    kept = Ceiling(device=rig.dev.name, key="bandwidth", value=1e9, unit="B/s", method="test")
    other = Ceiling(device="cpu", key="bandwidth", value=2e9, unit="B/s", method="test")
    record = new_record("run", rig.cfg.as_dict(), [rig.dev], ceilings=[kept, other])
    record.run_id = rig.store.begin_run(record)
    rig.store.runs[record.run_id].ceilings = [kept, other]
    rig.store.runs[record.run_id].status = "incomplete"
    done = rig.resume(record.run_id)
    assert done.status == "complete" and done.ceilings == [other, kept]
    assert rig.store.runs[record.run_id].ceilings == [other, kept]


def test_parts_note_says_each_part_and_the_gap() -> None:
    record = RunRecord(
        payload={
            "kind": "run",
            "parts": [
                {"started_utc": "2026-11-23T04:00:00+00:00", "finished_utc": None, "results": 1},
                {
                    "started_utc": "2026-11-23T04:30:00+00:00",
                    "finished_utc": "2026-11-23T04:39:00+00:00",
                    "results": 37,
                },
                {
                    "started_utc": "2026-11-23T04:41:00+00:00",
                    "finished_utc": "2026-11-23T04:50:00+00:00",
                    "results": 93,
                },
            ],
        }
    )
    assert parts_note(record) == (
        "measured in 3 parts: 1 result 2026-11-23 04:00 UTC (end not recorded); "
        "37 results 2026-11-23 04:30-04:39 UTC (gap unknown: the part before was killed); "
        "93 results 2026-11-23 04:41-04:50 UTC, begun 2 min after the part before ended"
    )
    assert parts_note(RunRecord()) is None


def test_the_sql_store_reopens_an_incomplete_run_once(tmp_path: Path) -> None:
    from torchmark.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    dev = FakeDevice(FakeClock())
    record = new_record("run", CFG.as_dict(), [dev])
    run_id = store.begin_run(record)
    case = Case("w", "v", dev, (("i", 0),))
    store.add_result(run_id, skipped(case, "first part"))
    record.status = "incomplete"
    store.finish_run(run_id, record)
    record.status = "running"
    store.reopen_run(run_id, record)
    with pytest.raises(InputError, match="is running now: it cannot be resumed"):
        store.reopen_run(run_id, record)  # a second resume of the same run is refused
    store.add_result(run_id, skipped(Case("w", "v", dev, (("i", 1),)), "second part"))
    loaded = store.load(run_id)
    assert loaded.status == "running" and [r.reason for r in loaded.results] == [
        "first part",
        "second part",
    ]
    with pytest.raises(RunNotFoundError):
        store.reopen_run("nope", record)


def test_sigterm_during_a_resumed_part_keeps_both_parts() -> None:
    rig = Rig(n=4)
    run_id = rig.first_part(stop_at=1).run_id or ""
    rig.w.actions[2] = lambda: os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(RunInterrupted) as e:
        rig.resume(run_id)
    assert e.value.exit_code == 128 + signal.SIGTERM
    stored = rig.store.runs[run_id]
    assert stored.status == "incomplete" and cases_of(stored) == [0, 1]
    assert [p.results for p in stored.payload.parts] == [1, 1]


def test_every_report_says_a_run_was_measured_in_parts() -> None:
    from pathlib import Path

    from rich.console import Console

    from torchmark.report import html, markdown
    from torchmark.report.table import run_tables

    fixture = Path(__file__).parents[1] / "fixtures" / "runs" / "cpu-only.json"
    record = RunRecord.model_validate_json(fixture.read_text())
    record.payload = RunPayload(
        parts=[
            {
                "started_utc": "2026-11-23T04:00:00+00:00",
                "finished_utc": "2026-11-23T04:09:00+00:00",
            },
            {
                "started_utc": "2026-11-23T04:10:00+00:00",
                "finished_utc": "2026-11-23T04:19:00+00:00",
            },
        ]
    )
    said = "measured in 2 parts: ? results 2026-11-23 04:00-04:09 UTC; "
    console = Console(width=80, record=True)
    for r in run_tables(record):
        console.print(r)
    assert "note: " + said.strip() in " ".join(console.export_text().split())  # wrapped
    assert said in markdown.render([record])
    assert said in html.render([record])
    record.payload.parts = None
    assert "measured in" not in markdown.render([record])


class AboveCeiling(Counted):
    """1 GB a 1 ms call: far above a 1 GB/s bandwidth ceiling."""

    def prepare(self, case: Case) -> Prepared:
        p = super().prepare(case)
        return Prepared(fn=p.fn, work=Work(bytes=1e9), headline="bytes", ceiling="bandwidth")


@pytest.mark.parametrize("looked", [True, False])
def test_a_second_look_taken_in_an_earlier_part_is_not_taken_again(
    monkeypatch: pytest.MonkeyPatch, looked: bool
) -> None:
    looks: list[str] = []
    monkeypatch.setattr(
        runner, "measure_device_ceilings", lambda d, cfg: looks.append(d.name) or ([], False)
    )
    rig = Rig(n=2, cfg=RunConfig(devices=("fake",), rule="test", telemetry=False))
    rig.w = AboveCeiling(rig.clock, 2)
    details = {"first_look": 5e8} if looked else {}
    bw = Ceiling(
        device=rig.dev.name, key="bandwidth", value=1e9, unit="B/s", method="t", details=details
    )
    record = new_record("run", rig.cfg.as_dict(), [rig.dev], ceilings=[bw])
    record.run_id = rig.store.begin_run(record)
    rig.store.runs[record.run_id].ceilings = [bw]
    rig.store.runs[record.run_id].status = "incomplete"
    done = rig.resume(record.run_id)
    assert all("above_ceiling" in r.flags for r in done.results)
    assert looks == ([] if looked else [rig.dev.name])  # once per run, whichever part


def test_a_run_resumed_twice_reads_as_the_same_plan_measured_in_one_go() -> None:
    """Each part measures the cases left in plan order after the stored ones (a prefix of
    the plan), so the stored results, and every report drawn from them, keep the order an
    uninterrupted run of the same plan has."""
    from rich.console import Console

    from torchmark.report.table import results_table

    def table(record: RunRecord) -> str:
        console = Console(width=80, record=True, color_system=None)
        console.print(results_table(record))
        return console.export_text().replace(record.run_id or "", "ID")

    whole = Rig(n=6).first_part(stop_at=None)
    rig = Rig(n=6)
    run_id = rig.first_part(stop_at=2).run_id or ""
    rig.w.actions[4] = stop
    with pytest.raises(RunInterrupted):
        rig.resume(run_id)
    rig.resume(run_id)
    parts = rig.store.runs[run_id]
    assert [p.results for p in parts.payload.parts] == [2, 2, 2]
    assert cases_of(parts) == cases_of(whole) == list(range(6))
    assert table(parts) == table(whole)


class Sized(Counted):
    """Counted cases sized from the memory available to the plan (as add/triad and seed-add
    are): i = 0 .. free // 1 GB - 1."""

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        free = device.plan_memory_bytes() or 0
        return [Case("counted", "v", device, (("i", i),)) for i in range(free // 10**9)]


class Roomy(FakeDevice):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.free = 4 * 10**9

    def available_memory_bytes(self) -> int | None:
        return self.free


def test_a_resumed_run_plans_the_sizes_its_first_part_planned() -> None:
    """Sizes come from the memory available when the run was planned (buffers, seed-add's
    side); a resumed part planned them again from the memory available then, and a run
    stopped on a machine that had less (another job, the very pressure that stopped it)
    found its stored results matching no case: "start a new run"."""
    from torchmark.run.plan import make_plan

    rig = Rig()
    dev, w = Roomy(rig.clock), Sized(rig.clock, 0)
    p = make_plan(rig.cfg, devices=[dev], workloads={"counted": w})
    assert [c.param_dict["i"] for c in p.cases] == [0, 1, 2, 3]
    w.actions[2] = stop
    record = new_record("run", rig.cfg.as_dict(), p.devices)
    assert record.environment["plan_memory_bytes"] == {dev.name: 4 * 10**9}
    try:
        runner.run_planned(
            Session(record, rig.store, host_clock=rig.clock), p.cases, p.workloads, rig.cfg
        )
    except RunInterrupted as e:
        run_id = e.record.run_id or ""  # type: ignore[attr-defined]
    dev.free = 2 * 10**9  # less memory now: a new plan would make i = 0, 1 only
    again = Roomy(rig.clock)
    again.free = 2 * 10**9
    plan = resume.prepare(rig.store.load(run_id), devices=[again], workloads={"counted": w})
    assert [c.param_dict["i"] for c in plan.planned] == [0, 1, 2, 3]
    assert [c.param_dict["i"] for c in plan.todo] == [2, 3]
    assert again.plan_memory_bytes() == 4 * 10**9 and again.available_memory_bytes() == 2 * 10**9
    # a fresh plan on the same device object reads the memory again
    assert len(make_plan(rig.cfg, devices=[again], workloads={"counted": w}).cases) == 2
