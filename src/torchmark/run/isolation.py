"""User code measured in a child process, so that a call that holds the GIL is still bounded.

The watchdog (run/watchdog.py) is a thread: it can only act when the main thread lets go of the
GIL. A model whose forward is stuck in C code that never releases it (a catastrophic regex
backtrack, ``re.match(r"(a+)+$", "a" * 40 + "b")``) kept the command waiting until it was
killed, and the stored reason then said 10 s for a 90 s hang. Here the user's calls run in
a child process; the parent runs none of them, watches the child's heartbeats on a pipe,
kills it when a gap passes the bound, records how long the call had really run, and forks
a fresh child for the cases left. Outside the user's calls a child silent for ``SILENT_S``
is stuck in torchmark's own code: it is made to write its stack (faulthandler), killed, and
the error says where it stuck.

    parent                                   child (forked at the first request)
    ------                                   -----------------------------------
    Worker.ask(request) ------------------>  serve(request, PipeWatchdog): run_case ...
    select() on beats and answers  <-------  "arm bound what" / "." per heartbeat / "disarm"
    a gap > bound: SIGKILL, CallTimedOut     ... ("done", value) or ("raised", exception)

Forking is only safe where the parent has not started an OpenMP thread pool (a child of a
process that ran one parallel region hangs in its first: measured here) and holds no CUDA
context, so ``refusal`` says where it cannot be used; the caller measures in-process then,
bounded as before. Loading a model and making random inputs start no pool (checked here);
the parent runs none of the user's calls, so the pool first starts in each child, with the
parent's thread count.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import re
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, Pipe
from typing import TYPE_CHECKING, Any

from torchmark.run.watchdog import BOUND_WHY, CallTimedOut, Watchdog, frames_text

if TYPE_CHECKING:
    from torchmark.devices.base import Device

# A child that cannot run a parallel op within this long inherited a started OpenMP pool.
PROBE_S = 5.0
# Outside the user's calls the child runs only torchmark's own work between heartbeats
# (making a batch's inputs, a case's bookkeeping: seconds at most). A child silent this long
# there is stuck (a lock another thread of the parent held at the fork): the parent waited
# on it for ever before, and nothing said where.
SILENT_S = 300.0
# The signal that makes a silent child write where it is (faulthandler) before it is killed.
WHERE_SIGNAL = getattr(signal, "SIGUSR2", None)


class ChildDied(RuntimeError):
    """The child process ended without an answer (a crash in C code, killed from outside)."""


class ChildStuck(ChildDied):
    """The child sent nothing for SILENT_S outside the user's calls: killed (not reaped)."""


class PipeWatchdog(Watchdog):
    """The child's side of the watchdog: each heartbeat is a byte on a pipe, each armed
    block two messages; the parent keeps the clock and acts."""

    def __init__(self, beats: int, messages: Connection) -> None:
        super().__init__()
        self._beats, self._messages = beats, messages

    def heartbeat(self) -> float:
        os.write(self._beats, b".")
        return self.clock()

    @contextlib.contextmanager
    def armed(self, bound_s: float, what: str, why: str = BOUND_WHY) -> Iterator[None]:
        _send(self._messages, ("arm", bound_s, what, why))
        try:
            yield
        finally:
            _send(self._messages, ("disarm",))

    def close(self) -> None:
        return None


def refusal(devices: Sequence[Device]) -> str | None:
    """None where user code can be measured in a forked child here, else why not."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    if any(d.is_accelerator for d in devices):
        return "an accelerator is measured: a forked child cannot use its driver"
    if not _fork_runs_parallel_ops():
        return "this process already ran a parallel op: its OpenMP pool does not survive fork"
    return None


_POOL_STARTED = [False]  # once started, a process's OpenMP pool stays: asked once


def _fork_runs_parallel_ops() -> bool:
    """Whether a forked child can still run a multi-threaded op (the parent's OpenMP pool not
    started yet): a child that does not finish one within ``PROBE_S`` is killed."""
    import torch

    if torch.get_num_threads() == 1:
        return True  # one thread runs no parallel region: nothing to inherit
    if _POOL_STARTED[0]:
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            torch.ones(1 << 22).add_(1)  # above the grain size: a parallel region
        finally:
            os._exit(0)
    end = time.monotonic() + PROBE_S
    while time.monotonic() < end:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    _POOL_STARTED[0] = True
    return False


class Worker:
    """A child process, forked at the first request, that answers each with
    ``serve(request, watchdog)`` and keeps its state between requests (a model's state
    carries from one case to the next, as in one process). A child that timed out or died is
    killed and the next request forks a fresh one, whose state ``serve`` builds again.

    ``ask`` raises ``CallTimedOut`` (naming the time the call really ran), ``ChildDied``, or
    the exception ``serve`` raised; ``bound_s`` arms a bound from the start of a request.
    """

    def __init__(self, serve: Callable[[Any, Watchdog], Any]) -> None:
        self.serve = serve
        self.pid: int | None = None
        self.forks = 0

    def _fork(self) -> None:
        beat_r, beat_w = os.pipe()
        answers, answer_w = Pipe(duplex=False)
        request_r, requests = Pipe(duplex=False)
        # the child's stack, written there when it is stuck; closed with the worker
        where = tempfile.TemporaryFile()  # noqa: SIM115
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; coverage cannot follow it
            os.close(beat_r)
            answers.close()
            requests.close()
            if WHERE_SIGNAL is not None:
                faulthandler.register(WHERE_SIGNAL, file=where, all_threads=True)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {WHERE_SIGNAL})  # as the watchdog
            _serve(self.serve, beat_w, answer_w, request_r)
        os.close(beat_w)
        answer_w.close()
        request_r.close()
        self.pid, self.forks = pid, self.forks + 1
        self._beats, self._answers, self._requests = beat_r, answers, requests
        self._where = where

    def ask(
        self, request: Any, *, bound_s: float | None = None, what: str = "", why: str = ""
    ) -> Any:
        if self.pid is None:
            self._fork()
        assert self.pid is not None
        try:
            _send(self._requests, request)
            kind, value = _watch(
                self.pid, self._beats, self._answers, bound_s, what, why, self._where
            )
        except ChildStuck:
            self.close()  # killed, not waited for yet
            raise
        except ChildDied:
            self.close(reaped=True)  # waited for already: its pid may be another's now
            raise
        except BaseException:
            self.close()  # timed out, stuck, or stopped by Ctrl-C: a fresh child next time
            raise
        if kind == "raised":
            raise value  # serve's own exception: the child lives on, state and all
        return value

    def close(self, reaped: bool = False) -> None:
        if self.pid is None:
            return
        if not reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        os.close(self._beats)
        self._answers.close()
        self._requests.close()
        self._where.close()
        self.pid = None


def _serve(
    serve: Callable[[Any, Watchdog], Any], beat_w: int, answers: Connection, requests: Connection
) -> None:  # pragma: no cover - runs in the child
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    dog = PipeWatchdog(beat_w, answers)
    try:
        while True:
            try:
                request = pickle.loads(requests.recv_bytes())
            except EOFError:
                break
            try:
                answer: tuple[str, Any] = ("done", serve(request, dog))
            except BaseException as e:  # everything goes back to the parent
                answer = ("raised", e)
            try:
                _send(answers, answer)
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                _send(answers, ("raised", RuntimeError(f"{answer[1]!r} (not picklable: {e})")))
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        os._exit(0)


def _watch(
    pid: int,
    beat_r: int,
    recv: Connection,
    bound_s: float | None,
    what: str,
    why: str,
    where: Any = None,
) -> tuple[str, Any]:
    clock = time.monotonic
    last = clock()
    armed: tuple[float, str, str] | None = (bound_s, what, why) if bound_s else None
    watched = [beat_r, recv.fileno()]
    while True:
        bound = SILENT_S if armed is None else armed[0]
        wait = max(0.0, last + bound - clock())
        ready, _, _ = select.select(watched, [], [], wait)
        now = clock()
        if beat_r in ready:
            if os.read(beat_r, 1 << 16):
                last = now
            else:
                watched.remove(beat_r)  # the child is gone: its answer, if any, is queued
        if recv.fileno() in ready:
            try:
                msg = pickle.loads(recv.recv_bytes())
            except EOFError:
                _, status = os.waitpid(pid, 0)
                raise ChildDied(_how_it_ended(status)) from None
            if msg[0] == "arm":
                armed, last = (msg[1], msg[2], msg[3]), now
            elif msg[0] == "disarm":
                armed, last = None, now  # the silence outside calls counts from here
            else:
                return msg[0], msg[1]  # ("done", value) or ("raised", exception)
        elif armed is None and now - last >= SILENT_S:
            stuck = where_stuck(pid, where)
            os.kill(pid, signal.SIGKILL)  # reaped by Worker.close
            raise ChildStuck(
                f"the measuring process sent nothing for {SILENT_S:.3g} s outside the model's "
                f"calls (making inputs, placing the model, torchmark's own work){stuck}: "
                "it was killed"
            )
        elif armed is not None and now - last >= armed[0]:
            bound, did, because = armed
            os.kill(pid, signal.SIGKILL)
            raise CallTimedOut(
                f"timed out: {did} did not return within {bound:.3g} s"
                + (f" ({because})" if because else "")
                + f"; stopped after {now - last:.3g} s in its own process"
            )


_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def where_stuck(pid: int, where: Any, thread_with: str = "") -> str:
    """`` at trace.py:123 in snapshot < ...``: the innermost frames of the child's thread
    that took WHERE_SIGNAL (faulthandler's "Current thread"; Linux gives a process-directed
    signal to the main thread where it does not block it), or of the first thread whose
    frames hold ``thread_with`` (a model run in a thread other than the main one), written
    by the child into ``where``; empty where it wrote nothing within a second."""
    if where is None or WHERE_SIGNAL is None:
        return ""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, WHERE_SIGNAL)
    text, before = "", None
    for _ in range(100):
        time.sleep(0.01)
        # pread: the file's offset is shared with the child, which may still be writing
        text = os.pread(where.fileno(), 1 << 20, 0).decode(errors="replace")
        if text and text == before:
            break  # the dump stopped growing
        before = text
    blocks = text.split("\n\n")
    current = [b for b in blocks if b.lstrip().startswith("Current thread")]
    marked = [b for b in blocks if thread_with and thread_with in b]
    return frames_text(_FRAME.findall((marked[:1] or current or blocks)[-1])[:3])


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    # plain pickle: Connection.send's ForkingPickler sends tensors as shared-memory handles,
    # which the parent fetches from the sender, gone by then (ConnectionResetError)
    conn.send_bytes(pickle.dumps(message))


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"the measuring process was killed by {signal.Signals(sig).name}"
    return f"the measuring process exited with code {os.waitstatus_to_exitcode(status)}"


def exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """In a pool's worker process: exit once ``parent``, the process that started it, is
    gone. A pool's worker waits for work for ever on its queue, and a parent ended without
    its shutdown (SIGKILL, a supervisor's time-out, ``os._exit``) left it behind: a
    leaderboard's drawing process, a serving model worker of 250 MB seen an hour later."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="torchmark-parent-watch", daemon=True).start()
