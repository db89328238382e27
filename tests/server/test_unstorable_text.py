"""Text that cannot be stored or sent (a lone surrogate, a NUL) is refused at the door with
422 and never stored; a run stored with such text before is still read by every reader."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from boardtest import doc, make_run
from torchmark.web import cases
from torchmark.web.accounts import Accounts

SURROGATE, NUL = "\udfff", "\x00"


def bad_documents() -> dict[str, dict[str, Any]]:
    out = {}
    for name, text in (("surrogate", SURROGATE), ("nul", NUL)):
        note = doc(make_run(note=f"x{text}y"))
        model = doc(make_run())
        model["environment"]["devices"]["cpu"]["model"] = f"CPU{text}"
        workload = doc(make_run())
        workload["results"][0]["workload"] = f"add{text}"
        key = doc(make_run())
        key["results"][0]["params"] = {f"n{text}": 1000}
        out |= {f"{name} in a note": note, f"{name} in a device model": model}
        out |= {f"{name} in a workload": workload, f"{name} in a key": key}
    return out


@pytest.mark.parametrize("shape", sorted(bad_documents()))
def test_unstorable_text_is_refused_at_the_door(
    server: tuple[TestClient, str, Accounts], shape: str
) -> None:
    client, token, accounts = server
    headers = {"Authorization": f"Bearer {token}"}
    sent = json.dumps(bad_documents()[shape]).encode()  # JSON escapes: \udfff, \u0000
    r = client.post("/api/v1/runs", content=sent, headers=headers)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "lone surrogate" in detail or "NUL" in detail, detail
    assert client.get("/api/v1/runs").json() == []
    with accounts.engine.connect() as conn:  # no stray run row without a submission either
        assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 0
    place = client.post("/api/v1/place", content=sent)
    assert place.status_code == 422
    assert client.get("/api/v1/results?format=csv").status_code == 200


def test_a_run_stored_with_such_text_before_is_read_by_every_reader(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """A note with a lone surrogate and a NUL, stored by an older server: every reader
    answered 500 until someone edited the database."""
    client, _, accounts = server
    app: Any = client.app
    run = make_run(note=f"x{SURROGATE}y{NUL}z")
    run_id = app.state.store.save(run)
    rows = cases.index_rows(run, run_id, "standard", "m1")
    with accounts.engine.begin() as conn:
        accounts.record_in(conn, "old", run_id, "alice", "standard", "m1")
        cases.insert(conn, rows)
    case = {"workload": "add", "variant": "seed", "params": '{"n": 1000}'}
    for page in (
        "/",
        "/api/v1/results",
        "/api/v1/results?format=csv",
        f"/runs/{run_id}",
        f"/api/v1/runs/{run_id}",
        f"/api/v1/runs/{run_id}?format=csv",
        f"/runs/{run_id}/report",
        "/machines/m1",
        "/api/v1/leaderboard?" + "&".join(f"{k}={v}" for k, v in case.items()),
    ):
        got = client.get(page)
        assert got.status_code == 200, (page, got.text[:200])
    note = json.loads(client.get(f"/api/v1/runs/{run_id}").text)["results"][0]["notes"][0]
    assert note == "x\\udfffy\\x00z"  # shown escaped, never dropped
