"""A results store on a "full disk"."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from torchmark.store import SQLStore, open_store


def full_store(path: Path, every_write: bool = False) -> tuple[SQLStore, list[float]]:
    """A real SQLite store whose file may not grow by a page, so SQLite itself raises its
    SQLITE_FULL ("database or disk is full") as on a full disk; ``every_write``: every
    INSERT and UPDATE raises it (a small row may still fit a page the file has). Returns
    the store and the waits it slept."""
    store = open_store(f"sqlite:///{path}")
    assert isinstance(store, SQLStore)
    pages = sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0]

    @sa.event.listens_for(store.engine, "connect")
    def _cap(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count={pages}")

    if every_write:

        @sa.event.listens_for(store.engine, "before_cursor_execute")
        def _full(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
                raise sqlite3.OperationalError("database or disk is full")

    store.engine.dispose()  # pooled connections were opened without the cap
    waits: list[float] = []
    store._sleep = waits.append
    return store, waits
