"""The run session on a fake device and clock: store failures, signals, the watchdog."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from torchmark.devices import Device
from torchmark.errors import RunInterrupted, RunNotStored, StoreUnavailable
from torchmark.results import RunRecord, Work
from torchmark.run import runner, watchdog
from torchmark.run.case import CALL_TIMED_OUT
from torchmark.run.config import RunConfig
from torchmark.run.record import new_record
from torchmark.run.session import Session
from torchmark.run.watchdog import CallTimedOut, Watchdog
from torchmark.testing import FakeClock, FakeDevice, MemoryStore, scripted
from torchmark.workloads import Case, PlanOptions, Prepared, Workload

CFG = RunConfig(devices=("fake",), rule="test", ceilings=False, telemetry=False)


class Timed(Workload):
    """Cases i=0..n-1 on a fake device; call i takes ``durations[i]`` fake seconds, or runs
    ``actions[i]`` (a signal, a real sleep) on its first call."""

    name: ClassVar[str] = "timed"
    summary: ClassVar[str] = "test workload"

    def __init__(self, clock: FakeClock, durations: list[float]) -> None:
        self.clock, self.durations = clock, durations
        self.actions: dict[int, Callable[[], None]] = {}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("timed", "v", device, (("i", i),)) for i in range(len(self.durations))]

    def prepare(self, case: Case) -> Prepared:
        i = case.param_dict["i"]
        step = scripted(self.clock, [self.durations[i]])
        action = self.actions.get(i)

        def fn() -> None:
            if action is not None:
                action()
            step()

        return Prepared(fn=fn, work=Work(items=10), timing="e2e")


def planned(durations: list[float], store: Any) -> tuple[Timed, list[Case], Session]:
    clock = FakeClock()
    dev = FakeDevice(clock)
    w = Timed(clock, durations)
    record = new_record("run", CFG.as_dict(), [dev])
    return w, w.cases(dev, PlanOptions()), Session(record, store, host_clock=clock)


def test_the_runner_measures_planned_cases_on_a_fake_device() -> None:
    store = MemoryStore()
    w, cases, s = planned([0.002, 0.004], store)
    record = runner.run_planned(s, cases, {"timed": w}, CFG)
    assert record.status == "complete"
    medians = [r.median_s for r in record.results]
    assert medians == [pytest.approx(0.002), pytest.approx(0.004)]  # exact fake timings
    assert [r.throughput.value for r in record.results if r.throughput] == [
        pytest.approx(5000),
        pytest.approx(2500),
    ]
    assert store.runs[record.run_id or ""].results == record.results


class FlakyStore(MemoryStore):
    """Writes fail (StoreUnavailable, as the SQL store raises after its retries) while
    ``down`` is true, as with a lock held by another writer or a database restarting."""

    def __init__(self, down_for: int) -> None:
        super().__init__()
        self.down_for = down_for  # failing writes left; -1: never comes back

    def _maybe_fail(self) -> None:
        if self.down_for != 0:
            self.down_for -= 1 if self.down_for > 0 else 0
            raise StoreUnavailable("cannot store a result (database is locked)")

    def begin_run(self, run: Any) -> str:
        self._maybe_fail()
        return super().begin_run(run)

    def add_result(self, run_id: str, result: Any) -> None:
        self._maybe_fail()
        super().add_result(run_id, result)

    def finish_run(self, run_id: str, run: Any) -> None:
        self._maybe_fail()
        super().finish_run(run_id, run)


def test_a_store_down_mid_run_loses_nothing_and_is_resynced() -> None:
    store = FlakyStore(down_for=0)
    w, cases, s = planned([0.001, 0.002, 0.003, 0.004], store)
    w.actions[1] = lambda: setattr(store, "down_for", 3) if store.down_for == 0 else None
    s.store_retry_after_s = 0.0  # try the store again on every write
    # case 1 takes the store down for 3 writes: cases 1-2 are kept, case 3's write re-syncs
    record = runner.run_planned(s, cases, {"timed": w}, CFG)
    assert len(record.results) == 4 and record.status == "complete"
    stored = store.runs[record.run_id or ""]
    assert [r.params["i"] for r in stored.results] == [0, 1, 2, 3]  # in order, none lost
    assert stored.status == "complete"
    assert any("store failed" in n and "kept in memory" in n for n in record.payload.notes)
    assert record.payload.not_stored is None


def test_what_outlives_the_run_is_frozen_for_its_length_only() -> None:
    # each case's gc.collect() then walks only what the run made (0.13 s -> microseconds)
    gc.unfreeze()  # an in-process CLI test before this one froze its imports
    frozen: list[int] = []
    w, cases, s = planned([0.001, 0.002], FlakyStore(down_for=0))
    w.actions[0] = lambda: frozen.append(gc.get_freeze_count())
    runner.run_planned(s, cases, {"timed": w}, CFG)
    assert frozen and frozen[0] > 0
    assert gc.get_freeze_count() == 0  # the caller's process is left as it was


def test_a_callers_own_freeze_outlives_the_run() -> None:
    # the CLI freezes what importing a command left; a run must not thaw it on its way out
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        w, cases, s = planned([0.001], FlakyStore(down_for=0))
        runner.run_planned(s, cases, {"timed": w}, CFG)
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()


class CountingStore(FlakyStore):
    def __init__(self, down_for: int) -> None:
        super().__init__(down_for)
        self.attempts = 0

    def _maybe_fail(self) -> None:
        self.attempts += 1
        super()._maybe_fail()


def test_a_failed_store_is_not_retried_on_every_result() -> None:
    """Each failed write already retried for the store's bound (60 s): a long run with the
    store down must not pay that per case. One try, then none until the retry interval
    passes, then one last try at the end."""
    store = CountingStore(down_for=-1)
    w, cases, s = planned([0.001] * 6, store)
    with pytest.raises(RunNotStored) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert len(info.value.record.results) == 6  # type: ignore[attr-defined]
    assert store.attempts == 2  # begin_run at the start, begin_run again at the end


def test_a_store_that_never_comes_back_hands_the_whole_run_back() -> None:
    store = FlakyStore(down_for=-1)
    w, cases, s = planned([0.001, 0.002], store)
    with pytest.raises(RunNotStored) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    rec: RunRecord = info.value.record  # type: ignore[assignment]
    assert [r.ok for r in rec.results] == [True, True] and rec.status == "complete"
    assert "database is locked" in str(info.value) and rec.payload.not_stored
    assert store.runs == {}


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_the_run_like_ctrl_c(signum: int, code: int) -> None:
    store = MemoryStore()
    w, cases, s = planned([0.001, 0.002, 0.003], store)
    w.actions[1] = lambda: os.kill(os.getpid(), signum)
    before = signal.getsignal(signum)
    with pytest.raises(RunInterrupted) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert info.value.exit_code == code
    stored = next(iter(store.runs.values()))
    assert stored.status == "incomplete" and [r.params["i"] for r in stored.results] == [0]
    assert signal.getsignal(signum) == before  # the session put the handler back


def test_ctrl_c_exits_130() -> None:
    w, cases, s = planned([0.001, 0.002], MemoryStore())

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    w.actions[1] = ctrl_c
    with pytest.raises(RunInterrupted) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert info.value.exit_code == 130 and "Ctrl-C" in str(info.value)


def test_a_call_past_the_bound_ends_its_case_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "MIN_CALL_BOUND_S", 0.0)  # bound: 2 x the rule's 0.5 s
    w, cases, s = planned([0.001, 0.002], MemoryStore())
    w.actions[0] = lambda: time.sleep(30)  # a forward that does not come back
    t0 = time.perf_counter()
    record = runner.run_planned(s, cases, {"timed": w}, CFG)
    assert time.perf_counter() - t0 < 10
    hung, ok = record.results
    assert hung.status == "skipped" and CALL_TIMED_OUT in hung.flags
    assert (hung.reason or "").startswith(
        "timed out: a call of timed/v i=0 on fake:0 did not return within 1 s"
    ), hung.reason
    assert ok.ok and record.status == "complete"


def test_a_call_stuck_where_no_signal_reaches_it_is_abandoned() -> None:
    hung: list[str] = []
    dog = Watchdog(on_hung=hung.append, grace_s=0.2)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        with pytest.raises(CallTimedOut), dog.armed(0.2, "a call of x"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # as a call stuck in C
            try:
                deadline = time.monotonic() + 60  # ends as soon as on_hung ran
                while not hung and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # it lands
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        dog.close()
    assert hung and "a call of x did not return within 0.2 s" in hung[0]
    # where it hung, for the one-line error the run ends with
    assert (
        "; the call is stuck at test_session.py:" in hung[0]
        and "in test_a_call_stuck_where" in hung[0]
    )


def test_a_signal_the_caller_blocked_still_reaches_the_call() -> None:
    """A process can start with SIGUSR1 blocked (its parent launched it from a thread that
    blocks signals): the watchdog's signal then never landed, and CI saw the abandon path's
    exit 124 in a hung-forward test that passes here. Armed, the watchdog unblocks it; closed,
    the caller's mask is back."""
    hung: list[str] = []
    dog = Watchdog(on_hung=hung.append, grace_s=5.0)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # as the process began
    try:
        with pytest.raises(CallTimedOut), dog.armed(0.2, "a call of x"):
            time.sleep(30)
        dog.close()
        assert signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        dog.close()
    assert not hung  # interrupted by the signal, not abandoned after the grace


def test_a_timeout_swallowed_once_is_raised_again_before_the_run_is_abandoned() -> None:
    """The first CallTimedOut can land where Python swallows exceptions (a __del__, a gc
    callback): the call hangs on. The watchdog signals again within its grace. (CI once saw
    the test process exit 124, the abandon path's code, in a hung-forward test that passes
    alone; a lost first signal is one way there.)"""
    hung: list[str] = []
    dog = Watchdog(on_hung=hung.append, grace_s=2.0)
    swallowed = []
    try:
        with pytest.raises(CallTimedOut), dog.armed(0.2, "a call of x"):
            try:
                time.sleep(30)
            except CallTimedOut as e:  # as in a __del__: printed and ignored
                swallowed.append(e)
            deadline = time.monotonic() + 30  # the call hangs on
            while not hung and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        dog.close()
    assert swallowed and not hung


def test_telemetry_sources_open_once_per_device_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark import telemetry
    from torchmark.telemetry import Source

    calls = {"open": 0, "close": 0, "read": 0}

    class Counting(Source):
        name, role = "counting", "device"

        def open(self) -> dict[str, Any]:
            calls["open"] += 1  # NVML: nvmlInit and the static queries
            return {}

        def read(self) -> dict[str, Any]:
            calls["read"] += 1
            return {"sm_mhz": None}

        def close(self) -> None:
            calls["close"] += 1

    monkeypatch.setattr(telemetry, "sources_for", lambda device: [Counting()])
    w, cases, s = planned([0.001, 0.002, 0.003], MemoryStore())
    cfg = RunConfig(devices=("fake",), rule="test", ceilings=False, telemetry=True)
    record = runner.run_planned(s, cases, {"timed": w}, cfg)
    assert calls["open"] == 1 and calls["close"] == 1 and calls["read"] >= 6
    assert all(
        r.telemetry and r.telemetry["sources"]["counting"]["present"] for r in record.results
    )


class StopsAsItStores(MemoryStore):
    """SIGTERM arriving just as a write returns, as Slurm's or `timeout`'s can: the handler
    runs at the next line of Python, here inside the store's own method, after the write."""

    def __init__(self, at: str, n: int = 1) -> None:
        super().__init__()
        self.at, self.n = at, n

    def _now(self, what: str) -> None:
        if what == self.at:
            self.n -= 1
            if self.n == 0:
                os.kill(os.getpid(), signal.SIGTERM)

    def begin_run(self, run: Any) -> str:
        run_id = super().begin_run(run)
        self._now("begin_run")
        return run_id

    def add_result(self, run_id: str, result: Any) -> None:
        super().add_result(run_id, result)
        self._now("add_result")


def test_a_stop_as_a_result_is_stored_stores_it_once() -> None:
    # was [0, 1, 1]: the count of stored results was not raised, and the end re-synced it
    store = StopsAsItStores("add_result", n=2)
    w, cases, s = planned([0.001, 0.002, 0.003], store)
    with pytest.raises(RunInterrupted) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert info.value.exit_code == 143
    stored = next(iter(store.runs.values()))
    assert [r.params["i"] for r in stored.results] == [0, 1]
    assert stored.status == "incomplete"


class StoreThatHangs(MemoryStore):
    """A write that keeps retrying (a PostgreSQL restart: up to 60 s) while the user stops
    the run, then stops it again."""

    hung = True

    def add_result(self, run_id: str, result: Any) -> None:
        if self.hung:  # the write that hangs; the run's last sync then stores the result
            self.hung = False
            os.kill(os.getpid(), signal.SIGINT)  # held: the write goes on
            os.kill(os.getpid(), signal.SIGINT)  # the second one stops the run now
            raise AssertionError("a second stop while one is held must stop the run")
        super().add_result(run_id, result)


def test_a_second_stop_while_one_is_held_stops_at_once() -> None:
    store = StoreThatHangs()
    w, cases, s = planned([0.001, 0.002], store)
    with pytest.raises(RunInterrupted) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert info.value.exit_code == 130
    (stored,) = store.runs.values()
    assert stored.status == "incomplete" and [r.params["i"] for r in stored.results] == [0]


def test_a_stop_as_the_run_begins_finishes_it() -> None:
    # was a bare Stopped out of __enter__: no RunInterrupted, the run left `running` in the
    # store, the session's signal handlers and gc freeze left in place
    store = StopsAsItStores("begin_run")
    w, cases, s = planned([0.001], store)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as info:
        runner.run_planned(s, cases, {"timed": w}, CFG)
    assert info.value.exit_code == 143
    assert [r.status for r in store.runs.values()] == ["incomplete"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_stop_while_the_run_is_finished_waits_until_it_is_stored() -> None:
    """A stop that arrives after the last case reaches the caller's own handler (the
    default one ends the process) only once the finished run is stored."""
    store = MemoryStore()
    seen: list[str] = []
    w, cases, s = planned([0.001], store)
    s.analyse = lambda rec: os.kill(os.getpid(), signal.SIGTERM)  # inside finish()

    def callers_own(*_: object) -> None:
        seen.extend(r.status for r in store.runs.values())

    old = signal.signal(signal.SIGTERM, callers_own)
    try:
        record = runner.run_planned(s, cases, {"timed": w}, CFG)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert record.status == "complete"
    assert seen == ["complete"]  # was ["running"]: delivered before the run was stored


class Racing(Session):
    """A session whose first check of ``_finished`` (in the main thread) lets the watchdog's
    thread run ``finish`` right then, between the check and the set: the interleaving a
    stuck call returning as its grace ends can give."""

    other: threading.Thread | None = None

    @property  # type: ignore[override]
    def _finished(self) -> bool:
        value: bool = self.__dict__["finished"]
        if self.other is not None and threading.current_thread() is threading.main_thread():
            other, self.other = self.other, None
            other.start()
            other.join(0.5)  # blocked on the session's lock: it waits for the set
        return value

    @_finished.setter
    def _finished(self, value: bool) -> None:
        self.__dict__["finished"] = value


def test_a_run_finished_by_two_threads_at_once_is_finished_once() -> None:
    *_, s = planned([0.001], MemoryStore())
    racing = Racing(s.record, s.store, host_clock=s.host_clock)
    judged: list[str] = []
    racing.analyse = lambda rec: judged.append(threading.current_thread().name)
    racing.other = threading.Thread(target=racing.finish, name="watchdog")
    thread = racing.other
    racing.finish()
    thread.join(10)
    assert judged == ["MainThread"]


def test_a_refused_thread_signal_goes_to_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that denies signalling one thread (tgkill) killed the watchdog's thread
    with an OSError: the call then ran unbounded. The process gets the signal instead."""

    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(watchdog.signal, "pthread_kill", refused)
    hung: list[str] = []
    dog = Watchdog(on_hung=hung.append, grace_s=5.0)
    try:
        with pytest.raises(CallTimedOut), dog.armed(0.2, "a call of x"):
            time.sleep(30)
    finally:
        dog.close()
    assert not hung


def test_a_timer_that_outruns_the_host_clock_makes_its_result_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchmark.judge import verdicts

    honest = FakeDevice.timer

    def doubled(self: FakeDevice, mode: str = "device") -> Any:
        inner = honest(self, mode)  # type: ignore[arg-type]
        return SimpleNamespace(start=inner.start, stop=lambda: 2 * inner.stop())

    monkeypatch.setattr(FakeDevice, "timer", doubled)
    w, cases, s = planned([0.002], MemoryStore())
    (r,) = runner.run_planned(s, cases, {"timed": w}, CFG).results
    check = r.extra.get("timer_check")
    assert check is not None and check["timer_s"] == pytest.approx(2 * check["host_s"])
    assert r.verdict is not None and r.verdict.level == "invalid"
    assert "timer that outruns the wall clock" in r.verdict.reasons[0]
    assert not verdicts.may(r, "rank") and not verdicts.may(r, "compare")
