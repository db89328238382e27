"""The main loop with a fake workload: skipped, wrong, OOM stops a sweep, Ctrl-C keeps results."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch

from torchmark import telemetry
from torchmark.devices import CPUDevice, Device
from torchmark.errors import CaseSkipped, OutOfMemory, RunInterrupted, WrongResultError
from torchmark.results import Result, Work
from torchmark.run import plan, runner
from torchmark.run.case import call_floor_s, repeatable
from torchmark.run.config import RunConfig
from torchmark.run.record import new_record
from torchmark.run.session import Session
from torchmark.testing import FakeClock, FakeDevice, MemoryStore
from torchmark.timing.loop import one_thread_s
from torchmark.workloads import Case, PlanOptions, Prepared, Workload


class Scripted(Workload):
    """Cases b=1..5; behaviour per batch is scripted by the test."""

    name: ClassVar[str] = "scripted"
    summary: ClassVar[str] = "test workload"
    behaviour: ClassVar[dict[int, str]] = {}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("scripted", "v", device, (("batch", b),), sweep="s") for b in range(1, 6)]

    def prepare(self, case: Case) -> Prepared:
        b = case.param_dict["batch"]
        what = self.behaviour.get(b, "ok")
        if what == "skip":
            raise CaseSkipped("dtype unsupported here")
        if what == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        if what == "guard-skips":

            def no_such_op() -> list[str]:
                raise CaseSkipped("int8 matmul has no kernel here")

            x = torch.randn(64)
            return Prepared(fn=lambda: x + x, work=Work(items=b), check=no_such_op)
        if what == "too-big":
            raise OutOfMemory("three 65536^2 matrices do not fit")
        if what == "interrupt":
            raise KeyboardInterrupt

        def wrong() -> list[str]:
            raise WrongResultError("max error 0.5 > tolerance 0.01")

        x = torch.randn(64)
        return Prepared(
            fn=lambda: x + x,
            work=Work(items=b, bytes=3 * 64 * 4),
            headline="items",
            check=wrong if what == "wrong" else None,
        )


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[Scripted]:
    monkeypatch.setattr(plan, "select_workloads", lambda cfg: {"scripted": Scripted()})
    monkeypatch.setattr(Scripted, "behaviour", {})
    return Scripted


CFG = RunConfig(devices=("cpu",), rule="test", ceilings=False, telemetry=False)


def test_statuses_and_oom_stops_the_sweep(scripted: type[Scripted]) -> None:
    scripted.behaviour = {1: "skip", 2: "wrong", 4: "oom"}
    store = MemoryStore()
    record = runner.run(CFG, store)
    by_batch = {r.params["batch"]: r for r in record.results}
    assert [by_batch[b].status for b in range(1, 6)] == [
        "skipped",
        "wrong",
        "ok",
        "skipped",
        "skipped",
    ]
    assert by_batch[1].reason == "dtype unsupported here"
    assert "max error 0.5" in (by_batch[2].reason or "")
    assert "out of memory" in (by_batch[4].reason or "")
    assert (by_batch[5].reason or "").startswith("sweep stopped: out of memory")
    ok = by_batch[3]
    assert ok.n >= 5 and ok.median_s and ok.throughput is not None
    assert ok.throughput.unit == "it/s"
    assert record.status == "complete"
    assert store.runs[record.run_id or ""].status == "complete"


def test_interrupt_keeps_what_was_measured(scripted: type[Scripted]) -> None:
    scripted.behaviour = {3: "interrupt"}
    store = MemoryStore()
    with pytest.raises(RunInterrupted) as info:
        runner.run(CFG, store)
    assert info.value.exit_code == 130
    stored = next(iter(store.runs.values()))
    assert stored.status == "incomplete"
    assert [r.params["batch"] for r in stored.results] == [1, 2]


def test_ceilings_are_cached_per_device_fingerprint(
    scripted: type[Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark import ceilings
    from torchmark.results import Ceiling

    calls: list[str] = []

    def fake_measure(device: Device, *, quick: bool) -> list[Ceiling]:
        calls.append(device.name)
        return [Ceiling(device=device.name, key="bandwidth", value=1e9, unit="B/s", method="fake")]

    monkeypatch.setattr(ceilings, "measure", fake_measure)
    store = MemoryStore()
    cfg = RunConfig(devices=("cpu",), rule="test", telemetry=False)
    first = runner.run(cfg, store)
    second = runner.run(cfg, store)
    assert calls == ["cpu"]  # the second run used the cache
    assert first.ceilings == second.ceilings
    runner.run(
        RunConfig(devices=("cpu",), rule="test", telemetry=False, remeasure_ceilings=True), store
    )
    assert calls == ["cpu", "cpu"]


def test_threads_are_set_and_recorded(scripted: type[Scripted]) -> None:
    before = torch.get_num_threads()
    try:
        record = runner.run(
            RunConfig(devices=("cpu",), rule="test", ceilings=False, telemetry=False, threads=1),
            MemoryStore(),
        )
        assert record.environment["threads"]["torch_num_threads"] == 1
        assert record.config["threads"] == 1
    finally:
        CPUDevice().set_threads(before)


def test_ceilings_measured_under_load_are_annotated_not_cached(
    scripted: type[Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark import ceilings
    from torchmark.results import Ceiling

    class Busy:
        cores = 1.5

        def __enter__(self) -> Busy:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(runner, "OtherLoad", Busy)
    monkeypatch.setattr(
        ceilings,
        "measure",
        lambda device, *, quick: [
            Ceiling(device=device.name, key="bandwidth", value=1e9, unit="B/s", method="fake")
        ],
    )
    store = MemoryStore()
    record = runner.run(RunConfig(devices=("cpu",), rule="test", telemetry=False), store)
    (c,) = record.ceilings
    assert "other processes used 1.5 cores" in c.method and "not cached" in c.method
    assert c.details["competing_load_cores"] == 1.5
    assert store.cache == {}


class Fast(Workload):
    """Claims 1 TB per call: above any low ceiling."""

    name: ClassVar[str] = "fast"
    summary: ClassVar[str] = "test workload"

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("fast", "v", device, (("i", i),)) for i in range(2)]

    def prepare(self, case: Case) -> Prepared:
        x = torch.randn(64)
        return Prepared(
            fn=lambda: x + x, work=Work(bytes=1e12), headline="bytes", ceiling="bandwidth"
        )


# 1 TB in a ~1 µs call is ~1e18 B/s: above 2e9, far below 1e30
@pytest.mark.parametrize(("looks", "still_invalid"), [((1e9, 1e30), False), ((1e9, 2e9), True)])
def test_a_result_above_its_ceiling_gets_one_second_look(
    monkeypatch: pytest.MonkeyPatch, looks: tuple[float, float], still_invalid: bool
) -> None:
    from torchmark import ceilings
    from torchmark.results import Ceiling

    values = iter(looks)
    monkeypatch.setattr(plan, "select_workloads", lambda cfg: {"fast": Fast()})
    monkeypatch.setattr(
        ceilings,
        "measure",
        lambda device, *, quick: [
            Ceiling(
                device=device.name, key="bandwidth", value=next(values), unit="B/s", method="fake"
            )
        ],
    )
    store = MemoryStore()
    record = runner.run(RunConfig(devices=("cpu",), rule="test", telemetry=False), store)
    first, second = record.results
    (c,) = record.ceilings
    assert c.value == looks[1] and c.details["first_look"] == looks[0]
    assert "second look" in c.method
    assert store.runs[record.run_id or ""].ceilings == record.ceilings
    assert ("above_ceiling" in first.flags) is still_invalid
    assert first.verdict is not None and (first.verdict.level == "invalid") is still_invalid
    assert any("it was measured again" in n for n in first.notes)
    # one second look per device: the iterator above holds two values, a third would raise
    assert ("above_ceiling" in second.flags) is still_invalid


def test_a_workload_that_knows_a_case_will_not_fit_stops_its_sweep(
    scripted: type[Scripted],
) -> None:
    scripted.behaviour = {2: "too-big"}
    record = runner.run(CFG, MemoryStore())
    statuses = [(r.params["batch"], r.status, "out_of_memory" in r.flags) for r in record.results]
    assert statuses == [
        (1, "ok", False),
        (2, "skipped", True),
        (3, "skipped", False),
        (4, "skipped", False),
        (5, "skipped", False),
    ]
    assert (record.results[2].reason or "").startswith("sweep stopped: three 65536^2")
    assert "out_of_memory" in record.results[1].model_dump(mode="json")["flags"]


def test_a_guard_that_finds_the_case_cannot_run_skips_it_and_the_run_goes_on(
    scripted: type[Scripted],
) -> None:
    scripted.behaviour = {1: "guard-skips"}
    record = runner.run(CFG, MemoryStore())
    assert [r.status for r in record.results] == ["skipped", "ok", "ok", "ok", "ok"]
    assert record.results[0].reason == "int8 matmul has no kernel here"


def test_the_stored_command_reads_as_typed() -> None:
    from torchmark.run.record import command_line

    assert (
        command_line(["/w/src/torchmark/__main__.py", "run", "--quick"]) == "torchmark run --quick"
    )
    assert command_line(["/venv/bin/torchmark", "run", "-w", "a b"]) == "torchmark run -w 'a b'"
    assert command_line(["bench.py", "--x"]) == "bench.py --x"


def test_a_source_tree_knows_its_version() -> None:
    import torchmark

    assert torchmark._source_version().endswith("+src")


def test_a_calls_floor_is_its_roofline_time_plus_dispatch() -> None:
    from torchmark.results import Ceiling, Work

    def ceiling(key: str, value: float, unit: str) -> Ceiling:
        return Ceiling(device="cpu", key=key, value=value, unit=unit, method="fake")

    found = {
        "bandwidth": ceiling("bandwidth", 100e9, "B/s"),
        "matmul:float32": ceiling("matmul:float32", 400e9, "FLOP/s"),
        "matmul:bfloat16": ceiling("matmul:bfloat16", 800e9, "FLOP/s"),
        "dispatch": ceiling("dispatch", 1e-6, "s"),
    }
    # memory-bound: 1 GB at 100 GB/s; compute-bound: 8 TFLOP at the best peak, 800 GFLOP/s
    assert call_floor_s(Work(bytes=1e9, flops=1e6), found) == pytest.approx(0.01 + 1e-6)
    assert call_floor_s(Work(bytes=1e6, flops=8e12), found) == pytest.approx(10 + 1e-6)
    assert call_floor_s(Work(bytes=1e9), {}) is None  # --no-ceilings: no floor
    assert call_floor_s(Work(), found) is None  # nothing counted


class LoadedCPU(FakeDevice):
    """A CPU on a fake clock where one other process holds one of 2 cores: a call takes
    15 ms with 2 torch threads (each waits for time slices) and 20 µs with one."""

    kind: ClassVar[str] = "cpu"
    is_accelerator: ClassVar[bool] = False

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.threads, self.set_to = 2, list[int]()

    def set_threads(self, n: int) -> None:
        self.threads = n
        self.set_to.append(n)

    def step(self) -> None:
        self.clock.advance(15e-3 if self.threads > 1 else 20e-6)


class LoadedTrace:
    """Telemetry as the sampler summarises a loaded 2-core machine."""

    def mark(self, index: int, t_start: float, t_end: float) -> None:
        return None

    def summary(self) -> dict[str, Any]:
        return {"accelerator": False, "other_cores": 1.0, "logical_cores": 2, "torch_threads": 2}

    def throttled_samples(self) -> list[int]:
        return []


class Tiny(Workload):
    name: ClassVar[str] = "tiny"
    summary: ClassVar[str] = "test workload"

    def __init__(self, repeatable: bool = True) -> None:
        self.repeatable = repeatable

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("tiny", "infer", device, (("batch", 1),))]

    def prepare(self, case: Case) -> Prepared:
        dev = case.device
        assert isinstance(dev, LoadedCPU)
        return Prepared(fn=dev.step, work=Work(items=1), timing="e2e", repeatable=self.repeatable)


def test_one_thread_times_the_call_and_restores_the_threads() -> None:
    clock = FakeClock()
    dev = LoadedCPU(clock)
    calls = []

    def fn() -> None:
        calls.append(dev.threads)
        dev.step()

    m = SimpleNamespace(median=15e-3)
    assert one_thread_s(fn, dev, m, 2, clock) == pytest.approx(20e-6)  # type: ignore[arg-type]
    assert dev.set_to == [1, 2] and calls == [1] * 26  # a warm call, then 25 timed
    # one thread could take 2 x 200 ms a call: over the check's budget, not timed
    assert one_thread_s(fn, dev, SimpleNamespace(median=0.2), 2, clock) is None  # type: ignore[arg-type]
    assert dev.set_to == [1, 2] and len(calls) == 26


def loaded_run(monkeypatch: pytest.MonkeyPatch, w: Tiny) -> tuple[Result, LoadedCPU]:
    """``w``'s one case run on the loaded fake CPU with the sampler's loaded summary."""
    from contextlib import contextmanager

    @contextmanager
    def loaded(*args: Any, **kwargs: Any) -> Iterator[LoadedTrace]:
        yield LoadedTrace()

    monkeypatch.setattr(telemetry, "watch", loaded)
    monkeypatch.setattr(gc, "collect", lambda *_: 0)
    clock = FakeClock()
    dev = LoadedCPU(clock)
    cfg = RunConfig(devices=("cpu",), rule="test", ceilings=False, telemetry=True)
    record = new_record("run", cfg.as_dict(), [dev])
    session = Session(record, MemoryStore(), host_clock=clock)
    monkeypatch.setattr(session, "sources", lambda device: [])
    (r,) = runner.run_planned(session, w.cases(dev, PlanOptions()), {"tiny": w}, cfg).results
    return r, dev


def test_a_case_far_faster_at_one_thread_under_load_is_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tiny model stalled by its threads is steady (no clusters) and has no roofline
    floor: only the same call at one thread tells that its time is the scheduler's."""
    r, dev = loaded_run(monkeypatch, Tiny())
    assert r.median_s == pytest.approx(15e-3) and dev.threads == 2
    assert r.extra["one_thread_s"] == pytest.approx(20e-6)
    assert r.verdict is not None and r.verdict.level == "invalid"
    assert r.verdict.reasons[0] == (
        "15 ms a call with 2 threads, 750x the 20 µs it took with one thread right after, "
        "while other processes used 1.0 of 2 cores: 2 threads waiting for time slices, not "
        "the hardware; measure again with --threads 1 (the free cores; --threads auto "
        "picks them) or on a quiet machine"
    )


def test_no_one_thread_call_where_calls_are_recorded_or_ranks_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An input epoch records each call for its breakdown, and a rank's DDP step waits for
    the other ranks' all-reduce: neither is called again after its measurement."""
    r, dev = loaded_run(monkeypatch, Tiny(repeatable=False))
    assert "one_thread_s" not in r.extra and dev.set_to == []
    assert r.verdict is not None and r.verdict.level == "warn"  # the load, said
    import torch.distributed as dist

    prepared = Prepared(fn=lambda: None, work=Work(items=1))
    assert repeatable(prepared)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # a rank of a torchrun job
    assert not repeatable(prepared)
