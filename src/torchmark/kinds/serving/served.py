"""A fleet served over the network: the open loop (``client``) in its own process driving an
Open Inference Protocol v2 endpoint, so the search and the point judge measure the model as
its users reach it.

    OwnServer(recipe, ...)     torchmark's server (``oip``) started as a subprocess: "as
                               served"; its batcher is set per search setting; on the
                               cores ``cores.plan`` leaves it, the client on its own
    Endpoint(url, name, ...)   the Fleet: the model's tensors read from /v2/models/{name},
                               one request pre-encoded (binary tensor data), the client
                               process started; the user's server (``--endpoint``)
                               batches as it is configured: one setting, the server's

What is timed: from each request's scheduled arrival to its answer decoded and checked at
the client, over loopback; what a front end costs (HTTP, JSON, copies, the event loop) is
in every latency, as it is in every user's.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from torchmark.errors import InputError, TorchmarkError
from torchmark.kinds.serving.client import Client, Target, infer_request
from torchmark.kinds.serving.cores import CorePlan, affinity
from torchmark.kinds.serving.fleet import ForwardStuck, WindowData, stuck_text
from torchmark.kinds.serving.oip import DATATYPES, READY_LINE, STAMPS_ENV
from torchmark.kinds.serving.server import FIELDS, GIVE_UP_BOUNDS, GIVE_UP_MIN_S, Batching, Requests
from torchmark.run.isolation import where_stuck

START_TIMEOUT_S = 180.0  # importing torch and building the model on a loaded host
HTTP_TIMEOUT_S = 5.0
WATCH_S = 0.1  # how often the server's forwards are looked at


class ServerError(TorchmarkError):
    """torchmark's own server did not start."""


def _get(url: str, timeout: float = HTTP_TIMEOUT_S) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}


def _post(url: str, doc: dict[str, Any], timeout: float = HTTP_TIMEOUT_S) -> Any:
    req = urllib.request.Request(
        url, json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def _input(spec: dict[str, Any], seed: int) -> np.ndarray:
    """Random data of the tensor's datatype and shape (batch 1), never zeros."""
    name, dt, shape = spec.get("name"), spec.get("datatype"), spec.get("shape")
    dtype = DATATYPES.get(str(dt))
    if dtype is None or not isinstance(shape, list):
        raise InputError(f"the endpoint's input {name!r} is {dt} {shape}: not one served here")
    dims = [1 if (i == 0 and d == -1) else int(d) for i, d in enumerate(shape)]
    if any(d < 0 for d in dims):
        raise InputError(
            f"the endpoint's input {name!r} has shape {shape}: only the first (batch) "
            "dimension may vary for this load test"
        )
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(dims).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, dims).astype(dtype)
    return rng.integers(1, 100, dims).astype(dtype)


class Endpoint:
    """The Fleet of the module docstring over ``url`` (``http://host:port``)."""

    def __init__(
        self,
        url: str,
        model: str,
        bound_s: float,
        own: bool = False,
        seed: int = 0,
        client_cores: tuple[int, ...] = (),
    ) -> None:
        absent = missing()
        if absent:
            raise InputError(f"serving over HTTP is not available: {absent}")
        parts = urlsplit(url if "//" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise InputError(
                f"--endpoint {url!r}: give http://HOST:PORT, e.g. http://127.0.0.1:8000"
            )
        self.url, self.model, self.own = f"http://{parts.hostname}:{parts.port}", model, own
        try:
            status, _ = _get(f"{self.url}/v2/health/ready")
        except (OSError, ValueError) as e:
            raise InputError(f"--endpoint {self.url}: cannot reach it ({e}); is it running?") from e
        if status != 200:
            raise InputError(f"--endpoint {self.url}: /v2/health/ready answered {status}")
        status, meta = _get(f"{self.url}/v2/models/{model}")
        if status != 200 or not isinstance(meta, dict):
            err = meta.get("error") if isinstance(meta, dict) else ""
            raise InputError(
                f"--endpoint {self.url} has no model {model!r} ({status}: {err}); "
                "give its name with --model-name"
            )
        inputs = [
            (s["name"], s["datatype"], _input(s, seed + i))
            for i, s in enumerate(meta.get("inputs") or [])
        ]
        outputs = meta.get("outputs") or []
        if not inputs or not outputs:
            raise InputError(f"--endpoint {self.url}: model {model!r} lists no inputs or outputs")
        self.described = ", ".join(f"{n} {dt}{list(a.shape)}" for n, dt, a in inputs)
        self.timeout_s = max(GIVE_UP_BOUNDS * bound_s, GIVE_UP_MIN_S)
        host, port = parts.hostname, parts.port
        self.target = Target(
            host,
            port,
            infer_request(host, port, model, inputs, [o["name"] for o in outputs]),
            tuple((o["name"], o["datatype"], tuple(o["shape"])) for o in outputs),
            self.timeout_s,
        )
        self.batching: Batching | None = None
        self.client = Client(self.target, client_cores)
        # the cores the client and (torchmark's own) server had, as read from each process
        # once it started (None: not known)
        self.client_cores = self.client.affinity
        self.server_cores: tuple[int, ...] | None = None
        # torchmark's own server: why it was killed ("" while its forwards are in bound)
        self.stuck: Callable[[float], str] | None = None

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    @property
    def errors(self) -> dict[str, int]:
        """What the endpoint's failed answers said, over everything sent so far."""
        return self.client.errors

    def said(self) -> str:
        """The first errors, as a clause for a search that ended on them ("" if none)."""
        if not self.errors:
            return ""
        top = sorted(self.errors.items(), key=lambda kv: -kv[1])[:2]
        return "; ".join(f"{k} (x{v})" for k, v in top)

    def _check(self, wait_s: float = 0.0) -> None:
        """``ForwardStuck`` where the server's watcher killed it (waiting up to ``wait_s``
        for its word)."""
        said = self.stuck(wait_s) if self.stuck is not None else ""
        if said:
            raise ForwardStuck(said)

    def _batch(self, batching: Batching) -> None:
        """torchmark's own server takes each setting; another's batches as configured."""
        self._check()
        if self.own and batching != self.batching:
            try:
                _post(
                    f"{self.url}/torchmark/batching",
                    {"max_batch": batching.max_batch, "max_wait_s": batching.max_wait_s},
                )
            except OSError as e:  # a forward that holds the GIL stops the front end too
                self._check(wait_s=math.inf)
                raise ServerError(f"torchmark's OIP server did not take a setting: {e}") from e
            self.batching = batching

    def single_stream(self, n: int, max_s: float) -> Requests:
        self._batch(Batching(1, 0.0))
        out = self.client.single_stream(n, max_s)
        self._check()
        return out

    def offline(self, batch: int, n: int, max_s: float) -> tuple[Requests, float]:
        self._batch(Batching(batch, 0.0))
        reqs, took = self.client.offline(n, max_s, max(64, 4 * batch))
        self._check()
        ok = reqs.served & ~reqs.failed
        return Requests(*(getattr(reqs, k)[ok] for k in FIELDS)), took

    def windows(
        self, rate: float, batching: Batching, window_s: float, bound_s: float, seed: int
    ) -> Iterator[WindowData]:
        self._batch(batching)
        source = self.client.windows(rate, window_s, seed)
        if self.stuck is None:
            return source
        return self._watched(source)

    def _watched(self, source: Iterator[WindowData]) -> Iterator[WindowData]:
        try:
            for w in source:
                self._check()
                yield w
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()


def missing() -> str | None:
    """Why serving over HTTP is not available here (None: it is): the server needs uvicorn,
    the client httptools (both in the ``server`` extra)."""
    import importlib.util

    absent = [m for m in ("uvicorn", "httptools") if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return f"{' and '.join(absent)} not installed (pip install 'torchmark[server]')"


def _die_with_parent() -> None:
    """In the server's process before it runs: SIGTERM when the parent dies (even by
    SIGKILL), so no server outlives the run that started it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class OwnServer:
    """torchmark's OIP server in a subprocess, on a free loopback port: ``url`` once up."""

    def __init__(
        self,
        recipe: Any | None = None,
        name: str = "model",
        model_workers: int = 0,
        threads: int = 1,
        fake_ms: float | None = None,
        env: dict[str, str] | None = None,
        device: str = "cpu",
        forward_bound_s: float | None = None,
        cores: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        self.forward_bound_s = forward_bound_s
        self._said = ""  # why the watcher killed the server ("" while it has not)
        self._decided = threading.Event()  # the watcher killed it, or stopped watching
        self._stamps = tempfile.mkdtemp(prefix="torchmark-stamps-")
        args = [sys.executable, "-m", "torchmark.kinds.serving.oip", "--name", name]
        args += ["--model-workers", str(model_workers), "--threads", str(threads)]
        args += ["--device", device]
        if cores:  # it pins itself as it starts: its model workers inherit the cores
            args += ["--cores", ",".join(map(str, cores))]
        self._recipe_file: str | None = None
        if fake_ms is not None:
            args += ["--fake-ms", str(fake_ms)]
        else:
            fd, path = tempfile.mkstemp(prefix="torchmark-recipe-", suffix=".pkl")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(recipe, f)
            self._recipe_file = path
            args += ["--recipe", path]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, STAMPS_ENV: self._stamps, **(env or {})},
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            start_new_session=True,  # its model workers too are killed as one group
        )
        self._watcher: threading.Thread | None = None
        if forward_bound_s is not None:
            self._watcher = threading.Thread(target=self._watch, daemon=True)
            self._watcher.start()
        self.url = self._wait_ready()
        self.cores = affinity(self.proc.pid)  # what it runs on (None: not known)

    def stuck(self, wait_s: float = 0.0) -> str:
        """Why the server was killed, a forward of its model past the bound ("" if not);
        ``wait_s``: how long to wait for the watcher to decide."""
        if wait_s > 0 and self._watcher is not None:
            self._decided.wait(min(wait_s, 2 * (self.forward_bound_s or 0.0) + WATCH_S))
        return self._said

    def settle(self) -> None:
        """At a search's end: wait while a forward still runs, until it returns or the
        watcher calls it stuck (``ForwardStuck``), so that a search that ended on requests
        unanswered says why."""
        if self._watcher is None:
            return
        assert self.forward_bound_s is not None
        deadline = time.monotonic() + self.forward_bound_s + 1.0
        while self._running() and time.monotonic() < deadline:
            if self._decided.wait(WATCH_S):
                break
        if self._said:
            raise ForwardStuck(self._said)

    def _started(self) -> Iterator[tuple[int, float]]:
        """(pid, when its forward started) for each of the server's processes in a forward."""
        for stamp in Path(self._stamps).glob("*.stamp"):
            with contextlib.suppress(OSError, struct.error, ValueError):
                (started,) = struct.unpack("d", stamp.read_bytes()[:8])
                if started:
                    yield int(stamp.stem), started

    def _running(self) -> bool:
        return next(self._started(), None) is not None

    def _watch(self) -> None:
        """Every ``WATCH_S``: any process of the server whose forward has run past the
        bound is made to write its stack, and the server and its workers are killed."""
        assert self.forward_bound_s is not None
        bound = self.forward_bound_s
        while not self._decided.wait(WATCH_S):
            now = time.monotonic()
            for pid, started in self._started():
                if now - started >= bound:
                    with contextlib.suppress(OSError, struct.error):
                        self._kill_stuck(pid, started)
                        return

    def _kill_stuck(self, pid: int, started: float) -> None:
        at = ""
        where = Path(self._stamps) / f"{pid}.where"
        if where.exists():
            with where.open("rb") as f:
                at = where_stuck(pid, f, thread_with="in _call_impl")
        ran = time.monotonic() - started
        self._killpg()
        assert self.forward_bound_s is not None
        said = f"in torchmark's OIP server{at}; the server and its model workers were killed"
        self._said = stuck_text(self.forward_bound_s, ran, said)
        self._decided.set()

    def _killpg(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _wait_ready(self) -> str:
        import selectors

        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not sel.select(timeout=min(1.0, deadline - time.monotonic())):
                if self.proc.poll() is not None:
                    break
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(READY_LINE):
                return "http://" + line[len(READY_LINE) :].split()[0]
        self._killpg()  # it and any worker it started: its stderr then ends
        self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        self.close()
        last = err.strip().splitlines()[-1] if err.strip() else "no message"
        raise ServerError(f"torchmark's OIP server did not start: {last}")

    def __enter__(self) -> OwnServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._decided.set()  # the watcher stops
        if self._watcher is not None:
            self._watcher.join()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._killpg()  # model workers the server left (killed, it could not end them)
        shutil.rmtree(self._stamps, ignore_errors=True)
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        if self._recipe_file:
            with contextlib.suppress(OSError):
                os.unlink(self._recipe_file)


def url_name(name: str) -> str:
    """A model's name as a URL path segment: a SPEC (``models.py:make``) is ``model``."""
    return name if re.fullmatch(r"[A-Za-z0-9_.-]+", name) else "model"


@contextlib.contextmanager
def as_served(
    recipe: Any,
    name: str,
    bound_s: float,
    model_workers: int = 0,
    threads: int = 1,
    device: str = "cpu",
    forward_bound_s: float | None = None,
    cores: CorePlan | None = None,
) -> Iterator[Endpoint]:
    """The model behind torchmark's own server, and the fleet that drives it; with
    ``forward_bound_s``, a forward past it kills the server (``ForwardStuck`` next);
    ``cores``: the client's and the server's cores (``cores.plan``; None: not pinned)."""
    name = url_name(name)
    cores = cores or CorePlan()
    with (
        OwnServer(
            recipe,
            name,
            model_workers,
            threads,
            device=device,
            forward_bound_s=forward_bound_s,
            cores=cores.server,
        ) as srv,
        Endpoint(srv.url, name, bound_s, own=True, client_cores=cores.client) as fleet,
    ):
        fleet.server_cores = srv.cores
        if forward_bound_s is not None:
            fleet.stuck = srv.stuck
        yield fleet
        srv.settle()  # (not reached when the search raised)


def served_splits(cores: int) -> list[tuple[int, int]]:
    """(model worker processes, threads each) on ``cores``: the model in the front end's
    process with every core (0, N), then 1, 2, 4... workers on the cores the front end
    leaves (at least one thread each)."""
    out = [(0, cores)]
    w = 1
    while w < cores:
        out.append((w, max(1, (cores - 1) // w)))
        w *= 2
    return out
