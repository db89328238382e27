"""A full disk fails at once (StoreFull), a held lock is still waited out (test_store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from fullstore import full_store
from torchmark.errors import StoreFull, StoreUnavailable
from torchmark.results import Result, RunRecord, Work
from torchmark.store import sql


def record() -> RunRecord:
    return RunRecord(
        tool_version="0.1.0",
        command="torchmark run",
        environment={"host": "box", "blob": "x" * 20_000},  # needs new pages to store
        fingerprint="fp",
    )


def test_a_full_disk_fails_at_once_with_the_fix(tmp_path: Path) -> None:
    store, waits = full_store(tmp_path / "full.db")
    with pytest.raises(StoreFull, match=r"cannot start a run, the disk is full \(database or"):
        store.begin_run(record())
    assert waits == []  # no retry: waiting frees no disk space (a retry took 60 s here)
    with pytest.raises(StoreFull, match=r"free space on .* or pass --db sqlite:///"):
        store.begin_run(record())
    assert isinstance(StoreFull("x"), StoreUnavailable)  # every caller of the store copes
    store.close()


def test_errors_that_mean_full_and_errors_that_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def err(text: str) -> sa_exc.OperationalError:
        return sa_exc.OperationalError("INSERT", {}, Exception(text))

    assert sql.is_full(err("database or disk is full"))
    assert sql.is_full(err("could not extend file: No space left on device"))  # PostgreSQL
    assert not sql.is_full(err("database is locked"))
    assert sql.is_passing(err("database is locked"), "sqlite")
    assert not sql.is_passing(err("database or disk is full"), "sqlite")
    # an ENOSPC in the WAL reaches SQLite callers as an I/O error: full where no space is left
    io = err("disk I/O error")
    usage = type("usage", (), {"free": 0})
    monkeypatch.setattr(sql.shutil, "disk_usage", lambda p: usage)
    assert sql.is_full(io, tmp_path / "x.db") and not sql.is_full(io)
    usage.free = 10 << 30
    assert not sql.is_full(io, tmp_path / "x.db")


def test_a_result_on_a_full_disk_keeps_the_run(tmp_path: Path) -> None:
    from torchmark.run.session import Session

    store, waits = full_store(tmp_path / "full.db")
    told: list[str] = []

    class Events:
        def planned(self, cases: object) -> None: ...
        def ceilings(self, device: object, cached: bool) -> None: ...
        def case_started(self, case: object) -> None: ...
        def case_done(self, case: object, result: object) -> None: ...
        def store_failed(self, reason: str) -> None:
            told.append(reason)

    from torchmark.errors import RunNotStored

    ok = Result(
        workload="add", variant="fp32", device="cpu", samples_s=[0.1] * 6, work=Work(bytes=1)
    )
    with pytest.raises(RunNotStored) as stopped, Session(record(), store, Events()) as s:  # type: ignore[arg-type]
        s.add(None, ok)
    assert waits == [] and len(told) == 1 and "the disk is full" in told[0]
    assert stopped.value.record.results == [ok]  # kept, for the JSON file
    assert "the disk is full" in stopped.value.record.payload.not_stored
    store.close()
