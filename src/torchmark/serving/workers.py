"""Several serving processes on the CPU: how a CPU's cores are split between worker
processes and intra-op threads (1 x N ... N x 1) decides what it serves.

Each worker process builds the model itself (from the picklable recipe), sets its thread
count, and runs the same loop as ``fleet.Local`` on its own Poisson stream at rate / P:
a Poisson stream split at random is P Poisson streams of rate / P, so together they are the
open loop at ``rate``, routed as a load balancer picking an instance at random (a shared
queue would do a little better; random routing is what many deployments have). Every
timestamp is ``time.perf_counter`` (CLOCK_MONOTONIC, one clock for all processes), and
the parent merges the windows.

    parent                                     worker i (spawned)
    start: send (recipe, threads, max batch) -> build, warm up, reply "ready"
    windows(rate, ...): send the point      -> serve window k, send it, look for "stop"
    merge window k from every worker           (one window ahead, so no worker waits)
    close / SIGTERM / error: stop, join, terminate what remains

Bounded: at most as many processes as usable cores; every reply is awaited with a time-out;
the workers are daemons that exit when their pipe closes (the parent died), and ignore
Ctrl-C (the parent ends them).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from torchmark.errors import TorchmarkError
from torchmark.serving.clock import RealClock
from torchmark.serving.fleet import LEAD_S, WindowData, open_loop, single_stream
from torchmark.serving.fleet import offline as offline_loop
from torchmark.serving.model import Recipe
from torchmark.serving.server import Batching, Requests

START_TIMEOUT_S = 120.0  # a worker importing torch and building resnet50 on a loaded host
REPLY_GRACE_S = 30.0
CLOSE_GRACE_S = 1.0


class WorkerError(TorchmarkError):
    """A worker process failed to start or answer."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def splits(cores: int, max_procs: int | None = None) -> list[tuple[int, int]]:
    """(processes, threads) pairs using every core: 1 x N, 2 x N/2, ... N x 1 (powers of two
    and N itself; ``max_procs`` caps the processes)."""
    cap = min(cores, max_procs or cores)
    procs = sorted({p for p in (1 << i for i in range(cores.bit_length())) if p <= cap} | {cap})
    return [(p, max(1, cores // p)) for p in procs if cores % p == 0 or p == cap]


def _worker(conn: Connection, recipe: Recipe, device_name: str, threads: int, batch: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends us
    try:
        import torch

        from torchmark.devices import resolve
        from torchmark.serving.model import ModelExecutor

        torch.set_num_threads(threads)
        (device,) = resolve(device_name)
        executor = ModelExecutor(recipe(), device, batch)
        clock = RealClock()
    except BaseException as e:  # the parent says it, with the first line
        from torchmark.user.source import one_line

        conn.send(("error", one_line(e)))
        return
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
                _serve_point(conn, executor, clock, *args)


def _serve_point(
    conn: Connection,
    executor: Any,
    clock: RealClock,
    t_start: float,
    rate: float,
    batching: Batching,
    window_s: float,
    bound_s: float,
    seed: tuple[int, ...],
    max_windows: int,
) -> None:
    clock.sleep_until(t_start)  # every worker's loop starts at the same instant
    source = open_loop(executor, clock, rate, batching, window_s, bound_s, seed)
    for k, window in enumerate(source):
        conn.send(("window", window))
        stop = conn.poll() and conn.recv() == "stop"
        if stop or window.gave_up or k + 1 >= max_windows:
            break
    source.close()
    conn.send(("end", None))


class Processes:
    """``procs`` worker processes of ``threads`` intra-op threads each, on one CPU device."""

    def __init__(
        self,
        recipe: Recipe,
        device_name: str,
        procs: int,
        threads: int,
        max_batch: int,
        max_windows: int = 64,
    ) -> None:
        self.recipe, self.device_name = recipe, device_name
        self.instances, self.threads, self.max_batch = procs, threads, max_batch
        self.max_windows = max_windows
        self.conns: list[Connection] = []
        self.procs: list[Any] = []

    def __enter__(self) -> Processes:
        ctx = mp.get_context("spawn")  # fork after torch's threads start can deadlock
        try:
            for _ in range(self.instances):
                parent, child = ctx.Pipe()
                p = ctx.Process(
                    target=_worker,
                    args=(child, self.recipe, self.device_name, self.threads, self.max_batch),
                    daemon=True,
                )
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
        self.conns, self.procs = [], []

    def _expect(self, conn: Connection, what: str, timeout: float) -> Any:
        if not conn.poll(timeout):
            raise WorkerError(f"a serving worker did not answer within {timeout:g} s")
        try:
            tag, value = conn.recv()
        except EOFError:
            raise WorkerError("a serving worker died (its pipe closed)") from None
        if tag == "error":
            raise WorkerError(f"a serving worker failed: {value}")
        if tag != what:
            raise WorkerError(f"a serving worker said {tag!r} where {what!r} was expected")
        return value

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
        t_start = RealClock().now() + 0.05 + LEAD_S  # every worker hears the point first
        for i, conn in enumerate(self.conns):
            args = (t_start, rate / self.instances, batching, window_s, bound_s, (seed, i))
            conn.send(("point", (*args, self.max_windows)))
        try:
            while True:
                parts = [
                    self._expect(c, "window", window_s * 20 + REPLY_GRACE_S) for c in self.conns
                ]
                yield _merge(parts)
                if any(p.gave_up for p in parts):
                    return
        finally:
            self._finish_point()

    def _finish_point(self) -> None:
        """Tell every worker to stop and read what it still sends until its "end"."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("stop")
        for conn in self.conns:
            while True:
                if not conn.poll(REPLY_GRACE_S):
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
        Requests.concat([p.requests for p in parts]),
        sum(p.completed for p in parts),
        next((p.gave_up for p in parts if p.gave_up), None),
        errors,
        sum(p.busy_s for p in parts),
        sum(p.idle_s for p in parts),
        sum(p.wall_s for p in parts),
    )
