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
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from torchmark.errors import RunNotFoundError, StoreError
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.store import SQLStore, open_store
from torchmark.store.exchange import export_run, import_run

T0 = datetime(2026, 11, 21, 8, 30, 12, 345678, tzinfo=timezone.utc)
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
