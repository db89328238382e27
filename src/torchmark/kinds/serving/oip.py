"""A model behind an Open Inference Protocol v2 REST server (KServe v2, Triton's HTTP API):
what "as served" measures.

    GET  /v2/health/live, /v2/health/ready          200 when up / when the model is loaded
    GET  /v2                                         server metadata (its extensions)
    GET  /v2/models/{name}, /v2/models/{name}/ready  the model's tensors / 200 when ready
    POST /v2/models/{name}/infer                     JSON tensors, or the binary tensor data
                                                     extension (Inference-Header-Content-Length:
                                                     a JSON header, then the raw bytes)
    POST /torchmark/batching                         torchmark's own: the batcher's settings,
                                                     so a search needs no restart per setting
    errors: {"error": "..."} with 400 (bad request), 404 (no such model or path), 500 (the
    model failed)

The stack: a bare ASGI app on uvicorn, with uvloop and httptools where installed. uvicorn is
the ASGI server KServe's and MLServer's Python runtimes run on; its httptools parser is its
fastest. No framework on top: FastAPI's per-request validation cost more CPU than a small
model's forward, which is exactly the front end's share this server exists to measure.

Behind it, the dynamic batcher (Triton's ``max_batch_size`` / ``max_queue_delay``): a batch
is sent to the model when ``max_batch`` requests wait or the oldest has waited
``max_wait_s``, and a model slot is free. The model runs in a thread of this process (a fake
device, a GPU: torch releases the GIL in its kernels) or, on a CPU, in ``model_workers``
processes of ``threads`` threads each: the cores split between the front end (this
process's event loop) and the model.

Run as its own process: ``python -m torchmark.kinds.serving.oip --model simplenet --port 0``
prints ``listening on http://127.0.0.1:PORT`` (the port it bound) once it is ready;
``--cores`` pins it, and so its model workers, to those cores as it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures as cf
import contextlib
import gc
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The protocol's datatypes and numpy's (BYTES, strings, is not served here)
DATATYPES = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
NAMES = {v: k for k, v in DATATYPES.items()}
HEADER = "inference-header-content-length"
READY_LINE = "listening on http://"
SWITCH_S = 1e-4


class OipError(Exception):
    """A request the protocol answers with ``status`` and {"error": message}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor: its datatype and shape, -1 where it varies (the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def doc(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass
class ServedModel:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    run: Callable[[list[np.ndarray]], Awaitable[list[np.ndarray]]]  # one batch
    slots: int = 1  # batches the model runs at once (its worker processes)


@dataclass
class _Pending:
    arrays: list[np.ndarray]
    n: int
    t: float
    done: asyncio.Future[tuple[list[np.ndarray], int]]


@dataclass
class Batcher:
    """The dynamic batcher of the module docstring, on the running event loop."""

    model: ServedModel
    max_batch: int = 1
    max_wait_s: float = 0.0
    queue: collections.deque[_Pending] = field(default_factory=collections.deque)
    busy: int = 0
    timer: asyncio.TimerHandle | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def infer(self, arrays: list[np.ndarray], n: int) -> tuple[list[np.ndarray], int]:
        """This request's outputs, and the size of the batch it was served in."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[list[np.ndarray], int]] = loop.create_future()
        self.queue.append(_Pending(arrays, n, loop.time(), done))
        self._kick()
        return await done

    def _kick(self) -> None:
        loop = asyncio.get_running_loop()
        while self.queue and self.busy < self.model.slots:
            waiting = sum(p.n for p in self.queue) if self.max_wait_s > 0 else 0
            if self.max_wait_s > 0 and waiting < self.max_batch:
                deadline = self.queue[0].t + self.max_wait_s
                if loop.time() < deadline:
                    if self.timer is None:
                        self.timer = loop.call_at(deadline, self._fire)
                    return
            batch: list[_Pending] = []
            items = 0
            while self.queue and (not batch or items + self.queue[0].n <= self.max_batch):
                p = self.queue.popleft()
                batch.append(p)
                items += p.n
            self.busy += 1
            task = loop.create_task(self._run(batch, items))
            self.tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self.tasks.discard)

    def _fire(self) -> None:
        self.timer = None
        self._kick()

    async def _run(self, batch: list[_Pending], items: int) -> None:
        try:
            cols = len(batch[0].arrays)
            arrays = [
                batch[0].arrays[i]
                if len(batch) == 1
                else np.concatenate([p.arrays[i] for p in batch])
                for i in range(cols)
            ]
            outs = await self.model.run(arrays)
            at = 0
            for p in batch:
                mine = [o[at : at + p.n] for o in outs]
                at += p.n
                if not p.done.done():
                    p.done.set_result((mine, items))
        except Exception as e:  # the model failing fails its batch, not the server
            err = OipError(500, f"the model failed: {type(e).__name__}: {_first_line(e)}")
            for p in batch:
                if not p.done.done():
                    p.done.set_exception(err)
        finally:
            self.busy -= 1
            self._kick()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class OipApp:
    """The bare ASGI app: routes, the protocol's bodies, one ``Batcher``."""

    def __init__(self, model: ServedModel, max_batch: int = 1, max_wait_s: float = 0.0) -> None:
        self.model = model
        self.batcher = Batcher(model, max_batch, max_wait_s)
        base = f"/v2/models/{model.name}"
        self.routes: dict[tuple[str, str], Callable[[bytes, dict[str, str]], Any]] = {
            ("GET", "/v2/health/live"): self._ok,
            ("GET", "/v2/health/ready"): self._ok,
            ("GET", "/v2"): self._server_meta,
            ("GET", base): self._model_meta,
            ("GET", base + "/ready"): self._ok,
            ("POST", "/torchmark/batching"): self._set_batching,
        }
        self.infer_path = base + "/infer"

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        method, path = scope["method"], scope["path"]
        try:
            if method == "POST" and path == self.infer_path:
                headers = {k.decode("latin-1").lower(): v for k, v in scope["headers"]}
                status, out_headers, payload = await self._infer(body, headers)
            else:
                route = self.routes.get((method, path))
                if route is None:
                    raise OipError(404, self._unknown(method, path))
                status, out_headers, payload = 200, [], route(body, {})
        except OipError as e:
            status, out_headers, payload = e.status, [], {"error": str(e)}
        if isinstance(payload, dict):
            data = json.dumps(payload, separators=(",", ":")).encode()
            out_headers = [(b"content-type", b"application/json"), *out_headers]
        else:
            data = payload
        out_headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": out_headers})
        await send({"type": "http.response.body", "body": data})

    def _unknown(self, method: str, path: str) -> str:
        if path.startswith("/v2/models/"):
            name = path.split("/")[3]
            if name != self.model.name:
                return f"unknown model {name!r}: this server serves {self.model.name!r}"
        return f"no route {method} {path}"

    def _ok(self, body: bytes, _: dict[str, str]) -> dict[str, Any]:
        return {}

    def _server_meta(self, body: bytes, _: dict[str, str]) -> dict[str, Any]:
        from torchmark import __version__

        return {"name": "torchmark", "version": __version__, "extensions": ["binary_tensor_data"]}

    def _model_meta(self, body: bytes, _: dict[str, str]) -> dict[str, Any]:
        return {
            "name": self.model.name,
            "versions": ["1"],
            "platform": "pytorch_torchmark",
            "inputs": [t.doc() for t in self.model.inputs],
            "outputs": [t.doc() for t in self.model.outputs],
            "parameters": {
                "max_batch": self.batcher.max_batch,
                "max_wait_s": self.batcher.max_wait_s,
                "model_slots": self.model.slots,
            },
        }

    def _set_batching(self, body: bytes, _: dict[str, str]) -> dict[str, Any]:
        try:
            doc = json.loads(body)
            max_batch, max_wait_s = int(doc["max_batch"]), float(doc["max_wait_s"])
        except (ValueError, KeyError, TypeError) as e:
            raise OipError(400, f"batching takes {{max_batch, max_wait_s}}: {e}") from None
        if max_batch < 1 or not max_wait_s >= 0:
            raise OipError(400, "batching: max_batch >= 1 and max_wait_s >= 0")
        self.batcher.max_batch, self.batcher.max_wait_s = max_batch, max_wait_s
        return {"max_batch": max_batch, "max_wait_s": max_wait_s}

    async def _infer(
        self, body: bytes, headers: dict[str, bytes]
    ) -> tuple[int, list[tuple[bytes, bytes]], Any]:
        head_len = headers.get(HEADER)
        try:
            cut = int(head_len) if head_len is not None else len(body)
            doc = json.loads(body[:cut])
        except ValueError as e:
            raise OipError(400, f"the request is not JSON: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
            raise OipError(400, "the request has no 'inputs' list")
        arrays, n = decode_inputs(doc, body[cut:], self.model.inputs)
        outs, batch = await self.batcher.infer(arrays, n)
        binary = _wants_binary(doc)
        reply: dict[str, Any] = {
            "model_name": self.model.name,
            "model_version": "1",
            "outputs": [],
            "parameters": {"batch_size": batch},
        }
        if "id" in doc:
            reply["id"] = doc["id"]
        raw: list[bytes] = []
        for spec, out in zip(self.model.outputs, outs, strict=True):
            t: dict[str, Any] = {
                "name": spec.name,
                "datatype": NAMES[out.dtype],
                "shape": list(out.shape),
            }
            if binary:
                b = np.ascontiguousarray(out).tobytes()
                t["parameters"] = {"binary_data_size": len(b)}
                raw.append(b)
            else:
                t["data"] = out.reshape(-1).tolist()
            reply["outputs"].append(t)
        if not binary:
            return 200, [], reply
        head = json.dumps(reply, separators=(",", ":")).encode()
        hdrs = [
            (b"content-type", b"application/octet-stream"),
            (HEADER.encode(), str(len(head)).encode()),
        ]
        return 200, hdrs, head + b"".join(raw)


def _wants_binary(doc: dict[str, Any]) -> bool:
    params = doc.get("parameters") or {}
    if params.get("binary_data_output"):
        return True
    return any((o.get("parameters") or {}).get("binary_data") for o in doc.get("outputs") or [])


def decode_inputs(
    doc: dict[str, Any], raw: bytes, specs: Sequence[TensorSpec]
) -> tuple[list[np.ndarray], int]:
    """The request's tensors in the model's input order, checked against ``specs``, and
    the batch they carry (their common first dimension)."""
    by_name: dict[str, np.ndarray] = {}
    at = 0
    for t in doc["inputs"]:
        try:
            name, dtname, shape = str(t["name"]), str(t["datatype"]), [int(d) for d in t["shape"]]
        except (KeyError, TypeError, ValueError):
            raise OipError(400, "each input needs name, datatype and shape") from None
        dtype = DATATYPES.get(dtname)
        if dtype is None:
            raise OipError(400, f"input {name!r}: datatype {dtname!r} is not served here")
        size = (t.get("parameters") or {}).get("binary_data_size")
        try:
            if size is not None:
                chunk = raw[at : at + int(size)]
                at += int(size)
                arr = np.frombuffer(chunk, dtype=dtype).reshape(shape)
            else:
                arr = np.asarray(t["data"], dtype=dtype).reshape(shape)
        except (KeyError, ValueError, TypeError) as e:
            raise OipError(
                400, f"input {name!r}: its data does not fit shape {shape}: {e}"
            ) from None
        by_name[name] = arr
    arrays, n = [], -1
    for spec in specs:
        if spec.name not in by_name:
            raise OipError(400, f"missing input {spec.name!r}")
        arr = by_name.pop(spec.name)
        if spec.datatype != NAMES[arr.dtype]:
            raise OipError(
                400, f"input {spec.name!r} is {NAMES[arr.dtype]}, the model takes {spec.datatype}"
            )
        want = spec.shape
        if len(arr.shape) != len(want) or any(
            w not in (-1, g) for w, g in zip(want, arr.shape, strict=True)
        ):
            raise OipError(
                400,
                f"input {spec.name!r} has shape {list(arr.shape)}, the model takes {list(want)}",
            )
        if n not in (-1, arr.shape[0]):
            raise OipError(400, "the inputs' first dimensions (the batch) differ")
        n = arr.shape[0]
        arrays.append(arr)
    if by_name:
        raise OipError(400, f"unknown input(s) {sorted(by_name)}")
    if n < 1:
        raise OipError(400, "an empty batch")
    return arrays, n


# --- the models it serves ------------------------------------------------------------


def fake_model(
    name: str = "fake",
    fixed_s: float = 0.001,
    per_item_s: float = 0.0,
    shape: tuple[int, ...] = (4,),
    slots: int = 1,
) -> ServedModel:
    """A device of known service time behind the server (``fake.FakeDevice``'s rule: a
    batch of n takes ``fixed_s + per_item_s * n``), on a thread so the event loop goes on;
    it answers each request's input summed over its items' last axis."""
    pool = cf.ThreadPoolExecutor(slots, thread_name_prefix="fake-device")

    def serve(arrays: list[np.ndarray]) -> list[np.ndarray]:
        n = arrays[0].shape[0]
        end = time.perf_counter() + fixed_s + per_item_s * n
        left = end - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return [arrays[0].astype(np.float32).sum(axis=-1, keepdims=True)]

    async def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(pool, serve, arrays)

    x = TensorSpec("INPUT__0", "FP32", (-1, *shape))
    y = TensorSpec("OUTPUT__0", "FP32", (-1, *shape[:-1], 1))
    return ServedModel(name, [x], [y], run, slots)


# the model in a worker process, built there by the pool's initializer
_WORKER: Any = None


def _init_worker(recipe: Any, threads: int, parent: int) -> None:
    import torch

    from torchmark.run.isolation import exit_with_parent

    exit_with_parent(parent)  # a server ended without its shutdown leaves none behind

    torch.set_num_threads(threads)
    global _WORKER
    _WORKER = TorchRunner(recipe())


def _run_in_worker(arrays: list[np.ndarray]) -> list[np.ndarray]:
    out: list[np.ndarray] = _WORKER(arrays)
    return out


class TorchRunner:
    """A ``model.Served`` (a built-in model or the user's) on the CPU or a GPU: the
    request's arrays as its inputs, its outputs as arrays. Positional tensor inputs are
    ``INPUT__0``.. (Triton's PyTorch backend's names), keyword tensors keep their names."""

    def __init__(self, served: Any, device: Any = None) -> None:
        import torch

        self.torch, self.model = torch, served.model.eval()
        self.device = device.torch_device if device is not None else torch.device("cpu")
        self.model.to(self.device)
        sample = served.factory(1)
        self.kw_names = [k for k, v in sample.kwargs.items() if isinstance(v, torch.Tensor)]
        if any(not isinstance(a, torch.Tensor) for a in sample.args) or len(self.kw_names) != len(
            sample.kwargs
        ):
            from torchmark.errors import InputError

            raise InputError(
                f"{served.name} takes inputs other than tensors: the server passes only "
                "tensors (give a model whose forward takes tensors)"
            )
        self.n_args = len(sample.args)
        tensors = [*sample.args, *(sample.kwargs[k] for k in self.kw_names)]
        names = [f"INPUT__{i}" for i in range(self.n_args)] + self.kw_names
        self.inputs = [
            TensorSpec(nm, NAMES[np.dtype(str(t.numpy().dtype))], (-1, *t.shape[1:]))
            for nm, t in zip(names, tensors, strict=True)
        ]
        self.sample = [t.numpy() for t in tensors]
        outs = self(self.sample)
        self.outputs = [
            TensorSpec(f"OUTPUT__{i}", NAMES[o.dtype], (-1, *o.shape[1:]))
            for i, o in enumerate(outs)
        ]

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        from torchmark.user.inputs import tensors_in

        ts = [torch.from_numpy(np.ascontiguousarray(a)).to(self.device) for a in arrays]
        kwargs = dict(zip(self.kw_names, ts[self.n_args :], strict=True))
        with _stamped(), torch.inference_mode():
            out = self.model(*ts[: self.n_args], **kwargs)
        return [t.detach().cpu().numpy() for t in tensors_in(out)]


# Where the process that started this server watches each forward (``served.OwnServer``):
# a folder, one file per process running the model, holding when its forward started
# (time.monotonic, 0: none runs) and, on WHERE_SIGNAL, the process's stack. The watcher runs
# no forward, so a forward that holds the GIL here cannot stop it.
STAMPS_ENV = "TORCHMARK_FORWARD_STAMPS"
_STAMP: list[int] = []  # this process's stamp file, opened at its first forward


@contextlib.contextmanager
def _stamped() -> Iterator[None]:
    folder = os.environ.get(STAMPS_ENV)
    if not folder:
        yield
        return
    if not _STAMP:
        import faulthandler

        from torchmark.run.isolation import WHERE_SIGNAL

        pid = os.getpid()
        if WHERE_SIGNAL is not None:
            where = open(os.path.join(folder, f"{pid}.where"), "w")  # noqa: SIM115
            faulthandler.register(WHERE_SIGNAL, file=where, all_threads=True)
        _STAMP.append(os.open(os.path.join(folder, f"{pid}.stamp"), os.O_CREAT | os.O_WRONLY))
    os.pwrite(_STAMP[0], struct.pack("d", time.monotonic()), 0)
    try:
        yield
    finally:
        os.pwrite(_STAMP[0], struct.pack("d", 0.0), 0)


def torch_model(
    recipe: Any, name: str, model_workers: int = 0, threads: int = 1, device: Any = None
) -> ServedModel:
    """The recipe's model behind the server: in a thread of this process
    (``model_workers`` 0; a GPU, or a CPU whose model shares the front end's process), or
    in ``model_workers`` processes of ``threads`` threads each."""
    import torch

    runner = TorchRunner(recipe(), device)  # the tensors' names and shapes, checked here
    if model_workers <= 0:
        torch.set_num_threads(threads)
        # the model's thread takes the GIL back between its ops; at Python's default switch
        # interval (5 ms) the event loop, busy parsing requests, held it that long each
        # time: SimpleNet at batch 8 served 113 requests/s here (504 at 0.1 ms), against
        # 1,259 at batch 1 (load average 5 from other jobs)
        sys.setswitchinterval(SWITCH_S)
        pool: cf.Executor = cf.ThreadPoolExecutor(1, thread_name_prefix="model")
        fn: Callable[[list[np.ndarray]], list[np.ndarray]] = runner
        slots = 1
    else:
        import multiprocessing as mp

        pool = cf.ProcessPoolExecutor(
            model_workers,
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(recipe, threads, os.getpid()),
        )
        fn, slots = _run_in_worker, model_workers
        # every worker built and warm before the first request (a cold one takes seconds)
        list(pool.map(fn, [runner.sample] * (2 * model_workers)))

    async def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, arrays)

    return ServedModel(name, runner.inputs, runner.outputs, run, slots)


# --- the process ---------------------------------------------------------------------


def stack() -> tuple[str, str]:
    """uvicorn's loop and HTTP parser: uvloop and httptools where installed."""
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    try:
        import httptools  # noqa: F401

        http = "httptools"
    except ImportError:
        http = "h11"
    return loop, http


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def serve_forever(app: OipApp, sock: socket.socket, announce: bool = True) -> None:
    """Serve ``app`` on the bound socket until SIGTERM / SIGINT (uvicorn's handlers)."""
    import uvicorn

    loop, http = stack()
    config = uvicorn.Config(
        app,
        loop=loop,
        http=http,
        lifespan="on",
        log_level="warning",
        access_log=False,
        backlog=2048,
        timeout_keep_alive=60,
    )
    server = uvicorn.Server(config)
    # What start-up left (torch's import graph, the model) lives as long as the server;
    # unfrozen, each full collection walked it again and every request in flight waited:
    # 164 ms every few seconds at 2,200 requests/s (the 2-core VM, 2026-12-06).
    # Production Python servers freeze it the same way.
    gc.collect()
    gc.freeze()
    if announce:
        host, port = sock.getsockname()[:2]
        print(f"{READY_LINE}{host}:{port} ({loop} + {http})", flush=True)
    server.run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torchmark.kinds.serving.oip")
    ap.add_argument("--model", default="simplenet", help="a built-in model's name")
    ap.add_argument("--name", default="", help="the model's name in URLs (default: --model)")
    ap.add_argument("--size", action="append", default=[], help="a built-in size, e.g. image=32")
    ap.add_argument("--fake-ms", type=float, default=None, help="a fake device: ms per batch")
    ap.add_argument("--fake-item-ms", type=float, default=0.0, help="... plus ms per item")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    ap.add_argument("--max-batch", type=int, default=1)
    ap.add_argument("--max-wait-ms", type=float, default=0.0)
    ap.add_argument("--model-workers", type=int, default=0, help="0: the model in-process")
    ap.add_argument("--threads", type=int, default=1, help="the model's threads (each worker)")
    ap.add_argument("--device", default="cpu", help="the model's device, e.g. cuda:0")
    ap.add_argument(
        "--cores", default="", help="the cores it and its model workers run on, e.g. 0,1,2"
    )
    ap.add_argument("--recipe", default=None, help=argparse.SUPPRESS)  # a pickled recipe file
    a = ap.parse_args(argv)
    if a.cores:  # before the model or its workers start: they inherit it
        from torchmark.kinds.serving.cores import pin

        try:
            pin(int(c) for c in a.cores.split(","))
        except (OSError, ValueError) as e:
            ap.error(f"--cores {a.cores}: {e}")
    name = a.name or a.model
    if a.fake_ms is not None:
        model = fake_model(name, a.fake_ms / 1e3, a.fake_item_ms / 1e3)
    else:
        if a.recipe:
            import pickle

            with open(a.recipe, "rb") as f:
                recipe = pickle.load(f)
        else:
            from torchmark.kinds.serving.model import builtin

            sizes = dict(s.split("=", 1) for s in a.size)
            recipe = builtin(a.model, {k: int(v) for k, v in sizes.items()})
        device = None
        if a.device != "cpu":
            from torchmark.devices import resolve

            device = resolve([a.device])[0]
        model = torch_model(recipe, name, a.model_workers, a.threads, device)
    app = OipApp(model, a.max_batch, a.max_wait_ms / 1e3)
    serve_forever(app, bind(a.host, a.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
