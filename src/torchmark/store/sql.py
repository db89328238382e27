"""SQLStore: the one ResultStore implementation, on SQLAlchemy Core, for SQLite and PostgreSQL.

Layout (``DB_SCHEMA_VERSION`` 1)::

    meta           key -> value            schema_version, created_utc, tool_version
    runs           one row per run         id, kind, times, status, who/where + header JSON
    results        one row per result      (run_id, seq) + indexed names + doc JSON
    run_ceilings   one row per run         the ceilings the run's percentages used (JSON)
    ceiling_cache  one row per measurement ceilings per (machine fingerprint, device)

The JSON documents are the pydantic dumps of ``RunRecord`` / ``Result`` / ``Ceiling``: the
raw samples live there, written with ``repr`` precision, so a load is bit-identical. Columns
beside them only serve listing and filtering. Each write is its own transaction, so a run
interrupted between two results keeps every result already added.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from torchmark import __version__
from torchmark.errors import InputError, RunNotFoundError, StoreError
from torchmark.results import SCHEMA_VERSION, Ceiling, Result, RunRecord, utcnow
from torchmark.store.base import ResultStore, RunSummary
from torchmark.store.migrations import DB_SCHEMA_VERSION, migrate_database, migrate_document

FIX = "pass --db sqlite:///other.db or set TORCHMARK_DB"
SQLITE_MAGIC = b"SQLite format 3\x00"

metadata = sa.MetaData()
meta_t = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
runs_t = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(40), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    # ISO 8601 in UTC with fixed width: sorts as text the same on SQLite and PostgreSQL.
    sa.Column("created_utc", sa.String(40), nullable=False, index=True),
    sa.Column("finished_utc", sa.String(40)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("tool_version", sa.String(64), nullable=False),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("devices", sa.Text, nullable=False),  # JSON list
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("header", sa.Text, nullable=False),  # RunRecord JSON without results/ceilings
)
results_t = sa.Table(
    "results",
    metadata,
    sa.Column(
        "run_id",
        sa.String(40),
        sa.ForeignKey("runs.run_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("workload", sa.String(128), nullable=False),
    sa.Column("variant", sa.String(128), nullable=False),
    sa.Column("device", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("doc", sa.Text, nullable=False),
)
run_ceilings_t = sa.Table(
    "run_ceilings",
    metadata,
    sa.Column(
        "run_id",
        sa.String(40),
        sa.ForeignKey("runs.run_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("doc", sa.Text, nullable=False),  # JSON list of Ceiling
)
ceiling_cache_t = sa.Table(
    "ceiling_cache",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    sa.Column("device", sa.String(64), nullable=False),
    sa.Column("created_utc", sa.String(40), nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("tool_version", sa.String(64), nullable=False),
    sa.Column("doc", sa.Text, nullable=False),
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
    orig = getattr(e, "orig", None) or e
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


def _devices_of(run: RunRecord) -> list[str]:
    found = list((run.environment.get("devices") or {}).keys())
    return found + [d for d in dict.fromkeys(r.device for r in run.results) if d not in found]


class SQLStore(ResultStore):
    """Runs, results and the ceiling cache in one SQL database (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine, where: str, path: Path | None = None) -> None:
        self.engine, self.where, self.path = engine, where, path
        self.url = where if path is None else f"sqlite:///{path}"
        self._prepare()

    # -- opening -----------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check the database is ours (or empty), create or migrate the schema."""
        try:
            with self.engine.connect() as conn:
                tables = set(sa.inspect(conn).get_table_names())
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, "open it") from None
        foreign = tables - OUR_TABLES if self.path is not None else tables & OUR_TABLES
        if "meta" not in tables and foreign:
            # Somebody else's database: writing our tables into it could damage it.
            names = ", ".join(sorted(foreign)[:5])
            raise StoreError(
                f"{self.where} is a database of another program (tables: {names}), not a "
                f"torchmark results store; {FIX}"
            )
        if self.path is not None:
            self._set_wal()
        try:
            with self.engine.begin() as conn:
                if "meta" not in tables:
                    metadata.create_all(conn)
                    conn.execute(
                        meta_t.insert(),
                        [
                            {"key": "schema_version", "value": str(DB_SCHEMA_VERSION)},
                            {"key": "created_utc", "value": iso_utc(utcnow())},
                            {"key": "tool_version", "value": __version__},
                        ],
                    )
                    return
                raw = conn.execute(
                    sa.select(meta_t.c.value).where(meta_t.c.key == "schema_version")
                ).scalar()
                try:
                    version = int(raw) if raw is not None else -1
                except ValueError:
                    version = -1
                if version < 0:
                    raise StoreError(
                        f"{self.where} has no readable schema version ({raw!r}); it is not a "
                        f"usable torchmark database; {FIX}"
                    )
                if version != DB_SCHEMA_VERSION:
                    new = migrate_database(conn, version, where=self.where)
                    conn.execute(
                        meta_t.update()
                        .where(meta_t.c.key == "schema_version")
                        .values(value=str(new))
                    )
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, "create the results tables") from None

    def _set_wal(self) -> None:
        # WAL lets `torchmark history` or the web app read while a run writes. A read-only
        # file cannot switch modes; reading still works, so that is not an error here.
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        except sa_exc.OperationalError:
            pass

    def _unusable(self, e: BaseException) -> StoreError:
        if self.path is None:
            return StoreError(f"cannot use the results store {self.where} ({_reason(e)})")
        return StoreError(
            f"{self.path} is not a usable torchmark database ({_reason(e)}); "
            f"move it aside or pass --db sqlite:///other.db"
        )

    def _write_error(self, e: BaseException, action: str) -> StoreError:
        why = _reason(e)
        lowered = why.lower()
        if self.path is not None and ("unable to open" in lowered or "readonly" in lowered):
            return StoreError(f"cannot write the results store {self.path} ({why}); {FIX}")
        if self.path is not None and any(
            m in lowered for m in ("not a database", "malformed", "disk image", "encrypted")
        ):
            return self._unusable(e)
        return StoreError(f"results store {self.where}: cannot {action} ({why})")

    @contextmanager
    def _tx(self, action: str) -> Iterator[Connection]:
        """One transaction: all of it is stored, or none of it."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, action) from None

    @contextmanager
    def _read(self, action: str) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except sa_exc.SQLAlchemyError as e:
            raise self._write_error(e, action) from None

    def close(self) -> None:
        self.engine.dispose()

    # -- writing -----------------------------------------------------------------------

    def _free_id(self, conn: Connection, run: RunRecord, wanted: str | None) -> str:
        taken = sa.select(runs_t.c.run_id).where(runs_t.c.run_id == sa.bindparam("id"))
        candidate = wanted or new_run_id(run.created_utc)
        while conn.execute(taken, {"id": candidate}).first() is not None:
            candidate = new_run_id(run.created_utc)
        return candidate

    @staticmethod
    def _header(run: RunRecord) -> dict[str, Any]:
        return run.model_dump(mode="json", exclude={"results", "ceilings", "run_id"})

    def _run_row(self, run: RunRecord) -> dict[str, Any]:
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
            "header": dumps(self._header(run)),
        }

    def _insert_run(self, conn: Connection, run: RunRecord, run_id: str) -> None:
        conn.execute(runs_t.insert().values(run_id=run_id, **self._run_row(run)))
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
            raise self._not_found(run_id)
        return list(json.loads(devices))

    def begin_run(self, run: RunRecord) -> str:
        with self._tx("start a run") as conn:
            run_id = self._free_id(conn, run, None)
            self._insert_run(conn, run, run_id)
        return run_id

    def add_result(self, run_id: str, result: Result) -> None:
        with self._tx("store a result") as conn:
            devices = self._require(conn, run_id)
            self._insert_result(conn, run_id, result)
            if result.device not in devices:
                conn.execute(
                    runs_t.update()
                    .where(runs_t.c.run_id == run_id)
                    .values(devices=dumps([*devices, result.device]))
                )

    def set_ceilings(self, run_id: str, ceilings: list[Ceiling]) -> None:
        with self._tx("store ceilings") as conn:
            self._require(conn, run_id)
            self._put_ceilings(conn, run_id, ceilings)

    def finish_run(self, run_id: str, run: RunRecord) -> None:
        with self._tx("finish a run") as conn:
            stored = self._require(conn, run_id)
            row = self._run_row(run)
            row["devices"] = dumps(stored + [d for d in _devices_of(run) if d not in stored])
            conn.execute(runs_t.update().where(runs_t.c.run_id == run_id).values(**row))
            if run.ceilings:
                self._put_ceilings(conn, run_id, run.ceilings)

    def save(self, run: RunRecord) -> str:
        with self._tx("import a run") as conn:
            run_id = self._free_id(conn, run, run.run_id)
            self._insert_run(conn, run, run_id)
        return run_id

    # -- reading -----------------------------------------------------------------------

    def _not_found(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(
            f"no run {run_id!r} in {self.where}; `torchmark history` lists the stored run ids"
        )

    def _newest_id(self, conn: Connection) -> str | None:
        return conn.execute(
            sa.select(runs_t.c.run_id)
            .order_by(runs_t.c.created_utc.desc(), runs_t.c.run_id.desc())
            .limit(1)
        ).scalar()

    def load(self, run_id: str) -> RunRecord:
        with self._read("read a run") as conn:
            if run_id == "latest":
                newest = self._newest_id(conn)
                if newest is None:
                    raise RunNotFoundError(
                        f"no runs stored in {self.where} yet; `torchmark run` makes one"
                    )
                run_id = newest
            row = conn.execute(sa.select(runs_t).where(runs_t.c.run_id == run_id)).first()
            if row is None:
                raise self._not_found(run_id)
            ceilings = conn.execute(
                sa.select(run_ceilings_t.c.doc).where(run_ceilings_t.c.run_id == run_id)
            ).scalar()
            results = conn.execute(
                sa.select(results_t.c.doc)
                .where(results_t.c.run_id == run_id)
                .order_by(results_t.c.seq)
            ).scalars()
            doc = json.loads(row.header)
            doc["run_id"] = run_id
            doc["ceilings"] = json.loads(ceilings) if ceilings else []
            doc["results"] = [json.loads(r) for r in results]
        doc = migrate_document(doc, what=f"run {run_id} in {self.where}")
        try:
            return RunRecord.model_validate(doc)
        except ValueError as e:
            raise StoreError(f"run {run_id} in {self.where} cannot be read ({e})") from None

    def list_runs(self, limit: int | None = None) -> list[RunSummary]:
        if limit is not None and limit < 1:
            raise InputError(f"limit must be at least 1, not {limit}")
        counts = (
            sa.select(
                results_t.c.run_id,
                sa.func.count().label("n"),
                sa.func.sum(sa.case((results_t.c.status == "ok", 1), else_=0)).label("ok"),
            )
            .group_by(results_t.c.run_id)
            .subquery()
        )
        query = (
            sa.select(runs_t, counts.c.n, counts.c.ok)
            .select_from(runs_t.outerjoin(counts, counts.c.run_id == runs_t.c.run_id))
            .order_by(runs_t.c.created_utc.desc(), runs_t.c.run_id.desc())
            .limit(limit)
        )
        with self._read("list runs") as conn:
            rows = conn.execute(query).all()
        return [
            RunSummary(
                run_id=r.run_id,
                kind=r.kind,
                created_utc=datetime.fromisoformat(r.created_utc),
                status=r.status,
                devices=json.loads(r.devices),
                n_results=int(r.n or 0),
                n_ok=int(r.ok or 0),
                tool_version=r.tool_version,
                command=r.command,
                host=r.host,
                pid=_pid(r.header) if r.status == "running" else None,
            )
            for r in rows
        ]

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
        with self._tx("cache ceilings") as conn:
            conn.execute(
                ceiling_cache_t.insert().values(
                    fingerprint=fingerprint,
                    device=device,
                    created_utc=iso_utc(utcnow()),
                    schema_version=SCHEMA_VERSION,
                    tool_version=__version__,
                    doc=dumps([c.model_dump(mode="json") for c in ceilings]),
                )
            )


def _pid(header: str) -> int | None:
    pid = json.loads(header).get("environment", {}).get("pid")
    return pid if isinstance(pid, int) else None
