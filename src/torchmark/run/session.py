"""One run session: the lifecycle every kind of run (run, model, tune, soak) shares.

    with Session(record, store, events) as s:   # begin: store the header; SIGTERM and
        s.set_ceilings(ceilings)                #   SIGHUP now stop the run as Ctrl-C does
        for case in planned:                    # the caller plans; the session records
            s.case_started(case)
            s.add(case, run_case(...))          # kept in memory, stored, events told
    s.record                                    # judged and finished, complete or not

Ctrl-C, SIGTERM or SIGHUP: the results measured stay, the run is marked incomplete, judged,
finished, and ``RunInterrupted(record)`` is raised with exit code 128 + the signal.
A store that fails mid-run (``StoreError``): every result stays in memory and measuring goes
on; each later write first re-syncs what was missed. If the store is still down at the end,
``RunNotStored(record)`` is raised (``record.payload.not_stored`` names the cause) so the
caller can still show the run and write it to a file (``rescue_path``).

A ``Watchdog`` (``run.watchdog``) bounds a single call; the session owns one and closes it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from torchmark.errors import RunInterrupted, RunNotStored, StoreError
from torchmark.results import Ceiling, Result, RunRecord, utcnow
from torchmark.run.watchdog import Watchdog, in_main_thread

if TYPE_CHECKING:
    from torchmark.devices import Device
    from torchmark.judge.validity import Level
    from torchmark.store.base import ResultStore
    from torchmark.telemetry import Kept, Source
    from torchmark.workloads import Case


class Events(Protocol):
    def planned(self, cases: Sequence[Case]) -> None: ...
    def ceilings(self, device: Device, cached: bool) -> None: ...
    def case_started(self, case: Case) -> None: ...
    def case_done(self, case: Case, result: Result) -> None: ...
    # optional (the session asks with getattr): the store just failed, the run goes on
    def store_failed(self, reason: str) -> None: ...


class Quiet:
    def planned(self, cases: Sequence[Case]) -> None: ...
    def ceilings(self, device: Device, cached: bool) -> None: ...
    def case_started(self, case: Case) -> None: ...
    def case_done(self, case: Case, result: Result) -> None: ...
    def store_failed(self, reason: str) -> None: ...


# Signals that stop a run the way Ctrl-C does: Slurm's time limit and systemd send SIGTERM,
# a dropped ssh session SIGHUP. Each must leave the measured results stored and shown.
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class Stopped(KeyboardInterrupt):
    """SIGTERM / SIGHUP raised in the main thread: handled wherever Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def rescue_path(record: RunRecord) -> Path:
    """Where a run the store could not take is written: the current directory when it is
    writable, else the user data directory."""
    stamp = record.created_utc.strftime("%Y%m%d-%H%M%S")
    name = f"torchmark-unsaved-{record.kind}-{stamp}-{os.getpid()}.json"
    if os.access(Path.cwd(), os.W_OK):
        return Path.cwd() / name
    import platformdirs

    folder = Path(platformdirs.user_data_dir("torchmark"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def write_rescue(record: RunRecord) -> Path:
    """Write the run to ``rescue_path``; where that disk is full too (the store's own disk
    filled up), to the user data directory, then the temporary one; the path written."""
    import tempfile

    import platformdirs

    text = record.model_dump_json(indent=2)
    first = rescue_path(record)
    folders = [platformdirs.user_data_dir("torchmark"), tempfile.gettempdir()]
    tried: list[str] = []
    for path in [first, *(Path(f) / first.name for f in folders)]:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path
        except OSError as e:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)  # no half-written file left behind
            tried.append(f"{path.parent}: {e.strerror}")
    raise StoreError(f"the run could not be written anywhere ({'; '.join(tried)})")


# A store write that failed has already retried for its own bound (60 s by default in the SQL
# store): trying again on every result would add that wait to each case of a long run.
STORE_RETRY_AFTER_S = 60.0


class Session:
    """One run's record from begin to finish; see the module docstring.

    ``analyse(record)`` runs once at the end, complete or not (break-even, tune's summary);
    ``reasons(record)``: run-level verdict reasons of this kind of run (a soak's trend).
    ``json_path``: where a run abandoned by the watchdog (a call hung in C) is written.
    ``host_clock``: the clock measurements' stopping rules read (tests pass a FakeClock).
    ``resumed``: ``record`` was loaded from ``store`` (``torchmark run --resume``): its
    results and ceilings are stored already; new results are appended to the same run.
    """

    def __init__(
        self,
        record: RunRecord,
        store: ResultStore | None,
        events: Events | None = None,
        *,
        analyse: Callable[[RunRecord], None] | None = None,
        reasons: Callable[[RunRecord], list[tuple[Level, str]]] | None = None,
        json_path: Path | None = None,
        host_clock: Callable[[], float] = time.perf_counter,
        resumed: bool = False,
    ) -> None:
        self.record, self.store, self.events = record, store, events or Quiet()
        self.analyse, self.reasons = analyse, reasons
        self.json_path, self.host_clock = json_path, host_clock
        self.store_error: str | None = None  # the last store failure, in words
        self.store_failures = 0
        self._next_try = 0.0  # time.monotonic() before which a failed store is not tried
        self.store_retry_after_s = STORE_RETRY_AFTER_S
        self._stored = len(record.results) if resumed else 0  # results already in the store
        self._ceilings_stored = True
        self._old: dict[int, Any] = {}
        self._holding = False  # inside `held`: a stop signal waits in _held_signum
        self._held_signum: int | None = None
        self.watchdog = Watchdog(on_hung=self._abandon)
        self._finished = False
        self._finishing = threading.Lock()  # held for a check-and-set only: never waits long
        self._thawed = False  # nothing was frozen when the run began: unfreeze at its end
        self._sources: dict[str, list[Kept]] = {}

    # lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        # Each case ends with gc.collect() (its tensors freed before the next case): with
        # torch's ~240,000 objects alive that walk cost 0.13 s a case. Frozen here, what
        # outlives the run is never walked again, and a collect costs microseconds.
        gc.collect()
        self._thawed = gc.get_freeze_count() == 0  # a caller's own freeze outlives the run
        gc.freeze()
        if in_main_thread():
            # Ctrl-C too, so that it also waits for a store write under way (`held`); a
            # SIGINT ignored by the caller (a background job) stays ignored.
            for s in (signal.SIGINT, *STOP_SIGNALS):
                if s != signal.SIGINT or signal.getsignal(s) is signal.default_int_handler:
                    self._old[s] = signal.signal(s, self._on_stop)
        try:
            self._sync()  # a stop during the header's write ends the run here, finished
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # A stop arriving while the run is finished waits until it is stored, then reaches
        # the caller's own handler (the default one ends the process with 128 + signal).
        # Ctrl-C goes back to the caller's handler at once, as before: the CLI's says "run
        # incomplete", which a run stored complete before the re-raise would contradict.
        self._holding = True
        if signal.SIGINT in self._old:
            signal.signal(signal.SIGINT, self._old.pop(signal.SIGINT))
        try:
            if self._thawed:
                gc.unfreeze()
            self.watchdog.close()
            for kept in self._sources.values():
                for src in kept:
                    src.shutdown()
            if exc is None:
                self.record.status = "complete"
            self.finish()
        finally:
            for s, old in self._old.items():
                signal.signal(s, old)
            self._old = {}
            self._holding = False
            late, self._held_signum = self._held_signum, None
        if isinstance(exc, KeyboardInterrupt):
            signum = exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT)
            raise RunInterrupted(self.record, self.record.run_id, signum) from None
        if late is not None:
            signal.raise_signal(late)
        if exc is None and self.store_error is not None:
            raise RunNotStored(self.record, self.store_error)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        if self._holding and self._held_signum is None:
            self._held_signum = signum
            return
        # not held, or a second stop while one waits: a store write that retries (up to
        # its 60 s) must not make Ctrl-C, pressed again, do nothing
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Ctrl-C, SIGTERM and SIGHUP wait until the block ends, then stop the run there.

        For a step that must not be cut in two: a store write and the count of what is
        stored (a stop between the two stored a result twice, its re-sync at the end adding
        it again), or a soak's last result. The wait is one store write at most (its own
        retries included); the measuring itself is never held."""
        if self._holding or not in_main_thread():
            yield
            return
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            signum, self._held_signum = self._held_signum, None
        if signum is not None:
            self._on_stop(signum, None)

    def finish(self) -> RunRecord:
        """Judge and finish the run (incomplete unless the plan finished); idempotent."""
        # the watchdog's thread may finish an abandoned run while the main thread does: one
        # of them finishes it; the other never waits (the main one may be stuck in a write)
        with self._finishing:
            if self._finished:
                return self.record
            self._finished = True
        from torchmark.judge.validity import judge_run

        rec = self.record
        if rec.status == "running":
            rec.status = "incomplete"
        if self.analyse is not None:
            self.analyse(rec)
        if self.store_failures:
            gap = (
                f"the results store failed {self.store_failures} time(s) during the run "
                f"({self.store_error or 'it recovered'}); every result was kept in memory"
            )
            rec.payload.notes.append(gap)
        rec.verdict = judge_run(rec, extra=self.reasons(rec) if self.reasons else None)
        rec.finished_utc = utcnow()
        if self._sync(force=True) and self.store is not None and rec.run_id is not None:
            self._write(lambda: self.store.finish_run(rec.run_id, rec))  # type: ignore[union-attr,arg-type]
        if self.store_error is not None:
            rec.payload.not_stored = self.store_error
        return rec

    def sources(self, device: Device) -> list[Source]:
        """The device's telemetry sources, opened once for the whole run."""
        from torchmark.telemetry import Kept, sources_for

        if device.name not in self._sources:
            self._sources[device.name] = [Kept(s) for s in sources_for(device)]
        return list(self._sources[device.name])

    # recording ------------------------------------------------------------------------------

    def planned(self, cases: Sequence[Case]) -> None:
        self.events.planned(cases)

    def case_started(self, case: Case) -> None:
        self.events.case_started(case)

    def add(self, case: Case | None, result: Result) -> None:
        """Keep the result, store it (and anything the store missed), tell the events."""
        self.record.results.append(result)
        self._sync()
        if case is not None:
            self.events.case_done(case, result)

    def set_ceilings(self, ceilings: list[Ceiling]) -> None:
        self.record.ceilings = list(ceilings)
        self._ceilings_stored = False
        self._sync()

    def checkpoint(self) -> None:
        """Store the run's header (status still running) so a kill loses little: a soak
        calls this as each window of its record fills."""
        with self.held():
            if self._sync() and self.store is not None and self.record.run_id is not None:
                rec = self.record
                self._write(lambda: self.store.finish_run(rec.run_id, rec))  # type: ignore[union-attr,arg-type]

    # the store, guarded ---------------------------------------------------------------------

    def _write(self, action: Callable[[], Any]) -> bool:
        try:
            action()
        except StoreError as e:
            told = getattr(self.events, "store_failed", None)
            if self.store_error is None and told is not None and not self._finished:
                told(str(e))  # the first failure of a spell, said as it happens
            self.store_error = str(e)
            self.store_failures += 1
            self._next_try = time.monotonic() + self.store_retry_after_s
            return False
        return True

    def _sync(self, force: bool = False) -> bool:
        """Push everything the store has not got yet; False while it is down."""
        with self.held():
            return self._push(force)

    def _push(self, force: bool) -> bool:
        store, rec = self.store, self.record
        if store is None:
            return False
        if not force and self.store_error is not None and time.monotonic() < self._next_try:
            return False  # it just failed after its own retries: measure on, try again later
        if rec.run_id is None:
            header = rec.model_copy(update={"results": [], "ceilings": []})
            ok = self._write(lambda: setattr(rec, "run_id", store.begin_run(header)))
            if not ok:
                return False
        run_id = rec.run_id
        assert run_id is not None
        ceilings = not self._ceilings_stored and rec.ceilings
        if ceilings and not self._write(lambda: store.set_ceilings(run_id, rec.ceilings)):
            return False
        self._ceilings_stored = True
        while self._stored < len(rec.results):
            if not self._write(lambda: store.add_result(run_id, rec.results[self._stored])):
                return False
            self._stored += 1
        self.store_error = None  # it came back: everything missed is in
        return True

    # a call hung in C code: save what there is and leave ----------------------------------

    def _abandon(self, reason: str) -> None:
        """Runs in the watchdog thread when the main thread cannot be interrupted."""
        self.record.payload.notes.append(f"run abandoned: {reason}, never to return to Python")
        with contextlib.suppress(Exception):
            self.finish()
        path = self.json_path or rescue_path(self.record)
        with contextlib.suppress(OSError):
            path.write_text(self.record.model_dump_json(indent=2))
        print(
            f"error: {reason} and cannot be interrupted. Results so far: "
            f"run {self.record.run_id or '(not stored)'}, JSON {path}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(124)


__all__ = [
    "Events",
    "Quiet",
    "Session",
    "Stopped",
    "rescue_path",
    "write_rescue",
]
