"""The server's per-result index: one row per result of every submission, so that a ranking
reads only the rows of its own case and division from the database.

Walking every stored run in memory took 0.9-1.3 s per page at 100,000 results (1,000 runs x
100 cases, benchmarks/leaderboard_load.py); the index query reads ~1,000 rows of one case.
Each row keeps the result's kept samples (JSON, repr precision: bit-identical) and its
document without samples (``head``: work, headline, params...), which is all a ranking needs.
Rows are written in the transaction that records the submission; runs submitted before the
index existed are indexed when the app starts (``backfill``).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy import Connection, Engine

from torchmark.errors import RunNotFoundError
from torchmark.judge import verdicts
from torchmark.results import Result, RunRecord
from torchmark.store import ResultStore
from torchmark.store.exchange import escape_text
from torchmark.store.sql import results_t as store_results_t
from torchmark.web import plausible, ranking
from torchmark.web.accounts import metadata, submissions_t

T = TypeVar("T")

results_t = sa.Table(
    "server_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),  # submission order
    sa.Column("run_id", sa.Text, nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),  # the result's place in its run
    sa.Column("division", sa.Text, nullable=False),
    sa.Column("machine", sa.Text, nullable=False),
    sa.Column("workload", sa.Text, nullable=False),
    sa.Column("variant", sa.Text, nullable=False),
    sa.Column("params", sa.Text, nullable=False),  # sorted JSON, as ranking.case_of
    sa.Column("device", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),  # ranking.device_model of the run
    sa.Column("ok", sa.Boolean, nullable=False),
    # verdicts.may(rank) False, or work unverified (plausible.unverified): listed only
    sa.Column("invalid", sa.Boolean, nullable=False),
    # the kept samples (s) as little-endian float64: bit-identical, and ~10x faster to read
    # than JSON (11 ms for one case's 1,000 rows)
    sa.Column("kept", sa.LargeBinary, nullable=False),
    sa.Column("head", sa.Text, nullable=False),  # the Result without samples and telemetry
    # `ok` last: the case list reads this index alone (336 ms over the table at 100,000 rows)
    sa.Index("ix_server_results_case", "division", "workload", "variant", "params", "ok"),
)
# A readable name per machine fingerprint (ranking.machine_label of its first run): pages
# show it instead of the hex id. Written with the machine's first submission; machines
# submitted before the table existed are named at start (``backfill``).
machines_t = sa.Table(
    "server_machines",
    metadata,
    sa.Column("machine", sa.Text, primary_key=True),
    sa.Column("label", sa.Text, nullable=False),
)
_COMPUTED = set(Result.model_computed_fields)
_HEAD_LEFT_OUT = {"samples_s", "excluded", "telemetry"} | _COMPUTED


def index_rows(run: RunRecord, run_id: str, division: str, machine: str) -> list[dict[str, Any]]:
    """The index rows of one submitted run (every result; ``seq`` as the store numbers them)."""
    rows = []
    unverified = plausible.unverified(run)
    listed = ranking.listed_only(run)  # a tune run's other candidates: not cases
    for seq, r in enumerate(run.results):
        workload, variant, params = ranking.case_of(r)
        rows.append(
            {
                "run_id": run_id,
                "seq": seq,
                "division": division,
                "machine": machine,
                "workload": workload,
                "variant": variant,
                "params": params,
                "device": r.device,
                "model": ranking.device_model(run, r.device),
                "ok": r.ok and seq not in listed,
                # never ranked: its verdict keeps it off, or its work is not its case's
                "invalid": not verdicts.may(r, "rank") or seq in unverified,
                "kept": np.asarray(r.measurement.kept if r.ok else [], "<f8").tobytes(),
                "head": json.dumps(r.model_dump(mode="json", exclude=_HEAD_LEFT_OUT)),
            }
        )
    return rows


def insert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(results_t.insert(), rows)


def name_machine(conn: Connection, machine: str, label: str) -> None:
    """Keep ``label`` for ``machine`` unless it has one (the caller holds the write lock)."""
    known = conn.execute(sa.select(machines_t.c.machine).where(machines_t.c.machine == machine))
    if known.first() is None:
        conn.execute(machines_t.insert().values(machine=machine, label=label))


def machine_labels(engine: Engine, machines: Iterable[str]) -> dict[str, str]:
    """The readable name of each machine in ``machines`` that has one."""
    wanted = sorted(set(machines))
    if not wanted:
        return {}
    m = machines_t
    with engine.connect() as conn:
        rows = conn.execute(sa.select(m.c.machine, m.c.label).where(m.c.machine.in_(wanted)))
        return {r.machine: r.label for r in rows}


def division_counts(engine: Engine) -> dict[str, int]:
    """Submitted runs per division (those with any)."""
    s = submissions_t
    with engine.connect() as conn:
        rows = conn.execute(sa.select(s.c.division, sa.func.count()).group_by(s.c.division))
        return {division: int(n) for division, n in rows}


def backfill(engine: Engine, store: ResultStore) -> int:
    """Index every submission that has stored results but no index rows yet (those made
    before the index existed); returns how many runs were indexed. A submission without
    results needs no rows: it is never loaded, so a start after the backfill loads no run
    (it loaded every result-less submission at every start)."""
    s, t = submissions_t, results_t
    no_rows = ~sa.exists().where(t.c.run_id == s.c.run_id)
    has_results = sa.exists().where(store_results_t.c.run_id == s.c.run_id)
    with engine.connect() as conn:
        todo = conn.execute(
            sa.select(s.c.run_id, s.c.division, s.c.machine).where(no_rows, has_results)
        ).all()
    done = 0
    for run_id, division, machine in todo:
        rows = index_rows(store.load(run_id), run_id, division, machine)
        if rows:
            with engine.begin() as conn:
                insert(conn, rows)
            done += 1
    return done


def name_machines(engine: Engine, store: ResultStore) -> None:
    """Name the machines submitted before ``server_machines`` existed (one run each)."""
    s, m = submissions_t, machines_t
    with engine.connect() as conn:
        unnamed = conn.execute(
            sa.select(s.c.machine, sa.func.min(s.c.run_id))
            .where(~sa.exists().where(m.c.machine == s.c.machine))
            .group_by(s.c.machine)
        ).all()
    for machine, run_id in unnamed:
        try:
            label = ranking.machine_label(store.load(run_id))
        except RunNotFoundError:
            continue
        with engine.begin() as conn:
            name_machine(conn, machine, label)


# Cases asked for in one statement (generations, rank_many): a UNION ALL of one SELECT per
# case, each the index seek the case alone gets (a row-value IN made SQLite scan the whole
# division's index: 19 ms for 3 cases at 100,000 rows, where the union took 0.5 ms, and 21
# ms for 100 cases, as the 100 queries did). SQLite allows 500 terms in a compound SELECT;
# the built-in suite's ~100 cases take one statement.
CASES_PER_QUERY = 200


def _per_case(
    division: str,
    wanted: Iterable[ranking.Case],
    columns: Sequence[sa.ColumnElement[Any]],
    *where: sa.ColumnElement[bool],
) -> Iterator[tuple[list[ranking.Case], sa.Select[Any] | sa.CompoundSelect[Any]]]:
    """(cases, statement) per CASES_PER_QUERY of ``wanted`` (each case once): the statement
    selects ``columns`` of each case's rows, each row led by its case's place in ``cases``
    (column ``k``)."""
    t = results_t
    todo = list(dict.fromkeys(wanted))  # a case once, however many results share it
    for i in range(0, len(todo), CASES_PER_QUERY):
        chunk = todo[i : i + CASES_PER_QUERY]
        parts = [
            # the place inline, not bound: PostgreSQL cannot type a bound value in a union
            sa.select(sa.literal_column(str(k)).label("k"), *columns).where(
                t.c.division == division,
                t.c.workload == workload,
                t.c.variant == variant,
                t.c.params == params,
                *where,
            )
            for k, (workload, variant, params) in enumerate(chunk)
        ]
        yield chunk, parts[0] if len(parts) == 1 else sa.union_all(*parts)


def generation(engine: Engine, division: str, case: ranking.Case | None = None) -> tuple[int, ...]:
    """The key that keeps a cached answer fresh, also across processes sharing one database.

    For ``case``: its rows' (count, max id) in ``division``; rows are only ever added, so
    this changes with each (the count too: on PostgreSQL a lower id may commit after a
    higher one), and a submission elsewhere leaves it. Without: the division's submission
    count, which every new row comes with (one transaction) and the page shows; counting
    the division's 100,000 index rows instead took ~20 ms a page."""
    if case is not None:
        return generations(engine, division, [case])[case]
    s = submissions_t
    with engine.connect() as conn:
        runs = conn.execute(
            sa.select(sa.func.count()).select_from(s).where(s.c.division == division)
        ).scalar_one()
    return (int(runs),)


def generations(
    engine: Engine, division: str, wanted: Iterable[ranking.Case]
) -> dict[ranking.Case, tuple[int, int]]:
    """``generation(engine, division, case)`` of every case in ``wanted``, in one statement
    per CASES_PER_QUERY cases (one query per case made `/api/v1/place` ~100 a suite)."""
    t = results_t
    out: dict[ranking.Case, tuple[int, int]] = {}
    with engine.connect() as conn:
        for chunk, query in _per_case(
            division, wanted, [sa.func.count().label("n"), sa.func.max(t.c.id).label("last")]
        ):
            for k, count, last in conn.execute(query):  # an aggregate: a row per case
                out[chunk[k]] = (int(count), int(last or 0))
    return out


def cases(engine: Engine, division: str) -> list[ranking.Case]:
    """Every case with an ok result in ``division`` (as ranking.cases over its runs)."""
    t = results_t
    with engine.connect() as conn:
        found = conn.execute(
            sa.select(t.c.workload, t.c.variant, t.c.params)
            .where(t.c.division == division, t.c.ok)
            .distinct()
        ).all()
    return sorted((w, v, p) for w, v, p in found)


def rank(engine: Engine, division: str, case: ranking.Case) -> list[ranking.Row]:
    """ranking.rank over the submissions of ``division``, reading only ``case``'s rows."""
    return rank_many(engine, division, [case])[case]


def rank_many(
    engine: Engine, division: str, wanted: Iterable[ranking.Case]
) -> dict[ranking.Case, list[ranking.Row]]:
    """``rank(engine, division, case)`` of every case in ``wanted``, in one statement per
    CASES_PER_QUERY cases."""
    t, s = results_t, submissions_t
    # the submitter of each row (its token's name, by a correlated scalar subquery on the
    # submissions' run id index): a figure is confirmed only by another submitter's
    token = sa.select(s.c.token_name).where(s.c.run_id == t.c.run_id).limit(1).scalar_subquery()
    columns = [
        t.c.id, t.c.run_id, t.c.machine, t.c.device, t.c.model, t.c.kept, t.c.head,
        token.label("token"),
    ]  # fmt: skip
    groups: dict[ranking.Case, dict[tuple[str, str], ranking.Group]] = {}
    with engine.connect() as conn:
        where = [t.c.ok, sa.not_(t.c.invalid)]
        for chunk, query in _per_case(division, wanted, columns, *where):
            by_case: list[dict[tuple[str, str], ranking.Group]] = [{} for _ in chunk]
            groups.update(zip(chunk, by_case, strict=True))
            ordered = query.order_by(sa.literal_column("k"), sa.literal_column("id"))
            for k, _, run_id, machine, device, model, kept, head, who in conn.execute(ordered):
                g = by_case[k].get((machine, device))
                if g is None:
                    g = by_case[k][(machine, device)] = ranking.Group(
                        machine, device, model, [], [], _head(head)
                    )
                g.runs.append(run_id)
                g.samples.extend(np.frombuffer(kept, "<f8").tolist())
                g.submitters.add(who or "")
    return {case: ranking.rank_groups(list(g.values())) for case, g in groups.items()}


def _head(text: str) -> Result:
    """An index row's result. A row stored before the server refused text that is no UTF-8
    (a lone surrogate in a note) is read with that text escaped: pydantic's JSON parser
    refuses it, and one row must not fail every ranking of its case."""
    try:
        return Result.model_validate_json(text)
    except ValidationError:
        return Result.model_validate(escape_text(json.loads(text)))


def machine_runs(engine: Engine, machine: str) -> list[tuple[str, str]]:
    """(run id, division) of every submission of ``machine``."""
    s = submissions_t
    with engine.connect() as conn:
        rows = conn.execute(sa.select(s.c.run_id, s.c.division).where(s.c.machine == machine))
        return [(r.run_id, r.division) for r in rows]


def runs_with(engine: Engine, workload: str) -> list[str]:
    """Ids of the submitted runs with a result of ``workload``, in submission order."""
    t = results_t
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.c.run_id, sa.func.min(t.c.id).label("first"))
            .where(t.c.workload == workload)
            .group_by(t.c.run_id)
            .order_by("first")
        )
        return [r.run_id for r in rows]


class Cache:
    """A small LRU of computed answers; keys carry ``generation`` so a new submission
    makes every older answer unreachable (they age out).

    Bounded by count and, when ``weigh`` is given, by the sum of its weights (approximate
    bytes): the least recently used go first, and an answer heavier than ``max_bytes`` alone
    is returned without being kept."""

    def __init__(
        self,
        size: int = 256,
        *,
        max_bytes: int | None = None,
        weigh: Callable[[Any], int] | None = None,
    ) -> None:
        self.size, self.max_bytes, self.weigh = size, max_bytes, weigh
        self.bytes = 0
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        value = make()  # outside the lock: two misses may both compute, same answer
        weight = self.weigh(value) if self.weigh is not None else 0
        if self.max_bytes is not None and weight > self.max_bytes:
            return value
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            self._items[key] = (value, weight)
            self.bytes += weight
            while len(self._items) > self.size or (
                self.max_bytes is not None and self.bytes > self.max_bytes
            ):
                self.bytes -= self._items.popitem(last=False)[1][1]
        return value
