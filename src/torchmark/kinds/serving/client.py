"""The open-loop load generator over HTTP, in its own process: what drives a server as
its users do, and times each request from its scheduled arrival to its decoded answer.

    parent (served.Endpoint)              client process (spawned)
    "windows" rate, window, seed    ->    draw window k+1's Poisson arrivals before k ends;
                                          at each arrival: send on an idle keep-alive
                                          connection (or open one, up to MAX_CONNECTIONS)
                                          answer: check status, outputs' shapes, dtypes
    <- window k's requests, once every one is answered, failed or timed out
    "stop"                          ->    stop sending, drop what is in flight, "stopped"

The schedule is drawn before anything is sent and never waits for an answer (a closed loop
would slow down exactly when the server falls behind, and hide its queue): a request with
no idle connection opens one. Latency counts from the scheduled time, so a late send only
makes a result worse; the loop's own delay (wake-up - scheduled) is kept apart as
lateness, and a point where it decides the tail is the generator's limit, not the
server's (``point.LoadPoint.generator_behind``, on its p99).

asyncio with uvloop and httptools' response parser, in a process of its own (on a core of
its own where the host allows 3 or more: ``cores``): the clients written on aiohttp or
httpx cost more CPU per request than the server they drove. The loop sleeps on the event
loop's timers (1 ms resolution), so arrivals go out in bursts of up to a millisecond: each
one's lateness says by how much.

Every request is bounded by ``timeout_s``: a server that never answers ends the point
with a verdict (``WindowData.gave_up``), never a hang. Errors are counted by message, the
first ``MAX_ERRORS`` distinct ones kept word for word.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import math
import multiprocessing as mp
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from torchmark.errors import TorchmarkError
from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.cores import affinity, pin
from torchmark.kinds.serving.fleet import LEAD_S, WindowData, expect
from torchmark.kinds.serving.oip import DATATYPES
from torchmark.kinds.serving.server import Requests
from torchmark.results.serving import MAX_ERRORS, OTHER_ERRORS

MAX_CONNECTIONS = 512
START_TIMEOUT_S = 60.0
GRACE_S = 30.0
CHECK_S = 0.02  # how often timed-out requests and the parent's "stop" are looked for


class ClientError(TorchmarkError):
    """The client process failed to start or answer."""


@dataclass(frozen=True)
class Target:
    """What each request is: one pre-encoded HTTP request, and what its answer must be."""

    host: str
    port: int
    request: bytes  # the whole HTTP/1.1 request, sent as is
    outputs: tuple[tuple[str, str, tuple[int, ...]], ...]  # (name, datatype, shape, -1 any)
    timeout_s: float


def infer_request(
    host: str,
    port: int,
    model: str,
    arrays: Sequence[tuple[str, str, np.ndarray]],
    outputs: Sequence[str],
) -> bytes:
    """An OIP infer request with the binary tensor data extension, both ways."""
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": dt,
                    "shape": list(a.shape),
                    "parameters": {"binary_data_size": a.nbytes},
                }
                for name, dt, a in arrays
            ],
            "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs],
        },
        separators=(",", ":"),
    ).encode()
    body = head + b"".join(np.ascontiguousarray(a).tobytes() for _, _, a in arrays)
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(head)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


SIZES = {name: dtype.itemsize for name, dtype in DATATYPES.items()}


def check_answer(
    status: int, body: bytes, head_len: int | None, target: Target
) -> tuple[str | None, int]:
    """(what is wrong with the answer or None, the batch it says it was served in or 0)."""
    try:
        doc = json.loads(body[:head_len] if head_len is not None else body)
    except ValueError:
        doc = None
    if status != 200:
        err = doc.get("error") if isinstance(doc, dict) else None
        text = str(err) if err else body[:120].decode("utf-8", "replace").strip()
        return f"HTTP {status}: {text}"[:200], 0
    if not isinstance(doc, dict) or not isinstance(doc.get("outputs"), list):
        return "the answer is not an inference response (no 'outputs')", 0
    got = {o.get("name"): o for o in doc["outputs"] if isinstance(o, dict)}
    for name, dt, shape in target.outputs:
        o = got.get(name)
        if o is None:
            return f"the answer has no output {name!r}", 0
        oshape = o.get("shape")
        if o.get("datatype") != dt:
            return f"the answer's {name} is {o.get('datatype')}, expected {dt}", 0
        if (
            not isinstance(oshape, list)
            or len(oshape) != len(shape)
            or any(w not in (-1, g) for w, g in zip(shape, oshape, strict=False))
            or (oshape and oshape[0] != 1)
        ):
            return f"the answer's {name} has shape {oshape}, expected {list(shape)}", 0
        count = math.prod(oshape)
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            if size != count * SIZES.get(dt, 0):
                return f"the answer's {name} has {size} bytes for shape {oshape}", 0
        elif not isinstance(o.get("data"), list) or len(o["data"]) != count:
            return f"the answer's {name} has no data for shape {oshape}", 0
    batch = (doc.get("parameters") or {}).get("batch_size", 0)
    return None, int(batch) if isinstance(batch, int) else 0


# --- the client process ----------------------------------------------------------------


class Ledger:
    """The requests of one command: per request its times, failure and batch.
    ``on_done(i, error)`` is told of each request's first answer or failure (a harness
    passing answers on: benchmarks/serving_loadgen.py)."""

    def __init__(self, on_done: Callable[[int, str | None], None] | None = None) -> None:
        self.on_done = on_done
        self.arrival: list[float] = []
        self.start: list[float] = []
        self.finish: list[float] = []
        self.lateness: list[float] = []
        self.failed: list[bool] = []
        self.batch: list[int] = []
        self.left = 0  # requests sent or waiting, not yet answered
        self.errors: dict[str, int] = {}
        self.timeouts = 0
        self.refused: str | None = None
        self.changed = asyncio.Event()

    def add(self, t: float, late: float = math.nan) -> int:
        self.arrival.append(t)
        self.start.append(math.nan)
        self.finish.append(math.nan)
        self.lateness.append(late)
        self.failed.append(False)
        self.batch.append(0)
        self.left += 1
        return len(self.arrival) - 1

    def done(self, i: int, error: str | None, batch: int = 0) -> None:
        if not math.isnan(self.finish[i]):
            return
        self.finish[i] = time.perf_counter()
        self.batch[i] = batch
        if error is not None:
            self.failed[i] = True
            key = error if error in self.errors or len(self.errors) < MAX_ERRORS else OTHER_ERRORS
            self.errors[key] = self.errors.get(key, 0) + 1
        self.left -= 1
        self.changed.set()
        if self.on_done is not None:
            self.on_done(i, error)

    def requests(self, lo: int, hi: int) -> Requests:
        f = np.asarray
        return Requests(
            f(self.arrival[lo:hi], dtype=float),
            f(self.start[lo:hi], dtype=float),
            f(self.finish[lo:hi], dtype=float),
            f(self.lateness[lo:hi], dtype=float),
            f(self.failed[lo:hi], dtype=bool),
            f(self.batch[lo:hi], dtype=np.int32),
        )


class _Conn(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed by httptools."""

    def __init__(self, pool: Pool) -> None:
        import httptools

        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.current: int | None = None
        self.chunks: list[bytes] = []
        self.head_len: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, i: int) -> None:
        run = self.pool.run
        self.current, self.chunks, self.head_len = i, [], None
        run.start[i] = time.perf_counter()
        assert self.transport is not None
        self.transport.write(self.pool.target.request)

    def data_received(self, data: bytes) -> None:
        import httptools

        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._drop(f"the answer is not HTTP: {e}")

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            try:
                self.head_len = int(value)
            except ValueError:
                self.head_len = None

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        i, self.current = self.current, None
        if i is None:
            return
        pool = self.pool
        error, batch = check_answer(
            self.parser.get_status_code(), b"".join(self.chunks), self.head_len, pool.target
        )
        pool.run.done(i, error, batch)
        if self.parser.should_keep_alive():
            pool.release(self)
        else:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)
        if self.current is not None:
            i, self.current = self.current, None
            self.pool.run.done(i, "the server closed the connection before answering")

    def _drop(self, why: str) -> None:
        if self.current is not None:
            i, self.current = self.current, None
            self.pool.run.done(i, why)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Idle keep-alive connections; a request with none idle opens one (up to the most),
    or waits for the first to come free."""

    def __init__(self, target: Target, max_conns: int = MAX_CONNECTIONS) -> None:
        self.target, self.max_conns = target, max_conns
        self.idle: list[_Conn] = []
        self.all: set[_Conn] = set()
        self.opening = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.waiting: collections.deque[int] = collections.deque()
        self.run = Ledger()

    def submit(self, i: int) -> None:
        if self.idle:
            self.idle.pop().send(i)
            return
        self.waiting.append(i)
        if len(self.all) + self.opening < self.max_conns:
            self.opening += 1
            task = asyncio.get_running_loop().create_task(self._open())
            self.tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self.tasks.discard)

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Conn(self), self.target.host, self.target.port
            )
        except OSError as e:
            self.opening -= 1
            why = f"cannot connect to {self.target.host}:{self.target.port}: {e.strerror or e}"
            self.run.refused = why
            if self.waiting:
                self.run.done(self.waiting.popleft(), why)
            return
        self.opening -= 1
        self.all.add(conn)
        self.release(conn)

    def release(self, conn: _Conn) -> None:
        run = self.run
        while self.waiting:
            i = self.waiting.popleft()
            if math.isnan(run.finish[i]):  # not timed out while it waited
                conn.send(i)
                return
        self.idle.append(conn)

    def lost(self, conn: _Conn) -> None:
        self.all.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def expire(self, now: float) -> None:
        """Fail every request older than the timeout (its connection is closed: an answer
        arriving later would belong to no one)."""
        run, limit = self.run, self.target.timeout_s
        why = f"no answer within {limit:.3g} s"
        for c in list(self.all):
            i = c.current
            if i is not None and now - run.arrival[i] > limit:
                c.current = None
                run.timeouts += 1
                run.done(i, why)
                c.close()
        for i in list(self.waiting):
            if now - run.arrival[i] > limit and math.isnan(run.finish[i]):
                run.timeouts += 1
                run.done(i, why)

    def reset(self) -> None:
        """A fresh record for the next command; connections in flight are dropped."""
        for c in list(self.all):
            if c.current is not None:
                c.current = None
                c.close()
        self.waiting.clear()
        self.run = Ledger()


async def watch_timeouts(pool: Pool) -> None:
    """Fail the requests past their time-out, every CHECK_S, for as long as the loop runs."""
    while True:
        await asyncio.sleep(CHECK_S)
        pool.expire(time.perf_counter())


async def _single(pool: Pool, n: int, max_s: float) -> dict[str, Any]:
    """One request at a time; stops at the first that times out or cannot connect."""
    run = pool.run
    t_end = time.perf_counter() + max_s
    for k in range(n):
        t = time.perf_counter()
        if k and t > t_end:
            break
        i = run.add(t)
        run.changed.clear()
        pool.submit(i)
        while math.isnan(run.finish[i]):
            await run.changed.wait()
            run.changed.clear()
        if run.timeouts or run.refused:
            break
    return {"requests": run.requests(0, len(run.arrival)), "errors": dict(run.errors)}


async def _offline(pool: Pool, n: int, max_s: float, concurrency: int) -> dict[str, Any]:
    """``n`` requests due at once, ``concurrency`` of them in flight at a time."""
    run = pool.run
    t0 = time.perf_counter()
    sent = 0
    while sent < n or run.left:
        while sent < n and run.left < concurrency and time.perf_counter() - t0 <= max_s:
            pool.submit(run.add(t0))
            sent += 1
        if not run.left:
            break
        run.changed.clear()
        await run.changed.wait()
        if run.timeouts or run.refused:
            break
    reqs = run.requests(0, len(run.arrival))
    ok = reqs.served & ~reqs.failed
    took = float(np.nanmax(reqs.finish[ok]) - t0) if ok.any() else math.nan
    return {"requests": reqs, "took": took, "errors": dict(run.errors)}


async def _windows(pool: Pool, conn: Connection, rate: float, window_s: float, seed: int) -> None:
    run = pool.run
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter() + LEAD_S
    arrivals = Arrivals(rate, t0, seed)
    times: list[float] = []
    edges: list[int] = []  # window k's requests are [edges[k-1], edges[k])
    stop = asyncio.Event()

    def poll() -> None:
        try:
            if conn.poll():
                conn.recv()
                stop.set()
                return
        except (EOFError, OSError):  # the parent is gone
            stop.set()
            return
        loop.call_later(CHECK_S, poll)

    poll()

    async def sender() -> None:
        k = 0
        while not stop.is_set():
            new = arrivals.until(t0 + (k + 1) * window_s).tolist()
            times.extend(new)
            edges.append(len(times))
            for t in new:
                now = time.perf_counter()
                # never before its time: the loop's timers round to the millisecond and
                # fire up to one early, which would time an answer from before it was asked
                while now < t:
                    await asyncio.sleep(t - now)
                    if stop.is_set():
                        return
                    now = time.perf_counter()
                pool.submit(run.add(t, now - t))
            k += 1

    task = loop.create_task(sender())
    k, first_open = 0, 0  # the first request not yet answered

    def window_done() -> bool:
        nonlocal first_open
        if len(edges) <= k or len(run.arrival) < edges[k]:
            return False
        finish, end = run.finish, edges[k]
        while first_open < end and not math.isnan(finish[first_open]):
            first_open += 1
        return first_open >= end

    try:
        while not stop.is_set():
            while not stop.is_set() and not window_done():
                run.changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(run.changed.wait(), CHECK_S)
            if stop.is_set():
                break
            lo, hi = (edges[k - 1] if k else 0), edges[k]
            w0, w1 = t0 + k * window_s, t0 + (k + 1) * window_s
            fin = np.asarray(run.finish[:hi], dtype=float)
            completed = int(np.count_nonzero((fin >= w0) & (fin < w1)))
            gave_up = None
            if run.refused:
                gave_up = run.refused
            elif run.timeouts:
                gave_up = (
                    f"{run.timeouts} request(s) had no answer within "
                    f"{pool.target.timeout_s:.3g} s: the server is overloaded or not answering"
                )
            conn.send(
                (
                    "window",
                    WindowData(w0, w1, run.requests(lo, hi), completed, gave_up, dict(run.errors)),
                )
            )
            k += 1
            if gave_up:
                await stop.wait()
    finally:
        task.cancel()
        stop.set()


def _main(conn: Connection, target: Target, cores: tuple[int, ...] = ()) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends us
    try:  # on its own core before anything is sent (``cores``)
        pin(cores)
    except OSError as e:
        conn.send(("error", f"cannot run on cores {list(cores)}: {e}"))
        return
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pool = Pool(target)
    watch = loop.create_task(watch_timeouts(pool))
    # the instrument's own pauses land in every latency it times: what start-up left is
    # never walked again by the collector (``oip.serve_forever``: 160-180 ms walks)
    gc.collect()
    gc.freeze()
    conn.send(("ready", affinity()))
    while True:
        try:
            cmd, args = conn.recv()
        except EOFError:
            break
        if cmd == "close":
            break
        pool.reset()
        try:
            if cmd == "single":
                conn.send(("single", loop.run_until_complete(_single(pool, *args))))
            elif cmd == "offline":
                conn.send(("offline", loop.run_until_complete(_offline(pool, *args))))
            elif cmd == "windows":
                loop.run_until_complete(_windows(pool, conn, *args))
                conn.send(("stopped", None))
        except Exception as e:  # the parent raises it
            conn.send(("error", f"{type(e).__name__}: {e}"))
    watch.cancel()
    pool.reset()


class Client:
    """The client process, driven from the parent (``served.Endpoint``); ``cores``: the
    cores it pins itself to as it starts (() where it is not pinned), and ``affinity`` the
    ones it had once started (None where the platform cannot say)."""

    def __init__(self, target: Target, cores: tuple[int, ...] = ()) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_main, args=(child, target, cores), daemon=True)
        self.proc.start()
        child.close()
        self.target = target
        self.errors: dict[str, int] = {}
        self.affinity: tuple[int, ...] | None = self._expect("ready", START_TIMEOUT_S)

    def _expect(self, what: str, timeout: float) -> Any:
        return expect(self.conn, what, timeout, ClientError, "the load generator's process")

    def single_stream(self, n: int, max_s: float) -> Requests:
        self.conn.send(("single", (n, max_s)))
        out = self._expect("single", max_s + self.target.timeout_s + GRACE_S)
        self._count(out["errors"])
        return out["requests"]

    def offline(self, n: int, max_s: float, concurrency: int) -> tuple[Requests, float]:
        self.conn.send(("offline", (n, max_s, concurrency)))
        out = self._expect("offline", max_s + self.target.timeout_s + GRACE_S)
        self._count(out["errors"])
        return out["requests"], out["took"]

    def windows(self, rate: float, window_s: float, seed: int) -> Iterator[WindowData]:
        self.conn.send(("windows", (rate, window_s, seed)))
        last: dict[str, int] = {}
        try:
            while True:
                w: WindowData = self._expect("window", window_s + self.target.timeout_s + GRACE_S)
                last = w.errors
                yield w
        finally:
            self._count(last)
            self._stop()

    def _count(self, errors: dict[str, int]) -> None:
        """Every error the endpoint's answers had, over every command (bounded as each)."""
        for k, v in errors.items():
            if k in self.errors or len(self.errors) < MAX_ERRORS:
                self.errors[k] = self.errors.get(k, 0) + v
            else:
                self.errors[OTHER_ERRORS] = self.errors.get(OTHER_ERRORS, 0) + v

    def _stop(self) -> None:
        if not self.proc.is_alive():
            return
        self.conn.send(("stop", None))
        deadline = time.monotonic() + self.target.timeout_s + GRACE_S
        while time.monotonic() < deadline and self.conn.poll(deadline - time.monotonic()):
            kind, _value = self.conn.recv()
            if kind in ("stopped", "error"):
                return

    def close(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(("close", None))
            self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(2.0)
        self.conn.close()
