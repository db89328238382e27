"""The HTML pages: the ranking of one case, a run, its full report, a machine."""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Callable
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from torchmark import reference
from torchmark.reference import SEED_SET, SEED_VARIANT, SEED_WORKLOAD
from torchmark.store.sql import usable_run_id
from torchmark.web import cases, plausible, ranking
from torchmark.web.auth import BoardDep, Reader
from torchmark.web.reports import RETRY_AFTER_S, Busy, Reports
from torchmark.web.state import Board

# The report is one self-contained file with inline CSS and matplotlib's SVG (style
# attributes): it may use inline style, and nothing else. `sandbox` without allow-scripts
# runs no script at all in it, and gives it an origin of its own.
REPORT_CSP = (
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

router = APIRouter()

# The ranking page's sortable columns: each row's value (None sorts last either way). `rank`
# is the ranked order itself: ties keep it, on the server as in board.js.
SORTS: dict[str, Callable[[int, ranking.Row], float | None]] = {
    "rank": lambda i, row: i,
    "runs": lambda i, row: len(row.runs),
    "samples": lambda i, row: row.result.measurement.n,
    "median": lambda i, row: row.rate,
    "ci": lambda i, row: row.rate_ci[0] if row.rate_ci else None,
    "speedup": lambda i, row: row.speedup_x,
}


def sorted_by(values: list[dict[str, float | None]], key: str, desc: bool) -> list[int]:
    """Row positions ordered by ``key``; equal values keep the ranked order, None last."""
    have = [i for i, v in enumerate(values) if v[key] is not None]
    have.sort(key=lambda i: (-1 if desc else 1) * float(values[i][key] or 0))
    return have + [i for i, v in enumerate(values) if v[key] is None]


@router.get("/", response_class=HTMLResponse, dependencies=[Reader])
def index(
    state: BoardDep,
    case: str = "",
    division: str = "standard",
    sort: str = Query("", pattern=f"^-?({'|'.join(SORTS)})?$"),
) -> HTMLResponse:
    engine = state.engine
    gen = cases.generation(engine, division)
    all_cases = state.cache.get(("cases", division, gen), lambda: cases.cases(engine, division))
    picked = next((c for c in all_cases if json.dumps(c) == case), None)
    if picked is None and all_cases:
        # the seed's own question first: its add loop, as published, when anyone ran it
        seed = [c for c in all_cases if c[:2] == (SEED_WORKLOAD, SEED_VARIANT)]
        picked = (seed or all_cases)[0]
    case_gen = cases.generation(engine, division, picked) if picked else ()
    return HTMLResponse(
        state.rendered.get(
            ("page", division, picked, sort, gen, case_gen),
            lambda: index_page(state, division, sort, gen, all_cases, picked, case_gen),
        )
    )


def index_page(
    state: Board,
    division: str,
    sort: str,
    gen: tuple[int, ...],
    all_cases: list[ranking.Case],
    picked: ranking.Case | None,
    case_gen: tuple[int, ...],
) -> str:
    labels = {json.dumps(c): ranking.case_label(c) for c in all_cases}
    show_seed = picked is None or picked[:2] == (SEED_WORKLOAD, SEED_VARIANT)
    rows = state.ranked(division, picked, case_gen) if picked else []
    values = [{k: f(i, row) for k, f in SORTS.items()} for i, row in enumerate(rows)]
    key, desc = sort.removeprefix("-"), sort.startswith("-")
    order = list(range(len(rows)))
    if key:
        order = sorted_by(values, key, desc)
    query = {"case": json.dumps(picked) if picked else "", "division": division}
    # a header link sorts by its column, ascending; the sorted column's link reverses it
    flip = {k: f"-{k}" if k == key and not desc else k for k in SORTS}
    links = {k: "/?" + urlencode(query | {"sort": flip[k]}) for k in SORTS}
    return state.render(
        "index.html",
        labels=labels,
        picked=json.dumps(picked) if picked else "",
        picked_label=ranking.case_label(picked) if picked else "",
        rows=[(rows[i], values[i]) for i in order],
        sort_key=key,
        sort_desc=desc,
        sort_links=links,
        division=division,
        n_runs=gen[0],
        seed=reference.load(SEED_SET) if show_seed else None,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse, dependencies=[Reader])
def run_page(state: BoardDep, run_id: str) -> HTMLResponse:
    run, division = state.submitted_run(run_id)
    html = state.render(
        "run.html",
        run=run,
        division=division,
        why_custom=ranking.nonstandard_flags(run),
        unverified=plausible.unverified(run),
        models={r.device: ranking.device_model(run, r.device) for r in run.results},
    )
    return HTMLResponse(html)


@router.get("/runs/{run_id}/report", response_class=HTMLResponse, dependencies=[Reader])
async def run_report(state: BoardDep, run_id: str, request: Request) -> Response:
    """The page `torchmark report` makes for this run: its tables, charts and notes."""
    if not usable_run_id(run_id) or run_id == "latest":
        raise HTTPException(404, f"no run {run_id!r}")
    drawer: Reports = state.reports
    found = await run_in_threadpool(drawer.find, run_id)
    if found is None:
        raise HTTPException(404, f"no submitted run {run_id!r}")
    key, page = found
    if page is None:
        try:
            page = await drawer.page(run_id, key, functools.partial(state.load_run, run_id))
        except Busy as e:
            retry = {"Retry-After": str(RETRY_AFTER_S)}
            raise HTTPException(503, str(e), headers=retry) from None
    headers = {"Content-Security-Policy": REPORT_CSP, "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"  # stored gzipped: sent as it is
    else:
        page = await run_in_threadpool(gzip.decompress, page)
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)


@router.get("/machines/{machine}", response_class=HTMLResponse, dependencies=[Reader])
def machine_page(state: BoardDep, machine: str) -> HTMLResponse:
    found = dict(cases.machine_runs(state.engine, machine))
    if not found:
        raise HTTPException(404, f"no machine {machine!r}")
    mine = sorted(state.runs_by_id(list(found)), key=lambda r: r.created_utc)
    html = state.render(
        "machine.html",
        machine=machine,
        runs=mine,
        divisions=found,
        devices=mine[-1].environment.get("devices") or {},
        software=mine[-1].environment.get("software") or {},
    )
    return HTMLResponse(html)
