"""What the board asks its database: a submitted run never changes, so it is read once per
process; a stored report, a placement and a start cost a bounded number of queries, counted
on the engine, whatever the number of results."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from boardtest import body, make_run
from torchmark.errors import InputError
from torchmark.results import RunRecord
from torchmark.run import resume
from torchmark.store import SQLStore
from torchmark.web import cases, ranking
from torchmark.web.app import create_app
from torchmark.web.reports import Reports


@contextlib.contextmanager
def queries(engine: sa.Engine) -> Iterator[list[str]]:
    """The statements sent on ``engine`` meanwhile (SQLite's explicit BEGIN left out)."""
    sent: list[str] = []

    def count(conn, cursor, statement, *rest):  # type: ignore[no-untyped-def]
        if statement.strip().upper() != "BEGIN":
            sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)


def board(db: Path) -> tuple[FastAPI, TestClient, dict[str, str]]:
    app = create_app(f"sqlite:///{db}")
    token = app.state.accounts.create_token("t")
    return app, TestClient(app), {"Authorization": f"Bearer {token}"}


def suite(model: str, scale: float, n_cases: int) -> RunRecord:
    """A run of ``n_cases`` results of distinct cases (add/seed at n = 1000, 1001...)."""
    run = make_run(model, scale)
    one = run.results[0]
    run.results = [one.model_copy(update={"params": {"n": 1000 + i}}) for i in range(n_cases)]
    # begun long enough ago to have timed its samples (the board checks they fit its time)
    run.created_utc -= timedelta(minutes=10)
    return run


def test_a_submitted_run_never_changes_and_more_results_are_another_run(tmp_path: Path) -> None:
    app, client, headers = board(tmp_path / "b.db")
    part = suite("Box CPU", 1.0, 1)
    part.status = "incomplete"  # stopped after its first case
    first = client.post("/api/v1/runs", content=body(part), headers=headers)
    assert first.status_code == 201
    first_id = first.json()["run_id"]
    served = client.get(f"/api/v1/runs/{first_id}").text
    # resumed on its own machine (`torchmark run --resume`), then submitted again
    whole = suite("Box CPU", 1.0, 2)
    whole.status = "complete"
    again = client.post("/api/v1/runs", content=body(whole), headers=headers)
    assert again.status_code == 201 and again.json()["run_id"] != first_id
    whole_id = again.json()["run_id"]
    twin = client.post("/api/v1/runs", content=body(whole), headers=headers)
    assert twin.status_code == 200 and twin.json() == {"run_id": whole_id, "duplicate": True}
    store: SQLStore = app.state.store
    assert sorted(r.run_id for r in store.list_runs()) == sorted([first_id, whole_id])
    # the first stays as it was submitted, in this process and in a new one
    fresh = TestClient(create_app(f"sqlite:///{tmp_path / 'b.db'}"))
    for c in (client, fresh):
        assert c.get(f"/api/v1/runs/{first_id}").text == served
        assert len(RunRecord.model_validate_json(served).results) == 1
        got = RunRecord.model_validate_json(c.get(f"/api/v1/runs/{whole_id}").text)
        assert len(got.results) == 2 and got.status == "complete"
    # nor can it be resumed in the server's database: its host was stripped, so the machine
    # that measured it is another environment to `torchmark run --resume`
    with pytest.raises(InputError, match=r"cannot resume run .* host differs"):
        resume.check_environment(store.load(first_id), part.environment)


def test_a_submitted_run_is_read_from_the_database_once(tmp_path: Path) -> None:
    app, client, headers = board(tmp_path / "b.db")
    run_id = client.post("/api/v1/runs", content=body(make_run()), headers=headers).json()["run_id"]
    engine = app.state.accounts.engine
    with queries(engine) as cold:
        page = client.get(f"/runs/{run_id}").text
    with queries(engine) as warm:
        assert client.get(f"/runs/{run_id}").text == page
        doc = client.get(f"/api/v1/runs/{run_id}").text
    # each view: is it a submission? (one query); the page also asks its cases' ranking
    # generations (its ranks: one query for every case, the rankings cached)
    assert len(cold) > 1 and len(warm) == 3
    assert (
        RunRecord.model_validate_json(doc).results[0].samples_s == make_run().results[0].samples_s
    )
    assert client.get("/runs/nope").status_code == 404


def test_a_stored_report_costs_one_query_and_serves_the_same_bytes(tmp_path: Path) -> None:
    app, client, headers = board(tmp_path / "r.db")
    drawn: list[str] = []

    def draw(run: RunRecord) -> bytes:
        drawn.append(run.run_id or "")
        return gzip.compress(f"<p>report of {run.run_id}</p>".encode(), mtime=0)

    def threads(n: int) -> object:
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor(n)

    engine = app.state.accounts.engine
    app.state.reports = Reports(engine, render=draw, pool=threads)  # type: ignore[arg-type]
    run_id = client.post("/api/v1/runs", content=body(make_run()), headers=headers).json()["run_id"]
    first = client.get(f"/runs/{run_id}/report")
    assert first.status_code == 200 and drawn == [run_id]
    assert first.text == f"<p>report of {run_id}</p>"
    with queries(engine) as sent:
        again = client.get(f"/runs/{run_id}/report")
        plain = client.get(f"/runs/{run_id}/report", headers={"Accept-Encoding": "identity"})
    assert len(sent) == 2 and drawn == [run_id]  # one query a view, nothing drawn again
    assert again.content == plain.content == first.content
    assert again.headers["Content-Encoding"] == "gzip" and "Content-Encoding" not in plain.headers
    # the page stored under another key (other report code) is not served: drawn again
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE server_reports SET key = 'other'"))
    assert client.get(f"/runs/{run_id}/report").text == first.text and drawn == [run_id] * 2
    assert client.get("/runs/nope/report").status_code == 404


def test_placing_a_run_costs_the_same_queries_for_3_cases_or_60(tmp_path: Path) -> None:
    app, client, headers = board(tmp_path / "p.db")
    engine = app.state.accounts.engine
    for model, scale in (("A", 1.0), ("B", 2.0), ("C", 4.0), ("D", 1.001)):
        post = client.post("/api/v1/runs", content=body(suite(model, scale, 60)), headers=headers)
        assert post.status_code == 201
    submitted = [app.state.store.load(r["run_id"]) for r in client.get("/api/v1/runs").json()]
    counts = {}
    for n in (3, 60):
        mine = suite("mine", 3.0, n)
        mine.results.append(mine.results[0].model_copy(update={"device": "cuda:0"}))
        with queries(engine) as sent:
            placed = client.post("/api/v1/place", content=body(mine)).json()
        counts[n] = len(sent)
        # as ranking each case over the whole runs in memory would place it
        assert len(placed) == n + 1
        for p, r in zip(placed, mine.results, strict=True):
            rows = ranking.rank(submitted, ranking.case_of(r))
            t = r.measurement.median
            faster = sum(row.result.measurement.median < t for row in rows)
            slower = sum(row.result.measurement.median > t for row in rows)
            assert (p["workload"], p["params"], p["device"]) == (r.workload, r.params, r.device)
            # A, B and D (1-2 ms) are faster than its 3 ms, C (4 ms) slower
            assert (p["machines"], p["rank"]) == (len(rows), faster + 1) == (4, 4)
            assert p["faster_than_pct"] == 100 * slower / len(rows) == 25
    # generations, then the rankings not cached yet: 2 queries; the 3 cases were cached
    assert counts == {3: 2, 60: 2}
    with queries(engine) as sent:
        client.post("/api/v1/place", content=body(suite("mine", 3.0, 60)))
    assert len(sent) == 1  # every ranking cached: the generations alone


def test_many_cases_are_asked_for_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, client, headers = board(tmp_path / "c.db")
    engine = app.state.accounts.engine
    for model, scale in (("A", 1.0), ("B", 2.0)):
        client.post("/api/v1/runs", content=body(suite(model, scale, 25)), headers=headers)
    wanted = [ranking.case_of(r) for r in suite("x", 1.0, 30).results]  # 5 with no rows
    one_by_one = {
        c: [ranking.row_json(x) for x in cases.rank(engine, "standard", c)] for c in wanted
    }
    gens = {c: cases.generation(engine, "standard", c) for c in wanted}
    monkeypatch.setattr(cases, "CASES_PER_QUERY", 7)
    with queries(engine) as sent:
        together = cases.rank_many(engine, "standard", wanted + wanted[:3])  # repeats once
        assert cases.generations(engine, "standard", wanted) == gens
    assert len(sent) == 2 * 5  # ceil(30 / 7) each
    assert {c: [ranking.row_json(x) for x in rows] for c, rows in together.items()} == one_by_one
    assert [len(one_by_one[c]) for c in wanted] == [2] * 25 + [0] * 5
    assert gens[wanted[-1]] == (0, 0)


def test_a_start_after_the_backfill_loads_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, client, headers = board(tmp_path / "s.db")
    ids = []
    for i, n in enumerate((2, 0, 3)):  # the second run has no results: it needs no rows
        r = client.post("/api/v1/runs", content=body(suite(f"M{i}", 1.0, n)), headers=headers)
        assert r.status_code == 201
        ids.append(r.json()["run_id"])
    engine = app.state.accounts.engine
    case = ranking.case_of(suite("x", 1.0, 1).results[0])
    before = [ranking.row_json(x) for x in cases.rank(engine, "standard", case)]
    with engine.begin() as conn:  # as a database made before the index existed
        conn.execute(sa.delete(cases.results_t))
    app.state.store.close()
    loaded: list[str] = []
    load = SQLStore.load

    def counted(self: SQLStore, run_id: str) -> RunRecord:
        loaded.append(run_id)
        return load(self, run_id)

    monkeypatch.setattr(SQLStore, "load", counted)
    again = create_app(f"sqlite:///{tmp_path / 's.db'}")  # the backfill
    assert sorted(loaded) == sorted([ids[0], ids[2]])
    after = [ranking.row_json(x) for x in cases.rank(again.state.accounts.engine, "standard", case)]
    assert after == before and len(after) == 2
    again.state.store.close()
    loaded.clear()
    with_store = create_app(f"sqlite:///{tmp_path / 's.db'}")  # after it: no run loaded
    assert loaded == []
    with queries(with_store.state.accounts.engine) as sent:
        assert cases.backfill(with_store.state.accounts.engine, with_store.state.store) == 0
    assert len(sent) == 1 and loaded == []
