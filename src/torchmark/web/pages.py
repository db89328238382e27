"""The HTML pages: the ranking of one case, a run, its full report, a machine."""

from __future__ import annotations

import functools
import gzip
from collections.abc import Callable
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from torchmark import reference
from torchmark.judge import verdicts
from torchmark.reference import SEED_SET, SEED_VARIANT, SEED_WORKLOAD
from torchmark.results import RunRecord
from torchmark.store.sql import usable_run_id
from torchmark.web import cases, plausible, ranking, serving
from torchmark.web.auth import BoardDep, Reader
from torchmark.web.catalogue import SEED_SIZE
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
    request: Request,
    case: str = "",
    division: str = "",
    sort: str = Query("", pattern=f"^-?({'|'.join(SORTS)})?$"),
) -> Response:
    engine = state.engine
    old = ranking.case_from_json(case)
    if old is not None:  # the JSON-array URLs of before: the same page, plainly
        query = dict(request.query_params) | {"case": ranking.case_key(old)}
        return RedirectResponse("/?" + plain_query(query), status_code=301)
    if division == serving.DIVISION:  # ranked on a page of its own: not a case's rates
        return RedirectResponse("/serving", status_code=301)
    counts = cases.division_counts(engine)
    division = division or next((d for d in DIVISIONS if counts.get(d)), DIVISIONS[0])
    gen = (counts.get(division, 0),)
    all_cases = state.cache.get(("cases", division, gen), lambda: cases.cases(engine, division))
    all_cases = sorted(set(all_cases) | set(reference_cases(division)))
    picked = ranking.case_from_key(case, all_cases)
    if picked is None and all_cases:
        # the seed's own question first: its add loop, as published, when anyone ran it
        seed = [c for c in all_cases if c[:2] == (SEED_WORKLOAD, SEED_VARIANT)]
        picked = (seed or all_cases)[0]
    case_gen = cases.generation(engine, division, picked) if picked else ()
    key = ("page", division, picked, sort, tuple(sorted(counts.items())), case_gen)
    return HTMLResponse(
        state.rendered.get(
            key, lambda: index_page(state, division, sort, counts, all_cases, picked, case_gen)
        )
    )


DIVISIONS = ("standard", "custom")


def plain_query(query: dict[str, str]) -> str:
    """A query string a person can read: ``case=matmul/float32/n=512``."""
    return urlencode(query, safe="/=,:")


@functools.cache
def reference_rows(division: str) -> dict[ranking.Case, list[ranking.Row]]:
    """The committed reference runs' rows of each case, in the division they belong to
    (``--quick`` runs: custom): shown, labelled, beside the submitted machines'. A row's
    machine is ``reference NAME``."""
    out: dict[ranking.Case, list[ranking.Row]] = {}
    for ref in reference.runs():
        if ref.run is None or ranking.division_of(ref.run) != division:
            continue
        name = f"reference {ref.name}"
        run = ref.run.model_copy(update={"run_id": name})
        for case in ranking.cases([run]):
            out.setdefault(case, []).extend(ranking.rank([run], case, {name: name}))
    return out


def reference_cases(division: str) -> list[ranking.Case]:
    # only the divisions there are: the cache must not grow with whatever a URL names
    return list(reference_rows(division)) if division in DIVISIONS else []


def index_page(
    state: Board,
    division: str,
    sort: str,
    counts: dict[str, int],
    all_cases: list[ranking.Case],
    picked: ranking.Case | None,
    case_gen: tuple[int, ...],
) -> str:
    labels = {ranking.case_key(c): ranking.case_label(c) for c in all_cases}
    references = reference_cases(division)
    seed_case = picked is None or picked[:2] == (SEED_WORKLOAD, SEED_VARIANT)
    rows = state.ranked(division, picked, case_gen) if picked and case_gen[0] else []
    values = [{k: f(i, row) for k, f in SORTS.items()} for i, row in enumerate(rows)]
    key, desc = sort.removeprefix("-"), sort.startswith("-")
    order = sorted_by(values, key, desc) if key else list(range(len(rows)))
    query = {"case": ranking.case_key(picked) if picked else "", "division": division}
    # a header link sorts by its column, ascending; the sorted column's link reverses it
    flip = {k: f"-{k}" if k == key and not desc else k for k in SORTS}
    links = {k: "/?" + plain_query(query | {"sort": flip[k]}) for k in SORTS}
    machines = cases.machine_labels(state.engine, [row.machine for row in rows])
    seed = reference.load(SEED_SET) if seed_case else None
    seed_rows = seed_table(seed, rows, machines) if seed else []
    return state.render(
        "index.html",
        labels=labels,
        picked=ranking.case_key(picked) if picked else "",
        picked_label=ranking.case_label(picked) if picked else "",
        rows=[(rows[i], values[i]) for i in order],
        references=reference_rows(division).get(picked, []) if picked in references else [],
        machines=machines,
        sort_key=key,
        sort_desc=desc,
        sort_links=links,
        division=division,
        divisions=DIVISIONS,
        counts=counts,
        n_runs=counts.get(division, 0),
        seed=seed,
        seed_rows=seed_rows,
        seed_size=f"{SEED_SIZE}²",
        placed_here=any(r.this_machine for r in seed_rows),
    )


def seed_table(
    seed: reference.ReferenceSet, rows: list[ranking.Row], machines: dict[str, str]
) -> list[reference.ReferenceRow]:
    """The blog's table, fastest first, with the committed reference runs and each
    submitted machine of the seed case placed in it (`compare --reference seed-2023`'s
    table, on the board)."""
    mine = []
    for row in rows:
        per_it = seed.bytes_per_iteration
        if not (row.result.work.bytes == per_it and row.result.rate("items")):
            continue  # another --size: another iteration, no place in that table
        mine.append(
            reference.ReferenceRow(
                hardware=f"{row.model} ({row.device})",
                value=row.result.rate("items") or 0.0,
                device_type="cpu" if row.device == "cpu" else "gpu",
                implied_bytes_per_s=row.result.rate("bytes"),
                source=f"submitted: {machines.get(row.machine, row.machine)}",
                this_machine=True,
                measured=True,
            )
        )
    return reference.placed(seed, mine)


@router.get("/serving", response_class=HTMLResponse, dependencies=[Reader])
def serving_page(state: BoardDep) -> HTMLResponse:
    """Serving runs: per model, inputs and p99 bound, each device's max rate within it."""
    groups = state.serving_board()
    machines = cases.machine_labels(state.engine, [r.machine for g in groups for r in g.rows])
    return HTMLResponse(state.render("serving.html", groups=groups, machines=machines))


@router.get("/runs/{run_id}", response_class=HTMLResponse, dependencies=[Reader])
def run_page(state: BoardDep, run_id: str) -> HTMLResponse:
    run, division, machine = state.submitted_run(run_id)
    html = state.render(
        "run.html",
        run=run,
        serving=serving.rows_of(run, machine),
        served=serving.read(run),
        division=division,
        machine=machine,
        machine_label=ranking.machine_label(run),
        why_custom=ranking.why_custom(run),
        unverified=plausible.unverified(run),
        ranks=ranks_of(state, run, run_id, division),
        models={r.device: ranking.device_model(run, r.device) for r in run.results},
        # each verdict with its reasons, as the CLI's footnotes give them
        said=["; ".join([verdicts.says(r), *verdicts.reasons(r)[1:]]) for r in run.results],
    )
    return HTMLResponse(html)


def ranks_of(
    state: Board, run: RunRecord, run_id: str, division: str
) -> dict[int, tuple[str, str]]:
    """Each result's standing on the board, by its place in the run: (``3 of 12`` or
    ``not ranked``, the case page's URL); a result in no ranking (its verdict, its work) has
    none. Read from the cached rankings of its cases."""
    if division == serving.DIVISION:
        return {}
    wanted = [ranking.case_of(r) for r in run.results if r.ok]
    board = state.ranked_many(division, wanted) if wanted else {}
    out = {}
    for i, r in enumerate(run.results):
        case = ranking.case_of(r)
        rows = board.get(case, [])
        row = next((x for x in rows if run_id in x.runs and x.device == r.device), None)
        if row is None:
            continue
        url = "/?" + urlencode({"case": ranking.case_key(case), "division": division})
        n = sum(1 for x in rows if not x.held)
        out[i] = (f"{row.rank} of {n}" if not row.held else "not ranked: " + row.standing, url)
    return out


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
        label=ranking.machine_label(mine[-1]),
        runs=mine,
        divisions=found,
        devices=mine[-1].environment.get("devices") or {},
        software=mine[-1].environment.get("software") or {},
    )
    return HTMLResponse(html)
