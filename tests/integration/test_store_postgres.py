"""The same SQLStore on a real PostgreSQL server: a throw-away cluster on a Unix socket.

Skipped where PostgreSQL's server programs (initdb, pg_ctl) or the psycopg driver
(`pip install 'torchmark[postgres]'`) are missing. The server listens on no TCP port.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from torchmark.errors import RunNotFoundError, StoreError
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.store import SQLStore, open_store
from torchmark.store.exchange import export_run, import_run

T0 = datetime(2026, 11, 21, 8, 30, 12, 345678, tzinfo=timezone.utc)
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
SAMPLES = [0.1 + 0.2, 1 / 3, 5e-324, 1.2345678901234567e-05]


def pg_program(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


def as_server_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no `postgres` user to run the server")
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser")
    return [runuser, "-u", "postgres", "--"]


CLUSTER: dict[str, Callable[[], None]] = {}


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    initdb, pg_ctl = pg_program("initdb"), pg_program("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server programs (initdb, pg_ctl) are not installed")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed: pip install 'torchmark[postgres]'")
    prefix = as_server_user()
    # A short path under /tmp: a Unix socket path must stay under ~100 characters.
    root = Path(tempfile.mkdtemp(prefix="tmpg", dir="/tmp"))
    if prefix:
        shutil.chown(root, "postgres")
    data = root / "data"

    def sh(*cmd: str) -> None:
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=60)

    sh(initdb, "-D", str(data), "-A", "trust", "-U", "tm", "--no-sync", "-E", "UTF8")
    opts = f"-k {root} -c listen_addresses='' -F"  # socket only, no fsync: a test cluster
    sh(pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
    CLUSTER["stop"] = lambda: sh(pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop")
    CLUSTER["start"] = lambda: sh(
        pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"
    )
    try:
        yield f"postgresql://tm@/postgres?host={root}"
    finally:
        sh(pg_ctl, "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def store(pg_url: str) -> Iterator[SQLStore]:
    s = open_store(pg_url)
    assert isinstance(s, SQLStore)
    with s.engine.begin() as conn:  # each test starts from an empty store
        conn.exec_driver_sql("TRUNCATE runs, results, run_ceilings, ceiling_cache")
    yield s
    s.close()


def make_run(hours: int = 0) -> RunRecord:
    bw = Ceiling(device="cpu", key="bandwidth", value=4.5e10, unit="B/s", method="mul_")
    return RunRecord(
        tool_version="0.1.0",
        created_utc=T0 + timedelta(hours=hours),
        environment={"host": "box", "devices": {"cpu": {}}},
        fingerprint="fp",
        ceilings=[bw],
        results=[
            Result(workload="add", variant="fp32", device="cpu", samples_s=SAMPLES,
                   work=Work(bytes=1e9), headline="bytes", ceiling=bw),
            Result(workload="mm", variant="int8", device="cpu", status="skipped", reason="no"),
        ],
    )  # fmt: skip


def served_run(hours: int = 0) -> RunRecord:
    """make_run as the leaderboard takes it: its 5e-324 s sample (there to test the
    store's float round trip) is below what any timer resolves, which the server refuses."""
    run = make_run(hours)
    run.results[0].samples_s = [s if s > 1e-6 else 0.25 for s in SAMPLES]
    return run


def test_incremental_writes_and_lookup(store: SQLStore, pg_url: str) -> None:
    run = make_run()
    run_id = store.begin_run(run.model_copy(update={"results": []}))
    store.add_result(run_id, run.results[0])
    store.add_result(run_id, run.results[1])
    older = store.save(make_run(-1))
    reopened = open_store(pg_url)  # a second connection sees what the first committed
    got = reopened.load(run_id)
    assert (got.run_id, got.status) == (run_id, "running")
    assert [x.hex() for x in got.results[0].samples_s] == [x.hex() for x in SAMPLES]
    assert [(r.run_id, r.n_results, r.n_ok) for r in reopened.list_runs()] == [
        (older, 2, 1),  # stored last: newest in this store, whatever its date
        (run_id, 2, 1),
    ]
    # runs holding an mm int8 result, found by query: the finished ones, newest first
    assert reopened.runs_holding("mm", "int8") == []  # both still running
    done = [reopened.save(make_run(h).model_copy(update={"status": "complete"})) for h in (-3, -2)]
    assert reopened.runs_holding("mm", "int8") == done[::-1]
    assert reopened.runs_holding("mm", "no-such-variant") == []
    reopened.close()
    with pytest.raises(RunNotFoundError, match="torchmark history"):
        store.load("nope")


def test_import_round_trip_and_taken_ids(store: SQLStore) -> None:
    text = export_run(make_run().model_copy(update={"run_id": "20260101-000000-abcd"}), "json")
    first = store.save(import_run(text))
    second = store.save(import_run(text))
    assert first == "20260101-000000-abcd" and second != first
    assert export_run(store.load(first), "json") == text


def test_save_is_one_transaction(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object) -> None:
        raise sa_exc.OperationalError("INSERT", {}, Exception("server went away"))

    monkeypatch.setattr(SQLStore, "_insert_result", failing)
    store.retry_s = 0  # a dropped connection is retried; one try here
    with pytest.raises(StoreError, match="server went away"):
        store.save(make_run())
    monkeypatch.undo()
    assert store.list_runs() == []


def test_ceiling_cache(store: SQLStore) -> None:
    c = make_run().ceilings
    assert store.cached_ceilings("fp", "cpu") is None
    store.cache_ceilings("fp", "cpu", c)
    assert store.cached_ceilings("fp", "cpu") == c


def test_missing_database_is_a_store_error(pg_url: str) -> None:
    with pytest.raises(StoreError, match='database "nope" does not exist'):
        open_store(pg_url.replace("/postgres?", "/nope?"))


# -- both back ends: the same documents and faults on SQLite and PostgreSQL ---------------

_made = iter(range(10**6))


def new_database(pg_url: str) -> str:
    """A fresh, empty database on the test cluster: its URL."""
    import psycopg

    name = f"t{os.getpid()}_{next(_made)}"
    dsn = pg_url.replace("postgresql://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_url.replace("/postgres?", f"/{name}?")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL on each back end (PostgreSQL skipped where it is missing)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    return new_database(request.getfixturevalue("pg_url"))


LONG_SPEC = "/home/someone/projects/" + "deeply_nested_directory/" * 6 + "my_model_spec.py:build"


def test_long_texts_are_stored_whole(url: str) -> None:
    # Before: PostgreSQL said "value too long for type character varying(128)" for a
    # 168-character model spec path, and refused ids > 40 and names > 64 characters.
    assert len(LONG_SPEC) >= 168
    store = open_store(url)
    long_name = "w" * 300
    run = make_run()
    run.command = f"torchmark model {LONG_SPEC}"
    run.results[0] = run.results[0].model_copy(
        update={"workload": LONG_SPEC, "variant": long_name, "device": "cpu:" + "x" * 90}
    )
    run_id = store.begin_run(run.model_copy(update={"results": []}))
    store.add_result(run_id, run.results[0])
    assert store.load(run_id).results[0].workload == LONG_SPEC
    # (the kind is one of a closed set since schema 2: a long run id, host and fingerprint)
    doc = make_run().model_copy(update={"run_id": "i" * 100})
    doc.environment["host"] = "h" * 300
    doc.fingerprint = "f" * 200
    imported = store.save(import_run(export_run(doc)))
    assert imported == "i" * 100
    assert export_run(store.load(imported)) == export_run(doc)
    store.cache_ceilings("f" * 200, "d" * 100, doc.ceilings)
    assert store.cached_ceilings("f" * 200, "d" * 100) == doc.ceilings
    store.close()


def _open_and_begin(url: str) -> str:
    try:
        s = open_store(url)
        s.begin_run(RunRecord())
        s.close()
        return "ok"
    except Exception as e:  # reported, not raised: the parent counts the failures
        return f"{type(e).__name__}: {e}"


def test_concurrent_first_opens_all_succeed(url: str) -> None:
    # Before: 4 of 40 concurrent first opens failed on SQLite ("no readable schema version",
    # "table meta already exists"), 3 of 18 on PostgreSQL ("type meta already exists").
    import multiprocessing

    n = 12  # bounded: 2 cores here; each process opens once, at the same moment
    # fork: each child starts at once (an import of torchmark costs seconds on a busy box)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(n) as pool:
        outcomes = pool.map(_open_and_begin, [url] * n, chunksize=1)
    assert [o for o in outcomes if o != "ok"] == []
    store = open_store(url)
    assert len(store.list_runs()) == n
    store.close()


def test_a_store_write_retries_a_passing_failure(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection through the store: the first writes fail as a held lock / a dropped
    connection would; the write is retried with growing waits, then stored once."""
    store = open_store(url)
    assert isinstance(store, SQLStore)
    run_id = store.begin_run(make_run().model_copy(update={"results": []}))
    clock = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock[0] += s

    store._sleep, store._clock = sleep, lambda: clock[0]
    real = SQLStore._insert_result
    failures = iter(["database is locked", "disk I/O error"])

    def flaky(self, conn, rid, res):  # type: ignore[no-untyped-def]
        why = next(failures, None)
        if why is not None:
            raise sa_exc.OperationalError("INSERT", {}, Exception(why))
        real(self, conn, rid, res)

    monkeypatch.setattr(SQLStore, "_insert_result", flaky)
    store.add_result(run_id, make_run().results[0])
    assert len(waits) == 2 and waits[1] > waits[0] > 0
    assert len(store.load(run_id).results) == 1  # stored once, not twice
    store.close()


def test_a_store_that_stays_away_raises_store_unavailable(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.errors import StoreUnavailable

    store = open_store(url)
    assert isinstance(store, SQLStore)
    run_id = store.begin_run(make_run().model_copy(update={"results": []}))
    clock = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock[0] += s

    store._sleep, store._clock, store.retry_s = sleep, lambda: clock[0], 60.0

    # a lock that stays held (a full disk does not wait: test_store_full.py)
    def away(self, conn, rid, res):  # type: ignore[no-untyped-def]
        raise sa_exc.OperationalError("INSERT", {}, Exception("database is locked"))

    monkeypatch.setattr(SQLStore, "_insert_result", away)
    with pytest.raises(
        StoreUnavailable,
        match=r"could not store a result for 60 s \(database is locked\)",
    ):
        store.add_result(run_id, make_run().results[0])
    assert sum(waits) == pytest.approx(60.0) and max(waits) <= 5.0
    assert isinstance(StoreUnavailable("x"), StoreError)
    store.close()


def test_damaged_rows_are_skipped_and_named(url: str) -> None:
    # Before: one damaged row gave JSONDecodeError tracebacks in export, report, latest and
    # all of history.
    store = open_store(url)
    assert isinstance(store, SQLStore)
    good, bad_result, bad_header = (
        store.save(make_run(h).model_copy(update={"status": "complete"})) for h in range(3)
    )
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE runs SET header = '{{\"oops' WHERE run_id = '{bad_header}'")
        conn.exec_driver_sql(
            f"UPDATE results SET doc = 'not json' WHERE run_id = '{bad_result}' AND seq = 1"
        )
    runs = {r.run_id: r.status for r in store.list_runs()}
    assert runs == {good: "complete", bad_result: "complete", bad_header: "damaged"}
    assert store.load("latest").run_id == bad_result  # the damaged newer one is skipped
    with pytest.raises(StoreError, match=f"run {bad_header} in .* is damaged"):
        store.load(bad_header)
    partial = store.load(bad_result)
    assert [r.workload for r in partial.results] == ["add"]
    assert partial.verdict is not None
    assert "stored result 1 is damaged (not JSON) and was left out" in partial.verdict.reasons
    json_text = export_run(partial)
    assert "damaged" in json_text
    store.close()


V1_DDL = """
CREATE TABLE meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (run_id VARCHAR(40) PRIMARY KEY, kind VARCHAR(32) NOT NULL,
  created_utc VARCHAR(40) NOT NULL, finished_utc VARCHAR(40), status VARCHAR(16) NOT NULL,
  schema_version INTEGER NOT NULL, tool_version VARCHAR(64) NOT NULL,
  fingerprint VARCHAR(128) NOT NULL, host VARCHAR(255) NOT NULL, devices TEXT NOT NULL,
  command TEXT NOT NULL, header TEXT NOT NULL);
CREATE TABLE results (run_id VARCHAR(40) REFERENCES runs(run_id) ON DELETE CASCADE,
  seq INTEGER, workload VARCHAR(128) NOT NULL, variant VARCHAR(128) NOT NULL,
  device VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (run_id, seq));
CREATE TABLE run_ceilings (run_id VARCHAR(40) PRIMARY KEY REFERENCES runs(run_id)
  ON DELETE CASCADE, doc TEXT NOT NULL);
CREATE TABLE ceiling_cache (id INTEGER PRIMARY KEY, fingerprint VARCHAR(128) NOT NULL,
  device VARCHAR(64) NOT NULL, created_utc VARCHAR(40) NOT NULL,
  schema_version INTEGER NOT NULL, tool_version VARCHAR(64) NOT NULL, doc TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO runs VALUES ('20260101-000000-aaaa', 'run', '2026-01-01T00:00:00.000000+00:00',
  NULL, 'complete', 1, '0.1.0', 'fp', 'box', '["cpu"]', 'torchmark run', '{"schema_version": 1}');
INSERT INTO runs VALUES ('20250101-000000-bbbb', 'run', '2025-01-01T00:00:00.000000+00:00',
  NULL, 'complete', 1, '0.1.0', 'fp', 'box', '["cpu"]', 'torchmark run', '{"schema_version": 1}');
"""


def test_a_version_1_database_is_migrated(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        for statement in V1_DDL.split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    engine.dispose()
    store = open_store(url)
    assert [r.run_id for r in store.list_runs()] == [  # insertion order guessed from time
        "20260101-000000-aaaa",
        "20250101-000000-bbbb",
    ]
    run = make_run().model_copy(
        update={"run_id": "x" * 80, "command": LONG_SPEC, "status": "complete"}
    )
    assert store.save(run) == "x" * 80
    assert store.load("latest").command == LONG_SPEC
    assert store.load("20250101-000000-bbbb").status == "complete"
    store.close()


def test_schema_1_rows_load_as_their_kinds_typed_payloads(store: SQLStore) -> None:
    """Runs of every kind as schema 1 stored them (tests/fixtures/runs/v1-*.json): read
    back typed, the same runs an import of the file gives (SQLite: tests/unit/test_schema_v1)."""
    import json

    from torchmark.results import SCHEMA_VERSION
    from v1store import store_v1

    for path in sorted(RUNS.glob("v1-*.json")):
        doc = json.loads(path.read_text())
        stored = store.load(store_v1(store, doc))
        want = import_run(path)
        assert stored.schema_version == SCHEMA_VERSION and type(stored.payload) is type(
            want.payload
        ), path.name
        assert stored == want.model_copy(update={"results": stored.results}), path.name
        assert [r.model_dump() for r in stored.results] == [r.model_dump() for r in want.results]
        assert store.load(store.save(stored)) == stored.model_copy(  # stored again as schema 2
            update={"run_id": store.list_runs()[0].run_id, "results": stored.results}
        )


def test_a_write_survives_a_server_restart(pg_url: str) -> None:
    # Before: a PostgreSQL restart mid-run ended it ("cannot finish a run"), results dropped.
    import threading

    url = new_database(pg_url)
    store = open_store(url)
    run_id = store.begin_run(make_run().model_copy(update={"results": []}))
    CLUSTER["stop"]()
    restart = threading.Timer(3.0, CLUSTER["start"])  # the server is away for ~3 s
    restart.start()
    try:
        store.add_result(run_id, make_run().results[0])  # retried until the server is back
    finally:
        restart.join()
    assert len(store.load(run_id).results) == 1
    store.close()


def test_leaderboard_server_on_postgres(pg_url: str) -> None:
    """`torchmark board`'s app over PostgreSQL: tokens, a stored run, its duplicate, a rank."""
    from fastapi.testclient import TestClient

    from torchmark.web.app import create_app

    run = served_run()
    run.environment = {"host": "secret-host", "devices": {"cpu": {"model": "PG CPU"}}}
    app = create_app(new_database(pg_url))
    token = app.state.accounts.create_token("team")
    client = TestClient(app)
    closing = app.state.store
    headers = {"Authorization": f"Bearer {token}"}
    first = client.post("/api/v1/runs", content=export_run(run), headers=headers)
    assert first.status_code == 201, first.text
    again = client.post("/api/v1/runs", content=export_run(run), headers=headers)
    assert again.json() == {"run_id": first.json()["run_id"], "duplicate": True}
    stored = client.get(f"/api/v1/runs/{first.json()['run_id']}").text
    assert "secret-host" not in stored and "PG CPU" in stored
    r = run.results[0]
    board = client.get(
        "/api/v1/leaderboard", params={"workload": r.workload, "variant": r.variant}
    ).json()
    closing.close()
    assert [(row["model"], row["rank"]) for row in board] == [("PG CPU", "1")]


def test_the_boards_batched_reads_on_postgres(pg_url: str) -> None:
    """What SQLite's tests count, on PostgreSQL's SQL: a placement over several cases (a
    row-value IN), a stored report found in one query (its key joined as text), and a
    backfill that loads only the submissions with results."""
    import sqlalchemy as sa
    from fastapi.testclient import TestClient

    from boardtest import body
    from boardtest import make_run as board_run
    from torchmark.web import cases, ranking
    from torchmark.web.app import create_app

    def suite(model: str, scale: float, n: int) -> RunRecord:
        run = board_run(model, scale)
        one = run.results[0]
        run.results = [one.model_copy(update={"params": {"n": 1000 + i}}) for i in range(n)]
        return run

    app = create_app(new_database(pg_url))
    headers = {"Authorization": f"Bearer {app.state.accounts.create_token('t')}"}
    client = TestClient(app)
    ids = []
    for model, scale, n in (("A", 1.0, 5), ("B", 2.0, 5), ("C", 4.0, 0)):
        answer = client.post("/api/v1/runs", content=body(suite(model, scale, n)), headers=headers)
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["run_id"])
    store = app.state.store
    submitted = [store.load(run_id) for run_id in ids]
    mine = suite("mine", 3.0, 6)
    placed = client.post("/api/v1/place", content=body(mine)).json()
    assert [(p["machines"], p["rank"]) for p in placed] == [(2, 3)] * 5 + [(0, 1)]
    for p, r in zip(placed, mine.results, strict=True):
        assert p["machines"] == len(ranking.rank(submitted, ranking.case_of(r)))
    reports = app.state.reports
    key = reports.key(ids[0])
    reports.keep(ids[0], key, b"page")
    assert reports.find(ids[0]) == (key, b"page")
    assert reports.find(ids[1]) == (reports.key(ids[1]), None) and reports.find("no") is None
    engine = app.state.accounts.engine
    with engine.begin() as conn:
        conn.execute(sa.delete(cases.results_t))
    assert cases.backfill(engine, store) == 2  # C has no results: never loaded
    assert cases.backfill(engine, store) == 0
    assert len(cases.rank(engine, "standard", ranking.case_of(mine.results[0]))) == 2
    store.close()


def database_with_token(pg_url: str, name: str) -> tuple[str, str]:
    """A fresh database with the server's tables and a token ``name``: (its URL, the token)."""
    from torchmark.web.accounts import Accounts

    db = new_database(pg_url)
    store = open_store(db)
    try:
        return db, Accounts(store).create_token(name)
    finally:
        store.close()


def test_leaderboard_concurrent_submitters_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """`torchmark board` on uvicorn over PostgreSQL, 16 threads submitting 40 runs and 8
    repeats: every acknowledged run is readable, none stored twice, no 5xx."""
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from boardtest import start_server, stop
    from torchmark.cli.submit import post

    db, token = database_with_token(pg_url, "load")
    proc, url = start_server(db, tmp_path / "serve.log")
    try:
        bodies = []
        for i in range(40):
            run = served_run(hours=i)
            bodies.append(export_run(run).encode())
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda b: post(url, token, b), bodies + bodies[:8]))
        ids = [a["run_id"] for a in answers]
        runs = json.loads(urllib.request.urlopen(url + "/api/v1/runs", timeout=30).read())
    finally:
        stop(proc)
    assert len(set(ids[:40])) == 40 and ids[40:] == ids[:8]
    assert sorted(r["run_id"] for r in runs) == sorted(ids[:40])


def test_leaderboard_acknowledged_runs_survive_sigkill_on_postgres(
    pg_url: str, tmp_path: Path
) -> None:
    """The SQLite durability test's scenario on PostgreSQL: `torchmark board` SIGKILLed
    under 8 submitting threads, restarted: every acknowledged run is there, none twice."""
    from boardtest import survives_sigkill

    db, token = database_with_token(pg_url, "kill")
    survives_sigkill(db, token, tmp_path / "serve.log")


def test_two_server_processes_share_one_postgres_database(pg_url: str, tmp_path: Path) -> None:
    """`torchmark serve --workers 2` on uvicorn over PostgreSQL: 40 runs and their 8 twins
    sent at once by 16 threads on new connections (the kernel hands them to either worker):
    each stored once (no orphan copy in the store), the report drawn and kept once, and no
    process left behind."""
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    import psutil
    import sqlalchemy as sa

    from boardtest import serve, stop
    from torchmark.cli.submit import post
    from torchmark.web.accounts import Accounts
    from torchmark.web.reports import reports_t

    db = new_database(pg_url)
    store = open_store(db)
    assert isinstance(store, SQLStore)
    token = Accounts(store).create_token("two")
    proc, url = serve(db, tmp_path / "serve.log", ["--workers", "2"], start_s=90)
    try:
        workers = [c for c in psutil.Process(proc.pid).children() if c.is_running()]
        assert len(workers) >= 2  # uvicorn's two workers (and perhaps its resource tracker)
        bodies = [export_run(served_run(hours=i)).encode() for i in range(40)]
        sends = [b for pair in zip(bodies[:8], bodies[:8], strict=True) for b in pair]
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(lambda b: post(url, token, b), sends + bodies[8:]))
        ids = [a["run_id"] for a in answers]
        listed = json.loads(urllib.request.urlopen(url + "/api/v1/runs", timeout=30).read())
        for _ in range(4):
            page = urllib.request.urlopen(f"{url}/runs/{ids[0]}/report", timeout=120).read()
            assert b"<svg" in page
        # the workers, the process drawing reports, multiprocessing's resource tracker
        family = psutil.Process(proc.pid).children(recursive=True)
    finally:
        stop(proc)
    assert ids[0:16:2] == ids[1:16:2]  # each twin got its first's id
    assert len(set(ids)) == 40 and sorted(r["run_id"] for r in listed) == sorted(set(ids))
    assert len(store.list_runs()) == 40  # no second copy of a twin left in the store
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(reports_t)).scalar() == 1
    store.close()
    _, alive = psutil.wait_procs(family, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]  # none outlives the server
