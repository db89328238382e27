"""Reading stored runs: the queries every store runs and what their rows become, without
SQLAlchemy; and ``open_reader``, a read-only view of a local SQLite store on the standard
library's ``sqlite3`` that the commands which only read runs (history, show, export,
compare, report) open first.

Why two drivers: importing SQLAlchemy alone takes 0.2-0.4 s, most of such a command's start.
The SQL is one text for both: ``SQLStore`` runs it through SQLAlchemy (SQLite and
PostgreSQL), ``SQLiteReader`` through ``sqlite3``, and both turn rows into runs here. The
reader serves only a file this version can read as it is: one that exists, is ours, is at
today's schema and holds no run whose process died unmarked. Anything else (a new file, an
older schema to migrate, an orphaned run to mark, a damaged file, PostgreSQL) is
``open_reader``'s None, and the caller opens the full store, which sets up, migrates, marks,
or says what is wrong exactly as before.

``history`` reads no run's header: a serving run keeps its raw samples there (~2 MB each,
0.04 s to parse), so it reads the small ``summary`` column written beside each header (the
measuring process's pid, a serving run's answers counted), and tells a damaged header by its
first and last characters (a cut or overwritten document); ``load`` parses the header whole.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from torchmark.errors import InputError, RunNotFoundError, StoreError
from torchmark.judge.verdicts import COUNTED, answers_counted

if TYPE_CHECKING:
    from torchmark.results import RunRecord
    from torchmark.store.base import RunSummary

# The database layout these queries read (store/migrations.py upgrades older ones to it).
DB_SCHEMA_VERSION = 4
# Each SQLite attempt waits this long for a lock (a writer mid-transaction) before failing.
SQLITE_BUSY_S = 10.0
SQLITE_MAGIC = b"SQLite format 3\x00"
MEMORY_URLS = (":memory:", "sqlite://", "sqlite:///:memory:")

# (sql, parameters) -> rows as tuples: sqlite3's cursor, or SQLAlchemy's text() on a connection
Query = Callable[[str, dict[str, Any]], Sequence[Sequence[Any]]]

# ok by the verdict rule (an invalid or unreliable result is not ok); a result stored
# without a verdict kind (schema 1) by its status
_OK = ", ".join(f"'{k}'" for k in COUNTED)
_LIST = f"""
SELECT r.run_id, r.kind, r.created_utc, r.status, r.tool_version, r.host, r.devices,
       r.command, r.summary, substr(r.header, 1, 1), substr(r.header, length(r.header), 1),
       CASE WHEN r.summary IS NULL THEN r.header END, c.n, c.ok
FROM runs r LEFT JOIN (
    SELECT run_id, count(*) AS n,
           sum(CASE WHEN verdict IN ({_OK}) THEN 1
                    WHEN verdict IS NULL AND status = 'ok' THEN 1 ELSE 0 END) AS ok
    FROM results GROUP BY run_id
) c ON c.run_id = r.run_id
ORDER BY r.stored_seq DESC, r.run_id DESC"""
_ORDER = "SELECT run_id, status FROM runs ORDER BY stored_seq DESC, run_id DESC"
_HEADER = "SELECT status, header FROM runs WHERE run_id = :id"
_CEILINGS = "SELECT doc FROM run_ceilings WHERE run_id = :id"
_RESULTS = "SELECT seq, doc FROM results WHERE run_id = :id ORDER BY seq"
RUNNING = "SELECT run_id, created_utc, writer, header FROM runs WHERE status = 'running'"
_HOLDING = """
SELECT r.run_id FROM runs r
WHERE r.status != 'running' AND EXISTS (
    SELECT 1 FROM results s
    WHERE s.run_id = r.run_id AND s.workload = :workload AND s.variant = :variant)
ORDER BY r.stored_seq DESC, r.run_id DESC"""


def json_or_none(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def with_reason(verdict: Any, note: str) -> dict[str, Any]:
    """A verdict dict that also says ``note``: at least `warn`, reasons kept."""
    v = verdict if isinstance(verdict, dict) else {}
    reasons = [r for r in v.get("reasons", []) if isinstance(r, str)]
    level = v.get("level") if v.get("level") in ("warn", "invalid") else "warn"
    return {"level": level, "reasons": [*reasons, note] if note not in reasons else reasons}


def summary_of(header: dict[str, Any]) -> str:
    """The ``runs.summary`` column for a run header (``_summary_fields`` as JSON)."""
    return json.dumps(_summary_fields(header), separators=(",", ":"))


def _summary_fields(header: dict[str, Any]) -> dict[str, Any]:
    """What ``history`` says of a run beyond its other columns: the measuring process's
    pid; a serving run's answers, ok/total."""
    pid = (header.get("environment") or {}).get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    return {"pid": pid, "answers": answers_counted(header)}


def list_runs(query: Query, limit: int | None) -> list[RunSummary]:
    """Newest first (insertion order), at most ``limit``."""
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1, not {limit}")
    if limit is None:
        return [_summary(row) for row in query(_LIST, {})]
    return [_summary(row) for row in query(f"{_LIST} LIMIT :limit", {"limit": limit})]


def _summary(row: Sequence[Any]) -> RunSummary:
    from torchmark.store.base import RunSummary

    (run_id, kind, created, status, tool_version, host, devices_text, command, summary_text,
     first, last, header_text, n, ok) = row  # fmt: skip
    devices = json_or_none(devices_text)
    summary = json_or_none(summary_text)
    if isinstance(summary, dict):
        intact = first == "{" and last == "}"
    else:  # written without one (an older torchmark's row, a header no migration could read)
        header = json_or_none(header_text)
        intact = isinstance(header, dict)
        summary = _summary_fields(header) if isinstance(header, dict) else {}
    ok, total = int(ok or 0), int(n or 0)
    answers = summary.get("answers")
    if kind == "serving" and not total and isinstance(answers, (list, tuple)) and len(answers) == 2:
        ok, total = int(answers[0]), int(answers[1])  # its findings are answers, one per device
    pid = summary.get("pid")
    return RunSummary(
        run_id=run_id,
        kind=kind,
        created_utc=datetime.fromisoformat(created),
        status=status if intact and isinstance(devices, list) else "damaged",
        devices=[str(d) for d in devices] if isinstance(devices, list) else [],
        n_results=total,
        n_ok=ok,
        tool_version=tool_version,
        command=command,
        host=host,
        pid=pid if isinstance(pid, int) and status == "running" else None,
    )


def load_run(query: Query, run_id: str, where: str) -> RunRecord:
    """A run by id, or ``latest``: the newest finished run stored (insertion order) whose
    header reads. RunNotFoundError names the fix; a damaged header is a StoreError; damaged
    results and ceilings are left out and named in the run's verdict."""
    if run_id == "latest":
        return _load_latest(query, where)
    rows = query(_HEADER, {"id": run_id})
    if not rows:
        raise not_found(run_id, where)
    status, header = rows[0]
    doc = json_or_none(header)
    if not isinstance(doc, dict):
        raise StoreError(
            f"run {run_id} in {where} is damaged (its stored header is not readable JSON) "
            f"and cannot be read; the other runs are unaffected"
        )
    return _assemble(query, run_id, status, doc, where)


def runs_holding(query: Query, workload: str, variant: str) -> list[str]:
    """The finished runs holding a result of ``workload`` ``variant``, newest first: the
    ones worth loading to find one (`compare --reference`), found without parsing any."""
    return [str(row[0]) for row in query(_HOLDING, {"workload": workload, "variant": variant})]


def not_found(run_id: str, where: str) -> RunNotFoundError:
    return RunNotFoundError(
        f"no run {run_id!r} in {where}; `torchmark history` lists the stored run ids"
    )


def _load_latest(query: Query, where: str) -> RunRecord:
    running = None
    for run_id, status in query(_ORDER, {}):
        if status == "running":
            running = running or run_id
            continue
        rows = query(_HEADER, {"id": run_id})
        doc = json_or_none(rows[0][1]) if rows else None
        if isinstance(doc, dict):  # a damaged one is skipped: the one before it is read
            return _assemble(query, str(run_id), rows[0][0], doc, where)
    if running is not None:
        raise RunNotFoundError(
            f"no finished run in {where} yet (run {running} is still running; "
            f"name it to read it as it is)"
        )
    raise RunNotFoundError(f"no runs stored in {where} yet; `torchmark run` makes one")


def _assemble(query: Query, run_id: str, status: str, doc: dict[str, Any], where: str) -> RunRecord:
    from torchmark.results import Result, RunRecord
    from torchmark.results.schema import migrate_document

    damage: list[str] = []
    doc["run_id"] = run_id
    doc["status"] = status  # the column: what history shows and marking changes
    doc["ceilings"] = []
    ceilings = query(_CEILINGS, {"id": run_id})
    if ceilings and ceilings[0][0]:
        parsed = json_or_none(ceilings[0][0])
        if isinstance(parsed, list):
            doc["ceilings"] = parsed
        else:
            damage.append("its stored ceilings are damaged and were left out")
    kept: list[tuple[int, Any]] = []
    for seq, text in query(_RESULTS, {"id": run_id}):
        parsed = json_or_none(text)
        if isinstance(parsed, dict):
            kept.append((seq, parsed))
        else:
            damage.append(f"stored result {seq} is damaged (not JSON) and was left out")
    doc["results"] = [r for _, r in kept]
    doc = migrate_document(doc, what=f"run {run_id} in {where}")
    for note in damage:
        doc["verdict"] = with_reason(doc.get("verdict"), note)
    try:  # whole: one validator to build (~0.02 s of `show`'s start less than two)
        return RunRecord.model_validate(doc)
    except ValueError:
        pass  # a result or the header does not validate: each result on its own
    valid = []
    for (seq, _), r in zip(kept, doc["results"], strict=True):
        try:
            valid.append(Result.model_validate(r))
        except ValueError:
            note = f"stored result {seq} is damaged and was left out"
            doc["verdict"] = with_reason(doc.get("verdict"), note)
    try:
        record = RunRecord.model_validate({**doc, "results": []})
    except ValueError as e:
        raise StoreError(
            f"run {run_id} in {where} is damaged and cannot be read "
            f"({' '.join(str(e).splitlines()[:3])})"
        ) from None
    record.results = valid
    return record


# -- runs whose process died -------------------------------------------------------------


def process_started(pid: int) -> float | None:
    import psutil  # here, not at import: `history` startup does not pay for it

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def gone_note(writer: str | None, header: str | None, created_utc: str) -> str | None:
    """Why a `running` run is orphaned, or None while its process lives (or it cannot be
    told: another host, an import)."""
    from torchmark.results import utcnow

    if writer is None:  # an import or a schema-1 row: the header's pid and the run's time
        env = (json_or_none(header) or {}).get("environment") or {}
        host, pid = env.get("host"), env.get("pid")
        try:
            started_before = datetime.fromisoformat(created_utc).timestamp() + 1
        except ValueError:
            return None
        w: dict[str, Any] = {"host": host, "pid": pid, "before": started_before}
    else:
        w = json_or_none(writer) or {}
    host, pid = w.get("host"), w.get("pid")
    if host != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return None
    now = process_started(pid)
    if now is not None:
        started = w.get("started")
        if "before" in w and now <= w["before"]:
            return None
        if isinstance(started, (int, float)) and math.isclose(now, started, abs_tol=1.0):
            return None
    return (
        f"marked incomplete on {utcnow():%Y-%m-%d %H:%M} UTC: its process {pid} on {host} "
        f"ended without finishing the run (killed or lost power)"
    )


# -- the read-only view of a local SQLite file ---------------------------------------------


class SQLiteReader:
    """``load``, ``list_runs`` and ``runs_holding`` of a SQLite results store, on
    ``sqlite3`` alone, changing nothing; made by ``open_reader``, which checked the file
    first."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn, self.path = conn, path
        self.url = f"sqlite:///{path}"

    def _query(self, sql: str, params: dict[str, Any]) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"results store {self.path}: cannot read it ({e})") from None

    def load(self, run_id: str) -> RunRecord:
        return load_run(self._query, run_id, str(self.path))

    def list_runs(self, limit: int | None = None) -> list[RunSummary]:
        return list_runs(self._query, limit)

    def runs_holding(self, workload: str, variant: str) -> list[str]:
        return runs_holding(self._query, workload, variant)

    def close(self) -> None:
        self._conn.close()


def sqlite_path(url: str | None) -> Path | None:
    """The file a results-store URL names (``open_store``'s spellings), or None for one that
    is not a SQLite file (memory, PostgreSQL, an unknown scheme)."""
    if url is None or not url.strip():
        from torchmark.store import default_path

        return default_path()
    url = url.strip()
    if url in MEMORY_URLS:
        return None
    if "://" not in url:
        return Path(url).expanduser().absolute()
    scheme, rest = url.split("://", 1)
    if scheme.lower().split("+", 1)[0] != "sqlite":
        return None
    return Path(rest[1:]).expanduser().absolute()


def open_reader(url: str | None) -> SQLiteReader | None:
    """A read-only view of the SQLite store at ``url`` when it can be read as it is, else
    None: open the full store (``open_store``), which sets up, migrates, marks orphaned runs
    or names what is wrong. See the module docstring."""
    path = sqlite_path(url)
    if path is None or not path.is_file() or not os.access(path, os.R_OK):
        return None
    try:
        with path.open("rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return None
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=SQLITE_BUSY_S)
    except (OSError, sqlite3.Error):
        return None
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or version[0] != str(DB_SCHEMA_VERSION):
            raise LookupError
        for _run_id, created, writer, header in conn.execute(RUNNING).fetchall():
            if gone_note(writer, header, created):
                raise LookupError  # the full open marks it incomplete
    except (sqlite3.Error, LookupError):
        conn.close()
        return None
    return SQLiteReader(conn, path)
