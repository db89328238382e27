"""The server under load: report pages drawn once, bounded and kept in the database; the
in-memory run cache bounded; several server processes on one database."""

from __future__ import annotations

import asyncio
import gzip
import multiprocessing.connection
import multiprocessing.process
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from boardtest import body, make_run
from torchmark.results import RunRecord
from torchmark.web import reports as reports_mod
from torchmark.web.app import create_app
from torchmark.web.cases import Cache
from torchmark.web.reports import Reports


class FakeDrawing:
    """A render that counts its calls and, while ``hold`` is clear, waits (60 s at most: a
    loaded 2-core CI machine must not see the hold end on its own before a test sets it)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self, run: RunRecord) -> bytes:
        self.calls.append(run.run_id or "")
        self.hold.wait(timeout=60)
        return gzip.compress(f"<p>report of {run.run_id}</p>".encode())


NAMES = iter(range(10**6))


def until(done: Callable[[], object], s: float = 60.0) -> None:
    """Wait for ``done()``: the deadline only bounds a test that would otherwise hang (a
    loaded CI machine takes its time; a fixed count of short waits failed there)."""
    deadline = time.monotonic() + s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def ended(proc: multiprocessing.process.BaseProcess, s: float) -> bool:
    """Whether ``proc`` has ended within ``s`` seconds, read from its sentinel (closed when
    the process exits). Not ``is_alive()``: that asks ``waitpid``, and where the pool's own
    thread reaped the process first it gets ECHILD and says "alive" of a dead process."""
    return bool(multiprocessing.connection.wait([proc.sentinel], s))


def threads(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(n)


def board(db: Path, drawing: FakeDrawing, **kw: float) -> tuple[TestClient, dict[str, str]]:
    app = create_app(f"sqlite:///{db}")
    app.state.reports = Reports(app.state.accounts.engine, render=drawing, pool=threads, **kw)  # type: ignore[arg-type]
    token = app.state.accounts.create_token(f"t{next(NAMES)}")
    return TestClient(app), {"Authorization": f"Bearer {token}"}


def submit(client: TestClient, headers: dict[str, str], scale: float) -> str:
    r = client.post("/api/v1/runs", content=body(make_run(scale=scale)), headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def test_cache_evicts_least_recently_used_by_count_and_by_bytes() -> None:
    c: Cache = Cache(3, max_bytes=10, weigh=len)
    for k in "abc":
        c.get(k, lambda k=k: k * 2)  # 2 bytes each
    c.get("a", lambda: "never")  # a hit: "a" is now the most recent
    c.get("d", lambda: "dd")
    assert [k in c for k in "abcd"] == [True, False, True, True] and c.bytes == 6
    c.get("e", lambda: "eeeeeeee")  # 8 bytes: "c" then "a" go, to stay within 10
    assert [k in c for k in "acde"] == [False, False, True, True] and c.bytes == 10
    assert c.get("huge", lambda: "x" * 11) == "x" * 11  # answered, never kept
    assert "huge" not in c and len(c) == 2 and c.bytes == 10


def test_the_run_cache_stays_within_its_bounds(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'b.db'}", run_cache=(2, 10**9))
    token = app.state.accounts.create_token("t")
    client = TestClient(app)
    ids = [submit(client, {"Authorization": f"Bearer {token}"}, 1 + i) for i in range(3)]
    rows = client.get("/api/v1/results").json()
    assert sorted(r["run_id"] for r in rows) == sorted(ids)  # every run read, 2 kept
    assert len(app.state.runs) == 2
    one = len(
        RunRecord.model_validate_json(client.get(f"/api/v1/runs/{ids[0]}").text).model_dump_json()
    )
    small = create_app(f"sqlite:///{tmp_path / 'b.db'}", run_cache=(100, int(one * 1.5)))
    assert len(TestClient(small).get("/api/v1/results").json()) == 3
    assert len(small.state.runs) == 1 and small.state.runs.bytes <= one * 1.5


def test_a_report_is_drawn_once_and_served_from_the_store(tmp_path: Path) -> None:
    drawing = FakeDrawing()
    client, headers = board(tmp_path / "r.db", drawing)
    run_id = submit(client, headers, 1)
    first = client.get(f"/runs/{run_id}/report")
    assert first.status_code == 200 and first.text == f"<p>report of {run_id}</p>"
    assert first.headers["Content-Encoding"] == "gzip"
    assert first.headers["Content-Security-Policy"].startswith("sandbox")
    plain = client.get(f"/runs/{run_id}/report", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and plain.text == first.text
    assert drawing.calls == [run_id]
    # another server process on the same database: served from the store, not drawn
    other = FakeDrawing()
    client2, _ = board(tmp_path / "r.db", other)
    assert client2.get(f"/runs/{run_id}/report").text == first.text and other.calls == []
    # other report code (a new torchmark): drawn again, replacing the old page
    reports_mod.report_version.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(reports_mod, "__version__", "99.0")
            assert client2.get(f"/runs/{run_id}/report").status_code == 200
            assert other.calls == [run_id]
    finally:
        reports_mod.report_version.cache_clear()
    assert client.get("/runs/nope/report").status_code == 404


def test_reports_over_the_bound_or_too_slow_get_503_and_nothing_is_lost(tmp_path: Path) -> None:
    drawing = FakeDrawing()
    client, headers = board(tmp_path / "q.db", drawing, queue=0, wait_s=0.3)
    a, b = submit(client, headers, 1), submit(client, headers, 2)
    drawing.hold.clear()
    slow = client.get(f"/runs/{a}/report")  # waits 0.3 s, then gives up; the drawing goes on
    assert slow.status_code == 503 and slow.headers["Retry-After"] == "5"
    assert "still being drawn" in slow.json()["detail"]
    over = client.get(f"/runs/{b}/report")  # 1 worker + queue 0 busy: refused at once
    assert over.status_code == 503 and "being drawn" in over.json()["detail"]
    assert client.get("/").status_code == 200  # the rest of the server still answers
    drawing.hold.set()
    reports: Reports = client.app.state.reports  # type: ignore[attr-defined]
    until(lambda: not reports._drawing)  # the held drawing finishes and is stored
    assert client.get(f"/runs/{a}/report").status_code == 200
    assert client.get(f"/runs/{b}/report").status_code == 200
    assert drawing.calls == [a, b]  # a was drawn once, though asked for twice


def test_the_same_report_asked_for_at_once_is_drawn_once(tmp_path: Path) -> None:
    drawing = FakeDrawing()
    client, headers = board(tmp_path / "s.db", drawing, queue=0)
    run_id = submit(client, headers, 1)
    reports: Reports = client.app.state.reports  # type: ignore[attr-defined]
    key = reports.key(run_id)
    assert key is not None
    store = client.app.state.store  # type: ignore[attr-defined]

    async def both() -> list[bytes | BaseException]:
        drawing.hold.clear()
        asks = [reports.page(run_id, key, lambda: store.load(run_id)) for _ in range(3)]
        asyncio.get_running_loop().call_later(0.2, drawing.hold.set)
        return await asyncio.gather(*asks, return_exceptions=True)

    pages = asyncio.run(both())
    assert len(set(pages)) == 1 and not isinstance(pages[0], BaseException)
    assert drawing.calls == [run_id]
    assert reports.stored(run_id, "stale") is None and reports.key("nope") is None


def test_a_kept_ranking_page_is_made_again_when_its_case_gains_a_run(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'p.db'}")
    token = app.state.accounts.create_token("t")
    client = TestClient(app)
    headers = {"Authorization": f"Bearer {token}"}
    first = client.post("/api/v1/runs", content=body(make_run("Alpha CPU")), headers=headers)
    page = client.get("/").text
    assert "Alpha CPU" in page and "1 submitted runs" in page
    assert client.get("/").text == page  # kept
    assert f'<a href="/runs/{first.json()["run_id"]}">1</a> ' in page
    client.post("/api/v1/runs", content=body(make_run("Beta CPU", 2.0)), headers=headers)
    again = client.get("/").text
    assert "Beta CPU" in again and "2 submitted runs" in again
    by_rate = client.get("/", params={"sort": "median"}).text  # the rate, lowest first
    assert by_rate.index("Beta CPU") < by_rate.index("Alpha CPU")
    assert again.index("Alpha CPU") < again.index("Beta CPU")


def test_connections_on_a_socket_bound_as_uvicorn_binds_it_get_tcp_nodelay() -> None:
    """uvicorn's own protocol on a socket bound with proto 0 (its --workers path) leaves
    Nagle on; NoDelayHTTP turns it off."""
    import socket

    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.server import ServerState

    from torchmark.web.nodelay import NoDelayHTTP

    config = uvicorn.Config(app=create_app, http="torchmark.web.nodelay:NoDelayHTTP")
    config.load()
    assert config.http_protocol_class is NoDelayHTTP

    async def nodelay(protocol: type[H11Protocol]) -> int:
        listener = socket.socket(socket.AF_INET)  # as uvicorn's Config.bind_socket does
        listener.bind(("127.0.0.1", 0))
        made: list[H11Protocol] = []

        def factory() -> H11Protocol:
            made.append(protocol(config=config, server_state=ServerState(), app_state={}))
            return made[-1]

        server = await asyncio.get_running_loop().create_server(factory, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        deadline = time.monotonic() + 60
        while not (made and made[0].transport is not None) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the server side accepts on one of its next turns
        sock = made[0].transport.get_extra_info("socket")
        value = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()
        made[0].transport.close()
        server.close()
        await server.wait_closed()
        return value

    assert asyncio.run(nodelay(H11Protocol)) == 0  # uvicorn issue #3149
    assert asyncio.run(nodelay(NoDelayHTTP)) == 1


def test_a_drawing_process_that_died_gets_503_and_a_new_one_next_time(tmp_path: Path) -> None:
    from concurrent.futures import Executor, Future
    from concurrent.futures.process import BrokenProcessPool

    class Died(Executor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            f: Future[bytes] = Future()
            f.set_exception(BrokenProcessPool("a drawing process was killed"))
            return f

    pools: list[Executor] = []

    def pool(n: int) -> Executor:
        pools.append(Died() if not pools else ThreadPoolExecutor(n))
        return pools[-1]

    drawing = FakeDrawing()
    client, headers = board(tmp_path / "d.db", drawing)
    client.app.state.reports = Reports(  # type: ignore[attr-defined]
        client.app.state.accounts.engine,  # type: ignore[attr-defined]
        render=drawing,
        pool=pool,
    )
    run_id = submit(client, headers, 1)
    died = client.get(f"/runs/{run_id}/report")
    assert died.status_code == 503 and "stopped; try again" in died.json()["detail"]
    assert died.headers["Retry-After"] == "5"
    assert client.get(f"/runs/{run_id}/report").status_code == 200
    assert len(pools) == 2 and drawing.calls == [run_id]


def test_a_browser_gets_an_error_page_and_a_script_gets_json(tmp_path: Path) -> None:
    client, _ = board(tmp_path / "e.db", FakeDrawing())
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    page = client.get("/runs/nope", headers=html)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "<h1>404 Not Found</h1>" in page.text and "no submitted run &#39;nope&#39;" in page.text
    assert client.get("/runs/nope").json() == {"detail": "no submitted run 'nope'"}
    api = client.get("/api/v1/runs/nope", headers=html)
    assert api.status_code == 404 and api.json() == {"detail": "no submitted run 'nope'"}


def test_a_drawing_past_the_hard_bound_is_killed_and_frees_its_slot(tmp_path: Path) -> None:
    killed = threading.Event()
    drawn: list[str] = []

    def render(run: RunRecord) -> bytes:  # sleeps until its "process" is killed
        drawn.append(run.run_id or "")
        if run.environment["devices"]["cpu"]["model"] == "Hung CPU":
            killed.wait(timeout=30)
            raise RuntimeError("killed")
        return gzip.compress(f"<p>report of {run.run_id}</p>".encode())

    pools: list[ThreadPoolExecutor] = []

    def pool(n: int) -> ThreadPoolExecutor:
        pools.append(ThreadPoolExecutor(n))
        return pools[-1]

    client, headers = board(tmp_path / "k.db", FakeDrawing())
    app = client.app
    reports = Reports(
        app.state.accounts.engine,  # type: ignore[attr-defined]
        queue=0,
        wait_s=0.1,  # killed after 5x that: 0.5 s
        render=render,
        pool=pool,
        kill=lambda p: killed.set(),
    )
    app.state.reports = reports  # type: ignore[attr-defined]
    r = client.post("/api/v1/runs", content=body(make_run("Hung CPU")), headers=headers)
    a, b = r.json()["run_id"], submit(client, headers, 2)
    assert reports.kill_s == 0.5
    first = client.get(f"/runs/{a}/report")
    assert first.status_code == 503 and "still being drawn" in first.json()["detail"]
    assert client.get(f"/runs/{b}/report").status_code == 503  # its slot is taken
    assert killed.wait(timeout=60)  # the hard bound passed: the drawing was killed
    until(lambda: not reports._drawing)  # and its slot freed
    assert not reports._drawing and reports._pools == {}
    second = client.get(f"/runs/{b}/report")
    assert second.status_code == 200 and second.text == f"<p>report of {b}</p>"
    assert len(pools) == 2 and drawn == [a, b]  # drawn by a new "process"
    reports.close()


def test_a_hung_drawing_process_is_killed_by_the_bound_and_by_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    from concurrent.futures.process import BrokenProcessPool

    from boardtest import draw_for_ever

    pool = reports_mod._spawned_pool(1)
    try:
        assert pool.submit(os.getpid).result(timeout=60) != os.getpid()  # started
        never = pool.submit(time.sleep, 3600)
        (proc,) = reports_mod._processes(pool)
        reports_mod._kill_workers(pool)
        assert ended(proc, 10)
        with pytest.raises(BrokenProcessPool):
            never.result(timeout=10)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

    # a server closing while a drawing hangs: waits CLOSE_S, then kills it
    monkeypatch.setattr(reports_mod, "CLOSE_S", 0.5)
    client, headers = board(tmp_path / "c.db", FakeDrawing())
    reports = Reports(client.app.state.accounts.engine, render=draw_for_ever, wait_s=0.1)  # type: ignore[attr-defined]
    client.app.state.reports = reports  # type: ignore[attr-defined]
    run_id = submit(client, headers, 1)
    assert client.get(f"/runs/{run_id}/report").status_code == 503
    procs: list[multiprocessing.process.BaseProcess] = []
    try:
        for _ in range(600):  # until its drawing process is up (spawn: seconds on 2 cores)
            procs = [p for x in list(reports._pools.values()) for p in reports_mod._processes(x)]
            if procs and procs[0].is_alive():
                break
            time.sleep(0.05)
        assert procs
        start = time.monotonic()
        reports.close()
        assert time.monotonic() - start < 5
        assert ended(procs[0], 0)
    finally:
        for proc in procs:  # else pytest's exit would wait an hour on the pool's atexit
            proc.kill()


class HeldOnce:
    """The drawing table's lock, noting where the real one would wait for ever: taken
    again by the thread that holds it."""

    def __init__(self) -> None:
        self.lock, self.owner = threading.Lock(), 0
        self.reentered: list[int] = []

    def __enter__(self) -> None:
        if self.owner == threading.get_ident():
            self.reentered.append(self.owner)
            raise RuntimeError("a deadlock: the lock's holder takes it again")
        self.lock.acquire()
        self.owner = threading.get_ident()

    def __exit__(self, *exc: object) -> None:
        self.owner = 0
        self.lock.release()


def test_a_drawing_done_before_its_callback_is_added_does_not_deadlock(tmp_path: Path) -> None:
    """A drawing thread can finish (its load failed at once) between the submit and the
    done-callback's registration: the callback then runs in the request's thread."""
    from concurrent.futures import Executor, Future

    class DoneAtOnce(Executor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            f: Future[bytes] = Future()
            try:
                f.set_result(fn(*args, **kwargs))
            except Exception as e:
                f.set_exception(e)
            return f

    client, _ = board(tmp_path / "x.db", FakeDrawing())
    reports: Reports = client.app.state.reports  # type: ignore[attr-defined]
    lock = HeldOnce()
    reports._lock, reports._jobs = lock, DoneAtOnce()  # type: ignore[assignment]

    def gone() -> RunRecord:
        raise RuntimeError("the run's row is gone")

    with pytest.raises(RuntimeError, match="the run's row is gone"):
        asyncio.run(reports.page("r1", "k", gone))
    assert lock.reentered == [] and reports._drawing == {}  # was: the lock taken twice


def test_a_drawing_still_loading_as_the_server_closes_starts_no_process(tmp_path: Path) -> None:
    """close() ends the drawing processes it knows of; a drawing whose thread was loading its
    run then started one after it, left running with no one to end it."""
    started: list[int] = []

    def pool(n: int) -> ThreadPoolExecutor:
        started.append(n)
        return ThreadPoolExecutor(n)

    client, _ = board(tmp_path / "z.db", FakeDrawing())
    reports = Reports(client.app.state.accounts.engine, render=FakeDrawing(), pool=pool)  # type: ignore[attr-defined]
    run = make_run(scale=1)

    def load_then_close() -> RunRecord:  # the server closes while this thread loads
        reports.close()
        return run

    with pytest.raises(reports_mod.Busy, match="shutting down"):
        reports._draw("r1", "k", load_then_close)
    assert started == []
