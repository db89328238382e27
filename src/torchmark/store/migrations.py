"""Schema versions and the step-by-step migrations between them.

Two things carry a version:

- a run *document* (exported JSON, and the JSON kept inside the database):
  ``results.SCHEMA_VERSION``, stored as ``schema_version`` in the document;
- the *database* layout (tables and columns): ``DB_SCHEMA_VERSION``, kept in table ``meta``.

An older version is upgraded one step at a time by the functions registered below
(``DOC_STEPS[v]`` turns version ``v`` into ``v + 1``); a newer one is refused with a message
that says to upgrade torchmark, because guessing at a future layout could lose data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from torchmark.errors import InputError, StoreError
from torchmark.results import SCHEMA_VERSION

DB_SCHEMA_VERSION = 3

Doc = dict[str, Any]
DocStep = Callable[[Doc], Doc]
DbStep = Callable[[Connection], None]

# Columns version 1 declared VARCHAR(n): PostgreSQL enforced the widths (a 168-character
# model spec path could not be stored), SQLite ignored them.
_V1_BOUNDED = {
    "meta": ("key",),
    "runs": ("run_id", "kind", "created_utc", "finished_utc", "status", "tool_version",
             "fingerprint", "host"),
    "results": ("run_id", "workload", "variant", "device", "status"),
    "run_ceilings": ("run_id",),
    "ceiling_cache": ("fingerprint", "device", "created_utc", "tool_version"),
}  # fmt: skip


def _db_v1_to_v2(conn: Connection) -> None:
    """Unbounded text; runs get their local insertion order and their writer process."""
    if conn.dialect.name == "postgresql":
        for table, columns in _V1_BOUNDED.items():
            alters = ", ".join(f"ALTER COLUMN {c} TYPE TEXT" for c in columns)
            conn.exec_driver_sql(f"ALTER TABLE {table} {alters}")
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN stored_seq INTEGER")
    conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN writer TEXT")
    # Version 1 kept no insertion order: the runs' own times are the best guess.
    ids = conn.execute(sa.text("SELECT run_id FROM runs ORDER BY created_utc, run_id")).scalars()
    update = sa.text("UPDATE runs SET stored_seq = :seq WHERE run_id = :id")
    rows = [{"seq": seq, "id": run_id} for seq, run_id in enumerate(ids, 1)]
    if rows:
        conn.execute(update, rows)


def _db_v2_to_v3(conn: Connection) -> None:
    """Each result's verdict kind (``torchmark.verdicts``) in a column of its own, so that
    ``history`` counts ok results by their verdict without reading every document."""
    import json

    from torchmark.verdicts import kind_of_doc

    if "verdict" not in {c["name"] for c in sa.inspect(conn).get_columns("results")}:
        conn.exec_driver_sql("ALTER TABLE results ADD COLUMN verdict TEXT")
    todo = sa.text("SELECT run_id, seq, doc FROM results WHERE verdict IS NULL")
    rows = []
    for run_id, seq, doc in conn.execute(todo):
        try:
            parsed = json.loads(doc)
        except ValueError:
            continue  # a damaged document: counted by its status, as before
        if isinstance(parsed, dict):
            rows.append({"kind": kind_of_doc(parsed), "run_id": run_id, "seq": seq})
    if rows:
        update = "UPDATE results SET verdict = :kind WHERE run_id = :run_id AND seq = :seq"
        conn.execute(sa.text(update), rows)


DOC_STEPS: dict[int, DocStep] = {}
DB_STEPS: dict[int, DbStep] = {1: _db_v1_to_v2, 2: _db_v2_to_v3}


class NewerSchemaError(InputError):
    """Written by a newer torchmark: this one cannot read it without losing data."""


def _check_version(version: object, what: str) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InputError(f"{what} has an invalid schema_version {version!r}")
    return version


def migrate_document(
    doc: Doc,
    *,
    what: str = "this document",
    target: int = SCHEMA_VERSION,
    steps: Mapping[int, DocStep] | None = None,
) -> Doc:
    """Upgrade a run document to ``target`` one registered step at a time (a new dict)."""
    steps = DOC_STEPS if steps is None else steps
    version = _check_version(doc.get("schema_version"), what)
    if version > target:
        raise NewerSchemaError(
            f"{what} was written by schema version {version}; this torchmark reads up to "
            f"version {target}: upgrade torchmark (pip install -U torchmark)"
        )
    out = dict(doc)
    while version < target:
        step = steps.get(version)
        if step is None:
            raise InputError(f"{what} has schema version {version}, which cannot be migrated")
        out = step(out)
        version += 1
        out["schema_version"] = version
    return out


def migrate_database(
    conn: Connection,
    version: int,
    *,
    where: str,
    target: int = DB_SCHEMA_VERSION,
    steps: Mapping[int, DbStep] | None = None,
) -> int:
    """Upgrade the database layout inside the caller's transaction; returns the new version."""
    steps = DB_STEPS if steps is None else steps
    if version > target:
        raise StoreError(
            f"{where} was written by schema version {version}; this torchmark reads up to "
            f"version {target}: upgrade torchmark (pip install -U torchmark)"
        )
    while version < target:
        step = steps.get(version)
        if step is None:
            raise StoreError(f"{where} has schema version {version}, which cannot be migrated")
        step(conn)
        version += 1
    return version
