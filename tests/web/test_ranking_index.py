"""The ranking read from the per-case SQL index (torchmark.web.cases) equals the ranking
computed over whole runs in memory (ranking.rank), and a pooled row pools every run."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from fastapi.testclient import TestClient

from boardtest import body, make_run
from torchmark.results import RunRecord, Verdict
from torchmark.web import cases, ranking
from torchmark.web.app import create_app


def runs() -> list[RunRecord]:
    out = []
    for i, (model, scale) in enumerate(
        [("A", 1.0), ("A", 1.01), ("B", 1.002), ("C", 2.0), ("D", 0.5), ("A", 0.99)]
    ):
        run = make_run(model, scale, n=12 + i, spread=0.02 * (1 + i % 3))
        extra = run.results[0].model_copy(update={"params": {"n": 2000}})
        gpu = run.results[0].model_copy(
            update={"device": "cuda:0", "samples_s": [s / 3 for s in run.results[0].samples_s]}
        )
        run.results += [extra, gpu]
        run.environment["devices"]["cuda:0"] = {"kind": "cuda", "model": f"{model} GPU"}
        if model == "D":
            run.results[0].verdict = Verdict(level="invalid")
        out.append(run)
    return out


def submit_all(tmp_path: Path) -> tuple[TestClient, list[RunRecord]]:
    app = create_app(f"sqlite:///{tmp_path / 'b.db'}")
    token = app.state.accounts.create_token("t")
    client = TestClient(app)
    stored = []
    for run in runs():
        r = client.post(
            "/api/v1/runs", content=body(run), headers={"Authorization": f"Bearer {token}"}
        )
        assert r.status_code == 201, r.text
        stored.append(app.state.store.load(r.json()["run_id"]))
    return client, stored


def test_the_index_ranks_as_the_runs_do(tmp_path: Path) -> None:
    client, stored = submit_all(tmp_path)
    engine = client.app.state.accounts.engine  # type: ignore[attr-defined]
    machines = {r.run_id or "": ranking.machine_of(r) for r in stored}
    assert cases.cases(engine, "standard") == ranking.cases(stored)
    for case in ranking.cases(stored):
        want = [ranking.row_json(x) for x in ranking.rank(stored, case, machines)]
        got = [ranking.row_json(x) for x in cases.rank(engine, "standard", case)]
        assert got == want, case
    assert cases.rank(engine, "custom", ranking.cases(stored)[0]) == []


def test_a_pooled_row_uses_every_runs_samples(tmp_path: Path) -> None:
    client, stored = submit_all(tmp_path)
    board = client.get(
        "/api/v1/leaderboard", params={"workload": "add", "variant": "seed", "params": '{"n":1000}'}
    ).json()
    a_cpu = next(row for row in board if row["model"] == "A" and row["device"] == "cpu")
    mine = [r for r in stored if r.environment["devices"]["cpu"]["model"] == "A"]
    assert len(a_cpu["runs"]) == 3
    # 12 + 13 + 17 samples; the pooled row once showed the first run's 12 (a copied cache)
    assert a_cpu["n_samples"] == sum(r.results[0].n for r in mine) == 42
    assert not any(row["model"] == "D" and row["device"] == "cpu" for row in board)  # invalid


def test_runs_stored_before_the_index_are_indexed_at_start(tmp_path: Path) -> None:
    client, _ = submit_all(tmp_path)
    engine = client.app.state.accounts.engine  # type: ignore[attr-defined]
    case = ("add", "seed", '{"n": 1000}')
    before = [ranking.row_json(x) for x in cases.rank(engine, "standard", case)]
    with engine.begin() as conn:
        conn.execute(sa.delete(cases.results_t))
    client.app.state.store.close()  # type: ignore[attr-defined]
    again = create_app(f"sqlite:///{tmp_path / 'b.db'}")
    after = [ranking.row_json(x) for x in cases.rank(again.state.accounts.engine, "standard", case)]
    assert after == before and len(after) == 7


def test_the_page_sorts_by_a_column_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    client, _ = submit_all(tmp_path)
    case = {"case": '["add", "seed", "{\\"n\\": 1000}"]'}
    ranked = client.get("/", params=case).text
    by_runs = client.get("/", params=case | {"sort": "-runs"}).text
    assert ranked.count("<tr class=") == by_runs.count("<tr class=") == 7
    # A's GPU and CPU rows pool 3 runs each: first by runs, descending, in their ranked
    # order (the GPU's 3x faster); the others, 1 run each, follow in theirs
    rows = by_runs.split("<tbody>")[1].split("</tr>")
    assert "A GPU" in rows[0] and ">A <" in rows[1] and "(cpu," in rows[1]
    assert "D GPU" in rows[2]  # rank 1 among the 1-run rows
    assert 'data-sort="runs" aria-sort="descending"><a href="/?case=' in by_runs
    for bad in ("runs; DROP TABLE", "model", "--runs"):
        r = client.get("/", params=case | {"sort": bad})
        assert r.status_code == 422, bad


def test_the_standard_division_needs_the_default_flags() -> None:
    from torchmark.run.config import RunConfig

    defaults = {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in RunConfig().as_dict().items()
    }
    assert {k: defaults[k] for k in ranking.STANDARD_CONFIG} == ranking.STANDARD_CONFIG
    run = make_run()
    assert ranking.division_of(run) == "standard"  # nothing recorded: the defaults
    run.config = RunConfig(devices=("cpu",), workloads=("add",), telemetry=False).as_dict()
    assert ranking.division_of(run) == "standard"  # choosing cases changes no measurement
    for change in ({"threads": 4}, {"timing": "e2e"}, {"suite": "quick"}, {"batches": (8,)},
                   {"rule": "micro"}, {"sizes": (10,)}):  # fmt: skip
        run.config = RunConfig(**change).as_dict()  # type: ignore[arg-type]
        assert ranking.division_of(run) == "custom", change
        (key,) = change
        assert [f.split("=")[0] for f in ranking.nonstandard_flags(run)] == [key]
    run.config = {}
    run.results[0].extra["world_size"] = 2
    assert ranking.nonstandard_flags(run) == ["world_size=2"]
    run.results[0].extra["world_size"] = 1
    assert ranking.division_of(run) == "standard"
    run.kind = "model"
    assert ranking.division_of(run) == "custom"


def test_a_case_name_too_long_to_index_is_refused(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'b.db'}")
    token = app.state.accounts.create_token("t")
    run = make_run()
    run.results[0].params = {"n": "x" * 3000}
    r = TestClient(app).post(
        "/api/v1/runs", content=body(run), headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 422 and "at most 2000" in r.json()["detail"]
