"""Results store, chosen by URL: ``open_store(url) -> ResultStore``.

Accepted URLs (SQLAlchemy's spelling)::

    None                        SQLite file results.db in the user data directory
    sqlite:///rel/path.db       relative to the current directory
    sqlite:////abs/path.db      absolute (four slashes), also sqlite:///~/path.db
    path/to/file.db             a bare file path
    sqlite://  or  :memory:     in memory (tests)
    postgresql://user:pw@host/db    needs `pip install 'torchmark[postgres]'` (psycopg 3)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from torchmark.errors import InputError, StoreError, StorePathError
from torchmark.store.read import MEMORY_URLS, SQLITE_MAGIC, open_reader, sqlite_path

if TYPE_CHECKING:  # SQLAlchemy on first open: open_reader's commands never import it
    from torchmark.store.base import ResultStore, RunSummary
    from torchmark.store.sql import SQLStore

__all__ = [
    "ResultStore",
    "RunSummary",
    "SQLStore",
    "default_board_path",
    "default_path",
    "open_reader",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name in ("ResultStore", "RunSummary"):
        from torchmark.store import base

        return getattr(base, name)
    if name == "SQLStore":
        from torchmark.store.sql import SQLStore

        return SQLStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SUPPORTED = "sqlite:///PATH, postgresql://USER@HOST/DB, or a plain file path"
POSTGRES_SCHEMES = ("postgresql", "postgres")


def default_path() -> Path:
    return Path(platformdirs.user_data_dir("torchmark")) / "results.db"


def default_board_path() -> Path:
    """The leaderboard's own store (`torchmark board` without --db): beside the results
    file, never in it (the server's copies of submitted runs would show in `history`)."""
    return default_path().with_name("board.db")


def is_postgres(url: str | None) -> bool:
    """Whether ``url`` names a PostgreSQL store (``postgresql://``, ``postgres+DRIVER://``)."""
    url = (url or "").strip()
    return "://" in url and _base_scheme(url) in POSTGRES_SCHEMES


def _base_scheme(url: str) -> str:
    return url.split("://", 1)[0].lower().split("+", 1)[0]


def open_store(url: str | None = None) -> ResultStore:
    """Open (creating if needed) the results store at ``url``; see the module docstring."""
    from torchmark.store.sql import postgres_store

    path = sqlite_path(url)  # the one reading of a file's URL, open_reader's too
    if path is not None:
        return _open_sqlite(path)
    url = (url or "").strip()
    if url in MEMORY_URLS:
        return _open_memory()
    if _base_scheme(url) in POSTGRES_SCHEMES:
        return postgres_store(url)
    scheme = url.split("://", 1)[0].lower()
    raise InputError(f"unsupported results store URL scheme {scheme!r}; use {SUPPORTED}")


def _open_memory() -> SQLStore:
    import sqlalchemy as sa
    from sqlalchemy.pool import StaticPool

    from torchmark.store.sql import SQLStore

    # One shared connection: each new connection to ":memory:" would be a new, empty database.
    engine = sa.create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    return SQLStore(engine, "sqlite:// (in memory)")


def _open_sqlite(path: Path) -> SQLStore:
    from torchmark.store.sql import FIX, sqlite_store

    path = path.expanduser().absolute()
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a database file; {FIX}")
    parent = path.parent
    if not parent.is_dir():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"cannot create the directory {parent} for the results store "
                f"({e.strerror or e}); {FIX}"
            ) from None
    if path.exists():
        # Check the file header ourselves before SQLite touches it: a file that is not a
        # database must stay exactly as it is.
        try:
            with path.open("rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise StorePathError(f"cannot read {path} ({e.strerror or e}); {FIX}") from None
        if head and head != SQLITE_MAGIC:
            raise StorePathError(
                f"{path} is not a usable torchmark database (file is not a database); "
                f"move it aside or pass --db sqlite:///other.db"
            )
    return sqlite_store(path)
