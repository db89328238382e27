"""The JSON API under ``/api/v1/``: submit, list and read runs, results, rankings, place."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from torchmark.judge import verdicts
from torchmark.results import Result, RunRecord
from torchmark.store.exchange import (
    CSV_COLUMNS,
    _csv_row,
    export_run,
    finite_json,
)
from torchmark.web import admission, cases, plausible, ranking, serving
from torchmark.web.auth import BoardDep, Reader, Writer, caller
from torchmark.web.state import Board

OWN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")  # store.sql.new_run_id's form
MAX_BYTES = 8 * 1024 * 1024  # a full suite run with raw samples is ~1-2 MiB

router = APIRouter(prefix="/api/v1")


async def body_of(request: Request) -> bytes:
    """The request's body, 413 past MAX_BYTES (by its Content-Length, or as it arrives)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BYTES:
        raise HTTPException(413, f"payload over {MAX_BYTES // 2**20} MiB")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > MAX_BYTES:
            raise HTTPException(413, f"payload over {MAX_BYTES // 2**20} MiB")
    return bytes(received)


@router.post("/runs", status_code=201)
async def submit(request: Request, state: BoardDep, token_name: Writer) -> JSONResponse:
    """Submit one exported run document (``torchmark export RUN``)."""
    body = await body_of(request)
    # parsing, statistics and the database block: off the event loop
    return await run_in_threadpool(accept, state, body, token_name)


def checked(body: bytes, what: str) -> RunRecord:
    """The run in a request's ``body`` as the server takes it (``admission.checked``:
    stripped again, strictly typed, every bound and plausibility check passed); 422 naming
    the first violation."""
    try:
        return admission.checked(admission.parse(body, what), what)
    except admission.Refused as e:
        raise HTTPException(422, str(e)) from None


def accept(state: Board, body: bytes, token_name: str) -> JSONResponse:
    run = checked(body, "the submission")
    # The run keeps the id torchmark gave it (one id locally and on the board) where it is
    # torchmark's own form and free here; any other text (`<script>`, `../x`, a `?` that
    # breaks links) gets a new one, as an id another machine took first does.
    kept = run.run_id if run.run_id and OWN_ID.fullmatch(run.run_id) else None
    run = run.model_copy(update={"run_id": kept})
    # what was sent makes the twin, not how this server judges it (a later judge would
    # store a run sent again a second time)
    content = content_of(run)
    run = plausible.rejudged(run)  # every verdict judged again, never better than sent
    # Built before the lock, which every submission to this database waits for: 3.5 ms
    # for a 100-case run (benchmarks/leaderboard_load.py's); only its id comes later.
    division, machine = ranking.division_of(run), ranking.machine_of(run)
    rows = cases.index_rows(run, "", division, machine)
    accounts, store = state.accounts, state.store
    with state.write_lock, accounts.writing():
        first = accounts.submission(content)
        if first is not None:
            return JSONResponse({"run_id": first, "duplicate": True}, status_code=200)
        if accounts.count_since(token_name, 1) >= state.rate_limit:
            raise HTTPException(
                429,
                f"token {token_name!r} sent {state.rate_limit} runs in the last hour; try later",
                headers={"Retry-After": "3600"},
            )

        def submission(conn: Connection, run_id: str) -> None:
            accounts.record_in(conn, content, run_id, token_name, division, machine)
            cases.insert(conn, [row | {"run_id": run_id} for row in rows])
            cases.name_machine(conn, machine, ranking.machine_label(run))

        # One transaction: a server killed between storing the run and recording its
        # submission left a run no reader could find (and the next twin stored another).
        # The write lock makes a concurrent twin impossible here: checked above.
        run_id = store.save(run, also=submission)
    answer = {"run_id": run_id, "duplicate": False} | where(state, run, run_id, division)
    return JSONResponse(answer, status_code=201)


def content_of(run: RunRecord) -> str:
    """What makes two submissions the same run: the checked document, whatever its id."""
    doc = run.model_copy(update={"run_id": None}).model_dump(mode="json")
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def where(state: Board, run: RunRecord, run_id: str, division: str) -> dict[str, Any]:
    """What a submitter is told of a stored run: its page, its division and why a custom
    run is custom (in the options' words), and results the board will not rank."""
    return {
        "url": f"{state.public_url.rstrip('/')}/runs/{run_id}",
        "division": division,
        "why_custom": ranking.why_custom(run) if division == "custom" else [],
        "unranked": list(plausible.unverified(run).values()),
    }


@router.get("/runs/{run_id}/summary", dependencies=[Reader])
def summary(state: BoardDep, run_id: str) -> JSONResponse:
    """Where a submitted run stands: its page, division, and why it is custom."""
    run, division, _ = state.submitted_run(run_id)
    return JSONResponse({"run_id": run_id} | where(state, run, run_id, division))


@router.get("/runs", dependencies=[Reader])
def list_runs(state: BoardDep) -> list[dict[str, Any]]:
    """Every submitted run: id, division and machine fingerprint."""
    subs = state.accounts.submissions()
    return [{"run_id": k, "division": d, "machine": m} for k, (d, m) in subs.items()]


@router.get("/runs/{run_id}", dependencies=[Reader])
def get_run(state: BoardDep, run_id: str, format: str = "json") -> Response:
    """The run document as stored (JSON, re-importable) or its results as CSV."""
    run = state.load_run(run_id)
    if format == "csv":
        return PlainTextResponse(export_run(run, "csv"), media_type="text/csv")
    if format != "json":
        raise HTTPException(422, "format is json or csv")
    return Response(export_run(run, "json"), media_type="application/json")


@router.get("/results", dependencies=[Reader])
def results(
    state: BoardDep,
    workload: str | None = None,
    format: str = Query("json", pattern="^(json|csv)$"),
) -> Response:
    """Every ranked-or-not result of submitted runs, with raw samples."""
    if workload is None:
        runs = state.runs_by_id(list(state.accounts.submissions()))
    else:
        runs = state.runs_by_id(cases.runs_with(state.engine, workload))
    rows = [
        _csv_row(run, r)
        for run in runs
        for r in run.results
        if workload is None or r.workload == workload
    ]
    if format == "csv":
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return PlainTextResponse(out.getvalue(), media_type="text/csv")
    return JSONResponse(finite_json(rows))


@router.get("/serving", dependencies=[Reader])
def serving_board(state: BoardDep) -> JSONResponse:
    """Serving runs, one table per model, inputs and p99 bound: each device's max rate
    within the bound, its verdict, and its rank where the verdict allows."""
    groups = state.serving_board()
    return JSONResponse(finite_json([serving.group_json(g) for g in groups]))


@router.get("/leaderboard", dependencies=[Reader])
def leaderboard(
    state: BoardDep,
    workload: str,
    variant: str,
    params: str = "{}",
    division: str = "standard",
) -> JSONResponse:
    """Machines ranked on one case: pooled median, its 95 % CI, shared ranks."""
    rows = state.ranked(division, case_of_query(workload, variant, params))
    return JSONResponse(finite_json([ranking.row_json(x) for x in rows]))


@router.post("/place", dependencies=[Reader])
async def place(request: Request, state: BoardDep) -> JSONResponse:
    """Where a run's results sit among the submitted machines of the division it would rank
    in (a ``--quick`` run: custom), case by case (rank 1 = fastest, and the % of ranked
    machines it is faster than); nothing is stored. Bounded per caller and at once
    (``state.PLACE_PER_MINUTE``, ``PLACE_AT_ONCE``): 429 or 503 with Retry-After, before the
    body is read."""
    wait = state.place_limit.wait_s(await run_in_threadpool(caller, state, request))
    if wait > 0:
        raise HTTPException(
            429,
            f"over {state.place_limit.per_minute} placements a minute; try again in "
            f"{math.ceil(wait)} s",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    if not state.place_slots.acquire(blocking=False):
        raise HTTPException(
            503, "the server is placing other runs; try again", headers={"Retry-After": "1"}
        )
    try:
        return await run_in_threadpool(placement, state, await body_of(request))
    finally:
        state.place_slots.release()


def placement(state: Board, body: bytes) -> JSONResponse:
    sent = checked(body, "the run")
    mine = plausible.rejudged(sent)  # placed as the board would judge it
    out = []
    unverified = plausible.unverified(mine)
    # a result its own verdict keeps off rankings (invalid), or whose work is not its case's,
    # is not placed: said why
    why = {
        i: verdicts.says(r) if not verdicts.may(r, "rank") else unverified[i]
        for i, r in enumerate(mine.results)
        if not verdicts.may(r, "rank") or i in unverified
    }
    ok = [(i, r, ranking.case_of(r)) for i, r in enumerate(mine.results) if r.ok]
    division = ranking.division_of(mine)
    wanted = [case for i, _, case in ok if i not in why]
    board = state.ranked_many(division, wanted)
    # A machine is never its own competitor: "faster than 100 % of them" was a run placed
    # against its own twin, or against the same machine's other run. Its rows are left out
    # of each placement (and the answer says so); a twin is named.
    machine = ranking.machine_of(mine)
    there = any(row.machine == machine for rows in board.values() for row in rows)
    own = state.accounts.submission(content_of(sent)) if there else None  # what was sent
    left_out = ({"left_out": own} if own else {}) | ({"machine_left_out": True} if there else {})
    for i, r, case in ok:
        if i in why:
            out.append({**_where(r), "machines": None, "rank": None, "why": why[i]})
            continue
        # held rows rank no one, and this machine's own rows are no competitor
        rows = [row for row in board[case] if not row.held and row.machine != machine]
        t = r.measurement.median
        faster = sum(1 for row in rows if row.result.measurement.median < t)
        slower = sum(1 for row in rows if row.result.measurement.median > t)
        out.append(
            {
                **_where(r),
                "division": division,
                "machines": len(rows),
                "rank": faster + 1,
                "faster_than_pct": 100 * slower / len(rows) if rows else None,
                **left_out,
            }
        )
    return JSONResponse(finite_json(out))


def _where(r: Result) -> dict[str, Any]:
    """A placed result's case, as /api/v1/place names it."""
    return {"workload": r.workload, "variant": r.variant, "device": r.device, "params": r.params}


def case_of_query(workload: str, variant: str, params: str) -> ranking.Case:
    try:
        parsed = json.loads(params)
    except json.JSONDecodeError:
        raise HTTPException(422, 'params must be a JSON object, e.g. {"batch": 64}') from None
    if not isinstance(parsed, dict):
        raise HTTPException(422, 'params must be a JSON object, e.g. {"batch": 64}')
    return (workload, variant, json.dumps(parsed, sort_keys=True, default=str))
