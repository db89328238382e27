"""Schema versions and the step-by-step migrations between them.

Two things carry a version:

- a run *document* (exported JSON, and the JSON kept inside the database):
  ``results.SCHEMA_VERSION``, stored as ``schema_version`` in the document;
- the *database* layout (tables and columns): ``DB_SCHEMA_VERSION``, kept in table ``meta``.

An older version is upgraded one step at a time by registered functions (``DB_STEPS[v]``
below, and ``results.schema.DOC_STEPS[v]`` for documents, turn version ``v`` into ``v + 1``);
a newer one is refused with a message that says to upgrade torchmark, because guessing at a
future layout could lose data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from torchmark.errors import StoreError
from torchmark.store.read import DB_SCHEMA_VERSION

if TYPE_CHECKING:  # SQLAlchemy is imported by the steps: reading a store needs only the number
    from sqlalchemy import Connection


DbStep = Callable[["Connection"], None]

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
    import sqlalchemy as sa

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
    """Each result's verdict kind (``torchmark.judge.verdicts``) in a column of its own, so that
    ``history`` counts ok results by their verdict without reading every document."""
    import json

    import sqlalchemy as sa

    from torchmark.judge.verdicts import kind_of_doc

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


def _db_v3_to_v4(conn: Connection) -> None:
    """Each run's summary (``store.read.summary_of``: its process's pid, a serving run's
    answers counted) in a column of its own, so that ``history`` reads no header: a serving
    run's holds its raw samples (~2 MB)."""
    import json

    import sqlalchemy as sa

    from torchmark.store.read import summary_of  # its rule, for every stored run

    if "summary" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}:
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN summary TEXT")
    rows = []
    for run_id, header in conn.execute(sa.text("SELECT run_id, header FROM runs")):
        try:
            parsed = json.loads(header)
        except ValueError:
            continue  # a damaged header: history finds it so without a summary
        if isinstance(parsed, dict):
            rows.append({"summary": summary_of(parsed), "id": run_id})
    if rows:
        conn.execute(sa.text("UPDATE runs SET summary = :summary WHERE run_id = :id"), rows)


DB_STEPS: dict[int, DbStep] = {1: _db_v1_to_v2, 2: _db_v2_to_v3, 3: _db_v3_to_v4}


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


__all__ = [
    "DB_SCHEMA_VERSION",
    "DB_STEPS",
    "migrate_database",
]
