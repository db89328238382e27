"""User-model cases on the board are keyed by the model's fingerprint (parameter count,
FLOPs per item, input shape), never its file name: two people's `model.py:make_model`
ranked against each other; and a tune search is one case per device (its pick), not one
per candidate (15 "cases" from one submission)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from boardtest import body
from torchmark.results import RunRecord
from torchmark.results.payloads import Recommendation
from torchmark.store.exchange import import_run
from torchmark.web.accounts import Accounts
from torchmark.web.admission import fingerprint

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
Server = tuple[TestClient, str, Accounts]


def model_run(spec: str, parameters: int, torch: str) -> RunRecord:
    run = import_run(RUNS / "v1-model.json")
    run.results = [r.model_copy(update={"workload": spec}) for r in run.results]
    run.payload.model = run.payload.model.model_copy(  # type: ignore[union-attr]
        update={"name": spec, "parameters": parameters}
    )
    run.environment["software"]["torch"] = torch
    run.finished_utc = run.created_utc + timedelta(hours=1)
    return run


def test_user_models_rank_by_fingerprint_not_file_name(server: Server) -> None:
    client, token, _ = server
    auth = {"Authorization": f"Bearer {token}"}
    alice = model_run("model.py:make_model", 24330, "2.13.1")
    bob = model_run("model.py:make_model", 99999, "2.13.2")  # same name, another model
    carol = model_run("nets/cnn.py:build", 24330, "2.13.3")  # alice's model, renamed
    assert fingerprint(alice) == fingerprint(carol) != fingerprint(bob)
    assert "24,330 params" in str(fingerprint(alice))
    for run in (alice, bob, carol):
        sent = client.post("/api/v1/runs", content=body(run), headers=auth)
        assert sent.status_code == 201, sent.text
    # alice's and carol's runs are one model's results; bob's are another's
    ids = {}
    for run in (alice, bob):
        got = client.get("/api/v1/results", params={"workload": fingerprint(run)}).json()
        ids[run.payload.model.parameters] = {r["run_id"] for r in got}  # type: ignore[union-attr]
    assert len(ids[24330]) == 2 and len(ids[99999]) == 1 and not ids[24330] & ids[99999]
    spec = client.get(f"/api/v1/runs/{min(ids[99999])}").json()["results"][0]["extra"]["spec"]
    assert spec == "model.py:make_model"  # the file name is kept, as the run's own words


def test_a_tune_search_is_one_case_per_device(server: Server) -> None:
    client, token, _ = server
    run = import_run(RUNS / "v1-tune.json")
    base = run.results[0]
    names = [f"candidate {i}" for i in range(14)]
    run.results = [base] + [base.model_copy(update={"variant": n}) for n in names]
    run.payload.recommendation = {  # type: ignore[union-attr]
        "cpu": Recommendation(name="candidate 3", speedup=1.5)
    }
    run.finished_utc = run.created_utc + timedelta(hours=1)
    sent = client.post(
        "/api/v1/runs", content=body(run), headers={"Authorization": f"Bearer {token}"}
    )
    assert sent.status_code == 201, sent.text
    listed = [
        line
        for line in client.get("/?division=custom").text.split("<option")
        if "FLOP/item" in line
    ]
    assert len(listed) == 1 and "tuned" in listed[0], listed
    stored = client.get(f"/api/v1/runs/{sent.json()['run_id']}").json()
    picked = [r for r in stored["results"] if r["variant"] == "tuned"]
    assert len(stored["results"]) == 15 and len(picked) == 1
    assert "tune's pick: candidate 3" in picked[0]["notes"]
