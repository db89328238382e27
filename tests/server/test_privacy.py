"""What a shared run never carries: the command line as typed (a store URL with its password),
paths and URLs in the config, short host and user names; and what the board never shows of
a run stored before the server removed them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from boardtest import body, doc, make_run
from clitest import cli
from torchmark.results import RunRecord
from torchmark.results.payloads import Part, RunPayload
from torchmark.store.exchange import export_run
from torchmark.web.accounts import Accounts
from torchmark.web.strip import prepare

SECRET = "S3cret"
COMMAND = f"torchmark run --db postgresql://tm:{SECRET}@dbhost/board --output /scratch/jd/x.json"


def leaky_run() -> RunRecord:
    run = make_run()
    run.command = COMMAND
    run.config = {
        "suite": "standard",
        "devices": ["cpu"],
        "threads": None,
        "cache_dir": "/scratch/jd/cache",
        "db": f"postgresql://tm:{SECRET}@dbhost/board",
    }
    run.results[0].notes = ["written by jd@vm to /scratch/jd/out", "see https://x.org/a?k=1"]
    run.payload = RunPayload(parts=[Part(command=COMMAND)])  # a resumed run keeps the command
    return run


def test_submit_sends_only_the_case_options_as_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.cli import submit

    monkeypatch.setattr(submit, "_identity", lambda: ("jd", "vm"))
    path = tmp_path / "run.json"
    path.write_text(export_run(leaky_run()), encoding="utf-8")
    code, out, err = cli(capsys, "submit", str(path), "--dry-run")
    assert code == 0, err
    for secret in (SECRET, "postgresql", "dbhost", "/scratch/jd", "jd@", "https://", "--db"):
        assert secret not in out, secret
    sent = json.loads(out)
    assert sent["config"] == {"suite": "standard", "devices": ["cpu"], "threads": None}
    assert "command" not in sent and "command" not in sent["payload"]["parts"][0]
    assert sent["results"][0]["notes"] == [
        "written by <redacted>@<redacted> to /scratch/<redacted>/out",
        "see <url>",
    ]
    # what was removed is said, and what is sent is exactly what --dry-run printed
    assert "command" in err and "config.cache_dir" in err and "config.db" in err


def test_short_names_are_scrubbed_where_they_name_a_host_or_user() -> None:
    out, _ = prepare(
        {"results": [{"notes": ["/scratch/jd/x", "ssh jd@vm", "vm:8000", "ran on a vm"]}]},
        ("jd", "vm"),
    )
    notes = out["results"][0]["notes"]
    assert notes[:3] == ["/scratch/<redacted>/x", "ssh <redacted>@<redacted>", "<redacted>:8000"]
    assert notes[3] == "ran on a vm"  # a plain word stays: a user named `a` must not eat text


def test_the_server_strips_a_command_itself(server: tuple[TestClient, str, Accounts]) -> None:
    """A client that sends the command anyway (an old torchmark, a script): never stored."""
    client, token, _ = server
    headers = {"Authorization": f"Bearer {token}"}
    r = client.post("/api/v1/runs", content=body(leaky_run()), headers=headers)
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    store = client.app.state.store  # type: ignore[attr-defined]
    kept = export_run(store.load(run_id))
    assert SECRET not in kept and "dbhost" not in kept and "cache_dir" not in kept
    for page in (f"/runs/{run_id}", f"/api/v1/runs/{run_id}", "/api/v1/results"):
        assert SECRET not in client.get(page).text, page


def test_a_command_stored_before_is_never_shown(server: tuple[TestClient, str, Accounts]) -> None:
    """Runs stored by an older server kept their command: every reader leaves it out."""
    client, _, accounts = server
    app = client.app
    store = app.state.store  # type: ignore[attr-defined]
    run = leaky_run()
    run_id = store.save(run)
    with accounts.engine.begin() as conn:
        accounts.record_in(conn, "old", run_id, "alice", "standard", "m1")
    pages = [f"/runs/{run_id}", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}?format=csv"]
    pages += ["/api/v1/results", "/api/v1/results?format=csv"]
    for page in pages:
        got = client.get(page)
        assert got.status_code == 200, page
        assert SECRET not in got.text and "postgresql://" not in got.text, page
    shown = json.loads(client.get(f"/api/v1/runs/{run_id}").text)
    assert shown["command"] == "" and "db" not in shown["config"]
    assert doc(make_run())["command"]  # the fixture run itself does carry one
