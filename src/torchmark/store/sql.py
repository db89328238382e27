"""SQLStore: the one ResultStore implementation, on SQLAlchemy Core, for SQLite and PostgreSQL.

Layout (``DB_SCHEMA_VERSION`` 4)::

    meta           key -> value            schema_version, created_utc, tool_version
    runs           one row per run         id, kind, times, status, who/where + header JSON,
                                           stored_seq (local insertion order), writer,
                                           summary (what history lists: store/read.py)
    results        one row per result      (run_id, seq) + indexed names + verdict kind
                                           (torchmark.judge.verdicts) + doc JSON
    run_ceilings   one row per run         the ceilings the run's percentages used (JSON)
    ceiling_cache  one row per measurement ceilings per (machine fingerprint, device)

Every text column is unbounded TEXT: PostgreSQL enforces widths that SQLite ignores, and a
width on a path, an id or a name only turns a long one into a lost run.

The JSON documents are the pydantic dumps of ``RunRecord`` / ``Result`` / ``Ceiling``: the
raw samples live there, written with ``repr`` precision, so a load is bit-identical. Columns
beside them only serve listing and filtering. Each write is its own transaction, so a run
interrupted between two results keeps every result already added; a write that fails for a
passing reason (a lock held by another writer, a restarting server) is retried with backoff
for ``retry_s`` seconds before ``StoreUnavailable`` says why; a full disk fails at once
(``StoreFull``): no wait frees space.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from torchmark import __version__
from torchmark.errors import (
    InputError,
    StoreError,
    StoreFull,
    StorePathError,
    StoreUnavailable,
    first_line,
)
from torchmark.judge.verdicts import kind_of
from torchmark.results import SCHEMA_VERSION, Ceiling, Result, RunRecord, utcnow
from torchmark.store import read
from torchmark.store.base import ResultStore, RunSummary
from torchmark.store.migrations import DB_SCHEMA_VERSION, migrate_database
from torchmark.store.read import SQLITE_BUSY_S, json_or_none, with_reason

FIX = "pass --db sqlite:///other.db or set TORCHMARK_DB"
# Total time a write keeps retrying a passing failure: a PostgreSQL restart takes ~20 s, a
# competing SQLite writer holds its lock for one transaction (milliseconds); 60 s covers both
# while a run that cannot store still ends within a minute (and keeps its results in memory).
RETRY_S = 60.0
# libpq would wait for ever on a server that accepts and never answers (135 s measured, in
# silence); ?connect_timeout= in the URL overrides this.
PG_CONNECT_TIMEOUT_S = 10
# pg_advisory_xact_lock key: concurrent first opens create the tables one at a time.
_PG_SCHEMA_LOCK = 0x746F7263686D61  # "torchma"
_BACKOFF_FIRST_S, _BACKOFF_MAX_S = 0.1, 5.0

T = TypeVar("T")


def _text(name: str, *, nullable: bool = False, index: bool = False) -> sa.Column[str]:
    """A text column: unbounded TEXT (see above), NOT NULL unless said otherwise."""
    return sa.Column(name, sa.Text, nullable=nullable, index=index)


def _run_id_key() -> sa.Column[str]:
    """The key of a table whose rows belong to one run: deleting the run deletes them."""
    return sa.Column(
        "run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )


metadata = sa.MetaData()
meta_t = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    _text("value"),
)
runs_t = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    _text("kind"),
    # ISO 8601 in UTC with fixed width: sorts as text the same on SQLite and PostgreSQL.
    _text("created_utc", index=True),
    _text("finished_utc", nullable=True),
    _text("status"),
    sa.Column("schema_version", sa.Integer, nullable=False),
    _text("tool_version"),
    _text("fingerprint"),
    _text("host"),
    _text("devices"),  # JSON list
    _text("command"),
    _text("header"),  # RunRecord JSON without results/ceilings
    # Local insertion order: `latest` and history follow it, not the run's own (importable,
    # possibly far-future) date.
    sa.Column("stored_seq", sa.Integer),
    # JSON {host, pid, started} of the measuring process, so a later open can tell a run whose
    # process died (SIGKILL, power loss) from one still measuring; NULL for imports and
    # schema-1 rows, which are judged by the header's pid and the run's time instead.
    _text("writer", nullable=True),
    # JSON {pid, answers}: what history says of the run beyond the columns above, so that it
    # never parses a header (a serving run's holds its raw samples); read.summary_of
    _text("summary", nullable=True),
)
results_t = sa.Table(
    "results",
    metadata,
    _run_id_key(),
    sa.Column("seq", sa.Integer, primary_key=True),
    _text("workload"),
    _text("variant"),
    _text("device"),
    _text("status"),
    _text("doc"),
    # the verdict's kind (verdicts.kind_of): history counts ok results by it
    _text("verdict", nullable=True),
)
run_ceilings_t = sa.Table(
    "run_ceilings",
    metadata,
    _run_id_key(),
    _text("doc"),  # JSON list of Ceiling
)
ceiling_cache_t = sa.Table(
    "ceiling_cache",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    _text("fingerprint"),
    _text("device"),
    _text("created_utc"),
    sa.Column("schema_version", sa.Integer, nullable=False),
    _text("tool_version"),
    _text("doc"),
    sa.Index("ix_ceiling_cache_key", "fingerprint", "device"),
)
OUR_TABLES = frozenset(metadata.tables)


def dumps(obj: Any) -> str:
    # json writes floats with repr (shortest round-trip form): samples reload bit-identical.
    return json.dumps(obj, separators=(",", ":"))


def iso_utc(t: datetime) -> str:
    """Fixed-width UTC text, so that text order is time order."""
    t = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    return t.isoformat(timespec="microseconds")


def new_run_id(created: datetime) -> str:
    """Readable and sortable: ``20261121-083012-a1b2`` (UTC time + 16 random bits)."""
    t = created.replace(tzinfo=timezone.utc) if created.tzinfo is None else created
    return f"{t.astimezone(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _reason(e: BaseException) -> str:
    return first_line(getattr(e, "orig", None) or e)


def _devices_of(run: RunRecord) -> list[str]:
    found = list((run.environment.get("devices") or {}).keys())
    return found + [d for d in dict.fromkeys(r.device for r in run.results) if d not in found]


# Failures that pass: another writer holds the lock, the server restarts or dropped the
# connection. Everything else (a read-only file, a missing database, bad credentials, a
# damaged file, a full disk) fails at once: waiting would not change it. A full disk was
# retried as passing: a 5 s run spent 60 s at its start and 60 s at its end in silence.
_SQLITE_PASSING = ("locked", "busy", "disk i/o error")
# SQLite's SQLITE_FULL, the OS's ENOSPC, PostgreSQL's disk_full (SQLSTATE 53100) and its
# "could not extend file" when a table grows on a full disk.
_FULL = ("database or disk is full", "no space left on device", "could not extend file")
# A disk with less free space than this under the SQLite file is full: an ENOSPC while
# writing the WAL reaches us as "disk I/O error", which alone would be retried.
_FULL_BELOW_BYTES = 1 << 20
_NEVER_PASSING = (
    "does not exist",
    "authentication",
    "readonly",
    "read-only",
    "permission denied",
    "not a database",
    "malformed",
    "no such table",
    "no such column",
    "syntax error",
)


def is_full(e: BaseException, path: Path | None = None) -> bool:
    """The store's disk is full: the error says so, or an I/O error on a SQLite file whose
    disk has (almost) no space left."""
    why = _reason(e).lower()
    if any(m in why for m in _FULL) or getattr(getattr(e, "orig", None), "sqlstate", "") == "53100":
        return True
    if path is not None and "disk i/o error" in why:
        try:
            return shutil.disk_usage(path.parent).free < _FULL_BELOW_BYTES
        except OSError:
            return False
    return False


def is_passing(e: BaseException, dialect: str) -> bool:
    """A store failure worth retrying (see above)."""
    if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
        return True
    if not isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        return False
    why = _reason(e).lower()
    if any(m in why for m in _NEVER_PASSING):
        return False
    return dialect != "sqlite" or any(m in why for m in _SQLITE_PASSING)


class SQLStore(ResultStore):
    """Runs, results and the ceiling cache in one SQL database (SQLite or PostgreSQL).

    ``read_only``: open without changing anything (a read-only file, directory or mount);
    ``retry_s``: how long a write retries a passing failure before ``StoreUnavailable``.
    """

    def __init__(
        self,
        engine: Engine,
        where: str,
        path: Path | None = None,
        *,
        read_only: bool = False,
        retry_s: float = RETRY_S,
    ) -> None:
        self.engine, self.where, self.path = engine, where, path
        self.url = where if path is None else f"sqlite:///{path}"
        self.read_only, self.retry_s = read_only, retry_s
        self.marked_gone: list[str] = []  # runs this open found orphaned and marked incomplete
        self._sleep: Callable[[float], None] = time.sleep
        self._clock: Callable[[], float] = time.monotonic
        self._dialect = engine.dialect.name
        if self._dialect == "sqlite":
            _sqlite_transactions(engine)
        self._writer_engine = engine.execution_options(tm_write=True)
        try:
            self._prepare()
        except BaseException:
            engine.dispose()  # no connection left open behind a refused store
            raise

    # -- opening -----------------------------------------------------------------------

    def _look(self, conn: Connection) -> tuple[set[str], str | None]:
        """Our view of the database without changing it: its tables and schema version."""
        inspector = sa.inspect(conn)
        tables = set(inspector.get_table_names())
        if "meta" not in tables:
            return tables, None
        columns = {c["name"] for c in inspector.get_columns("meta")}
        if not {"key", "value"} <= columns:
            # Another program's `meta` table: reading ours from it would fail or lie.
            raise self._foreign(tables)
        raw = conn.execute(
            sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")
        ).scalar()
        return tables, raw

    def _foreign(self, tables: set[str]) -> StoreError:
        names = ", ".join(sorted(tables)[:5])
        return StoreError(
            f"{self.where} is a database of another program (tables: {names}), not a "
            f"torchmark results store; {FIX}"
        )

    def _check_ours(self, tables: set[str], raw: str | None) -> int | None:
        """The schema version, or None for a database still to be created; refuses others'."""
        if raw is None:
            if self.path is not None:
                others = tables - OUR_TABLES
            else:  # a shared server: only our own table names can collide
                others = set() if "meta" in tables else tables & OUR_TABLES
            if others:
                raise self._foreign(others)
            return None
        try:
            version = int(raw)
        except ValueError:
            version = -1
        if version < 0:
            raise StoreError(
                f"{self.where} has no readable schema version ({raw!r}); it is not a "
                f"usable torchmark database; {FIX}"
            )
        return version

    def _prepare(self) -> None:
        """Check the database is ours (or empty) before changing anything; create or migrate
        the schema in one transaction; mark runs whose process died as incomplete."""
        try:
            with self.engine.connect() as conn:
                version = self._check_ours(*self._look(conn))
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, "open it") from None
        if version != DB_SCHEMA_VERSION:
            if self.read_only:
                what = "has no torchmark tables" if version is None else f"is at schema {version}"
                raise StoreError(
                    f"{self.where} {what} and is read-only, so it cannot be set up; {FIX}"
                )
            if self.path is not None:
                self._set_wal()
            try:
                with self._writer_engine.begin() as conn:
                    self._create_or_migrate(conn)
            except sa_exc.SQLAlchemyError as e:
                raise self._write_error(e, "create the results tables") from None
        elif self.path is not None and not self.read_only:
            self._set_wal()
        if not self.read_only:
            self.marked_gone = self._mark_gone_runs()

    def _create_or_migrate(self, conn: Connection) -> None:
        """Inside one write transaction that holds the schema lock: whoever comes second
        sees the first one's tables, never half of them."""
        if self._dialect == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
        tables, raw = self._look(conn)
        version = self._check_ours(tables, raw)
        if version is None:
            # Empty, or a layout an older build left half-made (killed between CREATE TABLE
            # and the meta insert): nothing is stored in it, so it is rebuilt.
            inspector = sa.inspect(conn)
            present, stale = [], False
            for name in sorted(tables & OUR_TABLES):
                table = metadata.tables[name]
                if conn.execute(sa.select(sa.func.count()).select_from(table)).scalar():
                    raise StoreError(
                        f"{self.where} holds torchmark tables with data but no schema "
                        f"version; it is not a usable torchmark database; {FIX}"
                    )
                present.append(table)
                stale |= {c["name"] for c in inspector.get_columns(name)} != set(table.c.keys())
            if stale:  # an older layout, all of it empty: made again
                metadata.drop_all(conn, tables=present)
            metadata.create_all(conn)
            conn.execute(
                meta_t.insert(),
                [
                    {"key": "schema_version", "value": str(DB_SCHEMA_VERSION)},
                    {"key": "created_utc", "value": iso_utc(utcnow())},
                    {"key": "tool_version", "value": __version__},
                ],
            )
        elif version != DB_SCHEMA_VERSION:
            new = migrate_database(conn, version, where=self.where)
            conn.execute(
                meta_t.update().where(meta_t.c.key == "schema_version").values(value=str(new))
            )

    def _set_wal(self) -> None:
        # WAL lets `torchmark history` or the web app read while a run writes. Only ever
        # called once the file is known to be ours (or empty): it changes the file.
        # Outside any transaction (SQLite cannot switch modes inside one): the raw connection.
        try:
            raw = self.engine.raw_connection()
        except sa_exc.SQLAlchemyError:
            return
        try:
            raw.cursor().execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error:
            pass
        finally:
            raw.close()

    def _unusable(self, e: BaseException) -> StoreError:
        if self.path is None:
            return StoreError(f"cannot use the results store {self.where} ({_reason(e)})")
        return StorePathError(
            f"{self.path} is not a usable torchmark database ({_reason(e)}); "
            f"move it aside or pass --db sqlite:///other.db"
        )

    def _full(self, e: BaseException, action: str) -> StoreFull:
        where = self.path.parent if self.path is not None else self.where
        return StoreFull(
            f"results store {self.where}: cannot {action}, the disk is full ({_reason(e)}); "
            f"free space on {where} or pass --db sqlite:///a/disk/with/room.db"
        )

    def _write_error(self, e: BaseException, action: str) -> StoreError:
        why = _reason(e)
        lowered = why.lower()
        if self.path is not None and ("unable to open" in lowered or "readonly" in lowered):
            return StorePathError(f"cannot write the results store {self.path} ({why}); {FIX}")
        if self.path is not None and any(
            m in lowered for m in ("not a database", "malformed", "disk image", "encrypted")
        ):
            return self._unusable(e)
        if self._dialect == "postgresql" and "timeout" in lowered:
            return StoreError(
                f"results store {self.where}: no answer from the server ({why}); check that "
                f"it is up and reachable, or wait longer with ?connect_timeout=SECONDS"
            )
        return StoreError(f"results store {self.where}: cannot {action} ({why})")

    def _write(self, action: str, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction; retry a passing failure with backoff."""
        deadline = self._clock() + self.retry_s
        delay = _BACKOFF_FIRST_S
        while True:
            try:
                with self._writer_engine.begin() as conn:
                    return work(conn)
            except sa_exc.SQLAlchemyError as e:
                if is_full(e, self.path):
                    raise self._full(e, action) from None
                if not is_passing(e, self._dialect):
                    raise self._write_error(e, action) from None
                left = deadline - self._clock()
                if left <= 0:
                    raise StoreUnavailable(
                        f"results store {self.where}: could not {action} for "
                        f"{self.retry_s:g} s ({_reason(e)})"
                    ) from None
                self._sleep(min(delay, left))
                delay = min(2 * delay, _BACKOFF_MAX_S)

    @contextmanager
    def _read(self, action: str) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, action) from None

    def close(self) -> None:
        self.engine.dispose()

    # -- runs whose process died ---------------------------------------------------------

    def _mark_gone_runs(self) -> list[str]:
        """Runs still `running` whose measuring process on this host is gone become
        `incomplete`, with a note; returns their ids. Reads first: writes only if needed."""
        try:
            with self.engine.connect() as conn:
                rows = _on(conn)(read.RUNNING, {})
        except sa_exc.SQLAlchemyError:
            return []  # best effort: history still shows "process gone" by itself
        gone = {}
        for run_id, created_utc, writer, header in rows:
            note = read.gone_note(writer, header, created_utc)
            if note:
                gone[run_id] = note
        if not gone:
            return []

        def mark(conn: Connection) -> list[str]:
            done = []
            for run_id, note in gone.items():
                header = conn.execute(
                    sa.select(runs_t.c.header).where(
                        runs_t.c.run_id == run_id, runs_t.c.status == "running"
                    )
                ).scalar()
                if header is None:
                    continue  # finished meanwhile
                doc = json_or_none(header)
                values: dict[str, Any] = {"status": "incomplete"}
                if isinstance(doc, dict):
                    doc["status"] = "incomplete"
                    doc["verdict"] = with_reason(doc.get("verdict"), note)
                    values["header"] = dumps(doc)
                    values["summary"] = read.summary_of(doc)
                conn.execute(runs_t.update().where(runs_t.c.run_id == run_id).values(**values))
                done.append(run_id)
            return done

        try:
            return self._write("mark orphaned runs incomplete", mark)
        except StoreError:
            return []

    # -- writing -----------------------------------------------------------------------

    def _free_id(self, conn: Connection, run: RunRecord, wanted: str | None) -> str:
        taken = sa.select(runs_t.c.run_id).where(runs_t.c.run_id == sa.bindparam("id"))
        if wanted is not None and not usable_run_id(wanted):
            wanted = None  # an id that reads as a file path or `latest` would be ambiguous
        candidate = wanted or new_run_id(run.created_utc)
        while conn.execute(taken, {"id": candidate}).first() is not None:
            candidate = new_run_id(run.created_utc)
        return candidate

    def _run_row(self, run: RunRecord) -> dict[str, Any]:
        header = run.model_dump(mode="json", exclude={"results", "ceilings", "run_id"})
        return {
            "kind": run.kind,
            "created_utc": iso_utc(run.created_utc),
            "finished_utc": iso_utc(run.finished_utc) if run.finished_utc else None,
            "status": run.status,
            "schema_version": run.schema_version,
            "tool_version": run.tool_version or __version__,
            "fingerprint": run.fingerprint,
            "host": str(run.environment.get("host") or ""),
            "devices": dumps(_devices_of(run)),
            "command": run.command,
            "header": dumps(header),
            "summary": read.summary_of(header),
        }

    def _insert_run(
        self, conn: Connection, run: RunRecord, run_id: str, writer: str | None
    ) -> None:
        seq = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(runs_t.c.stored_seq), 0) + 1)
        ).scalar_one()
        conn.execute(
            runs_t.insert().values(
                run_id=run_id, stored_seq=seq, writer=writer, **self._run_row(run)
            )
        )
        if run.ceilings:
            self._put_ceilings(conn, run_id, run.ceilings)
        for result in run.results:
            self._insert_result(conn, run_id, result)

    def _insert_result(self, conn: Connection, run_id: str, result: Result) -> None:
        seq = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(results_t.c.seq), -1) + 1).where(
                results_t.c.run_id == run_id
            )
        ).scalar_one()
        conn.execute(
            results_t.insert().values(
                run_id=run_id,
                seq=seq,
                workload=result.workload,
                variant=result.variant,
                device=result.device,
                status=result.status,
                doc=dumps(result.model_dump(mode="json")),
                verdict=kind_of(result),
            )
        )

    @staticmethod
    def _put_ceilings(conn: Connection, run_id: str, ceilings: list[Ceiling]) -> None:
        doc = dumps([c.model_dump(mode="json") for c in ceilings])
        conn.execute(run_ceilings_t.delete().where(run_ceilings_t.c.run_id == run_id))
        conn.execute(run_ceilings_t.insert().values(run_id=run_id, doc=doc))

    def _require(self, conn: Connection, run_id: str) -> list[str]:
        devices = conn.execute(
            sa.select(runs_t.c.devices).where(runs_t.c.run_id == run_id)
        ).scalar()
        if devices is None:
            raise read.not_found(run_id, self.where)
        try:
            return list(json.loads(devices))
        except ValueError:
            return []

    def begin_run(self, run: RunRecord) -> str:
        writer = _writer_of(run)

        def work(conn: Connection) -> str:
            run_id = self._free_id(conn, run, None)
            self._insert_run(conn, run, run_id, writer)
            return run_id

        return self._write("start a run", work)

    def add_result(self, run_id: str, result: Result) -> None:
        def work(conn: Connection) -> None:
            devices = self._require(conn, run_id)
            self._insert_result(conn, run_id, result)
            if result.device not in devices:
                conn.execute(
                    runs_t.update()
                    .where(runs_t.c.run_id == run_id)
                    .values(devices=dumps([*devices, result.device]))
                )

        self._write("store a result", work)

    def set_ceilings(self, run_id: str, ceilings: list[Ceiling]) -> None:
        def work(conn: Connection) -> None:
            self._require(conn, run_id)
            self._put_ceilings(conn, run_id, ceilings)

        self._write("store ceilings", work)

    def finish_run(self, run_id: str, run: RunRecord) -> None:
        def work(conn: Connection) -> None:
            stored = self._require(conn, run_id)
            row = self._run_row(run)
            row["devices"] = dumps(stored + [d for d in _devices_of(run) if d not in stored])
            conn.execute(runs_t.update().where(runs_t.c.run_id == run_id).values(**row))
            if run.ceilings:
                self._put_ceilings(conn, run_id, run.ceilings)

        self._write("finish a run", work)

    def reopen_run(self, run_id: str, run: RunRecord) -> None:
        writer = _writer_of(run)

        def work(conn: Connection) -> None:
            status = conn.execute(
                sa.select(runs_t.c.status).where(runs_t.c.run_id == run_id)
            ).scalar()
            if status is None:
                raise read.not_found(run_id, self.where)
            if status != "incomplete":  # checked and changed in one write transaction
                raise InputError(f"run {run_id} is {status} now: it cannot be resumed")
            row = self._run_row(run)
            del row["devices"]  # kept: results add theirs as they land
            conn.execute(
                runs_t.update().where(runs_t.c.run_id == run_id).values(writer=writer, **row)
            )

        self._write("reopen a run", work)

    def save(self, run: RunRecord, also: Callable[[Connection, str], None] | None = None) -> str:
        """Store ``run`` under a free id (its own where free); returns the id. ``also(conn,
        run_id)`` writes in the same transaction (the leaderboard's submission record and
        ranking index), so the run exists exactly when they do."""

        def work(conn: Connection) -> str:
            run_id = self._free_id(conn, run, run.run_id)
            self._insert_run(conn, run, run_id, None)
            if also is not None:
                also(conn, run_id)
            return run_id

        return self._write("import a run", work)

    # -- reading (the queries and their rows: store/read.py) -----------------------------

    def load(self, run_id: str) -> RunRecord:
        with self._read("read a run") as conn:
            return read.load_run(_on(conn), run_id, self.where)

    def list_runs(self, limit: int | None = None) -> list[RunSummary]:
        with self._read("list runs") as conn:
            return read.list_runs(_on(conn), limit)

    def runs_holding(self, workload: str, variant: str) -> list[str]:
        with self._read("list runs") as conn:
            return read.runs_holding(_on(conn), workload, variant)

    # -- ceiling cache -------------------------------------------------------------------

    def cached_ceilings(self, fingerprint: str, device: str) -> list[Ceiling] | None:
        """The newest ceilings measured on this machine + device, or None to measure them.

        Entries of another document schema are a miss, not migrated: re-measuring is safe.
        """
        query = (
            sa.select(ceiling_cache_t.c.doc)
            .where(
                ceiling_cache_t.c.fingerprint == fingerprint,
                ceiling_cache_t.c.device == device,
                ceiling_cache_t.c.schema_version == SCHEMA_VERSION,
            )
            .order_by(ceiling_cache_t.c.created_utc.desc(), ceiling_cache_t.c.id.desc())
            .limit(1)
        )
        with self._read("read the ceiling cache") as conn:
            doc = conn.execute(query).scalar()
        if doc is None:
            return None
        try:
            return [Ceiling.model_validate(c) for c in json.loads(doc)]
        except ValueError:
            return None  # an unreadable cache entry is a miss: the ceilings get re-measured

    def cache_ceilings(self, fingerprint: str, device: str, ceilings: list[Ceiling]) -> None:
        row = {
            "fingerprint": fingerprint,
            "device": device,
            "created_utc": iso_utc(utcnow()),
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "doc": dumps([c.model_dump(mode="json") for c in ceilings]),
        }
        self._write("cache ceilings", lambda conn: conn.execute(ceiling_cache_t.insert(), row))


# -- helpers -----------------------------------------------------------------------------

RESERVED_IDS = ("latest",)


def usable_run_id(run_id: str) -> bool:
    """An id that can never be read as a file path (see ``exchange.is_file_spec``)."""
    return bool(run_id.strip()) and run_id == run_id.strip() and not (
        run_id in RESERVED_IDS or "/" in run_id or "\\" in run_id
        or run_id.lower().endswith(".json")
    )  # fmt: skip


def _on(conn: Connection) -> read.Query:
    """store/read.py's queries, run on this connection."""

    def query(sql: str, params: dict[str, Any]) -> list[Any]:
        return list(conn.execute(sa.text(sql), params).all())

    return query


def _writer_of(run: RunRecord) -> str:
    """Who measures this run: this host, the run's process (its pid, else ours) and that
    process's start time, so a reused pid is not taken for the measuring process."""
    pid = run.environment.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else os.getpid()
    return dumps({"host": socket.gethostname(), "pid": pid, "started": read.process_started(pid)})


def _sqlite_transactions(engine: Engine) -> None:
    """Real SQLite transactions, DDL included: the sqlite3 module would commit a CREATE
    TABLE on its own, so a kill between two of them left a half-made database. Writes take
    the lock at BEGIN (IMMEDIATE): two writers queue instead of one failing at once when a
    read lock cannot be upgraded."""

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        write = conn.get_execution_options().get("tm_write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def sqlite_store(path: Path) -> SQLStore:
    """A SQLite file store; read-only (nothing changed, writes refused) where the file or
    its directory cannot be written: a read-only mount or a shared results directory."""
    exists = path.exists()
    writable = os.access(path.parent, os.W_OK) and (not exists or os.access(path, os.W_OK))
    if not exists or writable:
        engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": SQLITE_BUSY_S})
        return SQLStore(engine, str(path), path)

    def connect() -> sqlite3.Connection:
        # mode=ro reads a WAL file only where its -shm can be made; a file in a read-only
        # place cannot change under us, so it is read as immutable instead.
        base = f"file:{quote(str(path))}?mode=ro"
        try:
            conn = sqlite3.connect(base, uri=True, timeout=SQLITE_BUSY_S, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            return sqlite3.connect(f"{base}&immutable=1", uri=True, check_same_thread=False)

    engine = sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)
    return SQLStore(engine, str(path), path, read_only=True)


def _hide_password(url: str) -> str:
    return re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)


def postgres_store(url: str) -> SQLStore:
    """A PostgreSQL store; a connect timeout (default 10 s) unless the URL sets one."""
    try:
        parsed = sa.make_url(url)
        parsed.port  # noqa: B018  (parsed lazily: a bad port or [host] raises here)
    except (sa_exc.ArgumentError, ValueError) as e:
        raise InputError(
            f"bad results store URL {_hide_password(url)} ({e}); expected "
            f"postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")  # the [postgres] extra's driver
    if "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(PG_CONNECT_TIMEOUT_S)})
    shown = parsed.render_as_string(hide_password=True)
    try:
        engine = sa.create_engine(parsed, pool_pre_ping=True)
    except ImportError as e:
        raise StoreError(
            f"the PostgreSQL driver is not installed ({e}); run: pip install 'torchmark[postgres]'"
        ) from None
    except (sa_exc.ArgumentError, ValueError) as e:
        raise InputError(f"bad results store URL {shown} ({e})") from None
    return SQLStore(engine, shown)
