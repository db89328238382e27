"""The seam between the measuring core and every reader of its results.

One stored run holds every verdict kind (ok, warn, noisy, unreliable, timed out, in cache,
invalid, WRONG, skipped; the run itself incomplete), judged by the measuring code's own ``judge``,
and a second run measures the same cases cleanly (tests/fixtures/runs/build.py,
``verdicts_run``). Both go through every reader: ``show``, ``history``, ``compare`` and its
gate, ``compare --reference``, ``compare --server`` (a loopback board), ``report --html`` and
``--markdown``, ``export``/``import``, ``submit --dry-run``, the board's pages and API, and
tune's and the input pipeline's advice. None may rank, compare, count or recommend an
invalid, WRONG or skipped result as a measurement, nor say two things about one result that
contradict each other (a verdict beside "ok", a rank beside "invalid").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from boardtest import start_server, stop
from clitest import cli
from torchmark.judge import verdicts
from torchmark.results import RunRecord
from torchmark.store.exchange import import_run

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
A, B = RUNS / "verdicts-a.json", RUNS / "verdicts-b.json"
# each case its run's verdict rejects, and the word every reader must say for it
REJECTED = {
    "seam/invalid n=1000": "invalid",
    "seam/wrong n=1000": "WRONG",
    "seam/skipped n=1000": "skipped",
    "seed-add/as-published": "invalid",
}
KEPT = ["seam/ok", "seam/warn", "seam/noisy", "seam/unreliable", "seam/timed_out", "seam/in_cache"]
# 186 % of the DRAM ceiling with a 16 MiB working set in a 32 MiB cache: never "invalid"
IN_CACHE = "in cache: above the DRAM ceiling is expected (working set 16 MiB fits the 32 MiB"
JUDGED = re.compile(r"\b(FASTER|SLOWER|SAME)\b|\brank \d|apply:")


def lines_about(text: str, case: str) -> list[str]:
    """The lines of ``text`` that name ``case`` (its workload/variant, as tables write it)."""
    return [line for line in text.splitlines() if case in line]


def never_judged(text: str, case: str) -> None:
    """No statement about ``case`` ranks, compares or recommends it."""
    for part in lines_about(text, case):
        assert not JUDGED.search(part), (case, part)


def a_run() -> RunRecord:
    return import_run(A)


def test_the_fixture_holds_every_verdict_kind() -> None:
    run = a_run()
    kinds = [verdicts.kind_of(r) for r in run.results]
    assert set(kinds) == set(verdicts.RULES) and run.status == "incomplete"
    # measured cleanly, the in-cache case is in the cache still: that is its working set
    assert {verdicts.kind_of(r) for r in import_run(B).results} == {"ok", "in_cache"}


def test_show_says_each_verdict_once_and_never_places_a_rejected_seed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "show", str(A))
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "invalid" in rows["invalid"] and "WRONG" in rows["wrong"]
    assert "skipped" in rows["skipped"] and "warn" in rows["warn"]
    assert "invalid" in rows["as-published"]
    assert "in cache" in rows["in_cache"] and "invalid" not in rows["in_cache"]
    flat = " ".join(out.split())
    assert "seed-add as-published on AMD EPYC 7B13 (cpu): not placed in the seed blog's" in flat
    assert IN_CACHE in flat
    assert "rank" not in flat.split("not placed")[1].split("`")[0]
    for case in REJECTED:
        never_judged(out, case)


def test_history_counts_and_export_import_keep_every_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli(capsys, "import", str(A), "--db", db)[0] == 0
    row = json.loads(cli(capsys, "history", "--db", db, "--json")[1])[0]
    run = a_run()
    assert (row["ok"], row["total"]) == (verdicts.counted(run.results), 10) == (6, 10)
    assert row["status"] == "incomplete"
    exported = tmp_path / "a.json"
    assert cli(capsys, "export", "latest", "--db", db, "-o", str(exported))[0] == 0
    again = import_run(exported)
    assert [r.verdict for r in again.results] == [r.verdict for r in run.results]
    other = f"sqlite:///{tmp_path / 'b.db'}"
    assert cli(capsys, "import", str(exported), "--db", other)[0] == 0
    assert json.loads(cli(capsys, "history", "--db", other, "--json")[1])[0]["ok"] == 6
    csv = cli(capsys, "export", "latest", "--db", other, "-f", "csv")[1]
    invalid_rows = [line for line in csv.splitlines() if ",invalid," in line]
    assert len(invalid_rows) == 2  # seam/invalid and the seed-add: their verdict travels


@pytest.mark.parametrize("order", ["a-first", "b-first"])
def test_compare_and_its_gate_never_judge_a_rejected_case(
    order: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [str(A), str(B)] if order == "a-first" else [str(B), str(A)]
    code, out, err = cli(capsys, "compare", *runs, "--fail-on-regression", "5")
    assert code == 3, (out, err)  # cannot judge: never 1 (a regression) nor 0
    side = "A" if order == "a-first" else "B"
    flat = " ".join(out.split())
    for case, word in REJECTED.items():
        never_judged(out.split("verdict rule:")[0], case)
        said = "wrong" if word == "WRONG" else word
        (row,) = [line for line in out.splitlines() if line.startswith(f" {case} ")]
        assert " n/a " in f"{row} " and said in row.split(), row
        assert f"{said} in {side}: " in flat  # the reason, beside the row or under the table
    assert "regression:" not in err
    # compared, like for like, and said to be the cache's speed in one line
    (row,) = [line for line in out.splitlines() if line.startswith(" seam/in_cache ")]
    assert "SAME" in row.split() and "in cache in A and B: the cache's speed" in flat
    judged = [line for line in err.splitlines() if line.startswith("cannot judge:")]
    unjudged = {"seam/invalid n=1000 on cpu", "seam/wrong n=1000 on cpu"}
    unjudged.add("seed-add/as-published on cpu")
    if order == "b-first":  # measured in the baseline, not in the later run: lost
        unjudged.add("seam/skipped n=1000 on cpu")
    assert {line.split(": ")[1] for line in judged} == unjudged


def test_compare_reference_shows_the_rejected_seed_unranked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "compare", "--reference", "seed-2023", str(A))
    assert code == 0, err
    mine = next(line for line in out.splitlines() if "(this machine)" in line)
    assert mine.split()[0] == "—"  # shown, not ranked
    flat = " ".join(out.split())
    assert "not ranked: invalid: samples split" in flat  # beside the row or as its note
    assert "IMPLAUSIBLE: invalid" not in flat


def test_reports_say_each_rejected_verdict_and_place_no_rejected_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, md = tmp_path / "a.html", tmp_path / "a.md"
    code, _, err = cli(capsys, "report", str(A), "--html", str(page), "--markdown", str(md))
    assert code == 0, err
    html = page.read_text()
    rows = re.findall(r'<tr class="lvl-(\w+)">(.*?)</tr>', html, flags=re.S)
    bad = [body for level, body in rows if level == "bad"]
    assert len(bad) == 3 and all(("invalid" in b or "WRONG" in b) for b in bad)
    assert "not placed in the seed blog&#39;s 2023 table: invalid" in html
    markdown = md.read_text()
    for case, word in REJECTED.items():
        (row,) = [line for line in markdown.splitlines() if f"| {case} |" in line]
        assert f"{word}: " in row.split("|")[-2], row
    for case in KEPT:
        (row,) = [line for line in markdown.splitlines() if f"| {case} n=1000 |" in line]
        assert "invalid" not in row and "WRONG" not in row


def test_submit_dry_run_says_what_is_ranked_marked_or_only_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "submit", str(A), "--dry-run")
    assert code == 0 and json.loads(out)["results"]
    said = " ".join(err.split())
    listed = said.split("listed, never ranked: 3 results: ")[1].split(" listed as skipped")[0]
    assert "seam/invalid n=1000 on cpu (invalid:" in listed
    assert "seam/wrong n=1000 on cpu (WRONG:" in listed
    assert "seed-add/as-published on cpu (invalid:" in listed
    assert "listed as skipped (nothing measured): 1 result: seam/skipped" in said
    assert "ranked: 1 result" in said  # the one clean result; the marked ones say so
    marked = "listed, marked in cache, never ranked: 1 result: seam/in_cache n=1000 on cpu ("
    assert marked + IN_CACHE in said


def test_the_boards_pages_and_api_never_rank_a_rejected_result(tmp_path: Path) -> None:
    from torchmark.web.app import create_app

    app = create_app(f"sqlite:///{tmp_path / 'board.db'}", rate_limit=5)
    token = app.state.accounts.create_token("ci")
    client = TestClient(app)
    auth = {"Authorization": f"Bearer {token}"}
    ids = {}
    for name, path in (("a", A), ("b", B)):
        sent = client.post("/api/v1/runs", content=path.read_bytes(), headers=auth)
        assert sent.status_code == 201, sent.text
        ids[name] = sent.json()["run_id"]
    page = client.get(f"/runs/{ids['a']}").text
    body = page.split("<tbody>")[1].split("</tbody>")[0]
    heads = re.findall(r"<th[^>]*>(.*?)</th>", page.split("<thead>")[1].split("</thead>")[0])
    for row in body.split("<tr>")[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)
        status, verdict = cells[heads.index("status")], cells[heads.index("verdict")]
        if "invalid" in verdict:  # no "ok" beside an invalid verdict, and its reason given
            assert status == "measured" and "samples split into two clusters" in verdict
    for variant in ("invalid", "in_cache", "ok"):
        board = client.get(
            "/api/v1/leaderboard",
            params={"workload": "seam", "variant": variant, "params": '{"n":1000}'},
        ).json()
        runs = [run for row in board for run in row["runs"]]
        assert (ids["a"] in runs) is (variant == "ok"), board
    placed = client.post("/api/v1/place", content=A.read_bytes()).json()
    by = {f"{p['workload']}/{p['variant']}": p for p in placed}
    assert by["seam/invalid"]["rank"] is None and by["seam/invalid"]["why"].startswith("invalid")
    assert by["seed-add/as-published"]["rank"] is None
    assert "seam/wrong" not in by and "seam/skipped" not in by  # nothing measured to place
    assert by["seam/in_cache"]["rank"] is None  # accepted at 186 % of bw, never ranked
    assert all(by[f"seam/{k}"]["rank"] is not None for k in ("ok", "warn", "noisy"))


@pytest.fixture
def board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    """A real `torchmark board` on loopback holding the second run."""
    db = f"sqlite:///{tmp_path / 'served.db'}"
    code, out, _ = cli(capsys, "board", "token", "create", "ci", "--db", db)
    assert code == 0
    token = out.strip().splitlines()[-1]
    proc, url = start_server(db, tmp_path / "serve.log")
    try:
        code, _, err = cli(capsys, "submit", str(B), "--server", url, "--token", token)
        assert code == 0, err
        yield url
    finally:
        stop(proc)


def test_compare_server_never_places_a_rejected_result(
    board: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "compare", str(A), "--server", board)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "seam/invalid n=1000 on cpu: not placed: invalid: samples split" in flat
    assert "seed-add/as-published on cpu: not placed: invalid:" in flat
    # the board holds B, this machine's other run: never a competitor, so no rank, said so
    assert "placed among the other machines, not against its own" in flat
    assert "seam/ok n=1000 on cpu: no other machine in the standard division" in flat
    for case in REJECTED:
        never_judged(out, case)


def test_tune_never_recommends_a_rejected_candidate() -> None:
    from torchmark.kinds.tune.candidates import Candidate
    from torchmark.kinds.tune.search import Measured, Tuner

    tuner = Tuner.__new__(Tuner)
    tuner.max_latency_s, tuner.baseline = None, None
    measured = []
    for r in a_run().results:
        m = Measured(Candidate(r.variant), r, speedup=30.0 if r.variant == "invalid" else 1.5)
        m.judgement = type("J", (), {"verdict": "FASTER"})()  # type: ignore[assignment]
        measured.append(m)
    best = tuner.best(measured)
    assert best is not None and verdicts.may(best.result, "recommend")
    assert best.cand.name not in ("invalid", "wrong", "skipped", "as-published")


def test_the_input_advice_never_recommends_a_rejected_configuration() -> None:
    from torchmark.loaders import LOADER
    from torchmark.report.pipeline import advise

    loaders = []
    for workers, r in enumerate(a_run().results):  # each kind as one DataLoader setting
        p: dict[str, Any] = {"workers": workers, "batch": 16}
        loaders.append(r.model_copy(update={"workload": "input", "variant": LOADER, "params": p}))
    (a,) = advise(loaders)
    best = loaders[[r.params["workers"] for r in loaders].index(a.best.workers)] if a.best else None
    assert best is not None and verdicts.may(best, "recommend"), a.lines
    text = "\n".join(a.lines)
    assert "left out, invalid: samples split" in text
