"""The server's own tables beside the results store: tokens (hash only) and submissions.

They live in the store's database (SQLite file or PostgreSQL), created after ``open_store``
has created or checked its own tables; runs themselves are stored through the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy import Connection

from torchmark.errors import InputError, StoreError
from torchmark.results import utcnow
from torchmark.store import ResultStore, SQLStore

metadata = sa.MetaData()
tokens_t = sa.Table(
    "server_tokens",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_utc", sa.Text, nullable=False),
    sa.Column("revoked_utc", sa.Text),
)
submissions_t = sa.Table(
    "server_submissions",
    metadata,
    sa.Column("content_hash", sa.Text, primary_key=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("token_name", sa.Text, nullable=False),
    sa.Column("submitted_utc", sa.Text, nullable=False),
    sa.Column("division", sa.Text, nullable=False),
    sa.Column("machine", sa.Text, nullable=False),  # hardware+software fingerprint, no host
    sa.Index("ix_server_submissions_run_id", "run_id"),
    sa.Index("ix_server_submissions_machine", "machine"),
    sa.Index("ix_server_submissions_division", "division"),
)
# pg_advisory_lock key of the server's writes (any constant; the store's schema lock is
# another): several server processes on one PostgreSQL database take turns through it
_PG_WRITE_LOCK = 0x746D_7365_7276  # "tmserv"
TOKEN_BYTES = 32  # 256 random bits: guessing one is out of reach, so a fast hash suffices


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    name: str
    created_utc: str
    revoked_utc: str | None


class Accounts:
    """Tokens and submissions in the database of ``store`` (an SQL store)."""

    def __init__(self, store: ResultStore) -> None:
        if not isinstance(store, SQLStore):
            raise StoreError(f"the server needs an SQL results store, not {store.url}")
        self.engine = store.engine
        with self.writing():  # server processes starting at once create the tables once
            metadata.create_all(self.engine)
            for index in submissions_t.indexes:  # create_all adds none to an older table
                index.create(self.engine, checkfirst=True)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """One writer at a time across every server process on this database: on PostgreSQL
        a session advisory lock (released by the server if this process dies); SQLite
        serves from one process (`torchmark board` refuses --workers on it), where the
        caller's thread lock is enough."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect() as conn:
            conn.execute(sa.select(sa.func.pg_advisory_lock(_PG_WRITE_LOCK)))
            conn.commit()  # no transaction left open while the lock is held
            try:
                yield
            finally:
                conn.execute(sa.select(sa.func.pg_advisory_unlock(_PG_WRITE_LOCK)))
                conn.commit()

    # -- tokens ------------------------------------------------------------------------

    def create_token(self, name: str) -> str:
        """A new random token for ``name``; only its hash is kept, so it is shown once."""
        if not name or len(name) > 100 or not name.isprintable():
            raise InputError("a token name is 1-100 printable characters")
        token = "tm_" + secrets.token_urlsafe(TOKEN_BYTES)
        with self.engine.begin() as conn:
            taken = conn.execute(sa.select(tokens_t.c.name).where(tokens_t.c.name == name))
            if taken.first() is not None:
                raise InputError(
                    f"a token named {name!r} exists already; revoke it or choose another name"
                )
            conn.execute(
                tokens_t.insert().values(
                    name=name, token_hash=token_hash(token), created_utc=utcnow().isoformat()
                )
            )
        return token

    def list_tokens(self) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(tokens_t).order_by(tokens_t.c.created_utc)).all()
        return [TokenInfo(r.name, r.created_utc, r.revoked_utc) for r in rows]

    def revoke_token(self, name: str) -> None:
        with self.engine.begin() as conn:
            done = conn.execute(
                tokens_t.update()
                .where(tokens_t.c.name == name, tokens_t.c.revoked_utc.is_(None))
                .values(revoked_utc=utcnow().isoformat())
            )
        if done.rowcount == 0:
            names = ", ".join(t.name for t in self.list_tokens() if t.revoked_utc is None)
            raise InputError(f"no active token named {name!r}; active: {names or 'none'}")

    def check_token(self, token: str) -> str | None:
        """The name of the active token ``token``, else None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(tokens_t.c.name, tokens_t.c.revoked_utc).where(
                    tokens_t.c.token_hash == token_hash(token)
                )
            ).first()
        return row.name if row is not None and row.revoked_utc is None else None

    # -- submissions -------------------------------------------------------------------

    def submission(self, content_hash: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(submissions_t.c.run_id).where(
                    submissions_t.c.content_hash == content_hash
                )
            ).scalar()

    def count_since(self, token_name: str, hours: float) -> int:
        since = (utcnow() - timedelta(hours=hours)).isoformat()
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(submissions_t)
                    .where(
                        submissions_t.c.token_name == token_name,
                        submissions_t.c.submitted_utc >= since,
                    )
                ).scalar_one()
            )

    @staticmethod
    def record_in(
        conn: Connection,
        content_hash: str,
        run_id: str,
        token_name: str,
        division: str,
        machine: str,
    ) -> None:
        """Record a submission in the caller's transaction (the one that stores its run)."""
        conn.execute(
            submissions_t.insert().values(
                content_hash=content_hash,
                run_id=run_id,
                token_name=token_name,
                submitted_utc=utcnow().isoformat(),
                division=division,
                machine=machine,
            )
        )

    def submitted(self, run_id: str) -> tuple[str, str] | None:
        """(division, machine) of the submitted run ``run_id``, else None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(submissions_t.c.division, submissions_t.c.machine).where(
                    submissions_t.c.run_id == run_id
                )
            ).first()
        return None if row is None else (row.division, row.machine)

    def submissions(self, division: str | None = None) -> dict[str, tuple[str, str]]:
        """run id -> (division, machine) of every submission (in ``division``)."""
        s = submissions_t
        query = sa.select(s.c.run_id, s.c.division, s.c.machine)
        if division is not None:
            query = query.where(s.c.division == division)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {r.run_id: (r.division, r.machine) for r in rows}
