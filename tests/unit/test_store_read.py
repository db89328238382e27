"""Reading stored runs without SQLAlchemy: the read-only SQLite view gives what the full store
gives, is offered only where a file can be read as it is, and history reads no header."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from torchmark.errors import RunNotFoundError, StoreError
from torchmark.judge.verdicts import COUNTED, kind_of
from torchmark.store import SQLStore, open_reader, open_store
from torchmark.store import migrations as mig
from torchmark.store.exchange import import_run
from torchmark.store.read import SQLiteReader, sqlite_path

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
FILES = [
    "verdicts-a.json",  # results judged ok, warn and invalid, and two without a verdict
    "cpu-only.json",
    "serving-cpu.json",
    "v1-model.json",
    "tune-cpu.json",
    "v1-run.json",
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.db"
    store = open_store(str(path))
    for name in FILES:
        store.save(import_run(RUNS / name))
    store.close()
    return path


def _reader(path: Path) -> SQLiteReader:
    reader = open_reader(str(path))
    assert isinstance(reader, SQLiteReader)
    return reader


def _both(path: Path) -> tuple[SQLiteReader, SQLStore]:
    full = open_store(str(path))
    assert isinstance(full, SQLStore)
    return _reader(path), full


def _sql(path: Path, statement: str, *args: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, args)
    conn.close()


def test_the_reader_lists_and_loads_what_the_full_store_does(db: Path) -> None:
    reader, full = _both(db)
    listed = reader.list_runs()
    assert listed == full.list_runs() and len(listed) == len(FILES)
    assert reader.list_runs(2) == full.list_runs(2) == listed[:2]
    serving = next(r for r in listed if r.kind == "serving")
    assert serving.n_results >= 1  # its answers counted, from the summary column
    judged = listed[-1]  # verdicts-a: ok by the verdict rule only, its invalid ones not
    counted = [kind_of(r) in COUNTED for r in reader.load(judged.run_id).results]
    assert (judged.n_ok, judged.n_results) == (sum(counted), 10)
    assert 0 < judged.n_ok < 10
    for r in listed:
        assert reader.load(r.run_id) == full.load(r.run_id)
    assert reader.load("latest") == full.load("latest")
    with pytest.raises(RunNotFoundError, match="`torchmark history` lists"):
        reader.load("nope")
    reader.close()
    full.close()


def test_damaged_rows_read_the_same_through_either(db: Path) -> None:
    listed = _reader(db).list_runs()
    newest, older = listed[0].run_id, listed[1].run_id
    measured = next(r.run_id for r in listed[1:] if r.kind == "run" and r.n_results > 1)
    _sql(db, "UPDATE runs SET header = '{\"oops' WHERE run_id = ?", newest)
    _sql(db, "UPDATE results SET doc = 'not json' WHERE run_id = ? AND seq = 0", measured)
    reader, full = _both(db)
    assert reader.list_runs() == full.list_runs()
    assert {r.run_id: r.status for r in reader.list_runs()}[newest] == "damaged"
    assert reader.load("latest").run_id == full.load("latest").run_id == older  # skipped
    for store in (reader, full):
        with pytest.raises(StoreError, match=f"run {newest} in .* is damaged"):
            store.load(newest)
    partial = reader.load(measured)
    assert partial == full.load(measured)
    assert partial.verdict is not None
    assert "stored result 0 is damaged (not JSON) and was left out" in partial.verdict.reasons


def test_runs_holding_a_workload_are_found_without_reading_the_others(db: Path) -> None:
    from torchmark.reference import newest_placeable, seed_results

    reader, full = _both(db)
    loaded = [reader.load(r.run_id) for r in reader.list_runs()]  # newest first
    seeded = [r for r in loaded if any(x.workload == "seed-add" for x in r.results)]
    held = [r.run_id for r in seeded]
    assert len(held) == 2
    assert reader.runs_holding("seed-add", "as-published") == held
    assert full.runs_holding("seed-add", "as-published") == held
    assert reader.runs_holding("seed-add", "no-such-variant") == []
    assert all(seed_results(r) for r in seeded)  # both at the blog's size
    assert newest_placeable(reader).run_id == newest_placeable(full).run_id == held[0]
    # a damaged run holding one is passed over for the one before it
    _sql(db, "UPDATE runs SET header = '{\"oops' WHERE run_id = ?", held[0])
    assert newest_placeable(_reader(db)).run_id == held[1]
    reader.close()
    full.close()


def test_history_reads_no_header(db: Path) -> None:
    # A serving run keeps its raw samples in the header (~2 MB each as served): history
    # parsed every one (0.3 s for 7 runs). Its counts now come from the summary column: a
    # header whose middle is damaged still lists (load is what parses it, and says so).
    reader = _reader(db)
    serving = next(r for r in reader.list_runs() if r.kind == "serving")
    reader.close()
    _sql(db, "UPDATE runs SET header = '{not json}' WHERE run_id = ?", serving.run_id)
    reader, full = _both(db)
    for store in (reader, full):
        again = next(r for r in store.list_runs() if r.run_id == serving.run_id)
        assert again == serving
        with pytest.raises(StoreError, match="is damaged"):
            store.load(serving.run_id)


def test_rows_without_a_summary_are_read_from_their_header(db: Path) -> None:
    before = _reader(db).list_runs()
    _sql(db, "UPDATE runs SET summary = NULL")
    assert _reader(db).list_runs() == before


def test_a_version_3_database_is_migrated_then_read(db: Path) -> None:
    before = _reader(db).list_runs()
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN summary")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    assert open_reader(str(db)) is None  # an older layout: the full store migrates it
    full = open_store(str(db))
    assert full.list_runs() == before
    full.close()
    assert _reader(db).list_runs() == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE summary IS NULL").fetchone() == (0,)
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert version == (str(mig.DB_SCHEMA_VERSION),)


def test_no_reader_where_the_full_store_must_act(tmp_path: Path) -> None:
    assert open_reader(str(tmp_path / "missing.db")) is None  # the full open creates it
    assert not (tmp_path / "missing.db").exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all")
    assert open_reader(str(garbage)) is None  # the full open names it
    assert garbage.read_bytes() == b"not a database at all"
    for url in (":memory:", "sqlite://", "postgresql://u@localhost/db"):
        assert open_reader(url) is None
    other = tmp_path / "other.db"
    _sql(other, "CREATE TABLE meta (k TEXT)")
    assert open_reader(str(other)) is None


def test_a_run_whose_process_died_is_left_to_the_full_store_to_mark(db: Path) -> None:
    run_id = _reader(db).list_runs()[0].run_id
    writer = {"host": socket.gethostname(), "pid": 2**22 + 7, "started": 1.0}  # no such process
    _sql(db, "UPDATE runs SET status = 'running', writer = ? WHERE run_id = ?",
         json.dumps(writer), run_id)  # fmt: skip
    assert open_reader(str(db)) is None
    full = open_store(str(db))
    assert full.marked_gone == [run_id]  # type: ignore[attr-defined]
    full.close()
    assert {r.run_id: r.status for r in _reader(db).list_runs()}[run_id] == "incomplete"


def test_a_run_still_measuring_is_read_as_it_is(db: Path) -> None:
    import psutil

    run_id = _reader(db).list_runs()[0].run_id
    me = psutil.Process(os.getpid())
    writer = {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}
    _sql(db, "UPDATE runs SET status = 'running', writer = ? WHERE run_id = ?",
         json.dumps(writer), run_id)  # fmt: skip
    reader = _reader(db)
    assert {r.run_id: r.status for r in reader.list_runs()}[run_id] == "running"
    assert reader.load("latest").run_id != run_id


def test_the_reader_changes_nothing(db: Path) -> None:
    before = db.read_bytes()
    reader = _reader(db)
    for r in reader.list_runs():
        reader.load(r.run_id)
    reader.close()
    assert db.read_bytes() == before


def test_urls_name_the_same_file_as_open_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "r.db"
    assert sqlite_path("r.db") == sqlite_path("sqlite:///r.db") == here
    assert sqlite_path(f"sqlite:///{here}") == here
    assert sqlite_path("sqlite+pysqlite:///r.db") == here
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    from torchmark.store import default_path

    assert sqlite_path(None) == sqlite_path("  ") == default_path()
