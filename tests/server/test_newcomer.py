"""The board as a newcomer meets it: `serve` keeps its own store and says where the token
went; `submit` prints the run's page, its division and why a run is custom; the front page
names every division that has runs; the committed reference runs are labelled rows; the
seed table is sorted with each submitted machine placed; names and units as the CLI prints
them; a readable machine name; plain case URLs (the old JSON-array ones redirect)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from boardtest import body, builtin_run, make_run, serving
from clitest import cli
from torchmark import reference
from torchmark.results import RunRecord, Work
from torchmark.store import default_board_path, default_path, open_store
from torchmark.store.exchange import export_run
from torchmark.web.accounts import Accounts


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def quick(run: RunRecord) -> RunRecord:
    run.config = {"suite": "quick", "devices": ["all"], "threads": None}
    return run


def seed_run(model: str, it_per_s: float) -> RunRecord:
    """A machine's run of the seed question: the blog's loop, as published, 12288^2."""
    run = make_run(model)
    per_it = reference.load(reference.SEED_SET).bytes_per_iteration
    assert per_it is not None
    t = 1 / it_per_s
    run.results[0] = run.results[0].model_copy(
        update={
            "workload": "seed-add",
            "variant": "as-published",
            "params": {"size": 12288},
            "samples_s": [t * (1 + 0.001 * (i % 5)) for i in range(12)],
            "work": Work(flops=12288.0**2, bytes=per_it, items=1, item_unit="it"),
            "headline": "items",
        }
    )
    return run


def test_serve_keeps_its_own_store_and_says_where_the_token_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db, `serve` used the user's results store (TORCHMARK_DB or results.db):
    `history` then listed the server's copies."""
    results = tmp_path / "mine.db"
    monkeypatch.setenv("TORCHMARK_DB", f"sqlite:///{results}")
    code, out, err = cli(capsys, "board", "token", "create", "me")
    assert code == 0, err
    board = default_board_path()
    assert board.exists() and board.name == "board.db" and board.parent == default_path().parent
    assert str(board) in " ".join(out.split()) and out.strip().splitlines()[-1].startswith("tm_")
    assert not results.exists()  # the user's results store was never opened
    store = open_store(f"sqlite:///{board}")
    try:
        assert [t.name for t in Accounts(store).list_tokens()] == ["me"]
    finally:
        store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    from torchmark.web.app import create_app

    app = create_app(f"sqlite:///{tmp_path / 'board.db'}")
    token = app.state.accounts.create_token("me")
    with serving(app) as url:
        yield url, token, app


def test_submit_prints_the_page_the_division_and_why_custom(
    served: tuple[str, str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, token, _ = served
    path = tmp_path / "run.json"
    path.write_text(export_run(quick(builtin_run())), encoding="utf-8")
    code, out, err = cli(capsys, "submit", str(path), "--server", url, "--token", token)
    assert code == 0, err
    said = " ".join(out.split())
    page = re.search(rf"{url}/runs/[0-9a-f-]+", said)
    assert page is not None, said
    assert "division: custom (--quick)" in said and "the standard division ranks" in said
    with urllib.request.urlopen(page.group(), timeout=30) as r:
        assert r.status == 200 and b"Division: custom (--quick)" in r.read()
    code, again, _ = cli(capsys, "submit", str(path), "--server", url, "--token", token)
    assert code == 0 and "already there" in again and page.group() in " ".join(again.split())
    assert "division: custom (--quick)" in " ".join(again.split())
    path.write_text(export_run(builtin_run("Other CPU")), encoding="utf-8")
    code, out, _ = cli(capsys, "submit", str(path), "--server", url, "--token", token)
    assert code == 0 and "division: standard" in out and "custom" not in out


def test_the_front_page_says_where_the_runs_are(server: tuple[TestClient, str, Any]) -> None:
    """Three quick runs: the front page said "no runs yet ... submit a run" (it showed the
    standard division only)."""
    client, token, _ = server
    for i in range(3):
        run = quick(builtin_run(f"CPU {i}", 1.0 + i))
        assert client.post("/api/v1/runs", content=body(run), headers=auth(token)).status_code
    front = client.get("/").text
    assert "<strong>custom</strong> (3 runs)" in front and "standard</a> (0 runs)" in front
    # the seed question first: the reference runs have it in custom
    assert "Machines ranked: seed-add as-published size=12288" in front
    mine = client.get("/", params={"case": "matmul/float32/n=512"}).text
    assert "Machines ranked: matmul fp32 n=512" in mine and "CPU 2" in mine
    standard = client.get("/", params={"division": "standard"}).text
    assert "Nothing to rank in the standard division yet" in standard
    assert 'The 3 submitted runs in the <a href="/?division=custom">custom division</a>' in (
        standard
    )


def test_the_reference_runs_are_labelled_rows(server: tuple[TestClient, str, Any]) -> None:
    """An empty board: the committed H100 and H200 runs (quick: the custom division) are
    rows of their cases, marked ref and never ranked."""
    client, _, _ = server
    page = client.get("/", params={"division": "custom", "case": "matmul/tf32/n=4096"}).text
    rows = page.split('<tbody class="reference">')[1].split("</tbody>")[0]
    assert rows.count('<td class="rank">ref</td>') == 2
    assert "NVIDIA H100 80GB HBM3" in rows and "NVIDIA H200" in rows
    assert "reference h100-quick" in rows and "TFLOP/s" in rows
    labels = re.findall(r'<option value="[^"]*"[^>]*>([^<]*)</option>', page)
    assert "matmul tf32 n=4096" in labels and "add fp32 n=268M" in labels


def test_the_seed_table_is_sorted_with_each_submitted_machine_placed(
    server: tuple[TestClient, str, Any],
) -> None:
    client, token, _ = server
    for model, rate in (("Mine Slow CPU", 30.0), ("Mine GPU-ish CPU", 500.0)):
        r = client.post("/api/v1/runs", content=body(seed_run(model, rate)), headers=auth(token))
        assert r.status_code == 201, r.text
    page = client.get("/").text
    assert "Machines ranked: seed-add as-published size=12288" in page
    table = page.split('<table id="seed">')[1].split("</table>")[0]
    rates = [
        float(x.replace(",", ""))
        for x in re.findall(r'<td class="num">([0-9.,]+)</td>\n<td class="num">', table)
    ]
    assert rates == sorted(rates, reverse=True) and len(rates) == 11 + 4 + 2
    mine = re.findall(r'<tr class="mine"><td>([^<]*)</td><td class="num">([^<]*)<', table)
    assert [m[0] for m in mine] == ["Mine GPU-ish CPU (cpu)", "Mine Slow CPU (cpu)"]
    assert "submitted: Mine Slow CPU · torch 2.13.0" in table


def test_names_units_machines_and_case_urls_read_as_the_cli_prints_them(
    server: tuple[TestClient, str, Any],
) -> None:
    client, token, _ = server
    run = builtin_run("Xeon Test CPU", 1.0)
    add = run.results[0].model_copy(
        update={
            "workload": "add",
            "variant": "float32",
            "params": {"n": 268435456},
            "work": Work(flops=268435456, bytes=12 * 268435456, items=268435456, item_unit="elem"),
            "headline": "bytes",
            "samples_s": [s * 30 for s in run.results[0].samples_s],
        }
    )
    run.results.append(add)
    r = client.post("/api/v1/runs", content=body(run), headers=auth(token))
    assert r.status_code == 201, r.text
    page = client.get("/", params={"case": "matmul/float32/n=512"}).text
    assert "Machines ranked: matmul fp32 n=512" in page
    assert "269 GFLOP/s" in page and "TFLOP/s" not in page  # as `torchmark run` prints it
    assert ">Xeon Test CPU · torch 2.13.0</a>" in page  # the machine, not its hex id
    assert 'value="add/float32/n=268435456"' in page and "add fp32 n=268M" in page
    assert "%5B" not in page and "[&#34;" not in page  # no JSON arrays in links
    assert 'href="/?case=matmul/float32/n=512&amp;division=standard&amp;sort=median"' in page
    machine = client.get("/api/v1/runs").json()[0]["machine"]
    assert (
        "<h1>Machine: Xeon Test CPU · torch 2.13.0</h1>" in client.get(f"/machines/{machine}").text
    )
    run_page = client.get(f"/runs/{r.json()['run_id']}").text
    assert "add fp32 n=268M" in run_page and "GB/s" in run_page
    # the old JSON-array URL of a case: the same page, at its plain URL
    old = client.get(
        "/",
        params={"case": json.dumps(["matmul", "float32", '{"n": 512}']), "sort": "median"},
        follow_redirects=False,
    )
    assert old.status_code == 301
    assert old.headers["location"] == "/?case=matmul/float32/n=512&sort=median"


def test_compare_server_places_a_quick_run_in_its_own_division(
    served: tuple[str, str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quick run was placed among the standard division only: "no machine ... yet" however
    many quick runs the board held."""
    url, token, _ = served
    path = tmp_path / "theirs.json"
    path.write_text(export_run(quick(builtin_run("Their CPU", 1.0))), encoding="utf-8")
    assert cli(capsys, "submit", str(path), "--server", url, "--token", token)[0] == 0
    path.write_text(export_run(quick(builtin_run("My CPU", 2.0))), encoding="utf-8")
    code, out, err = cli(capsys, "compare", str(path), "--server", url)
    assert code == 0, err
    said = " ".join(out.split())
    assert "matmul/fp32 n=512 on cpu: rank 2 of 2" in said and "in the custom division" in said


def test_the_seed_table_promises_no_place_a_quick_run_lacks(
    server: tuple[TestClient, str, Accounts],
) -> None:
    """A `--quick` run measures the blog's loop at 11264², another iteration: the seed
    page said each submitted machine was placed in the blog's table, and it was not."""
    client, token, _ = server
    run = quick(seed_run("Quick CPU", 50.0))
    run.results[0] = run.results[0].model_copy(update={"params": {"size": 11264}})
    per_it = 3 * 4 * 11264**2  # three float32 tensors of 11264^2: what the catalogue derives
    work = run.results[0].work.model_copy(update={"flops": 11264.0**2, "bytes": float(per_it)})
    run.results[0] = run.results[0].model_copy(update={"work": work})
    assert client.post("/api/v1/runs", content=body(run), headers=auth(token)).status_code == 201
    page = client.get("/?case=seed-add/as-published/size=11264&division=custom").text
    text = " ".join(re.sub(r"<[^>]+>", "", page).split())
    assert "A --quick run measures a smaller size, another iteration, and has no place" in text
    assert "no submitted machine of this division measured the blog's size yet" in text
