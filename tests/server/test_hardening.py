"""What the board answers when things go wrong or a caller pushes: a clean 500 with the
security headers, 503 + Retry-After while the database is away, one transaction per
submission, a bounded /api/v1/place, CSV cells that no spreadsheet runs, a lowercase
`bearer`, and the headers every answer carries."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from boardtest import body, make_run
from torchmark.web import cases
from torchmark.web.accounts import Accounts

HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "Cache-Control")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def quiet(client: TestClient) -> TestClient:
    """The same app, answering a server error as a browser sees it instead of raising."""
    return TestClient(client.app, raise_server_exceptions=False)


def has_headers(r: Any) -> None:
    for h in HEADERS:
        assert h in r.headers, (h, dict(r.headers))
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"


def test_every_answer_carries_the_security_headers(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    run_id = client.post("/api/v1/runs", content=body(make_run()), headers=auth(token)).json()
    for path in ("/", "/api/v1/runs", "/static/style.css", f"/runs/{run_id['run_id']}", "/x"):
        has_headers(client.get(path))


def test_an_unexpected_error_is_a_clean_500(
    server: tuple[TestClient, str, Accounts], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _, accounts = server

    def broken() -> None:
        raise RuntimeError("secret internals /srv/board/app.py line 42")

    monkeypatch.setattr(accounts, "submissions", broken)
    for accept in ("application/json", "text/html"):
        r = quiet(client).get("/api/v1/runs", headers={"Accept": accept})
        assert r.status_code == 500
        has_headers(r)
        assert "secret internals" not in r.text and "Traceback" not in r.text
    monkeypatch.setattr(cases, "machine_runs", lambda *a: broken())
    page = quiet(client).get("/machines/m", headers={"Accept": "text/html"})
    assert page.status_code == 500 and "<h1>500 Internal Server Error</h1>" in page.text
    has_headers(page)


@pytest.mark.parametrize(
    "error",
    [
        sa.exc.OperationalError("SELECT", {}, Exception("connection refused")),
        sa.exc.InterfaceError("SELECT", {}, Exception("connection closed")),
    ],
    ids=["operational", "interface"],
)
def test_a_database_outage_is_503_with_retry_after(
    server: tuple[TestClient, str, Accounts], monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    client, token, accounts = server

    def away(*args: object, **kw: object) -> None:
        raise error

    monkeypatch.setattr(accounts, "submissions", away)
    monkeypatch.setattr(accounts, "check_token", away)
    q = quiet(client)
    for r in (
        q.get("/api/v1/runs"),
        q.post("/api/v1/runs", content=body(make_run()), headers=auth(token)),
    ):
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "5"
        assert "not answering" in r.json()["detail"] and "connection" not in r.text
        has_headers(r)


def test_a_submission_is_one_transaction(
    server: tuple[TestClient, str, Accounts], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the run is written and before its submission is recorded leaves
    nothing: storing a run and recording it were two transactions (stray rows no reader
    finds)."""
    client, token, accounts = server

    def fails(conn: Any, rows: Any) -> None:
        raise RuntimeError("killed here")

    monkeypatch.setattr(cases, "insert", fails)
    r = quiet(client).post("/api/v1/runs", content=body(make_run()), headers=auth(token))
    assert r.status_code == 500
    with accounts.engine.connect() as conn:
        for table in ("runs", "results", "server_submissions", "server_results"):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 0, table
    monkeypatch.undo()
    assert (
        client.post("/api/v1/runs", content=body(make_run()), headers=auth(token)).status_code
        == 201
    )


def test_place_is_bounded_per_caller_and_at_once(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    state: Any = client.app.state
    mine = body(make_run())
    answers = [client.post("/api/v1/place", content=mine) for _ in range(31)]
    assert [a.status_code for a in answers[:30]] == [200] * 30
    assert answers[30].status_code == 429 and 0 < int(answers[30].headers["Retry-After"]) <= 60
    # a token holder counts apart from the address
    assert client.post("/api/v1/place", content=mine, headers=auth(token)).status_code == 200
    state.place_slots.acquire()
    state.place_slots.acquire()  # two placements under way
    try:
        busy = client.post("/api/v1/place", content=mine, headers=auth(token))
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
    finally:
        state.place_slots.release()
        state.place_slots.release()
    big = b" " * (8 * 2**20 + 1)
    assert client.post("/api/v1/place", content=big, headers=auth(token)).status_code == 413


def test_csv_cells_are_never_formulas(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, _ = server
    run = make_run()
    r = run.results[0]
    r.workload, r.variant, r.device = '=HYPERLINK("http://x.example","pay")', "+1", "@cpu"
    run.environment["devices"]["@cpu"] = run.environment["devices"].pop("cpu")
    stored = client.post("/api/v1/runs", content=body(run), headers=auth(token))
    assert stored.status_code == 201, stored.text
    for path in (
        "/api/v1/results?format=csv",
        f"/api/v1/runs/{stored.json()['run_id']}?format=csv",
    ):
        rows = list(csv.DictReader(io.StringIO(client.get(path).text)))
        assert rows[0]["workload"].startswith("'=HYPERLINK(")
        assert rows[0]["variant"] == "'+1" and rows[0]["device"] == "'@cpu"
        assert float(rows[0]["median_s"]) > 0  # numbers stay numbers


def test_a_lowercase_bearer_scheme_is_accepted(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, _ = server
    r = client.post(
        "/api/v1/runs", content=body(make_run()), headers={"Authorization": f"bearer {token}"}
    )
    assert r.status_code == 201, r.text
    for bad in (f"Basic {token}", "bearer", "bearer  ", token):
        r = client.post(
            "/api/v1/runs", content=body(make_run(scale=2)), headers={"Authorization": bad}
        )
        assert r.status_code == 401, bad
