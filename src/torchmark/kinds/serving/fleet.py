"""What serves a load point: one instance in this process (``Local``), or several worker
processes each running one (``workers.Processes``). Both answer the same three questions:

    single_stream(n)        one request at a time, the next sent when the last returns
    offline(batch, n)       every request queued at once: the most it can serve per second
    windows(rate, ...)      the open loop at ``rate``, one window of requests at a time,
                            until the caller stops asking
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.clock import Clock
from torchmark.kinds.serving.server import Batching, Executor, Queue, Requests, Server

# The first arrival is scheduled this long after the point starts: the loop is at its
# sleep before anything is due, so the first request is not late by the set-up itself.
LEAD_S = 0.002


class ForwardStuck(RuntimeError):
    """A forward of the model ran past its bound in a process serving it: every process
    serving the model was killed; the message says where the forward was."""


def stuck_text(bound_s: float, ran_s: float, where: str) -> str:
    """What a fleet whose forward never returned says: the bound and why, how long the
    forward had run, in what (``where``: "in its worker process at x.py:3 in forward")."""
    return (
        f"the model's forward did not return within {bound_s:.3g} s (the bound is max(10 s, "
        "a load point's time limit): a forward that outlasts a whole point serves no request "
        f"within it); stopped after {ran_s:.3g} s {where}"
    )


def expect(
    conn: Connection,
    what: str | tuple[str, ...],
    timeout: float,
    error: Callable[[str], Exception],
    who: str,
    poll: Callable[[Connection, float], bool] = Connection.poll,
) -> Any:
    """The value of the next message (tag, value) on a serving process's pipe tagged
    ``what`` (a tuple of tags: the (tag, value)); ``error`` naming ``who`` where none comes
    within ``timeout`` (``poll``), the process died or failed, or another tag came."""
    if not poll(conn, timeout):
        raise error(f"{who} did not answer within {timeout:g} s")
    try:
        tag, value = conn.recv()
    except EOFError:
        raise error(f"{who} died (its pipe closed)") from None
    if tag == "error":
        raise error(f"{who} failed: {value}")
    if tag not in (what if isinstance(what, tuple) else (what,)):
        raise error(f"{who} said {tag!r} where {what!r} was expected")
    return (tag, value) if isinstance(what, tuple) else value


@dataclass
class WindowData:
    """One window's requests (those that arrived in it, all finished), how many requests
    finished inside its span, and whether the instance gave up (a queue without end)."""

    t0: float
    t1: float
    requests: Requests
    completed: int
    gave_up: str | None = None
    errors: dict[str, int] = field(default_factory=dict)  # cumulative over the point
    busy_s: float = 0.0  # time in the model over the window (summed over instances)
    idle_s: float = 0.0  # time asleep waiting for work
    wall_s: float = 0.0  # time the loop spent on the window (the rest is its bookkeeping)


class Fleet(Protocol):
    """One or more serving instances of a model on one device."""

    def single_stream(self, n: int, max_s: float) -> Requests: ...

    def offline(self, batch: int, n: int, max_s: float) -> tuple[Requests, float]: ...

    def windows(
        self, rate: float, batching: Batching, window_s: float, bound_s: float, seed: int
    ) -> Iterator[WindowData]: ...


class Local:
    """One instance in this process, on ``clock``."""

    def __init__(self, executor: Executor, clock: Clock) -> None:
        self.executor, self.clock = executor, clock

    def single_stream(self, n: int, max_s: float) -> Requests:
        """LoadGen's single-stream: the next request is sent when the last one returns."""
        return single_stream(self.executor, self.clock, n, max_s)

    def offline(self, batch: int, n: int, max_s: float) -> tuple[Requests, float]:
        """(requests, seconds) for ``n`` requests all queued at the start, in batches."""
        return offline(self.executor, self.clock, batch, n, max_s)

    def windows(
        self, rate: float, batching: Batching, window_s: float, bound_s: float, seed: int
    ) -> Iterator[WindowData]:
        return open_loop(self.executor, self.clock, rate, batching, window_s, bound_s, seed)


def single_stream(executor: Executor, clock: Clock, n: int, max_s: float) -> Requests:
    t_end = clock.now() + max_s
    times: list[tuple[float, float, bool]] = []
    for k in range(n):
        t0 = clock.now()
        if k and t0 > t_end:
            break
        ok = True
        try:
            executor(k, 1)
        except Exception:
            ok = False
        times.append((t0, clock.now(), not ok))
    a = np.array([t[0] for t in times])
    f = np.array([t[1] for t in times])
    failed = np.array([t[2] for t in times], dtype=bool)
    return Requests(a, a.copy(), f, np.full(a.size, np.nan), failed, np.ones(a.size, np.int32))


def offline(
    executor: Executor, clock: Clock, batch: int, n: int, max_s: float
) -> tuple[Requests, float]:
    """Every request due at once and served in batches of ``batch``; stops early (with the
    requests served so far) past ``max_s``."""
    t0 = clock.now()
    server = Server(executor, Batching(batch, 0.0), clock, give_up_s=math.inf)
    server.extend(np.full(n, t0))
    server.serve_until(n, stop=lambda: clock.now() - t0 > max_s)
    done = server.head
    reqs = server.requests(0, done)
    return reqs, float(reqs.finish[-1] - t0) if done else math.nan


def open_loop(
    executor: Executor,
    clock: Clock,
    rate: float,
    batching: Batching,
    window_s: float,
    bound_s: float,
    seed: int | tuple[int, ...],
    queue: Queue | None = None,
    t0: float | None = None,
) -> Generator[WindowData, None, None]:
    """The open loop at ``rate``, a window at a time; the next window's arrivals are always
    scheduled before this one is finished, so the queue carries across window edges.
    Instances sharing a ``queue`` are given the same ``seed`` and ``t0``: the same schedule,
    each window's requests as this instance served them (``Requests.combine`` joins them)."""
    server = Server(executor, batching, clock, bound_s, queue=queue)
    t0 = clock.now() + LEAD_S if t0 is None else t0
    arrivals = Arrivals(rate, t0, seed)
    server.extend(arrivals.until(t0 + window_s))
    lo, k = 0, 0
    while True:
        hi = server.arrival.size  # window k's arrivals end here
        server.extend(arrivals.until(t0 + (k + 2) * window_s))
        busy0, idle0, wall0 = server.busy_s, server.idle_s, clock.now()
        ok = server.serve_until(hi)
        w0, w1 = t0 + k * window_s, t0 + (k + 1) * window_s
        completed = server.finished_between(w0, w1)
        yield WindowData(
            w0,
            w1,
            server.requests(lo, min(hi, server.head)),
            completed,
            None if ok else server.gave_up,
            dict(server.errors),
            server.busy_s - busy0,
            server.idle_s - idle0,
            clock.now() - wall0,
        )
        if not ok:
            return
        lo, k = hi, k + 1
