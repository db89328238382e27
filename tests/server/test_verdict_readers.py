"""Readers that count, show, place and submit results follow the verdict rule:
history's ok/total, the board's run page and placement, submit --dry-run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from boardtest import body, make_run
from clitest import cli
from torchmark.results import Result, RunRecord, Verdict
from torchmark.store import open_store
from torchmark.store.exchange import export_run
from torchmark.web.accounts import Accounts

ARTEFACT = "samples split into two clusters, 7.99 ms and 16 ms (40% slow): a scheduler artefact"


def ten_with_three_invalid() -> RunRecord:
    run = make_run()
    first = run.results[0]
    results = []
    for i in range(10):
        r = first.model_copy(update={"params": {"n": 1000 + i}})
        if i < 3:
            r = r.model_copy(update={"verdict": Verdict(level="invalid", reasons=[ARTEFACT])})
        results.append(r)
    return run.model_copy(update={"results": results})


def test_history_counts_ok_results_by_their_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: `ok/total 10/10` for a run with 3 invalid results.
    db = f"sqlite:///{tmp_path / 'h.db'}"
    path = tmp_path / "run.json"
    path.write_text(export_run(ten_with_three_invalid()))
    assert cli(capsys, "import", str(path), "--db", db)[0] == 0
    code, out, _ = cli(capsys, "history", "--db", db, "--json")
    row = json.loads(out)[0]
    assert code == 0 and (row["ok"], row["total"]) == (7, 10)
    assert " 7/10 " in cli(capsys, "history", "--db", db)[1]


def test_an_older_database_gets_each_results_verdict_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = open_store(str(db))
    store.save(ten_with_three_invalid())
    store.close()
    with sqlite3.connect(db) as conn:  # as schema 2 left it: no verdict recorded
        conn.execute("UPDATE results SET verdict = NULL")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    store = open_store(str(db))
    try:
        (summary,) = store.list_runs()
    finally:
        store.close()
    assert (summary.n_ok, summary.n_results) == (7, 10)
    with sqlite3.connect(db) as conn:
        kinds = sorted(k for (k,) in conn.execute("SELECT verdict FROM results"))
    assert kinds == ["invalid"] * 3 + ["ok"] * 7


def test_the_run_page_gives_each_verdict_its_reason(
    server: tuple[TestClient, str, Accounts],
) -> None:
    # Before: "status ok" beside "verdict invalid", and no reason.
    client, token, _ = server
    sent = client.post(
        "/api/v1/runs",
        content=body(ten_with_three_invalid()),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert sent.status_code == 201, sent.text
    page = client.get(f"/runs/{sent.json()['run_id']}").text
    rows = page.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == 10
    for row in rows[:3]:
        assert f"invalid: {ARTEFACT}" in row and ">ok<" not in row
    for row in rows[3:]:
        assert ">measured<" in row and ">ok<" in row


def test_placement_never_places_an_invalid_result(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    auth = {"Authorization": f"Bearer {token}"}
    assert client.post("/api/v1/runs", content=body(make_run()), headers=auth).status_code == 201
    rows = client.post("/api/v1/place", content=body(ten_with_three_invalid())).json()
    assert [r["rank"] is None for r in rows] == [True] * 3 + [False] * 7
    assert rows[0]["why"] == f"invalid: {ARTEFACT}"


def test_submit_dry_run_says_what_the_server_will_refuse_or_mark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.json"
    run = ten_with_three_invalid()
    wrong = run.results[3].model_copy(update={"status": "wrong", "reason": "NaN in the output"})
    run = run.model_copy(update={"results": [*run.results[:3], wrong, *run.results[4:]]})
    path.write_text(export_run(run))
    code, _, err = cli(capsys, "submit", str(path), "--dry-run")
    said = " ".join(err.split())
    assert code == 0
    assert "ranked: 6 results" in said
    assert "listed, never ranked: 4 results: add/seed n=1000 on cpu (invalid: samples" in said
    assert "add/seed n=1003 on cpu (WRONG: NaN in the output)" in said
    # above the bounds the whole run is refused: said before anything is sent
    over = make_run(pct_of_bw=130.0)
    path.write_text(export_run(over))
    _, _, err = cli(capsys, "submit", str(path), "--dry-run")
    assert "the server will refuse this run: results.0" in " ".join(err.split())


def test_a_result_with_no_samples_is_not_counted_as_ok() -> None:
    from torchmark.judge import verdicts

    empty = Result(workload="w", variant="v", device="cpu")
    assert verdicts.counted([empty]) == 0
