"""The results store: incremental writes, lookup, bad files, URLs, ceiling cache, migrations."""

from __future__ import annotations

import os
import re
import sqlite3
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from torchmark.errors import InputError, RunNotFoundError, StoreError
from torchmark.results import SCHEMA_VERSION, Ceiling, Result, RunRecord, Verdict, Work
from torchmark.results.schema import NewerSchemaError, migrate_document
from torchmark.store import SQLStore, open_store
from torchmark.store import migrations as mig
from torchmark.store.migrations import migrate_database

T0 = datetime(2026, 11, 21, 8, 30, 12, 345678, tzinfo=timezone.utc)
# Samples whose decimal text is long: a store that rounds them would fail the equality checks.
SAMPLES = [0.1 + 0.2, 1 / 3, 1.2345678901234567e-05, 2.5e-3, 0.30000000000000004 * 1.01]


def ceiling(device: str = "cpu", value: float = 4.5e10) -> Ceiling:
    return Ceiling(
        device=device,
        key="bandwidth",
        value=value,
        unit="B/s",
        method="best of copy, triad, mul_",
        theoretical=5.12e10,
        theoretical_source="datasheet",
        details={"copy": 2.5e10, "mul_": value},
    )


def result(workload: str = "add", device: str = "cpu", **kw: object) -> Result:
    base: dict[str, object] = {
        "workload": workload,
        "variant": "fp32",
        "device": device,
        "params": {"numel": 1 << 20, "dtype": "float32"},
        "samples_s": SAMPLES,
        "calls_per_sample": 4,
        "first_call_s": 0.0123,
        "warmup_calls": 3,
        "stop_reason": "target spread",
        "rule": "test",
        "work": Work(bytes=3 * 4 * (1 << 20), items=1),
        "headline": "bytes",
        "ceiling": ceiling(device),
        "extra_flags": ["loaded_machine"],
        "verdict": Verdict(level="warn", reasons=["machine was busy"]),
    }
    base.update(kw)
    return Result.model_validate(base)


def skipped(device: str = "cpu") -> Result:
    return Result(
        workload="matmul", variant="int8", device=device, status="skipped", reason="no int8"
    )


def record(created: datetime = T0, host: str = "box", **kw: object) -> RunRecord:
    base: dict[str, object] = {
        "tool_version": "0.1.0",
        "created_utc": created,
        "command": "torchmark run --quick",
        "config": {"suite": "quick"},
        "environment": {"host": host, "devices": {"cpu": {"model": "Fake CPU"}}},
        "fingerprint": "abc123",
    }
    base.update(kw)
    return RunRecord.model_validate(base)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


@pytest.fixture
def store(db: Path):  # type: ignore[no-untyped-def]
    s = open_store(str(db))
    yield s
    s.close()


def hexes(xs: list[float]) -> list[str]:
    return [x.hex() for x in xs]


# -- writing and reading runs ------------------------------------------------------------


def test_interrupted_run_keeps_every_result_added(db: Path) -> None:
    writer = open_store(str(db))
    run_id = writer.begin_run(record())
    writer.add_result(run_id, result("add"))
    writer.add_result(run_id, skipped())
    writer.close()  # the process dies here: no finish_run

    reader = open_store(f"sqlite:///{db}")
    got = reader.load(run_id)
    assert got.status == "running"
    assert got.finished_utc is None
    assert [r.workload for r in got.results] == ["add", "matmul"]
    assert hexes(got.results[0].samples_s) == hexes(SAMPLES)
    assert got.results[1].reason == "no int8"
    [summary] = reader.list_runs()
    assert (summary.run_id, summary.n_results, summary.n_ok) == (run_id, 2, 1)
    reader.close()


def test_finish_run_sets_status_and_keeps_results_once(store: SQLStore) -> None:
    rec = record()
    run_id = store.begin_run(rec)
    store.set_ceilings(run_id, [ceiling()])
    store.add_result(run_id, result())
    rec.results = [result()]
    rec.status = "incomplete"
    rec.finished_utc = T0 + timedelta(seconds=42)
    rec.verdict = Verdict(level="warn", reasons=["interrupted"])
    store.finish_run(run_id, rec)

    got = store.load(run_id)
    assert got.status == "incomplete"
    assert got.finished_utc == T0 + timedelta(seconds=42)
    assert got.verdict == Verdict(level="warn", reasons=["interrupted"])
    assert len(got.results) == 1
    assert got.ceilings == [ceiling()]
    assert got.run_id == run_id


def test_every_stored_run_describes_itself(store: SQLStore, db: Path) -> None:
    run_id = store.begin_run(record())
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT schema_version, tool_version, created_utc, fingerprint, host FROM runs "
            "WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert row == (SCHEMA_VERSION, "0.1.0", "2026-11-21T08:30:12.345678+00:00", "abc123", "box")
    assert meta["schema_version"] == str(mig.DB_SCHEMA_VERSION)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_run_ids_are_readable_and_sortable(store: SQLStore) -> None:
    first = store.begin_run(record(T0))
    second = store.begin_run(record(T0 + timedelta(seconds=1)))
    assert re.fullmatch(r"20261121-083012-[0-9a-f]{4}", first)
    assert re.fullmatch(r"20261121-083013-[0-9a-f]{4}", second)
    assert sorted([second, first]) == [first, second]


def test_latest_is_the_newest_finished_run_by_insertion(store: SQLStore) -> None:
    # Stored out of time order: "newest" is what this store received last, so an imported
    # run dated 9999 does not win for ever, and a run still measuring is not "latest".
    mid = store.begin_run(record(T0 + timedelta(hours=1)))
    new = store.begin_run(record(T0 + timedelta(hours=2), host="other"))
    store.add_result(new, result(device="cuda:0"))
    with pytest.raises(RunNotFoundError, match=rf"no finished run .*run {new} is still running"):
        store.load("latest")
    future = store.save(record(datetime(9999, 1, 1, tzinfo=timezone.utc), status="complete"))
    store.finish_run(mid, record(T0 + timedelta(hours=1), status="complete"))
    old = store.save(record(T0, status="incomplete"))
    running = store.begin_run(record(T0 + timedelta(hours=3)))
    assert store.load("latest").run_id == old
    runs = store.list_runs()
    assert [r.run_id for r in runs] == [running, old, future, new, mid]
    assert runs[3].devices == ["cpu", "cuda:0"]  # a device seen only in results joins
    assert runs[3].host == "other"
    assert [r.run_id for r in store.list_runs(limit=2)] == [running, old]


def test_unknown_run_names_the_history_command(store: SQLStore) -> None:
    with pytest.raises(RunNotFoundError, match="no runs stored"):
        store.load("latest")
    store.begin_run(record())
    with pytest.raises(RunNotFoundError, match=r"'nope'.*torchmark history"):
        store.load("nope")
    with pytest.raises(RunNotFoundError):
        store.add_result("nope", result())


def test_save_keeps_the_id_unless_taken(store: SQLStore) -> None:
    rec = record(run_id="20260101-000000-beef", results=[result(), skipped()])
    assert store.save(rec) == "20260101-000000-beef"
    again = store.save(rec)
    assert again != rec.run_id
    assert again.startswith("20261121-083012-")  # a fresh id from the run's own time
    assert store.load(again).model_dump() == store.load(rec.run_id).model_dump() | {"run_id": again}


def test_save_is_one_transaction(store: SQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = store.save(record(results=[result()]))
    real = SQLStore._insert_result
    calls = []

    def failing(self, conn, run_id, res):  # type: ignore[no-untyped-def]
        calls.append(run_id)
        if len(calls) == 2:
            raise sa_exc.OperationalError("INSERT", {}, Exception("disk I/O error"))
        real(self, conn, run_id, res)

    monkeypatch.setattr(SQLStore, "_insert_result", failing)
    store.retry_s = 0  # one try: the retry is tested on its own
    with pytest.raises(StoreError, match="disk I/O error"):
        store.save(record(T0 + timedelta(days=1), results=[result(), result("triad")]))
    monkeypatch.undo()
    assert [r.run_id for r in store.list_runs()] == [kept]
    assert len(store.load(kept).results) == 1


# -- ceiling cache -----------------------------------------------------------------------


def test_ceiling_cache_get_and_put(store: SQLStore) -> None:
    assert store.cached_ceilings("fp1", "cpu") is None
    store.cache_ceilings("fp1", "cpu", [ceiling(value=4.0e10)])
    store.cache_ceilings("fp1", "cpu", [ceiling(value=4.5e10)])
    store.cache_ceilings("fp1", "cuda:0", [ceiling("cuda:0", 3.0e12)])
    assert store.cached_ceilings("fp1", "cpu") == [ceiling(value=4.5e10)]  # newest wins
    assert store.cached_ceilings("fp1", "cuda:0") == [ceiling("cuda:0", 3.0e12)]
    assert store.cached_ceilings("fp2", "cpu") is None


# -- bad files and locations -------------------------------------------------------------


def test_garbage_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    garbage = bytes(range(256)) * 64
    bad.write_bytes(garbage)
    with pytest.raises(StoreError) as e:
        open_store(str(bad))
    msg = str(e.value)
    assert f"{bad} is not a usable torchmark database" in msg
    assert "--db sqlite:///other.db" in msg
    assert bad.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_corrupt_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "results.db"
    # A real SQLite header followed by junk: passes the magic check, fails inside SQLite.
    garbage = b"SQLite format 3\x00" + b"\xff" * 4080
    bad.write_bytes(garbage)
    with pytest.raises(StoreError, match="is not a usable torchmark database"):
        open_store(str(bad))
    assert bad.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.db"]  # no -wal, -shm


def test_another_programs_database_is_not_written(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    before = other.read_bytes()
    with pytest.raises(StoreError, match=r"another program \(tables: users\)"):
        open_store(str(other))
    assert other.read_bytes() == before


def test_unwritable_location_names_path_and_fix(tmp_path: Path) -> None:
    # A regular file where a directory should be: refused even for root.
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    target = blocker / "sub" / "results.db"
    with pytest.raises(StoreError) as e:
        open_store(f"sqlite:///{target}")
    assert str(blocker / "sub") in str(e.value)
    assert "TORCHMARK_DB" in str(e.value) and "--db" in str(e.value)
    assert blocker.read_text() == "not a directory"


def test_read_only_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
    elif Path("/proc/self").is_dir():
        ro = Path("/proc")  # root ignores permission bits, but procfs refuses new files
    else:
        pytest.skip("running as root without /proc: no read-only directory to try")
    try:
        with pytest.raises(StoreError) as e:
            open_store(str(ro / "torchmark-test.db"))
        assert str(e.value) == (
            f"cannot write the results store {ro / 'torchmark-test.db'} (unable to open "
            f"database file); pass --db sqlite:///other.db or set TORCHMARK_DB"
        )
    finally:
        if ro != Path("/proc"):
            ro.chmod(0o700)


def test_directory_given_as_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        open_store(str(tmp_path))


# -- URLs --------------------------------------------------------------------------------


def test_default_store_in_user_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    data = tmp_path / "data" / "torchmark"
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda app: str(data))
    s = open_store(None)
    s.begin_run(record())
    s.close()
    assert (data / "results.db").is_file()


def test_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    forms = {
        "sqlite:///rel.db": tmp_path / "rel.db",
        f"sqlite:///{tmp_path}/abs.db": tmp_path / "abs.db",  # four slashes: absolute
        "plain.db": tmp_path / "plain.db",
        "nested/dir/x.db": tmp_path / "nested" / "dir" / "x.db",
    }
    for url, path in forms.items():
        s = open_store(url)
        s.begin_run(record())
        assert s.url == f"sqlite:///{path}"
        s.close()
        assert path.is_file(), url
    mem = open_store(":memory:")
    run_id = mem.save(record(status="complete"))
    assert mem.load("latest").run_id == run_id


def test_unknown_scheme_lists_supported_ones() -> None:
    with pytest.raises(InputError, match=r"'mysql'.*sqlite:///PATH, postgresql://"):
        open_store("mysql://u@h/db")


def test_postgres_without_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    with pytest.raises(StoreError, match=r"pip install 'torchmark\[postgres\]'"):
        open_store("postgresql://user:secret@localhost/torchmark")


# -- migrations --------------------------------------------------------------------------


def v0_to_v1(doc: dict) -> dict:  # type: ignore[type-arg]
    """A fake version 0 that called the results list 'measurements'."""
    out = {k: v for k, v in doc.items() if k != "measurements"}
    out["results"] = doc["measurements"]
    return out


def test_document_migration_runs_registered_steps() -> None:
    old = {"schema_version": 0, "measurements": [{"workload": "add"}]}
    new = migrate_document(old, steps={0: v0_to_v1}, target=1)
    assert new == {"schema_version": 1, "results": [{"workload": "add"}]}
    assert old["schema_version"] == 0  # the input is not changed
    two = migrate_document(old, steps={0: v0_to_v1, 1: lambda d: d | {"x": 2}}, target=2)
    assert (two["schema_version"], two["x"]) == (2, 2)


def test_document_migration_refuses_newer_and_unknown_versions() -> None:
    with pytest.raises(NewerSchemaError, match=r"schema version 7; .*upgrade torchmark"):
        migrate_document({"schema_version": 7}, what="run.json")
    with pytest.raises(InputError, match="cannot be migrated"):
        migrate_document({"schema_version": 0}, steps={}, target=1)
    with pytest.raises(InputError, match="invalid schema_version"):
        migrate_document({"schema_version": "one"})


def test_database_migration_steps_run_in_order(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_store(str(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    seen: list[str] = []
    monkeypatch.setitem(mig.DB_STEPS, 0, lambda conn: seen.append("0->1"))
    monkeypatch.setitem(mig.DB_STEPS, 1, lambda conn: seen.append("1->2"))
    open_store(str(db)).close()
    assert seen == ["0->1", "1->2"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(mig.DB_SCHEMA_VERSION),
        )
    open_store(str(db)).close()
    assert seen == ["0->1", "1->2"]  # already current: no step runs again


def test_newer_database_is_refused(db: Path) -> None:
    s = open_store(str(db))
    s.begin_run(record())
    s.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"schema version 9; .*upgrade torchmark"):
        open_store(str(db))


def test_migrate_database_without_step_is_an_error() -> None:
    with pytest.raises(StoreError, match="cannot be migrated"):
        migrate_database(None, 0, where="x.db", target=1, steps={})  # type: ignore[arg-type]


# -- creation, locks, foreign files, orphaned runs -----------------------------


def test_creating_the_schema_is_one_transaction(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a kill between CREATE TABLE and the meta insert left a file that was for ever
    # "not a usable torchmark database". A failure there now leaves no table at all.
    from torchmark.store import sql

    def killed(t: datetime) -> str:
        raise RuntimeError("killed between CREATE TABLE and the meta insert")

    monkeypatch.setattr(sql, "iso_utc", killed)
    with pytest.raises(RuntimeError):
        open_store(str(db))
    monkeypatch.undo()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    store = open_store(str(db))
    assert store.begin_run(record())
    store.close()


def test_a_half_made_database_of_an_older_build_is_completed(db: Path) -> None:
    with sqlite3.connect(db) as conn:  # what a kill after CREATE TABLE meta left behind
        conn.execute("CREATE TABLE meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("CREATE TABLE runs (run_id VARCHAR(40) PRIMARY KEY, kind VARCHAR(32))")
    store = open_store(str(db))
    run_id = store.begin_run(record())
    assert store.load(run_id).run_id == run_id
    store.close()


def test_another_programs_meta_table_is_recognised_before_any_change(tmp_path: Path) -> None:
    # Before: "no such column: meta.value", after switching the file's journal to WAL.
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE meta (name TEXT, val TEXT)")
        conn.execute("INSERT INTO meta VALUES ('owner', 'someone else')")
    before = other.read_bytes()
    with pytest.raises(StoreError, match=r"database of another program \(tables: meta\)"):
        open_store(str(other))
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]
    with sqlite3.connect(other) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_held_lock_is_waited_out_then_named(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from torchmark.errors import StoreUnavailable
    from torchmark.store import sql

    monkeypatch.setattr(sql, "SQLITE_BUSY_S", 0.2)
    store = open_store(str(db))
    assert isinstance(store, SQLStore)
    run_id = store.begin_run(record())
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    store.retry_s = 1.0
    t0 = time.monotonic()
    with pytest.raises(
        StoreUnavailable, match=r"could not store a result for 1 s \(database is locked\)"
    ):
        store.add_result(run_id, result())
    assert time.monotonic() - t0 < 10
    store.retry_s = 30.0
    threading.Timer(1.0, other.rollback).start()  # the other writer finishes after 1 s
    store.add_result(run_id, result())
    other.close()
    assert len(store.load(run_id).results) == 1
    store.close()


BEGIN_AND_DIE = """
import os, sys
from torchmark.results import RunRecord
from torchmark.store import open_store
s = open_store(sys.argv[1])
print(s.begin_run(RunRecord(command="killed")), flush=True)
os._exit(9)  # like SIGKILL: nothing runs after this
"""


def test_runs_whose_process_died_are_marked_incomplete_on_the_next_open(db: Path) -> None:
    # Before: "process gone" was shown by history only; the store said `running` for ever.
    import subprocess

    dead = subprocess.run(
        [sys.executable, "-c", BEGIN_AND_DIE, str(db)], capture_output=True, text=True
    ).stdout.strip()
    store = open_store(str(db))
    assert isinstance(store, SQLStore)
    assert store.marked_gone == [dead]  # found on the first open after the kill
    alive = store.begin_run(record())  # this process: alive
    reused = store.begin_run(record(command="pid reused"))
    assert isinstance(store, SQLStore)
    with store.engine.begin() as conn:  # same pid and host, another process start time
        conn.exec_driver_sql(
            "UPDATE runs SET writer = json_set(writer, '$.started', 1.0) WHERE run_id = ?",
            (reused,),
        )
    store.close()
    reopened = open_store(str(db))
    assert isinstance(reopened, SQLStore)
    assert reopened.marked_gone == [reused]
    got = reopened.load(dead)
    assert got.status == "incomplete"
    assert got.verdict is not None and "ended without finishing the run" in got.verdict.reasons[-1]
    assert reopened.load(alive).status == "running"
    assert {r.run_id: r.status for r in reopened.list_runs()}[reused] == "incomplete"
    reopened.close()


def test_postgres_server_that_never_answers_times_out(tmp_path: Path) -> None:
    # Before: 135 s of silence. A loopback socket that accepts and never answers.
    import socket
    import time

    pytest.importorskip("psycopg")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=r"no answer from the server .*connect_timeout"):
            open_store(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=2")
        assert time.monotonic() - t0 < 15
    finally:
        server.close()


def test_postgres_gets_a_default_connect_timeout() -> None:
    pytest.importorskip("psycopg")
    from torchmark.store import sql

    captured = {}

    class Stop(Exception):
        pass

    def fake_store(engine, where, *a, **kw):  # type: ignore[no-untyped-def]
        captured["url"] = engine.url
        raise Stop

    import unittest.mock

    with unittest.mock.patch.object(sql, "SQLStore", fake_store), pytest.raises(Stop):
        open_store("postgresql://u@localhost/db")
    assert captured["url"].query["connect_timeout"] == "10"
    with unittest.mock.patch.object(sql, "SQLStore", fake_store), pytest.raises(Stop):
        open_store("postgresql://u@localhost/db?connect_timeout=3")
    assert captured["url"].query["connect_timeout"] == "3"


@pytest.mark.parametrize(
    "url", ["postgresql://u@[::1:5432/db", "postgresql://u:secret@host:port/db"]
)
def test_malformed_postgres_url_is_one_line(url: str) -> None:
    # Before: a ValueError traceback.
    with pytest.raises(InputError, match=r"bad results store URL .*postgresql://USER") as e:
        open_store(url)
    assert "secret" not in str(e.value) and "\n" not in str(e.value)
