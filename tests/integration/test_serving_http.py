"""Serving over the network: torchmark's Open Inference Protocol server, the open-loop
client in its own process, and the fleet that joins them, with a fake device of known
service time behind the real HTTP stack (uvicorn on loopback), and hostile endpoints
written here from the protocol.

Every assertion holds at any speed or load of the machine: what is checked is what the
front end can only add to (a latency is never below the device's service time, and the
queue's share of fast answers never above M/D/1's), and that every hostile endpoint ends
with a verdict in bounded time (each request has a time-out), never how fast anything is.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from clitest import cli
from torchmark.errors import InputError
from torchmark.kinds.serving import client, cores, oip
from torchmark.kinds.serving.point import PointPlan, run_point
from torchmark.kinds.serving.search import SearchPlan, search
from torchmark.kinds.serving.served import Endpoint, OwnServer
from torchmark.kinds.serving.server import Batching
from torchmark.results import RunRecord
from torchmark.results.serving import DeviceAnswer, read

# the fake device's time per batch: short enough that a point holds the 459 requests
# LoadGen's early stopping asks of a p99 within the bound in ~2 s at half its capacity
D = 0.002
BOUND = 0.5


# -- the app in process (ASGI, no network) ----------------------------------------------------


def _call(app: oip.OipApp, method: str, path: str, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


def _failing_model() -> oip.ServedModel:
    async def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("CUDA out of memory\nsecond line")

    x = oip.TensorSpec("INPUT__0", "FP32", (-1, 4))
    return oip.ServedModel("bad", [x], [oip.TensorSpec("OUTPUT__0", "FP32", (-1, 1))], run)


def test_the_app_speaks_the_protocol_json_and_binary() -> None:
    app = oip.OipApp(oip.fake_model("m", 0.0))
    assert _call(app, "GET", "/v2/health/live").status_code == 200
    assert _call(app, "GET", "/v2/models/m/ready").status_code == 200
    meta = _call(app, "GET", "/v2/models/m").json()
    assert meta["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}]
    assert "binary_tensor_data" in _call(app, "GET", "/v2").json()["extensions"]
    doc = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2, 4], "data": [1] * 8}]}
    r = _call(app, "POST", "/v2/models/m/infer", json=doc)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert out["shape"] == [2, 1] and out["data"] == [4.0, 4.0]
    # the binary extension both ways
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    req = client.infer_request("t", 80, "m", [("INPUT__0", "FP32", x)], ["OUTPUT__0"])
    head, _, body = req.partition(b"\r\n\r\n")
    length = int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
    r = _call(
        app,
        "POST",
        "/v2/models/m/infer",
        content=body,
        headers={"Inference-Header-Content-Length": str(length)},
    )
    n = int(r.headers["inference-header-content-length"])
    reply = json.loads(r.content[:n])
    assert reply["outputs"][0]["parameters"]["binary_data_size"] == 4
    assert np.frombuffer(r.content[n:], np.float32).tolist() == [6.0]


def test_the_app_answers_bad_requests_with_the_protocols_errors() -> None:
    app = oip.OipApp(oip.fake_model("m", 0.0))
    wrong = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 3], "data": [1] * 3}]}
    r = _call(app, "POST", "/v2/models/m/infer", json=wrong)
    assert r.status_code == 400 and "shape [1, 3]" in r.json()["error"]
    r = _call(app, "POST", "/v2/models/m/infer", content=b"{not json")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
    r = _call(app, "GET", "/v2/models/other")
    assert r.status_code == 404 and "unknown model 'other'" in r.json()["error"]
    ints = {"inputs": [{"name": "INPUT__0", "datatype": "INT64", "shape": [1, 4], "data": [1] * 4}]}
    assert "the model takes FP32" in _call(app, "POST", "/v2/models/m/infer", json=ints).text
    r = _call(oip.OipApp(_failing_model()), "POST", "/v2/models/bad/infer", json=_doc(4))
    assert r.status_code == 500
    assert r.json()["error"] == "the model failed: RuntimeError: CUDA out of memory"


def _doc(width: int) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "INPUT__0", "datatype": "FP32", "shape": [1, width], "data": [0.5] * width}
        ]
    }


def test_the_batcher_serves_up_to_max_batch_and_waits_for_more_at_most_max_wait() -> None:
    seen: list[int] = []

    async def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        seen.append(arrays[0].shape[0])
        return [arrays[0][:, :1]]

    x = oip.TensorSpec("INPUT__0", "FP32", (-1, 2))
    model = oip.ServedModel("m", [x], [oip.TensorSpec("OUTPUT__0", "FP32", (-1, 1))], run)

    async def go() -> list[int]:
        b = oip.Batcher(model, max_batch=4, max_wait_s=0.05)
        one = np.ones((1, 2), np.float32)
        t0 = asyncio.get_running_loop().time()
        got = await asyncio.gather(*(b.infer([one], 1) for _ in range(6)))
        waited = asyncio.get_running_loop().time() - t0
        assert waited >= 0.05  # the last 2 waited for more, up to max wait
        return [n for _, n in got]

    sizes = asyncio.run(go())
    assert seen == [4, 2] and sizes == [4] * 4 + [2] * 2


def test_an_answer_is_checked_for_status_shape_dtype_and_data() -> None:
    t = client.Target("h", 1, b"", (("OUTPUT__0", "FP32", (-1, 10)),), 1.0)

    def body(**o: Any) -> bytes:
        out = {"name": "OUTPUT__0", "datatype": "FP32", "shape": [1, 10], "data": [0] * 10}
        return json.dumps({"outputs": [{**out, **o}], "parameters": {"batch_size": 3}}).encode()

    assert client.check_answer(200, body(), None, t) == (None, 3)
    assert "shape [1, 9]" in str(client.check_answer(200, body(shape=[1, 9]), None, t)[0])
    assert "is FP16" in str(client.check_answer(200, body(datatype="FP16"), None, t)[0])
    assert "no data" in str(client.check_answer(200, body(data=[0] * 3), None, t)[0])
    err = client.check_answer(500, b'{"error": "boom"}', None, t)[0]
    assert err == "HTTP 500: boom"
    assert "not an inference" in str(client.check_answer(200, b"[]", None, t)[0])


# -- the real stack: torchmark's server in its process, the client in its own ----------------


@pytest.fixture(scope="module")
def own() -> Iterator[OwnServer]:
    with OwnServer(name="fake", fake_ms=1e3 * D) as srv:
        yield srv


@pytest.fixture(scope="module")
def fleet(own: OwnServer) -> Iterator[Endpoint]:
    with Endpoint(own.url, "fake", BOUND, own=True) as ep:
        yield ep


def test_no_answer_is_faster_than_the_device_and_the_queue_is_md1s_or_worse(
    fleet: Endpoint,
) -> None:
    single = fleet.single_stream(20, 5.0)
    assert len(single) == 20 and not single.failed.any()
    assert single.latency.min() >= D
    rate = 250.0  # rho = 0.5
    plan = PointPlan(BOUND, max_point_s=6, min_requests=60, min_duration_s=2.5)
    p = run_point(fleet, rate, Batching(1, 0.0), plan)
    lat = p.kept.latency
    assert p.outcome == "within" and lat.size >= 20, p.why
    assert lat.min() >= D
    # M/D/1: P(W <= t) = (1 - rho) e^(lam t) for t < D; the HTTP stack only adds time, so
    # at most that share answers within D + t (with 4 standard errors for the sample)
    t, rho = 0.0002, rate * D
    bound = (1 - rho) * math.exp(rate * t)
    share = float(np.mean(lat <= D + t))
    assert share <= bound + 4 * math.sqrt(bound * (1 - bound) / lat.size), (share, bound)
    assert p.lateness.size == lat.size  # every send's own delay is kept apart


def test_the_offline_rate_never_exceeds_the_device_and_batches_form(fleet: Endpoint) -> None:
    reqs, took = fleet.offline(8, 200, 5.0)
    assert len(reqs) == 200 and took > 0
    assert len(reqs) / took <= 8 / D * 1.02  # 8 per batch of D at most
    assert reqs.batch.max() > 1  # the server said so: requests were served together


def test_the_search_drives_the_endpoint_and_stays_under_the_devices_capacity(
    fleet: Endpoint,
) -> None:
    plan = SearchPlan(
        # 500 requests a point: what LoadGen's early stopping asks (459) of a p99 within
        PointPlan(BOUND, max_point_s=6.0, min_requests=500, min_duration_s=2.0),
        batches=(1,),
        wait_shares=(0.0,),
        budget_s=15.0,
        single_stream_n=20,
    )
    from torchmark.kinds.serving.clock import RealClock

    s = search(fleet, plan, RealClock())
    assert s.offline[1] <= 1 / D * 1.02
    assert s.points and s.best is not None, s.stop_reason


# -- the cores each process runs on, as the plan says ------------------------------------------

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs CPU affinity and 2 allowed cores",
)


@needs_two_cores
def test_the_client_and_the_server_pin_themselves_to_the_planned_cores() -> None:
    """With the threshold lowered to this machine's 2 cores: the client on the last, the
    server on the rest, as each process's affinity says from the parent."""
    allowed = cores.allowed_cores()
    plan = cores.plan(allowed, min_cores=2)
    assert plan.client == allowed[-1:] and plan.server == allowed[:-1]
    with (
        OwnServer(name="fake", fake_ms=1e3 * D, cores=plan.server) as srv,
        Endpoint(srv.url, "fake", BOUND, own=True, client_cores=plan.client) as ep,
    ):
        assert os.sched_getaffinity(srv.proc.pid) == set(plan.server)
        assert os.sched_getaffinity(ep.client.proc.pid) == set(plan.client)
        assert srv.cores == plan.server and ep.client_cores == plan.client
        single = ep.single_stream(5, 5.0)  # and it serves, pinned
        assert len(single) == 5 and not single.failed.any()
        assert os.sched_getaffinity(ep.client.proc.pid) == set(plan.client)


@needs_two_cores
def test_unpinned_the_client_and_the_server_share_every_allowed_core() -> None:
    allowed = cores.allowed_cores()
    plan = cores.plan(allowed)  # 2 cores here: below the threshold of 3
    with (
        OwnServer(name="fake", fake_ms=1e3 * D, cores=plan.server) as srv,
        Endpoint(srv.url, "fake", BOUND, own=True, client_cores=plan.client) as ep,
    ):
        assert srv.cores == ep.client_cores == allowed


def test_a_core_it_may_not_run_on_is_one_clear_error() -> None:
    from torchmark.kinds.serving.served import ServerError

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    with pytest.raises(ServerError, match=r"--cores 4096: "):
        OwnServer(name="fake", fake_ms=1e3 * D, cores=(4096,))
    with SpecServer("ok") as srv, pytest.raises(client.ClientError, match=r"cores \[4096\]"):
        Endpoint(srv.url, "m", BOUND, client_cores=(4096,))


def test_a_server_that_fails_to_start_says_its_last_line() -> None:
    from torchmark.kinds.serving.served import ServerError

    with pytest.raises(ServerError, match=r"did not start: \w+Error: "):
        OwnServer(int, "m")  # a "recipe" whose model is 0: no module to serve


@pytest.mark.slow
@needs_two_cores
def test_as_served_pins_the_client_and_the_server_with_its_model_workers() -> None:
    import psutil

    from torchmark.kinds.serving.model import builtin
    from torchmark.kinds.serving.served import as_served

    plan = cores.plan(cores.allowed_cores(), min_cores=2)
    with as_served(builtin("simplenet"), "simplenet", BOUND, 1, 1, cores=plan) as ep:
        assert (ep.client_cores, ep.server_cores) == (plan.client, plan.server)
        assert os.sched_getaffinity(ep.client.proc.pid) == set(plan.client)
        (srv,) = [  # torchmark's server with a model: none other in this session
            p for p in psutil.Process().children() if {"--recipe", "--cores"} <= set(p.cmdline())
        ]
        kids = srv.children(recursive=True)
        assert kids, "a model worker of its own"
        assert all(p.cpu_affinity() == list(plan.server) for p in [srv, *kids])


# -- a second server, written here from the protocol, and hostile ones -----------------------


class _QuietWhenTheClientLeaves(ThreadingHTTPServer):
    """A load test ends with requests in flight: their answers meet a closed socket. That is
    the client leaving, not the server failing, and its traceback would land on stderr in
    whichever test runs then; any other error is printed as the standard library does."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SpecServer:
    """A minimal Open Inference Protocol v2 server on the standard library (threads, JSON
    only): ``mode`` ok, slow, shape, error, reset or silent. Once closed, requests still
    being served answer nothing."""

    def __init__(self, mode: str = "ok", service_s: float = D) -> None:
        mode_, service = mode, service_s
        lock = threading.Lock()
        closed = self.closed = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK (40 ms a request on Linux)
            disable_nagle_algorithm = True

            def log_message(self, *a: Any) -> None:
                pass

            def _json(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path in ("/v2/health/ready", "/v2/health/live"):
                    self._json(200, {})
                elif self.path == "/v2/models/m":
                    x = {"name": "x", "datatype": "FP32", "shape": [-1, 4]}
                    y = {"name": "y", "datatype": "FP32", "shape": [-1, 1]}
                    self._json(200, {"name": "m", "inputs": [x], "outputs": [y]})
                else:
                    self._json(404, {"error": "no such model"})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                cut = int(self.headers.get("Inference-Header-Content-Length", len(raw)))
                doc = json.loads(raw[:cut])
                (t,) = doc["inputs"]
                x = np.frombuffer(raw[cut:], np.float32) if cut < len(raw) else t["data"]
                if mode_ == "silent":
                    time.sleep(30)
                    return
                if mode_ == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.close_connection = True
                    return
                with lock:  # one device: requests served one at a time
                    time.sleep(0.3 if mode_ == "slow" else service)
                if closed.is_set():
                    self.close_connection = True
                    return
                if mode_ == "error":
                    self._json(500, {"error": "model crashed"})
                    return
                shape = [1, 2] if mode_ == "shape" else [1, 1]
                out = {"name": "y", "datatype": "FP32", "shape": shape}
                self._json(200, {"outputs": [{**out, "data": [float(np.sum(x))] * shape[1]}]})

        self.httpd = _QuietWhenTheClientLeaves(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> SpecServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _plan(bound_s: float) -> SearchPlan:
    return SearchPlan(
        PointPlan(bound_s, max_point_s=2.0, min_requests=40, min_duration_s=1.0),
        batches=(1,),
        wait_shares=(0.0,),
        budget_s=6.0,
        single_stream_n=10,
    )


def test_another_protocol_server_is_driven_the_same_way() -> None:
    from torchmark.kinds.serving.clock import RealClock

    with SpecServer("ok") as srv, Endpoint(srv.url, "m", BOUND) as ep:
        assert ep.described == "x FP32[1, 4]"
        single = ep.single_stream(10, 5.0)
        assert not single.failed.any() and single.latency.min() >= D
        plan = PointPlan(BOUND, max_point_s=6, min_requests=20, min_duration_s=2.5)
        p = run_point(ep, 200.0, Batching(1, 0.0), plan)
        assert p.outcome == "within" and p.kept.latency.min() >= D, p.why
        s = search(ep, _plan(BOUND), RealClock())
        assert s.offline[1] <= 1 / D * 1.02  # one device behind a lock: D a request


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("shape", "the answer's y has shape [1, 2], expected [-1, 1]"),
        ("error", "HTTP 500: model crashed"),
        ("reset", "the server closed the connection before answering"),
        ("silent", "no answer within 1 s"),
    ],
)
def test_a_hostile_endpoint_gets_a_clear_verdict_and_no_hang(mode: str, said: str) -> None:
    from torchmark.kinds.serving.clock import RealClock

    t0 = time.monotonic()
    with SpecServer(mode) as srv, Endpoint(srv.url, "m", 0.05) as ep:
        s = search(ep, _plan(0.05), RealClock())
        assert s.best is None and s.stop_reason == "every request failed one at a time"
        assert len(s.single) == (1 if mode == "silent" else 10)  # a time-out ends it at once
        plan = PointPlan(0.05, max_point_s=2, min_requests=20, min_duration_s=1.0)
        p = run_point(ep, 50.0, Batching(1, 0.0), plan)
        assert p.outcome == "over" and said in p.why, p.why
        if mode == "silent":
            assert p.gave_up and "no answer within 1 s" in p.gave_up
    # bounded: the time-outs (1 s) end it, not the silent server's 30 s
    assert time.monotonic() - t0 < 25


def test_a_slow_endpoint_is_over_the_bound_from_one_request_at_a_time() -> None:
    from torchmark.kinds.serving.clock import RealClock

    with SpecServer("slow") as srv, Endpoint(srv.url, "m", 0.05) as ep:
        s = search(ep, _plan(0.05), RealClock())
    assert s.best is None and "one request at a time already takes" in s.stop_reason


def test_an_endpoint_that_is_not_there_is_one_line_naming_the_fix() -> None:
    sock = oip.bind()
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(InputError, match="cannot reach it"):
        Endpoint(f"http://127.0.0.1:{port}", "m", 0.05)
    with pytest.raises(InputError, match="give http://HOST:PORT"):
        Endpoint("ftp://x", "m", 0.05)
    with SpecServer("ok") as srv, pytest.raises(InputError, match="--model-name"):
        Endpoint(srv.url, "nope", 0.05)


# -- the command: `torchmark serving MODEL --endpoint URL` -----------------------------------

# points of >= 2 s and 500 requests: the 459 LoadGen's early stopping asks of a p99
# within the bound; room for the answer's re-confirmation
ENDPOINT_QUICK = [
    "--p99-ms", "500", "--budget", "20s", "--point", "6s", "--min-duration", "2s",
    "--min-requests", "500",
]  # fmt: skip


def _answer(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> DeviceAnswer:
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    code, printed, err = cli(capsys, "serving", *argv, "--json", str(out), "--db", _db(tmp_path))
    assert code == 0, printed + err
    p = read(RunRecord.model_validate(json.loads(out.read_text())))
    assert p is not None and p.endpoint and not p.capacity
    (f,) = p.fleets
    assert f.served == "endpoint" and all(pt.max_batch == 1 for pt in f.points)
    (a,) = p.answers
    assert a.device == "endpoint" and a.batching == "the server's own batching"
    assert "endpoint at http://127.0.0.1:" in printed
    return a


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'r.db'}"


def test_endpoint_gives_the_same_answer_from_torchmarks_server_and_a_spec_server(
    own: OwnServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One device of D a request behind each (torchmark's at batch 1, the spec server's
    behind a lock): the same capacity, 1 / D, which neither answer may pass."""
    _post(own.url + "/torchmark/batching", {"max_batch": 1, "max_wait_s": 0.0})
    a = _answer(capsys, tmp_path, "fake", "--endpoint", own.url, *ENDPOINT_QUICK)
    with SpecServer("ok") as srv:
        b = _answer(capsys, tmp_path, "x", "--endpoint", srv.url, "--model-name", "m",
                    *ENDPOINT_QUICK)  # fmt: skip
    assert a.max_rate is not None and b.max_rate is not None
    for r in (a.max_rate, b.max_rate):
        assert r <= 1 / D * 1.05  # the search's first top is 5 % above the offline rate
    # the same answer within the spread: a search resolves a limit to its bracket, and
    # the two brackets overlap (compare's rule: neither surely faster)
    from torchmark.report.serving import change

    assert change(a, b)[0] == "UNCLEAR", (a.sentence, b.sentence)


def test_endpoint_failing_every_request_says_why_and_bad_urls_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with SpecServer("error") as srv:
        code, printed, err = cli(
            capsys, "serving", "m", "--endpoint", srv.url, *ENDPOINT_QUICK, "--db", _db(tmp_path)
        )
    # nothing answered is no answer: kept, shown, and exit 1 with why on one line
    assert code == 1, err
    text = " ".join(printed.split())
    assert "no arrival rate met p99 <= 500 ms" in text
    assert "every request failed one at a time: HTTP 500: model crashed (x" in text
    (line,) = err.strip().splitlines()
    assert line.startswith("error: no request was answered: every request failed one at")
    assert "torchmark show 2" in line and "fix the endpoint" in line
    sock = oip.bind()
    port = sock.getsockname()[1]
    sock.close()
    for url, said in [
        (f"http://127.0.0.1:{port}", "cannot reach it"),
        ("localhost:80", "give http://HOST:PORT"),
    ]:
        code, _, err = cli(
            capsys, "serving", "m", "--endpoint", url, "--p99-ms", "50", "--db", _db(tmp_path)
        )
        assert code == 2 and said in err and len(err.strip().splitlines()) <= 2, err
    code, _, err = cli(capsys, "serving", "m", "--endpoint", "http://h:1", "--p99-ms", "50",
                       "--input", "4", "--db", _db(tmp_path))  # fmt: skip
    assert code == 2 and "--endpoint serves its own model" in err


def _post(url: str, doc: dict[str, Any]) -> None:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(doc).encode(), method="POST")
    urllib.request.urlopen(req, timeout=5).close()
