"""The server's own plausibility checks, independent of what the client sends: forged numbers
were accepted into the standard division and shown at rank 1 (1e9 TFLOP/s on a Xeon, 1 ns
samples, 1e15 calls per sample); now each is refused with 422 naming the result and the
bound, or (work that is not its case's) stored, labelled and never ranked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from boardtest import body, builtin_run, doc, make_run
from torchmark import reference
from torchmark.store.exchange import export_run
from torchmark.web import plausible
from torchmark.web.accounts import Accounts

MATMUL = {"workload": "matmul", "variant": "float32", "params": '{"n": 512}'}


def send(server: tuple[TestClient, str, Accounts], payload: bytes) -> Any:
    client, token, _ = server
    return client.post(
        "/api/v1/runs", content=payload, headers={"Authorization": f"Bearer {token}"}
    )


def refused(server: tuple[TestClient, str, Accounts], payload: bytes, *said: str) -> None:
    r = send(server, payload)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "\n" not in detail
    for words in said:
        assert words in detail, detail
    assert server[0].get("/api/v1/runs").json() == []


def forged(mutate: Any, run: Any = None) -> bytes:
    d = doc(run or builtin_run())
    mutate(d, d["results"][0])
    return json.dumps(d).encode()


def test_an_honest_builtin_case_is_stored_and_ranked(
    server: tuple[TestClient, str, Accounts],
) -> None:
    assert send(server, body(builtin_run())).status_code == 201
    board = server[0].get("/api/v1/leaderboard", params=MATMUL).json()
    assert [row["model"] for row in board] == ["Xeon Test CPU"]


def test_a_rate_above_the_devices_peak_is_refused(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """work.flops=1e18 with 1 ms samples: 1e9 TFLOP/s on an 8-core Xeon (accepted and ranked
    first before)."""

    def flops(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["work"]["flops"] = 1e18

    refused(
        server,
        forged(flops),
        "results.0 (matmul float32 on cpu)",
        "above 1.5x",
        "not in the hardware catalogue",
    )
    # also where the case is not in the catalogue: the rate bound holds for every case
    unknown = make_run()
    unknown.results[0].work = unknown.results[0].work.model_copy(update={"flops": 1e18})
    refused(server, body(unknown), "results.0 (add seed on cpu)", "FLOP/s")


@pytest.mark.parametrize(
    ("samples", "said"),
    [([1e-9] * 12, "took 1e-09 s"), ([5e-324] * 12, "no timer resolves less than 1e-06 s")],
    ids=["1 ns", "5e-324 s"],
)
def test_samples_below_a_microsecond_are_refused(
    server: tuple[TestClient, str, Accounts], samples: list[float], said: str
) -> None:
    def tiny(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["samples_s"] = samples

    refused(server, forged(tiny), said)


@pytest.mark.parametrize("calls", [10**15, 10**400, 0])
def test_calls_per_sample_are_bounded(server: tuple[TestClient, str, Accounts], calls: int) -> None:
    def many(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["calls_per_sample"] = calls

    # past 64 bits: refused as the JSON is read, before any field is
    refused(server, forged(many), "calls" if calls < 2**63 else "fit 64 bits")


def test_a_sample_of_many_calls_outlasting_its_rule_is_refused(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """Samples of several calls are grouped to ~10 ms: one of 100 calls taking 300 s is
    above the quick rule's 2 s time-out."""

    def slow(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["calls_per_sample"] = 100
        r["rule"] = "adaptive(min_samples=10, min_time_s=0.2, target=0.01, max_time_s=2.0)"
        r["samples_s"] = [3.0] * 12

    refused(server, forged(slow), "above its stopping rule's 2 s time-out")


def test_work_that_is_not_the_cases_is_stored_but_never_ranked(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """The server derives a built-in case's work from its catalogue: declaring 10x the
    FLOPs (still under the device's peak) stores the run, labelled, and ranks nothing."""

    def inflated(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["work"]["flops"] *= 10

    r = send(server, forged(inflated))
    assert r.status_code == 201, r.text
    client = server[0]
    assert client.get("/api/v1/leaderboard", params=MATMUL).json() == []
    page = client.get(f"/runs/{r.json()['run_id']}").text
    assert "unverified: declares work flops=2.68435e+09" in page
    assert "not this case&#39;s flops=2.68435e+08" in page
    (placed,) = client.post("/api/v1/place", content=forged(inflated)).json()
    assert placed["rank"] is None and placed["why"].startswith("unverified: declares work")


@pytest.mark.parametrize(
    ("created", "said"),
    [(5, "created_utc"), ("2999-01-01T00:00:00Z", "is not a time a run was made")],
    ids=["5", "2999"],
)
def test_created_utc_must_be_a_time_a_run_was_made(
    server: tuple[TestClient, str, Accounts], created: Any, said: str
) -> None:
    def when(d: dict[str, Any], r: dict[str, Any]) -> None:
        d["created_utc"] = created

    refused(server, forged(when), said)


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("environment", "devices"), "cpu", "environment.devices: an object is needed"),
        (("environment", "devices", "cpu"), "Xeon", "environment.devices.cpu: an object"),
        (("results", 0, "calls_per_sample"), "12", "calls_per_sample"),
        (("results", 0, "calls_per_sample"), 12.5, "calls_per_sample"),
        (("results", 0, "work", "flops"), "1e18", "work.flops"),
        (("payload", "parts"), [{"results": "3"}], "payload.parts.0.results"),
    ],
    ids=[
        "devices as a string",
        "a device as a string",
        "calls as text",
        "calls 12.5",
        "text",
        "a payload's count as text",
    ],
)
def test_types_are_strict(
    server: tuple[TestClient, str, Accounts], path: tuple[Any, ...], value: Any, said: str
) -> None:
    d = doc(builtin_run())
    where: Any = d
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    refused(server, json.dumps(d).encode(), said)


def test_deep_nesting_is_refused_also_by_place(server: tuple[TestClient, str, Accounts]) -> None:
    deep = doc(builtin_run())
    deep["extra"] = json.loads("[" * 500 + "]" * 500)
    payload = json.dumps(deep).encode()
    refused(server, payload, "nests deeper than 32 levels")
    r = server[0].post("/api/v1/place", content=payload)
    assert r.status_code == 422 and "nests deeper" in r.json()["detail"]
    inside = b'{"a": "' + b"[" * 5000 + b'"}'  # brackets inside a string are text
    assert plausible.too_deep(inside) is None


@pytest.mark.parametrize("name", ["h100-quick", "h200-quick"])
def test_the_committed_reference_runs_pass(name: str) -> None:
    """Real GPU runs (H100, H200) within the datasheet bounds, every built-in case's work
    the catalogue's."""
    run = reference.load(name).run
    assert run is not None
    assert plausible.check(run) is None
    assert plausible.unverified(run) == {}


def test_the_loops_call_bound_is_the_servers() -> None:
    from torchmark.timing.loop import MAX_CALLS_PER_SAMPLE

    assert plausible.MAX_CALLS_PER_SAMPLE == MAX_CALLS_PER_SAMPLE


def test_a_run_stored_before_with_unverified_work_is_not_ranked(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """The index written at start for submissions made before (backfill) leaves it out too."""
    from torchmark.web import cases

    client, _, accounts = server
    app: Any = client.app
    run = builtin_run()
    run.results[0].work = run.results[0].work.model_copy(update={"items": 7.0})
    run_id = app.state.store.save(run)
    with accounts.engine.begin() as conn:
        accounts.record_in(conn, "old", run_id, "alice", "standard", "m1")
    assert cases.backfill(accounts.engine, app.state.store) == 1
    assert client.get("/api/v1/leaderboard", params=MATMUL).json() == []
    assert export_run(run)  # the run itself is kept as it was sent


# A matmul of 1 ms a call whose samples snapped to the scheduler's slices while another
# process used 1.5 of 2 cores (2 torch threads): torchmark's own judge calls it invalid.
SNAPPED = [1e-3] * 6 + [8e-3] * 8 + [16e-3] * 4
BUSY = {"other_cores": 1.5, "logical_cores": 2, "torch_threads": 2}


def snapped(level: str, reasons: list[str]) -> bytes:
    def edit(d: dict[str, Any], r: dict[str, Any]) -> None:
        r["samples_s"], r["telemetry"] = SNAPPED, BUSY
        r["verdict"] = {"level": level, "reasons": reasons}

    return forged(edit)


def stored_verdict(server: tuple[TestClient, str, Accounts], run_id: str) -> dict[str, Any]:
    run = server[0].get(f"/api/v1/runs/{run_id}").json()
    return dict(run["results"][0]["verdict"])


def test_a_verdict_the_client_cleaned_is_judged_again(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """Before: a client's ``ok`` beside samples that its own judge calls a scheduler artefact
    was stored as ok and ranked first."""
    sent = send(server, snapped("ok", []))
    assert sent.status_code == 201, sent.text
    v = stored_verdict(server, sent.json()["run_id"])
    assert v["level"] == "invalid" and "scheduler artefact" in v["reasons"][0], v
    assert server[0].get("/api/v1/leaderboard", params=MATMUL).json() == []


def test_the_server_never_clears_what_the_client_found(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """A client as strict as the server keeps its verdict as sent: its own reason, and no
    second wording of the same finding (an older client's words beside this server's)."""
    mine = "invalid: measured while the fans failed"
    sent = send(server, snapped("invalid", [mine]))
    assert sent.status_code == 201, sent.text
    assert stored_verdict(server, sent.json()["run_id"]) == {"level": "invalid", "reasons": [mine]}


def test_a_run_sent_again_is_stored_once_whatever_the_server_judged(
    server: tuple[TestClient, str, Accounts], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twin is what was sent: a run stored by a server that did not judge verdicts
    again (or judged them otherwise) and sent again is the same run, stored once."""
    payload = snapped("ok", [])
    with monkeypatch.context() as older:
        older.setattr(plausible, "rejudged", lambda run: run)
        first = send(server, payload)
    assert first.status_code == 201, first.text
    again = send(server, payload)
    assert again.status_code == 200 and again.json()["duplicate"] is True, again.text
    assert again.json()["run_id"] == first.json()["run_id"]


def test_an_honest_verdict_is_stored_as_sent() -> None:
    from torchmark.judge.validity import judge

    run = builtin_run()
    r = run.results[0] = run.results[0].model_copy(update={"samples_s": SNAPPED, "telemetry": BUSY})
    r.verdict = judge(r)
    again = plausible.rejudged(run)
    assert again.results[0].verdict == r.verdict and again.results[0].verdict.level == "invalid"
    assert again.verdict is not None and again.verdict.level == "invalid"


def test_submit_dry_run_says_the_verdict_the_server_will_judge(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from clitest import cli

    path = tmp_path / "run.json"
    path.write_bytes(snapped("ok", []))
    code, _, err = cli(capsys, "submit", str(path), "--dry-run")
    said = " ".join(err.split())
    assert code == 0 and "ranked: 1 result" not in said.replace("never ranked", "")
    assert "listed, never ranked: 1 result: matmul/fp32 n=512 on cpu (invalid: samples" in said


def test_submit_dry_run_refuses_an_environment_the_server_refuses(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server refuses `"devices": "cpu"` (422, environment_shape) before its shared rule
    (``serving.refusal``); the dry-run used only that rule, and its plausibility check
    called ``.get`` on the string: an AttributeError traceback, not the server's line."""
    from clitest import cli

    d = doc(builtin_run())
    d["environment"]["devices"] = "cpu"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    _, _, err = cli(capsys, "submit", str(path), "--dry-run")
    said = " ".join(err.split())
    assert "Traceback" not in err and "AttributeError" not in said
    assert "the server will refuse this run: environment.devices: an object is needed" in said
