"""Serving runs (``torchmark serving``) on the leaderboard: stored and shown with their
verdict, max rate within the p99 bound per device and the bound; a division of their own,
never ranked against a case's throughput; ranked among serving runs of the same model,
inputs and bound only where the verdict allows; and what the client sent bounded or derived
again by the server. (tests/web/test_board_serving.py is the board *serving pages* under
load; these are serving *runs*.)"""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from boardtest import body, make_run, serving
from torchmark.kinds.serving import stats
from torchmark.results import RunRecord, Verdict
from torchmark.results.serving import FleetDoc, PointDoc, read, write
from torchmark.web.app import create_app

FIXTURE = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"


def point(rate: float, bound_s: float, within: bool) -> PointDoc:
    """A load point at ``rate`` whose kept requests (0.72 s of them: 3 windows of 0.2 s and
    the Poisson's 20 %) all finish within the bound, or whose tail is over it."""
    n = int(rate * 0.72) + 1
    rng = np.random.default_rng(int(rate))
    top = 0.4 * bound_s if within else 3 * bound_s
    us = np.rint(rng.uniform(100e-6, top, n) * 1e6).astype(int)
    lat = stats.Latencies.of(us * 1e-6)
    tail = {"p50_s": lat.p50, "p90_s": lat.p90, "p99_s": lat.p99, "p999_s": lat.p999}
    return PointDoc(
        rate=rate, max_batch=8, max_wait_s=0.0, outcome="within" if within else "over", why="",
        window_p99_s=[lat.p99] * 3, window_rate=[rate] * 3, n=n, achieved_rate=rate,
        latency_us=[int(x) for x in us], **tail,
    )  # fmt: skip


def serving_run(
    cpu: str = "Alpha CPU",
    best: float = 1000.0,
    top: float | None = 1100.0,
    bound_s: float = 0.05,
    level: str = "ok",
    model: str = "simplenet",
) -> RunRecord:
    """A serving run on make_run's machine (named ``cpu``): within the bound at ``best``
    req/s, over it at ``top``; its stored answers say nothing (the server derives them)."""
    run = RunRecord.model_validate_json(FIXTURE.read_text())
    run.environment = make_run(cpu).environment
    run.finished_utc = run.created_utc + timedelta(seconds=120)
    run.verdict = Verdict(level=level)  # type: ignore[arg-type]
    p = read(run)
    assert p is not None
    p = p.model_copy(deep=True)
    p.model, p.bound_s, p.answers, p.verdict = model, bound_s, [], ""
    points = [point(best, bound_s, True)]
    if top is not None:
        points.append(point(top, bound_s, False))
    p.fleets = [FleetDoc(device="cpu", label="cpu", processes=2, threads=1, points=points)]
    write(run, p)
    return run


@pytest.fixture
def board(tmp_path: Path) -> tuple[TestClient, dict[str, str]]:
    app = create_app(f"sqlite:///{tmp_path / 'b.db'}")
    token = app.state.accounts.create_token("t")
    return TestClient(app), {"Authorization": f"Bearer {token}"}


def submit(client: TestClient, headers: dict[str, str], run: RunRecord | bytes) -> Any:
    data = run if isinstance(run, bytes) else body(run)
    return client.post("/api/v1/runs", content=data, headers=headers)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&lt;", "<")


def test_a_serving_run_is_stored_and_shown_with_its_verdict_rate_and_bound(
    tmp_path: Path,
) -> None:
    """Through uvicorn on loopback, as `torchmark submit` sends it."""
    app = create_app(f"sqlite:///{tmp_path / 'l.db'}")
    token = app.state.accounts.create_token("t")
    with serving(app) as url:
        from torchmark.cli.submit import post

        answer = post(url, token, body(serving_run()))
        assert answer["division"] == "serving" and answer["why_custom"] == []
        run_id = answer["run_id"]
        with urllib.request.urlopen(f"{url}/runs/{run_id}", timeout=60) as r:
            page = text(r.read().decode())
        with urllib.request.urlopen(f"{url}/serving", timeout=60) as r:
            board_page = text(r.read().decode())
    assert "Division: serving" in page
    assert "Serving: simplenet (float32[1, 1000]) within p99 <= 50 ms" in page
    assert "Alpha CPU (cpu) 1,000-1,100" in page and "2 x 1, batch <= 8, wait 0 ms" in page
    assert "Verdict: at 1,000 req/s within 50 ms: cpu x 1" in page  # the run's --rate 1000
    assert "simplenet (float32[1, 1000]) within p99 <= 50 ms" in board_page
    row = board_page[board_page.index("vs next faster") :]
    assert row.startswith("vs next faster 1 Alpha CPU (cpu, machine Alpha CPU")
    assert f"{run_id} 1,000-1,100 19.7 ms 2 x 1, batch <= 8, wait 0 ms ok" in row


def test_serving_runs_are_never_ranked_with_a_cases_throughput(board: Any) -> None:
    client, headers = board
    assert submit(client, headers, make_run("Case CPU")).status_code == 201
    assert submit(client, headers, serving_run()).status_code == 201
    runs = client.get("/api/v1/runs").json()
    assert sorted(r["division"] for r in runs) == ["serving", "standard"]
    case = {"workload": "add", "variant": "seed", "params": '{"n": 1000}'}
    rows = client.get("/api/v1/leaderboard", params=case).json()
    assert [r["model"] for r in rows] == ["Case CPU"]
    moved = client.get("/?division=serving", follow_redirects=False)
    assert moved.status_code == 301 and moved.headers["location"] == "/serving"
    assert 'href="/serving">Serving runs</a>\n(1)' in client.get("/").text
    assert client.get("/api/v1/results").json() == [
        r for r in client.get("/api/v1/results").json() if r["workload"] == "add"
    ]


def test_ranked_among_serving_runs_of_one_bound_where_the_verdict_allows(board: Any) -> None:
    client, headers = board
    runs = {
        "Slow CPU": serving_run("Slow CPU", 400.0, 440.0),
        "Fast CPU": serving_run("Fast CPU", 2000.0, 2200.0),
        "Close CPU": serving_run("Close CPU", 2100.0, 2300.0),  # brackets overlap Fast's
        "Bad CPU": serving_run("Bad CPU", 9000.0, 9900.0, level="invalid"),
        "Never CPU": serving_run("Never CPU", 100.0, None, bound_s=0.05),
        "Other bound": serving_run("Other CPU", 5000.0, 5500.0, bound_s=0.01),
    }
    none = runs["Never CPU"]  # no point within the bound at all
    p = read(none)
    assert p is not None
    p.fleets[0].points = [point(100.0, 0.05, False)]
    for run in runs.values():
        assert submit(client, headers, run).status_code == 201
    groups = client.get("/api/v1/serving").json()
    assert [(g["model"], g["p99_bound_s"]) for g in groups] == [
        ("simplenet", 0.01),
        ("simplenet", 0.05),
    ]
    assert [(r["rank"], r["model"]) for r in groups[0]["rows"]] == [("1", "Other CPU")]
    rows = [(r["rank"], r["model"], r["verdict"]) for r in groups[1]["rows"]]
    assert rows == [
        ("=1", "Close CPU", "ok"),
        ("=1", "Fast CPU", "ok"),
        ("3", "Slow CPU", "ok"),
        (None, "Bad CPU", "invalid"),  # its run's verdict: listed, never ranked
        (None, "Never CPU", "skipped"),  # no rate within the bound: nothing to rank
    ]
    said = {r["model"]: r for r in groups[1]["rows"]}
    assert said["Fast CPU"]["vs_above"] == "can't tell: the brackets overlap"
    assert said["Slow CPU"]["vs_above"].startswith("slower: over the bound at 440/s")
    assert said["Never CPU"]["max_rate"] is None
    page = text(client.get("/serving").text)
    assert "— Bad CPU (cpu" in page and "invalid; not ranked" in page


def test_no_row_is_ranked_below_a_row_it_cannot_be_told_from() -> None:
    """Brackets B 150-160, C 120-130, A 100-200: A overlaps both, so it shares B's rank; C
    is below B alone, whose bracket lies wholly above its own. Comparing each row with the
    row above only read B 1, C =2, A =2: A ranked below B, which it cannot be told from."""
    from torchmark.web.serving import board as serving_board
    from torchmark.web.serving import rederive

    made = [("B CPU", 150.0, 160.0), ("C CPU", 120.0, 130.0), ("A CPU", 100.0, 200.0)]
    (g,) = serving_board([(rederive(serving_run(n, best, top)), n) for n, best, top in made])
    assert [(r.rank, r.model) for r in g.rows] == [("=1", "B CPU"), ("=1", "A CPU"), ("2", "C CPU")]
    said = {r.model: r.vs_above for r in g.rows}
    assert said == {
        "B CPU": "",
        "A CPU": "can't tell: the brackets overlap",
        "C CPU": "can't tell from the row above (the brackets overlap); slower than the row "
        "higher up: over the bound at 130/s, which it serves",
    }


def test_the_pages_rank_rule_is_true_of_the_rows_it_ranks(board: Any) -> None:
    """The page said "no device is ranked below one it cannot be told from" above a table
    where C (120-130) is ranked 2 below A (100-200, =1), which it overlaps: no rank can
    promise that (overlap is not transitive). What it promises now holds of every pair: a
    device ranked below another has more devices surely faster than it."""
    client, headers = board
    made = {"B CPU": (150.0, 160.0), "C CPU": (120.0, 130.0), "A CPU": (100.0, 200.0)}
    for name, (best, top) in made.items():
        assert submit(client, headers, serving_run(name, best, top)).status_code == 201
    page = text(client.get("/serving").text)
    assert "ranked below one it cannot be told from" not in page
    assert "ranked below another only where more devices are surely faster than it" in page
    (g,) = client.get("/api/v1/serving").json()
    rank = {r["model"]: int(r["rank"].lstrip("=")) for r in g["rows"]}
    faster = {x: sum(made[o][0] > made[x][1] for o in made) for x in made}  # wholly above
    assert all(faster[x] > faster[y] for x in made for y in made if rank[x] > rank[y])
    assert rank["C CPU"] > rank["A CPU"]  # though they overlap: the page must not deny it


def test_the_server_derives_the_answers_from_the_points(board: Any) -> None:
    client, headers = board
    run = serving_run()
    p = read(run)
    assert p is not None
    p.verdict = "cpu serves a million requests/s"  # the client's claims: not taken
    doc = json.loads(body(run))
    doc["payload"]["serving"]["answers"] = [
        {"device": "cpu", "label": "cpu", "max_rate": 1e6, "flags": [], "sentence": "fast"}
    ]
    r = submit(client, headers, json.dumps(doc).encode())
    assert r.status_code == 201, r.text
    stored = RunRecord.model_validate_json(client.get(f"/api/v1/runs/{r.json()['run_id']}").text)
    sp = read(stored)
    assert sp is not None
    (a,) = sp.answers
    assert a.max_rate == 1000.0 and a.top == 1100.0 and a.split == "2 x 1"
    assert sp.verdict.startswith("at 1,000 req/s within 50 ms: cpu x 1")


def _edit(change: Any) -> bytes:
    doc = json.loads(body(serving_run()))
    change(doc["payload"]["serving"]["fleets"][0]["points"][0], doc)
    return json.dumps(doc).encode()


REFUSED = {
    "a negative latency": (
        lambda pt, d: pt["latency_us"].__setitem__(0, -5),
        "latencies are > 0",
    ),
    "a latency of a day": (
        lambda pt, d: pt["latency_us"].__setitem__(0, 86_400 * 10**6),
        "at most an hour",
    ),
    "a p99 its latencies do not have": (
        lambda pt, d: pt.__setitem__("p99_s", pt["p99_s"] * 1.001),  # 20 µs off
        "is not the p99 of its latencies",
    ),
    "within the bound with its p99 over it": (
        lambda pt, d: d["payload"]["serving"].__setitem__("bound_s", 0.001),
        "within the bound with p99",
    ),
    "a rate its requests cannot hold": (
        lambda pt, d: pt.__setitem__("rate", 1e6),
        "requests cannot hold a p99 at 1e+06/s",
    ),
    "more requests than the run's time": (
        lambda pt, d: d.__setitem__("finished_utc", d["created_utc"]),
        "more than the run's 0 s",
    ),
    "latencies missing": (
        lambda pt, d: pt.__setitem__("latency_us", pt["latency_us"][:10]),
        "10 latencies stored for n = 721",
    ),
    "a rate over any generator": (
        lambda pt, d: pt.__setitem__("rate", 1e9),
        "is not in (0, 1e+07] requests/s",
    ),
    "within the bound but INVALID by LoadGen's rules": (
        lambda pt, d: pt.update({"valid": False, "invalid_why": ["early stopping not met"]}),
        "INVALID by LoadGen's rules",
    ),
    "within the bound after less than its minimum duration": (
        lambda pt, d: pt.update({"duration_s": 1.0, "min_duration_s": 5.0}),
        "< its minimum duration",
    ),
    "energy beyond belief": (
        lambda pt, d: pt.__setitem__("energy", {"available": True, "j_per_item": 1e9}),
        "energy.j_per_item",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_client_sent_is_bounded(board: Any, name: str) -> None:
    client, headers = board
    change, said = REFUSED[name]
    r = submit(client, headers, _edit(change))
    assert r.status_code == 422, (name, r.text)
    detail = r.json()["detail"]
    assert said in detail and "payload.serving" in detail and "\n" not in detail, detail
    assert client.get("/api/v1/runs").json() == []  # nothing stored


def test_the_stored_fixture_of_a_real_cpu_run_is_accepted(board: Any) -> None:
    client, headers = board
    run = RunRecord.model_validate_json(FIXTURE.read_text())
    r = submit(client, headers, run)
    assert r.status_code == 201, r.text
    (group,) = client.get("/api/v1/serving").json()
    (row,) = group["rows"]
    assert row["rank"] == "1" and row["max_rate"] == pytest.approx(38.137939124137255)


def test_submit_dry_run_says_what_the_board_will_do_with_a_serving_run() -> None:
    from torchmark.cli.submit import server_lines

    ok = json.loads(body(serving_run()))
    assert server_lines(ok) == [
        "the server will store it in the serving division",
        "cpu: max 1,000-1,100 req/s (ok): ranked",
    ]
    bad = json.loads(body(serving_run(level="invalid")))
    assert server_lines(bad)[1] == "cpu: max 1,000-1,100 req/s (invalid): listed, never ranked"
    refused = json.loads(_edit(REFUSED["a negative latency"][0]))
    assert server_lines(refused)[0].startswith("the server will refuse this run: payload")


def test_the_serving_board_reads_the_submissions_only_when_one_came(board: Any) -> None:
    """Its cache key was every submission's id: the whole table read on each request."""
    import sqlalchemy as sa

    client, headers = board
    assert submit(client, headers, serving_run("Alpha CPU")).status_code == 201
    engine = client.app.state.accounts.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def watch(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", watch)
    try:
        assert "Alpha CPU" in client.get("/serving").text
        seen.clear()
        assert "Alpha CPU" in client.get("/serving").text  # nothing new: from the cache
        assert not [s for s in seen if "server_submissions.run_id" in s], seen
        assert submit(client, headers, serving_run("Beta CPU", best=2000.0)).status_code == 201
        assert "Beta CPU" in client.get("/serving").text  # a new submission: read again
    finally:
        sa.event.remove(engine, "before_cursor_execute", watch)


def test_as_served_runs_are_ranked_apart_and_their_answer_derived_as_served() -> None:
    """A run that served its model over HTTP answers as served (the server derives it so
    from the points, not the in-process fleet beside it) and is never ranked with runs
    that answered in process."""
    from torchmark.web.serving import board as groups
    from torchmark.web.serving import rederive

    old = serving_run(best=1000.0, top=1100.0)
    new = serving_run(best=5000.0, top=5500.0)
    p = read(new)
    assert p is not None
    served = FleetDoc(
        device="cpu", label="cpu", served="oip", model_workers=1, model_threads=1,
        points=[point(400.0, 0.05, True), point(440.0, 0.05, False)],
    )  # fmt: skip
    p.fleets.append(served)
    write(new, p)
    derived = read(rederive(new))
    assert derived is not None
    (a,) = derived.answers
    (c,) = derived.capacity
    assert (a.max_rate, a.top, a.fleet) == (400.0, 440.0, 1)
    assert (c.max_rate, c.fleet) == (5000.0, 0)
    assert derived.front_end["cpu"] == pytest.approx(1 - 400 / 5000)
    found = groups([(rederive(old), "m1"), (rederive(new), "m2")])
    assert [(g.label, [r.answer.max_rate for r in g.rows]) for g in found] == [
        ("simplenet (float32[1, 1000]) within p99 <= 50 ms", [1000.0]),
        ("simplenet (float32[1, 1000]) within p99 <= 50 ms, as served", [400.0]),
    ]
