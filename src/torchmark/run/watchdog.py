"""The watchdog: a bound on one call, so a case whose call never returns ends as timed out
and the run goes on.

``measure(..., clock=dog.heartbeat)`` beats between groups of calls; a gap longer than the
bound raises ``CallTimedOut`` in the main thread (a real signal, so a sleeping or blocking
call wakes too).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# The bound on one call: a probe model sleeping 10 s per call under `--stopping quick`
# (<= 2 s) took 69 s before this bound existed. 10 s leaves a slow but honest first call
# (cold CUDA context, cuDNN autotune: 1-5 s on the lent H100) room to finish.
MIN_CALL_BOUND_S = 10.0
BOUND_WHY = f"the bound is max({MIN_CALL_BOUND_S:.0f} s, 2x the stopping rule's time-out)"


def call_bound(rule_max_time_s: float) -> float:
    """A single call (or timed group of calls) running past this ends its case."""
    return max(MIN_CALL_BOUND_S, 2 * rule_max_time_s)


class CallTimedOut(BaseException):
    """Raised in the main thread by the watchdog. A BaseException, so the user's
    ``except Exception`` inside a model cannot swallow it."""


# The signal the watchdog sends the main thread: a real signal (pthread_kill) also wakes a
# sleeping or blocking call that retries on EINTR, which _thread.interrupt_main() does not.
WATCHDOG_SIGNAL = getattr(signal, "SIGUSR1", None)
RESEND_S = 2.0  # how often an unanswered signal is sent again within the grace


class Watchdog:
    """Bounds the time between heartbeats while armed (one thread per session).

    ``measure`` reads its host clock between every group of calls (after the first call,
    each warm-up group and each sample), so passing ``clock=dog.heartbeat`` makes every gap
    one group: the first call, a warm-up group (sized to fit the rule's time-out) or one
    sample (~10 ms, or one call when a call is longer). A gap past the bound means a call
    that does not return in time; the main thread gets ``CallTimedOut`` with the reason.

    A call stuck inside C code that never returns to Python cannot be interrupted from
    another thread. If the main thread has not answered ``grace_s`` after the signal,
    ``on_hung`` runs in the watchdog thread (the session saves the run and exits).
    """

    def __init__(
        self,
        on_hung: Callable[[str], None] | None = None,
        grace_s: float = 30.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.on_hung, self.grace_s, self.clock = on_hung, grace_s, clock
        self.fired: str | None = None
        self._bound, self._what, self._why = 0.0, "", ""
        self._deadline: float | None = None
        self._since = 0.0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._old_handler: Any = None
        self._was_blocked = False

    def heartbeat(self) -> float:
        t = self.clock()
        with self._cond:
            if self._deadline is not None:
                self._deadline = t + self._bound
        return t

    def beating(self, clock: Callable[[], float]) -> Callable[[], float]:
        """``clock`` (the one measure's stopping rule reads: a fake one in tests) that also
        beats the watchdog, whose deadlines stay on the real host clock."""
        if clock is self.clock:
            return self.heartbeat

        def beat() -> float:
            self.heartbeat()
            return clock()

        return beat

    @contextlib.contextmanager
    def armed(
        self,
        bound_s: float,
        what: str,
        why: str = BOUND_WHY,
    ) -> Iterator[None]:
        """Bound every gap between heartbeats inside the block; CallTimedOut on a miss."""
        if WATCHDOG_SIGNAL is None or not in_main_thread() or not math.isfinite(bound_s):
            yield  # no way to interrupt the main thread here: unbounded, as before
            return
        self._start()
        # A process started with the signal blocked (a parent that launched it from a thread
        # that blocks signals: a CI runner once) would never see it: the call ran on until
        # the grace abandoned the run (exit 124). Unblocked here, in the thread it targets.
        if WATCHDOG_SIGNAL in signal.pthread_sigmask(signal.SIG_UNBLOCK, {WATCHDOG_SIGNAL}):
            self._was_blocked = True
        with self._cond:
            self.fired, self._bound, self._what, self._why = None, bound_s, what, why
            self._deadline = self.clock() + bound_s
            self._cond.notify_all()
        try:
            yield
            if self.fired:  # fired just as the call returned: let the signal land here
                for _ in range(100):
                    time.sleep(0.01)
        finally:
            with self._cond:
                self._deadline = None
                # a signal still pending after this block must not end an unrelated call
                self.fired = None
                self._cond.notify_all()

    def _start(self) -> None:
        if self._thread is None:
            self._old_handler = signal.signal(WATCHDOG_SIGNAL, self._on_signal)  # type: ignore[arg-type]
            self._thread = threading.Thread(
                target=self._run, name="torchmark-watchdog", daemon=True
            )
            self._thread.start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.fired:
            # the real time: a call holding the GIL lets the signal land only when it ends
            # (90 s for a 10 s bound once, stored as 10 s)
            raise CallTimedOut(f"{self.fired}; stopped after {self.clock() - self._since:.3g} s")

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - self.clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self.fired = (
                    f"timed out: {self._what} did not return within {self._bound:.3g} s "
                    f"({self._why})"
                )
                self._since = self._deadline - self._bound  # the last heartbeat
                fired_at = self.clock()
                # sent again every RESEND_S of the grace: an exception the first raised can
                # be swallowed where Python ignores them (a __del__, a gc or weakref
                # callback), and the call then hangs on with the watchdog waiting; each
                # signal raises only while still armed (the block's exit disarms it)
                resend_s = min(RESEND_S, self.grace_s / 4)
                next_send = fired_at
                while self._deadline is not None and not self._closed:
                    now = self.clock()
                    if now >= next_send:  # first: the signal is sent at least once
                        _interrupt_main()
                        next_send = now + resend_s
                    if now - fired_at >= self.grace_s:
                        if self.on_hung is not None:
                            self.on_hung(f"{self.fired}; the call is stuck{where_main_is()}")
                        return
                    self._cond.wait(min(next_send, fired_at + self.grace_s) - now)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            if in_main_thread() and WATCHDOG_SIGNAL is not None:
                # the caller's mask again (the thread sends no more), then its handler: in
                # the other order a signal from outside could meet the default handler and
                # end the process where the caller had it blocked
                if self._was_blocked:
                    signal.pthread_sigmask(signal.SIG_BLOCK, {WATCHDOG_SIGNAL})
                    self._was_blocked = False
                signal.signal(WATCHDOG_SIGNAL, self._old_handler)
            self._thread = None


def _interrupt_main() -> None:
    """Send the watchdog's signal to the main thread; where the system refuses that (a
    sandbox that denies tgkill), to the process, which Linux delivers to its main thread
    first (unblocked while armed). Never raises: a dead watchdog thread would leave the call
    unbounded."""
    try:
        signal.pthread_kill(threading.main_thread().ident or 0, WATCHDOG_SIGNAL)  # type: ignore[arg-type]
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), WATCHDOG_SIGNAL)  # type: ignore[arg-type]


def where_main_is(depth: int = 3) -> str:
    """`` at model.py:12 in forward < module.py:1775 in _call_impl``: the main thread's
    innermost frames (a hung call's abandon says where it hung); empty where unknown."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    frames: list[tuple[str, int, str]] = []
    while frame is not None and len(frames) < depth:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return frames_text(frames)


def frames_text(frames: Sequence[tuple[str, int | str, str]]) -> str:
    """`` at model.py:12 in forward < ...``: (file, line, function) frames, innermost first,
    as an error names where something stuck; empty without frames."""
    said = " < ".join(f"{os.path.basename(f)}:{n} in {fn}" for f, n, fn in frames)
    return f" at {said}" if said else ""


__all__ = ["MIN_CALL_BOUND_S", "CallTimedOut", "Watchdog", "call_bound", "in_main_thread"]
