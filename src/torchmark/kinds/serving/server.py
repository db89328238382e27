"""One serving instance: the open loop's requests, a dynamic batcher and the model, in one
loop on one clock.

    arrivals (scheduled times, drawn before serving)    -> a request arrives at its time
    loop:
        queue empty             -> sleep until the next arrival (lateness: how late it woke)
        queue < max batch and the oldest has waited < max wait
                                -> sleep until the next arrival or that deadline
        else                    -> serve min(queue, max batch) as one batch:
                                   start = now; executor(first, n); finish = now

The queue is the schedule itself: a request is in the queue from its scheduled time whether
or not the loop is looking, so nothing the server does can delay an arrival, and latency
(finish - arrival) always counts from the time the request was due (as LoadGen counts from
its scheduled time). The generator therefore costs the server no thread and no core; what
it can get wrong is waking late while the server is idle, which is measured per arrival it
woke for (``lateness``) and reported apart. Arrivals during a batch are queued on time by
construction: they have no lateness of their own.

Several instances can share one queue (``Queue``: the next request's index, changed under a
lock): each has the same schedule and, when free, takes the next batch from the shared head,
as workers behind one server queue do (an M/D/c queue with a fake device). One instance owns
its queue: a plain counter, no lock.

The same loop runs on the host clock with a model (``executor.ModelExecutor``) and on a
fake clock with a fake device of known service time (``fake``): the tests check this very
loop against queueing theory, one step at a time where several instances share a queue.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from torchmark.kinds.serving.clock import Clock
from torchmark.results.serving import MAX_ERRORS, OTHER_ERRORS, batch_wait
from torchmark.user.source import one_line

# A request waiting this many times the bound (and at least this long in seconds) means a
# queue that grows without end: the point is over its bound beyond doubt.
GIVE_UP_BOUNDS = 10.0
GIVE_UP_MIN_S = 1.0


@dataclass(frozen=True)
class Batching:
    """The dynamic batcher's settings: a batch is served when ``max_batch`` requests wait or
    the oldest has waited ``max_wait_s`` (and the instance is free); 1 and 0 serve each
    request alone as soon as the instance is free."""

    max_batch: int = 1
    max_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_batch < 1 or not self.max_wait_s >= 0:
            raise ValueError(f"bad batching {self}: max_batch >= 1, max_wait_s >= 0")

    @property
    def label(self) -> str:
        return batch_wait(self.max_batch, self.max_wait_s)


class Executor(Protocol):
    def __call__(self, first: int, n: int) -> None:
        """Serve requests ``first .. first + n - 1`` as one batch; raise if it fails."""


@dataclass
class Requests:
    """Per request: scheduled arrival, start and finish of its batch (host clock seconds),
    the loop's lateness where it woke for the arrival (NaN where it did not), failure."""

    arrival: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    lateness: np.ndarray
    failed: np.ndarray
    batch: np.ndarray  # size of the batch it was served in

    @classmethod
    def empty(cls) -> Requests:
        f = np.empty(0)
        return cls(f, f, f, f, np.empty(0, dtype=bool), np.empty(0, dtype=np.int32))

    @classmethod
    def concat(cls, parts: list[Requests]) -> Requests:
        if not parts:
            return cls.empty()
        out = cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in FIELDS))
        order = np.argsort(out.arrival, kind="stable")
        return cls(*(getattr(out, k)[order] for k in FIELDS))

    @classmethod
    def combine(cls, parts: list[Requests]) -> Requests:
        """The same requests as each instance sharing a queue saw them (NaN where another
        served it): each request from the instance that served it; its lateness from the
        first to wake for it. A shorter part (an instance that stopped early) ends sooner."""
        if not parts:
            return cls.empty()
        size = max(len(p) for p in parts)
        out = cls(*(_padded(getattr(parts[0], k), size) for k in FIELDS))
        out.arrival = next(p.arrival for p in parts if len(p) == size).copy()
        for p in parts[1:]:
            finish = _padded(p.finish, size)
            take = np.isnan(out.finish) & ~np.isnan(finish)
            out.finish[take] = finish[take]
            for k in ("start", "failed", "batch"):
                getattr(out, k)[take] = _padded(getattr(p, k), size)[take]
            out.lateness = np.fmin(out.lateness, _padded(p.lateness, size))
        return out

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def served(self) -> np.ndarray:
        return ~np.isnan(self.finish)

    @property
    def latency(self) -> np.ndarray:
        """Seconds from arrival to result on the host, of the requests that succeeded."""
        ok = self.served & ~self.failed
        return self.finish[ok] - self.arrival[ok]

    @property
    def wait(self) -> np.ndarray:
        ok = self.served & ~self.failed
        return self.start[ok] - self.arrival[ok]


FIELDS = ("arrival", "start", "finish", "lateness", "failed", "batch")


def _padded(x: np.ndarray, size: int) -> np.ndarray:
    """A copy of ``x`` grown to ``size`` with "nothing yet" (NaN, False, 0)."""
    out = np.zeros(size, dtype=x.dtype) if x.dtype.kind in "bi" else np.full(size, np.nan)
    out[: x.size] = x
    return out


class _Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


@dataclass(frozen=True)
class Queue:
    """The index of the next request to serve (``head.value``), moved under ``lock`` by the
    instance that takes a batch. ``Queue()``: one instance's, no lock (None: even a no-op
    one entered per batch cost the loop a third of its time per request, as
    serving_generator.py's bookkeeping); worker processes share one made of
    ``multiprocessing.RawValue("q")`` and ``Lock()``."""

    head: Any = field(default_factory=_Counter)
    lock: Any = None  # acquire() / release(): multiprocessing's Lock


# What one step of the loop did
SLEPT, SERVED, DONE, GAVE_UP = 0, 1, 2, 3


class Server:
    """The loop of the module docstring over a schedule that grows window by window."""

    def __init__(
        self,
        executor: Executor,
        batching: Batching,
        clock: Clock,
        bound_s: float = math.inf,
        give_up_s: float | None = None,
        queue: Queue | None = None,
    ) -> None:
        self.executor, self.batching, self.clock = executor, batching, clock
        self.give_up_s = (
            give_up_s if give_up_s is not None else max(GIVE_UP_BOUNDS * bound_s, GIVE_UP_MIN_S)
        )
        self.queue = queue or Queue()
        self._lock, self._head = self.queue.lock, self.queue.head
        self.arrival = np.empty(0)
        self.start = np.empty(0)
        self.finish = np.empty(0)
        self.lateness = np.empty(0)
        self.failed = np.empty(0, dtype=bool)
        self.batch = np.empty(0, dtype=np.int32)
        self._due: list[float] = []  # the arrival times again, as Python floats
        self._seen = 0  # arrivals due by the loop's last look
        self._log: list[tuple[int, int, float, float, bool]] = []  # batches served
        self._filled = 0
        self.errors: dict[str, int] = {}  # first error line -> requests failed with it
        self.gave_up: str | None = None
        self.busy_s = 0.0  # time inside the executor
        self.idle_s = 0.0  # time asleep, waiting for an arrival or a batch's deadline

    @property
    def head(self) -> int:
        """The first request no instance has taken yet."""
        return int(self.queue.head.value)

    def extend(self, times: np.ndarray) -> None:
        """More scheduled arrivals (absolute times, after every earlier one)."""
        n = times.size
        nan = np.full(n, np.nan)
        self.arrival = np.concatenate([self.arrival, times])
        self._due.extend(times.tolist())
        self.start = np.concatenate([self.start, nan])
        self.finish = np.concatenate([self.finish, nan])
        self.lateness = np.concatenate([self.lateness, nan])
        self.failed = np.concatenate([self.failed, np.zeros(n, dtype=bool)])
        self.batch = np.concatenate([self.batch, np.zeros(n, dtype=np.int32)])

    def serve_until(self, index: int, stop: Callable[[], bool] | None = None) -> bool:
        """Serve until every request before ``index`` is taken and this instance's batch is
        done; False when the queue ran away (``gave_up`` says how) or ``stop()`` said so."""
        step = self.step
        while True:
            did = step(index)
            if did == DONE:
                return True
            if did == GAVE_UP or (did == SERVED and stop is not None and stop()):
                return False

    def step(self, index: int) -> int:
        """One turn of the loop: sleep until the next arrival or the batch's deadline, or
        take a batch from the queue's head and serve it (SLEPT, SERVED); DONE once every
        request before ``index`` is taken; GAVE_UP when the queue ran away."""
        # Python floats, not numpy: this loop is the generator's limit (9.5 µs a request
        # with np.searchsorted and numpy scalars, here)
        arr, now_, counter, lock = self._due, self.clock.now, self._head, self._lock
        n = len(arr)
        max_batch = self.batching.max_batch
        if lock is not None:  # other instances take from the same head
            lock.acquire()
        try:
            head = counter.value
            if head >= index or head >= n:
                return DONE
            now = now_()
            seen = max(self._seen, head)
            while seen < n and arr[seen] <= now:
                seen += 1
            self._seen = seen
            queued = seen - head
            wake = -1.0
            if not queued:  # idle: wake for the next arrival
                wake = arr[head]
            elif queued < max_batch and seen < n:
                deadline = arr[head] + self.batching.max_wait_s
                if now < deadline:
                    wake = min(deadline, arr[seen])
            if wake < 0:
                if now - arr[head] > self.give_up_s:
                    self.gave_up = (
                        f"overloaded: a request waited {now - arr[head]:.3g} s for the device "
                        f"(> {self.give_up_s:.3g} s), the queue grows without end"
                    )
                    return GAVE_UP
                taken = min(queued, max_batch)
                counter.value = head + taken
        finally:
            if lock is not None:
                lock.release()
        if wake < 0:
            self._serve(head, taken, now)
            return SERVED
        self.clock.sleep_until(wake)
        woke = now_()
        waking = head if not queued else seen  # the arrival it woke for, if it did
        if wake == arr[waking]:
            self.lateness[waking] = woke - wake
        self.idle_s += woke - now
        return SLEPT

    def _serve(self, first: int, n: int, now: float) -> None:
        # one tuple per batch (numpy slice writes cost 3 µs a batch); arrays on demand
        try:
            self.executor(first, n)
            failed = False
        except Exception as e:  # the model failing fails its batch's requests, not the run
            failed = True
            line = one_line(e)  # `Type: first line (at your_file.py:LINE)`
            if line not in self.errors and len(self.errors) >= MAX_ERRORS:
                line = OTHER_ERRORS  # the first messages say what failed; the rest, a count
            self.errors[line] = self.errors.get(line, 0) + n
        t = self.clock.now()
        self._log.append((first, n, now, t, failed))
        self.busy_s += t - now

    def _fill(self) -> None:
        """Write the batches served since the last call into the per-request arrays."""
        for first, n, start, finish, failed in self._log[self._filled :]:
            last = first + n
            self.start[first:last] = start
            self.finish[first:last] = finish
            self.batch[first:last] = n
            if failed:
                self.failed[first:last] = True
        self._filled = len(self._log)

    def requests(self, lo: int, hi: int) -> Requests:
        """Requests ``lo .. hi - 1`` (copies: the arrays grow)."""
        self._fill()
        return Requests(*(getattr(self, k)[lo:hi].copy() for k in FIELDS))

    def finished_between(self, t0: float, t1: float) -> int:
        """Requests whose batch finished in [t0, t1)."""
        key = operator.itemgetter(3)  # finish times grow along the log
        lo = bisect.bisect_left(self._log, t0, key=key)
        hi = bisect.bisect_left(self._log, t1, key=key)
        return sum(b[1] for b in self._log[lo:hi])
