"""The leaderboard API in process: auth, validation, duplicates, 429, stripping, ranking."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from boardtest import body, doc, make_run
from torchmark.results import SCHEMA_VERSION
from torchmark.web.accounts import Accounts
from torchmark.web.strip import ENV_ALLOW, strip_document


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def stored(client: TestClient) -> list[dict[str, str]]:
    return list(client.get("/api/v1/runs").json())


def test_submit_needs_a_valid_active_token(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, accounts = server
    for headers in ({}, auth("tm_wrong"), {"Authorization": token}):
        r = client.post("/api/v1/runs", content=body(make_run()), headers=headers)
        assert r.status_code == 401, r.text
        assert "Bearer" in r.json()["detail"]
    accounts.revoke_token("alice")
    r = client.post("/api/v1/runs", content=body(make_run()), headers=auth(token))
    assert r.status_code == 401
    assert stored(client) == []


def test_tokens_keep_only_their_hash(server: tuple[TestClient, str, Accounts]) -> None:
    _, token, accounts = server
    with accounts.engine.connect() as conn:
        dump = "\n".join(str(row) for row in conn.exec_driver_sql("SELECT * FROM server_tokens"))
    assert token not in dump and "alice" in dump
    assert accounts.check_token(token) == "alice"


def test_a_run_is_stored_once_and_served_back_stripped(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    run = make_run()
    first = client.post("/api/v1/runs", content=body(run), headers=auth(token))
    assert first.status_code == 201, first.text
    again = client.post("/api/v1/runs", content=body(run), headers=auth(token))
    assert again.status_code == 200
    assert again.json() == {"run_id": first.json()["run_id"], "duplicate": True}
    assert len(stored(client)) == 1
    text = client.get(f"/api/v1/runs/{first.json()['run_id']}").text
    for secret in ("alice", "GPU-1234", "SN99", "AWS_SECRET", "4242", "0123456789abcdef"):
        assert secret not in text, secret
    back = json.loads(text)
    assert back["environment"]["devices"]["cpu"]["model"] == "Test CPU 9000"
    assert back["environment"]["env_vars"] == {"OMP_NUM_THREADS": "8"}
    assert back["results"][0]["samples_s"] == run.results[0].samples_s


def test_bad_submissions_get_one_clear_reason_and_store_nothing(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    future = doc(make_run()) | {"schema_version": 99}
    negative = doc(make_run())
    negative["results"][0]["samples_s"][3] = -1.0
    cases = {
        b"{not json": (422, "not valid JSON"),
        b"[1, 2]": (422, "not a JSON object"),
        json.dumps({"hello": 1}).encode(): (422, "no 'schema_version' field"),
        json.dumps(future).encode(): (422, f"reads up to version {SCHEMA_VERSION}"),
        json.dumps(negative).encode(): (422, "results.0.samples_s: sample 3 is -1.0"),
        # NaN is no JSON: python's json writes it, the server's parser must refuse it
        body(make_run()).replace(b'"samples_s": [\n', b'"samples_s": [\nNaN, '): (
            422,
            "NaN is no number a run holds",
        ),
        body(make_run(pct_of_bw=120)): (422, "120 % of its run's measured ceiling"),
    }
    for payload, (code, reason) in cases.items():
        r = client.post("/api/v1/runs", content=payload, headers=auth(token))
        assert r.status_code == code, (reason, r.text)
        assert reason in r.json()["detail"], r.json()["detail"]
        assert "\n" not in r.json()["detail"]
    big = b" " * (8 * 2**20 + 1)
    assert client.post("/api/v1/runs", content=big, headers=auth(token)).status_code == 413
    assert stored(client) == []
    ok = client.post("/api/v1/runs", content=body(make_run(pct_of_bw=104)), headers=auth(token))
    assert ok.status_code == 201, ok.text


def test_rate_limit_answers_429_per_token(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, accounts = server
    for i in range(5):
        r = client.post("/api/v1/runs", content=body(make_run(scale=1 + i)), headers=auth(token))
        assert r.status_code == 201
    r = client.post("/api/v1/runs", content=body(make_run(scale=9)), headers=auth(token))
    assert r.status_code == 429 and "Retry-After" in r.headers
    other = accounts.create_token("bob")
    r = client.post("/api/v1/runs", content=body(make_run(scale=9)), headers=auth(other))
    assert r.status_code == 201
    assert len(stored(client)) == 6


def test_hostile_ids_and_filters_do_nothing(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, _ = server
    client.post("/api/v1/runs", content=body(make_run()), headers=auth(token))
    hostile = make_run(scale=3)
    hostile.run_id = "../<script>?x"
    r = client.post("/api/v1/runs", content=body(hostile), headers=auth(token))
    assert r.status_code == 201 and r.json()["run_id"].replace("-", "").isalnum()
    for path in ("/api/v1/runs/..%2F..%2Fetc", "/api/v1/runs/latest", "/runs/x' OR 1=1 --"):
        assert client.get(path).status_code == 404, path
    r = client.get("/api/v1/results", params={"workload": "add' OR '1'='1"})
    assert r.status_code == 200 and r.json() == []
    assert len(client.get("/api/v1/results", params={"workload": "add"}).json()) == 2
    assert client.get("/api/v1/results", params={"format": "xml"}).status_code == 422
    assert len(stored(client)) == 2


def test_ranking_pools_machines_and_shares_ranks_it_cannot_tell_apart(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    runs = [
        make_run("Fast CPU", 1.0),
        make_run("Fast CPU", 1.0005),  # same machine again: pools into one row
        make_run("Twin CPU", 1.001),  # within noise of the fast one: a shared rank
        make_run("Slow CPU", 2.0),
        make_run("Broken CPU", 0.1, verdict="invalid"),  # stored, never ranked
    ]
    for run in runs:
        r = client.post("/api/v1/runs", content=body(run), headers=auth(token))
        assert r.status_code == 201, r.text
    board = client.get(
        "/api/v1/leaderboard", params={"workload": "add", "variant": "seed", "params": '{"n":1000}'}
    ).json()
    assert [(row["model"], row["rank"], len(row["runs"])) for row in board] == [
        ("Fast CPU", "=1", 2),
        ("Twin CPU", "=1", 1),
        ("Slow CPU", "3", 1),
    ]
    assert board[1]["vs_above"] in ("same", "can't tell")
    assert board[2]["vs_above"].startswith("slower")
    lo, hi = board[0]["throughput_ci"]
    assert lo <= board[0]["throughput"] <= hi
    assert len(stored(client)) == 5
    fast = client.get(f"/machines/{board[0]['machine']}")
    assert fast.status_code == 200 and fast.text.count('href="/runs/') == 2
    assert client.get("/machines/nope").status_code == 404
    assert f'href="/machines/{board[0]["machine"]}"' in client.get("/").text


def test_pages_escape_what_runs_carry(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, _ = server
    payload = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    r = client.post(
        "/api/v1/runs", content=body(make_run(payload, note=payload)), headers=auth(token)
    )
    run_id = r.json()["run_id"]
    for page in ("/", f"/runs/{run_id}"):
        html = client.get(page)
        assert html.status_code == 200
        assert "<script>alert" not in html.text and "<img src=x" not in html.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html.text
        csp = html.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
    index = client.get("/").text
    assert f'href="/runs/{run_id}"' in index and "/static/board.js" in index
    assert client.get("/static/board.js").status_code == 200
    assert client.get("/api/v1/openapi.json").json()["paths"]["/api/v1/runs"]


def test_private_server_needs_a_token_to_read(tmp_path: object) -> None:
    from torchmark.web.app import create_app

    app = create_app(f"sqlite:///{tmp_path}/p.db", private=True)
    token = app.state.accounts.create_token("team")
    client = TestClient(app)
    assert client.get("/api/v1/runs").status_code == 401
    assert client.get("/").status_code == 401
    assert client.get("/api/v1/runs", headers=auth(token)).status_code == 200


def test_strip_removes_identifiers_and_keeps_hardware() -> None:
    out, removed = strip_document(doc(make_run()), ("alice-laptop", "alice"))
    env = out["environment"]
    assert "host" not in env and "pid" not in env and "fingerprint" not in out
    assert env["devices"]["cpu"] == {"kind": "cpu", "model": "Test CPU 9000", "physical_cores": 8}
    assert out["command"] == "torchmark run --output ~/runs/x.json"
    assert "environment.env_vars.HOME" in removed and "environment.host" in removed
    assert "alice" not in json.dumps(out)


def test_every_allowed_environment_variable_is_kept() -> None:
    # strip's key rule runs on the kept env_vars too: no allowed name may be a dropped key
    env = {name: "1" for name in ENV_ALLOW}
    out, removed = strip_document({"environment": {"env_vars": env}})
    assert out == {"environment": {"env_vars": env}} and removed == []
    assert strip_document({"environment": {"env_vars": {"uuid": "x"}}})[1] == [
        "environment.env_vars.uuid"
    ]


def test_front_page_opens_on_the_seed_question(server: tuple[TestClient, str, Accounts]) -> None:
    client, token, _ = server
    empty = client.get("/").text
    assert "Nvidia 3090 GPU" in empty and "(unverified)" in empty
    seed = make_run("Seed CPU")
    seed.results[0].workload, seed.results[0].variant = "seed-add", "as-published"
    for run in (make_run(), seed):
        assert client.post("/api/v1/runs", content=body(run), headers=auth(token)).status_code
    page = client.get("/").text
    assert "Machines ranked: seed-add as-published" in page
    assert "Seed CPU" in page and "Nvidia 3090 GPU" in page
    other = client.get("/", params={"case": '["add", "seed", "{\\"n\\": 1000}"]'}).text
    assert "Machines ranked: add seed n=1000" in other and "Nvidia 3090 GPU" not in other


def test_an_accelerator_row_shows_its_speedup_over_the_same_machines_cpu(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    run = make_run("Box CPU", 4.0)
    gpu = run.results[0].model_copy(
        update={"device": "cuda:0", "samples_s": [s / 4 for s in run.results[0].samples_s]}
    )
    run.results.append(gpu)
    run.environment["devices"]["cuda:0"] = {"kind": "cuda", "model": "Box GPU"}
    assert client.post("/api/v1/runs", content=body(run), headers=auth(token)).status_code == 201
    board = client.get(
        "/api/v1/leaderboard", params={"workload": "add", "variant": "seed", "params": '{"n":1000}'}
    ).json()
    assert [(row["model"], row["rank"]) for row in board] == [("Box GPU", "1"), ("Box CPU", "2")]
    assert board[0]["speedup"].startswith("4x (") and board[1]["speedup"] == ""
    assert "4x (" in client.get("/").text


def test_place_a_run_among_the_submitted_machines(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    for model, scale in (("A", 1.0), ("B", 2.0), ("C", 4.0)):
        run = make_run(model, scale)
        assert client.post("/api/v1/runs", content=body(run), headers=auth(token)).status_code
    placed = client.post("/api/v1/place", content=body(make_run("mine", 3.0))).json()
    assert [(p["rank"], p["machines"], round(p["faster_than_pct"])) for p in placed] == [(3, 3, 33)]
    assert len(stored(client)) == 3
    assert client.post("/api/v1/place", content=b"{").status_code == 422


def test_a_submitted_run_is_placed_among_the_others_never_against_itself(
    server: tuple[TestClient, str, Accounts],
) -> None:
    # The README walk: `compare RUN --server URL` after submitting RUN said "rank 1 of 2
    # (the server's 1 machine and this run), faster than 0 % of them": RUN against itself
    client, token, _ = server
    mine, other = make_run("mine", 1.0), make_run("B", 2.0)
    sent = client.post("/api/v1/runs", content=body(mine), headers=auth(token))
    (alone,) = client.post("/api/v1/place", content=body(mine)).json()
    assert (alone["machines"], alone["rank"], alone["left_out"]) == (0, 1, sent.json()["run_id"])
    assert client.post("/api/v1/runs", content=body(other), headers=auth(token)).status_code == 201
    (placed,) = client.post("/api/v1/place", content=body(mine)).json()
    assert (placed["rank"], placed["machines"], round(placed["faster_than_pct"])) == (1, 1, 100)
    # the board itself still ranks both, and a run not submitted is placed among all
    (again,) = client.post("/api/v1/place", content=body(make_run("new", 1.5))).json()
    assert (again["rank"], again["machines"], "left_out" in again) == (2, 2, False)
    # the same machine's next run, not submitted: placed among the other machines only
    (next_run,) = client.post("/api/v1/place", content=body(make_run("mine", 0.9))).json()
    assert (next_run["rank"], next_run["machines"], next_run["machine_left_out"]) == (1, 1, True)
    assert "left_out" not in next_run


def test_a_prediction_is_refused_and_nothing_is_stored(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """A prediction holds no measurement: the board refuses it in one line, naming why."""
    from torchmark.results.payloads import PredictPayload, PredictTarget

    client, token, _ = server
    run = make_run().model_copy(update={"kind": "predict", "results": []})
    run.payload = PredictPayload(
        target=PredictTarget(name="h100-quick", source="committed reference run", side="gpu",
                             device="cuda:0", model="NVIDIA H100 80GB HBM3")
    )  # fmt: skip
    r = client.post("/api/v1/runs", content=body(run), headers=auth(token))
    assert r.status_code == 422
    assert "is a prediction of h100-quick, not a measurement" in r.json()["detail"]
    assert stored(client) == []
