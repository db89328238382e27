"""Several serving processes on the CPU: how a CPU's cores are split between worker
processes and intra-op threads (1 x N ... N x 1) decides what it serves.

Each worker process builds the model itself (from the picklable recipe), sets its thread
count, and runs the same loop as ``fleet.Local`` on one shared queue: every worker draws the
same Poisson schedule at the full rate (same seed, same start), and the index of the next
request to serve lives in shared memory (``server.Queue``: a ``RawValue`` moved under a
``Lock``). A worker that is free takes the next batch from that head, as the workers behind
one server queue do: no worker idles while a request waits (an M/D/c queue, not the c
M/D/1 queues of routing each arrival to a worker at random, whose mean wait is 2.8x the
shared queue's at 50 % load and 2.2x at 80 % with 2 workers: 0.5 and 2 service times
against 0.18 and 0.90). Latency still runs from each request's scheduled arrival. Every timestamp is
``time.perf_counter`` (CLOCK_MONOTONIC, one clock for all processes), and the parent joins
each window's requests from every worker (``Requests.combine``).

    parent                                     worker i (spawned)
    start: send (recipe, threads, max batch) -> build, warm up, reply "ready"
    windows(rate, ...): head = 0, send point -> serve from the shared head until window k's
                                                requests are all taken, send what it served
    join window k from every worker             (then on to k + 1: no worker waits)
    close / SIGTERM / error: stop, join, terminate what remains

Bounded: at most as many processes as usable cores; every reply is awaited with a time-out;
the workers are daemons that exit when their pipe closes (the parent died), and ignore
Ctrl-C (the parent ends them). A forward that never returns (one that holds the GIL in C
code too: the parent runs none, and watches each worker's shared "in a forward since"
stamp) is ended at ``forward_bound_s``: the parent makes the worker write its stack
(faulthandler, from a C signal handler: it needs no GIL), kills every worker and raises
``ForwardStuck`` naming where the forward was.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing as mp
import signal
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from torchmark.errors import TorchmarkError
from torchmark.kinds.serving.clock import RealClock
from torchmark.kinds.serving.fleet import (
    LEAD_S,
    ForwardStuck,
    WindowData,
    expect,
    open_loop,
    single_stream,
    stuck_text,
)
from torchmark.kinds.serving.fleet import offline as offline_loop
from torchmark.kinds.serving.model import Recipe
from torchmark.kinds.serving.server import Batching, Queue, Requests
from torchmark.run.isolation import WHERE_SIGNAL, where_stuck

START_TIMEOUT_S = 120.0  # a worker importing torch and building resnet50 on a loaded host
REPLY_GRACE_S = 30.0
CLOSE_GRACE_S = 1.0


# How often the parent looks at the workers' forward stamps while it waits for a reply.
WATCH_S = 0.1


class WorkerError(TorchmarkError):
    """A worker process failed to start or answer."""


def splits(cores: int, max_procs: int | None = None) -> list[tuple[int, int]]:
    """(processes, threads) pairs using every core: 1 x N, 2 x N/2, ... N x 1 (powers of two
    and N itself; ``max_procs`` caps the processes)."""
    cap = min(cores, max_procs or cores)
    procs = sorted({p for p in (1 << i for i in range(cores.bit_length())) if p <= cap} | {cap})
    return [(p, max(1, cores // p)) for p in procs if cores % p == 0 or p == cap]


def _worker(
    conn: Connection,
    recipe: Recipe,
    device_name: str,
    threads: int,
    batch: int,
    queue: Queue,
    since: Any = None,
    where: str = "",
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends us
    if where and WHERE_SIGNAL is not None:  # the parent asks where a stuck forward is
        import faulthandler

        faulthandler.register(WHERE_SIGNAL, file=open(where, "w"), all_threads=True)  # noqa: SIM115
    try:
        import torch

        from torchmark.devices import resolve
        from torchmark.kinds.serving.model import ModelExecutor

        torch.set_num_threads(threads)
        (device,) = resolve(device_name)
        executor = ModelExecutor(recipe(), device, batch, since)
        clock = RealClock()
    except BaseException as e:  # the parent says it, with the first line
        from torchmark.user.source import one_line

        conn.send(("error", one_line(e)))
        return
    gc.collect()  # torch and the model, never walked again (``oip.serve_forever``)
    gc.freeze()
    conn.send(("ready", None))
    with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
        while True:
            msg = conn.recv()
            if msg is None:
                return
            if msg == "stop":  # a stop that crossed the point's own end
                continue
            what, args = msg
            if what == "single":
                conn.send(("done", single_stream(executor, clock, *args)))
            elif what == "offline":
                reqs, took = offline_loop(executor, clock, *args)
                conn.send(("done", (reqs, took)))
            elif what == "point":
                _serve_point(conn, executor, clock, queue, *args)


def _serve_point(
    conn: Connection,
    executor: Any,
    clock: RealClock,
    queue: Queue,
    t0: float,
    rate: float,
    batching: Batching,
    window_s: float,
    bound_s: float,
    seed: int,
    max_windows: int,
) -> None:
    source = open_loop(executor, clock, rate, batching, window_s, bound_s, seed, queue, t0)
    for k, window in enumerate(source):
        conn.send(("window", window))
        stop = conn.poll() and conn.recv() == "stop"
        if stop or window.gave_up or k + 1 >= max_windows:
            break
    source.close()
    conn.send(("end", None))


class Processes:
    """``procs`` worker processes of ``threads`` intra-op threads each, on one device (a
    CPU's splits; also one process on any device for a user's model, whose forward the
    serving run never runs itself)."""

    def __init__(
        self,
        recipe: Recipe,
        device_name: str,
        procs: int,
        threads: int,
        max_batch: int,
        max_windows: int = 100_000,
        forward_bound_s: float | None = None,
    ) -> None:
        self.recipe, self.device_name = recipe, device_name
        self.forward_bound_s = forward_bound_s
        self.since: list[Any] = []  # per worker: when its forward started (0: none runs)
        self.wheres: list[Any] = []  # per worker: the file its stack is written to
        self.instances, self.threads, self.max_batch = procs, threads, max_batch
        self.max_windows = max_windows
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        self.queue = Queue()

    def __enter__(self) -> Processes:
        ctx = mp.get_context("spawn")  # fork after torch's threads start can deadlock
        # the shared head: given to each worker as it is spawned (it cannot cross a pipe)
        self.queue = Queue(ctx.RawValue("q", 0), ctx.Lock())
        try:
            for _ in range(self.instances):
                parent, child = ctx.Pipe()
                args = (child, self.recipe, self.device_name, self.threads, self.max_batch)
                since = ctx.RawValue("d", 0.0)
                where = tempfile.NamedTemporaryFile(prefix="torchmark-where-")
                self.since.append(since)
                self.wheres.append(where)
                extra = (self.queue, since, where.name)
                p = ctx.Process(target=_worker, args=(*args, *extra), daemon=True)
                p.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(p)
            for conn in self.conns:
                self._expect(conn, "ready", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        deadline = time.monotonic() + CLOSE_GRACE_S  # a worker mid-point does not read
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=CLOSE_GRACE_S)
            if p.is_alive():
                p.kill()
                p.join()
        for conn in self.conns:
            conn.close()
        for where in self.wheres:
            where.close()
        self.conns, self.procs, self.since, self.wheres = [], [], [], []

    def _stuck(self) -> None:
        """Raise ``ForwardStuck`` (fleet) where a worker's forward has run past the bound, after
        reading where it is and killing every worker (none is left behind)."""
        if self.forward_bound_s is None:
            return
        now = time.perf_counter()
        for i, since in enumerate(self.since):
            started = since.value
            if not started or now - started < self.forward_bound_s:
                continue
            p = self.procs[i]
            at = where_stuck(p.pid, self.wheres[i]) if p.is_alive() else ""
            ran = time.perf_counter() - started
            for q in self.procs:
                q.kill()
            self.close()
            raise ForwardStuck(stuck_text(self.forward_bound_s, ran, f"in its worker process{at}"))

    def _poll(self, conn: Connection, timeout: float) -> bool:
        """``conn.poll(timeout)``, looking at the forwards' stamps every ``WATCH_S``."""
        deadline = time.monotonic() + timeout
        while not conn.poll(max(0.0, min(WATCH_S, deadline - time.monotonic()))):
            self._stuck()
            if time.monotonic() >= deadline:
                return False
        return True

    def _expect(self, conn: Connection, what: str | tuple[str, ...], timeout: float) -> Any:
        """``fleet.expect``, raising ``ForwardStuck`` as soon as a worker's forward runs past
        the bound."""
        return expect(conn, what, timeout, WorkerError, "a serving worker", self._poll)

    def single_stream(self, n: int, max_s: float) -> Requests:
        """One worker, one request at a time (the others idle): latency at this thread
        count."""
        self.conns[0].send(("single", (n, max_s)))
        result: Requests = self._expect(self.conns[0], "done", max_s + REPLY_GRACE_S)
        return result

    def offline(self, batch: int, n: int, max_s: float) -> tuple[Requests, float]:
        """Every worker serving its share of ``n`` queued requests at once: the total rate."""
        share = max(1, math.ceil(n / self.instances))
        for conn in self.conns:
            conn.send(("offline", (batch, share, max_s)))
        parts = [self._expect(c, "done", max_s + REPLY_GRACE_S) for c in self.conns]
        reqs = Requests.concat([r for r, _ in parts])
        took = max(t for _, t in parts)  # they ran side by side: the slowest sets the time
        return reqs, took

    def windows(
        self, rate: float, batching: Batching, window_s: float, bound_s: float, seed: int
    ) -> Iterator[WindowData]:
        self.queue.head.value = 0  # every worker is idle between points
        t0 = RealClock().now() + 0.05 + LEAD_S  # every worker hears the point first
        for conn in self.conns:
            args = (t0, rate, batching, window_s, bound_s, seed, self.max_windows)
            conn.send(("point", args))
        ended: set[int] = set()  # workers that ended the point at their window cap
        try:
            while True:
                parts = []
                for i, c in enumerate(self.conns):
                    tag, value = self._expect(c, ("window", "end"), window_s * 20 + REPLY_GRACE_S)
                    if tag == "end":
                        ended.add(i)
                    else:
                        parts.append(value)
                if ended:  # a point longer than the workers' cap ends there, not in a hang
                    return
                yield _merge(parts)
                if any(p.gave_up for p in parts):
                    return
        finally:
            self._finish_point(ended)

    def _finish_point(self, ended: set[int] | frozenset[int] = frozenset()) -> None:
        """Tell every worker to stop and read what it still sends until its "end" (those in
        ``ended`` said it already)."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("stop")
        for i, conn in enumerate(self.conns):
            while i not in ended:
                if not self._poll(conn, REPLY_GRACE_S):
                    raise WorkerError("a serving worker did not end its load point")
                tag, _ = conn.recv()
                if tag == "end":
                    break


def _merge(parts: list[WindowData]) -> WindowData:
    errors: dict[str, int] = {}
    for p in parts:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    return WindowData(
        min(p.t0 for p in parts),
        max(p.t1 for p in parts),
        Requests.combine([p.requests for p in parts]),
        sum(p.completed for p in parts),
        next((p.gave_up for p in parts if p.gave_up), None),
        errors,
        sum(p.busy_s for p in parts),
        sum(p.idle_s for p in parts),
        sum(p.wall_s for p in parts),
    )
