"""The leaderboard server: a FastAPI app over the results store (``create_app``).

JSON API under ``/api/v1/`` (OpenAPI at ``/api/v1/openapi.json``), HTML pages from Jinja2
templates with autoescape, every asset served from ``static/`` (no CDN, no inline script).
Reads are public unless ``private``; writes need ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import hashlib
import http
import io
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from torchmark import reference, verdicts
from torchmark.errors import InputError, RunNotFoundError
from torchmark.format import si, sig
from torchmark.reference import SEED_SET, SEED_VARIANT, SEED_WORKLOAD
from torchmark.results import Result, RunRecord
from torchmark.store import open_store
from torchmark.store.exchange import (
    CSV_COLUMNS,
    _csv_row,
    escape_text,
    export_run,
    finite_json,
    parse_run,
)
from torchmark.store.sql import usable_run_id
from torchmark.web import cases, ranking
from torchmark.web.accounts import Accounts
from torchmark.web.reports import RETRY_AFTER_S, Busy, Reports
from torchmark.web.strip import prepare, shareable

HERE = Path(__file__).parent
MAX_BYTES = 8 * 1024 * 1024  # a full suite run with raw samples is ~1-2 MiB
# Runs kept in memory per server process, by count and by their JSON size (the objects take
# a few times more): a run of 100 cases x 24 samples is ~100 kB of JSON, so the 1,000-run
# benchmark store fits, and a larger one is read again from the database as needed.
RUN_CACHE_RUNS = 2048
RUN_CACHE_BYTES = 128 * 2**20
RATE_LIMIT = 60  # submissions per token per hour
NEED_TOKEN = (
    "a valid token is needed: send 'Authorization: Bearer <token>' "
    "(made by `torchmark serve token create NAME`)"
)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


# The report is one self-contained file with inline CSS and matplotlib's SVG (style
# attributes): it may use inline style, and nothing else. `sandbox` without allow-scripts
# runs no script at all in it, and gives it an origin of its own.
REPORT_CSP = (
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def create_app(
    db: str | None = None,
    *,
    rate_limit: int = RATE_LIMIT,
    private: bool = False,
    public_url: str = "",
    render_workers: int = 1,
    run_cache: tuple[int, int] = (RUN_CACHE_RUNS, RUN_CACHE_BYTES),
) -> FastAPI:
    """The app over the store at ``db``. Several processes may serve one PostgreSQL
    database: what must be shared (submissions, the ranking index, drawn reports) lives in
    it, and each process keeps only caches. ``render_workers``: processes drawing report
    pages; ``run_cache``: (runs, approximate bytes) kept in memory."""
    store = open_store(db)
    accounts = Accounts(store)
    engine = accounts.engine
    # One submission at a time: check-duplicate, store and record stay one step, so the
    # same run sent twice at once is stored once (the thread lock in this process, and
    # accounts.writing() across the processes sharing a PostgreSQL database).
    write_lock = threading.Lock()
    with write_lock, accounts.writing():
        cases.backfill(engine, store)  # runs submitted before the ranking index existed
    cache = cases.Cache()
    reports = Reports(engine, workers=render_workers)
    pages = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True)
    )
    pages.filters.update(si=si, sig=sig, run_links=run_links)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.reports.close()
        store.close()  # uvicorn's shutdown: no connection left open (PostgreSQL)

    app = FastAPI(
        lifespan=lifespan,
        title="torchmark leaderboard",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # FastAPI's docs page loads its script from a CDN
        redoc_url=None,
    )
    app.state.store, app.state.accounts, app.state.reports = store, accounts, reports
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    if private:
        # Every path, not only the routes that declare `Reader`: the static files and the
        # OpenAPI document too, and a 404 (which would tell which run ids exist).
        @app.middleware("http")
        async def _private(request: Request, call_next: Any) -> Response:
            authorization = request.headers.get("authorization")
            if await run_in_threadpool(bearer, authorization) is None:
                need = {"WWW-Authenticate": "Bearer"}
                if wants_page(request):
                    return HTMLResponse(error_page(401, NEED_TOKEN), status_code=401, headers=need)
                return JSONResponse({"detail": NEED_TOKEN}, status_code=401, headers=need)
            response: Response = await call_next(request)
            return response

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)  # the report sets its own
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _error_page(request: Request, exc: StarletteHTTPException) -> Response:
        if not wants_page(request):
            return await http_exception_handler(request, exc)
        retry = (exc.headers or {}).get("Retry-After")
        html = error_page(exc.status_code, exc.detail, retry)
        return HTMLResponse(html, status_code=exc.status_code, headers=exc.headers)

    def wants_page(request: Request) -> bool:
        # a browser gets a page with its way back to the board; the API and scripts get JSON
        html = "text/html" in request.headers.get("accept", "")
        return html and not request.url.path.startswith("/api/")

    def error_page(status: int, detail: str, retry_after: str | None = None) -> str:
        phrase = http.HTTPStatus(status).phrase
        return pages.get_template("error.html").render(
            status=status, phrase=phrase, detail=detail, retry_after=retry_after
        )

    def bearer(authorization: str | None) -> str | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        return accounts.check_token(authorization.removeprefix("Bearer ").strip())

    def writer(authorization: Annotated[str | None, Header()] = None) -> str:
        name = bearer(authorization)
        if name is None:
            raise HTTPException(401, NEED_TOKEN, headers={"WWW-Authenticate": "Bearer"})
        return name

    def reader(authorization: Annotated[str | None, Header()] = None) -> None:
        if private:
            writer(authorization)

    Reader = Depends(reader)

    # A submitted run never changes, so each is read from the database once per process
    # while it stays in this LRU (a page over 200 runs took 270 ms reading them all on every
    # request). The server stores each accepted document under an id of its own; the same
    # content sent again is answered with that id and stores nothing; a run resumed after it
    # was submitted is other content, so another id; and `torchmark run --resume` on the
    # server's database refuses a submitted run (its host was stripped: another
    # environment). tests/web/test_board_queries.py holds this. Rankings never read runs:
    # they query the index of their cases.
    runs = cases.Cache(run_cache[0], max_bytes=run_cache[1], weigh=_run_bytes)
    app.state.runs = runs

    def read(run_id: str) -> RunRecord:
        return public_view(store.load(run_id))

    def runs_by_id(run_ids: list[str]) -> list[RunRecord]:
        return [runs.get(run_id, functools.partial(read, run_id)) for run_id in run_ids]

    def ranked(
        division: str, case: ranking.Case, gen: tuple[int, ...] | None = None
    ) -> list[ranking.Row]:
        gen = gen or cases.generation(engine, division, case)
        return cache.get(("rank", division, case, gen), lambda: cases.rank(engine, division, case))

    def ranked_many(
        division: str, wanted: list[ranking.Case]
    ) -> dict[ranking.Case, list[ranking.Row]]:
        """``ranked`` of every case in ``wanted`` in one query for their generations and one
        for those not cached (per cases.CASES_PER_QUERY cases): a query or two per case
        made `/api/v1/place` ~100-200 queries for a suite run."""
        keys = {
            c: ("rank", division, c, g)
            for c, g in cases.generations(engine, division, wanted).items()
        }
        missing = [c for c, key in keys.items() if key not in cache]
        fresh = cases.rank_many(engine, division, missing) if missing else {}

        def rows(case: ranking.Case) -> list[ranking.Row]:
            # evicted since it was looked for (another request's answers): read alone
            return fresh[case] if case in fresh else cases.rank(engine, division, case)

        return {c: cache.get(key, functools.partial(rows, c)) for c, key in keys.items()}

    # Rendered ranking pages, each a pure function of its query and the two generations: a
    # page over 50 machines x 20 runs took 18 ms of Jinja on every view (1,000 run links).
    # Up to ~100 kB each: bounded by bytes as well.
    rendered = cases.Cache(256, max_bytes=32 * 2**20, weigh=len)

    def load_run(run_id: str) -> RunRecord:
        return submitted_run(run_id)[0]

    def submitted_run(run_id: str) -> tuple[RunRecord, str]:
        """The submitted run ``run_id`` and its division; 404 when there is none."""
        if not usable_run_id(run_id) or run_id == "latest":
            raise HTTPException(404, f"no run {run_id!r}")
        found = accounts.submitted(run_id)
        if found is None:
            raise HTTPException(404, f"no submitted run {run_id!r}")
        try:
            return runs.get(run_id, functools.partial(read, run_id)), found[0]
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id!r}") from None

    # -- API ---------------------------------------------------------------------------

    @app.post("/api/v1/runs", status_code=201)
    async def submit(request: Request, token_name: str = Depends(writer)) -> JSONResponse:
        """Submit one exported run document (``torchmark export RUN``)."""
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BYTES:
            raise HTTPException(413, f"payload over {MAX_BYTES // 2**20} MiB")
        received = bytearray()
        async for chunk in request.stream():
            received += chunk
            if len(received) > MAX_BYTES:
                raise HTTPException(413, f"payload over {MAX_BYTES // 2**20} MiB")
        # parsing, statistics and the database block: off the event loop
        return await run_in_threadpool(accept, bytes(received), token_name)

    def accept(body: bytes, token_name: str) -> JSONResponse:
        try:
            doc = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HTTPException(422, f"the submission is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise HTTPException(422, "the submission is not a torchmark run: not a JSON object")
        doc, _ = prepare(doc)  # never trust the client's stripping
        try:
            run = parse_run(json.dumps(doc), "the submission")
        except InputError as e:
            raise HTTPException(422, str(e)) from None
        bad = ranking.check_bounds(run)
        if bad:
            raise HTTPException(422, f"the submission is refused: {bad}")
        # The server names its runs: a client's id could be any text (`<script>`, `../x`, a
        # `?` that breaks links) and two machines' ids could collide.
        run = run.model_copy(update={"run_id": None})
        content = hashlib.sha256(
            json.dumps(run.model_dump(mode="json"), sort_keys=True).encode()
        ).hexdigest()
        # Built before the lock, which every submission to this database waits for: 3.5 ms
        # for a 100-case run (benchmarks/leaderboard_load.py's); only its id comes later.
        division, machine = ranking.division_of(run), ranking.machine_of(run)
        rows = cases.index_rows(run, "", division, machine)
        with write_lock, accounts.writing():
            first = accounts.submission(content)
            if first is not None:
                return JSONResponse({"run_id": first, "duplicate": True}, status_code=200)
            if accounts.count_since(token_name, 1) >= rate_limit:
                raise HTTPException(
                    429,
                    f"token {token_name!r} sent {rate_limit} runs in the last hour; try later",
                    headers={"Retry-After": "3600"},
                )
            run_id = store.save(run)
            for row in rows:
                row["run_id"] = run_id
            run_id = accounts.record(
                content,
                run_id,
                token_name,
                division,
                machine,
                also=lambda conn: cases.insert(conn, rows),
            )
        url = f"{public_url.rstrip('/')}/runs/{run_id}"
        return JSONResponse({"run_id": run_id, "duplicate": False, "url": url}, status_code=201)

    @app.get("/api/v1/runs", dependencies=[Reader])
    def list_runs() -> list[dict[str, Any]]:
        """Every submitted run: id, division and machine fingerprint."""
        subs = accounts.submissions()
        return [{"run_id": k, "division": d, "machine": m} for k, (d, m) in subs.items()]

    @app.get("/api/v1/runs/{run_id}", dependencies=[Reader])
    def get_run(run_id: str, format: str = "json") -> Response:
        """The run document as stored (JSON, re-importable) or its results as CSV."""
        run = load_run(run_id)
        if format == "csv":
            return PlainTextResponse(export_run(run, "csv"), media_type="text/csv")
        if format != "json":
            raise HTTPException(422, "format is json or csv")
        return Response(export_run(run, "json"), media_type="application/json")

    @app.get("/api/v1/results", dependencies=[Reader])
    def results(
        workload: str | None = None,
        format: str = Query("json", pattern="^(json|csv)$"),
    ) -> Response:
        """Every ranked-or-not result of submitted runs, with raw samples."""
        if workload is None:
            runs = runs_by_id(list(accounts.submissions()))
        else:
            runs = runs_by_id(cases.runs_with(engine, workload))
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

    @app.get("/api/v1/leaderboard", dependencies=[Reader])
    def leaderboard(
        workload: str, variant: str, params: str = "{}", division: str = "standard"
    ) -> JSONResponse:
        """Machines ranked on one case: pooled median, its 95 % CI, shared ranks."""
        rows = ranked(division, _case(workload, variant, params))
        return JSONResponse(finite_json([ranking.row_json(x) for x in rows]))

    @app.post("/api/v1/place", dependencies=[Reader])
    async def place(request: Request) -> JSONResponse:
        """Where a run's results sit among the submitted machines of the standard division,
        case by case (rank 1 = fastest, and the % of ranked machines it is faster than);
        nothing is stored."""
        received = bytearray()
        async for chunk in request.stream():
            received += chunk
            if len(received) > MAX_BYTES:
                raise HTTPException(413, f"payload over {MAX_BYTES // 2**20} MiB")
        return await run_in_threadpool(placement, bytes(received))

    def placement(body: bytes) -> JSONResponse:
        try:
            doc = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HTTPException(422, f"the run is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise HTTPException(422, "the run is not a torchmark run: not a JSON object")
        try:
            mine = parse_run(json.dumps(prepare(doc)[0]), "the run")
        except InputError as e:
            raise HTTPException(422, str(e)) from None
        out = []
        # a result its own verdict keeps off rankings (invalid) is not placed: said why
        ok = [(r, ranking.case_of(r)) for r in mine.results if r.ok]
        board = ranked_many("standard", [case for r, case in ok if verdicts.may(r, "rank")])
        for r, case in ok:
            if not verdicts.may(r, "rank"):
                out.append({**_where(r), "machines": None, "rank": None, "why": verdicts.says(r)})
                continue
            rows = board[case]
            t = r.measurement.median
            faster = sum(1 for row in rows if row.result.measurement.median < t)
            slower = sum(1 for row in rows if row.result.measurement.median > t)
            out.append(
                {
                    **_where(r),
                    "machines": len(rows),
                    "rank": faster + 1,
                    "faster_than_pct": 100 * slower / len(rows) if rows else None,
                }
            )
        return JSONResponse(finite_json(out))

    # -- pages -------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse, dependencies=[Reader])
    def index(
        case: str = "",
        division: str = "standard",
        sort: str = Query("", pattern=f"^-?({'|'.join(SORTS)})?$"),
    ) -> HTMLResponse:
        gen = cases.generation(engine, division)
        all_cases = cache.get(("cases", division, gen), lambda: cases.cases(engine, division))
        picked = next((c for c in all_cases if json.dumps(c) == case), None)
        if picked is None and all_cases:
            # the seed's own question first: its add loop, as published, when anyone ran it
            seed = [c for c in all_cases if c[:2] == (SEED_WORKLOAD, SEED_VARIANT)]
            picked = (seed or all_cases)[0]
        case_gen = cases.generation(engine, division, picked) if picked else ()
        return HTMLResponse(
            rendered.get(
                ("page", division, picked, sort, gen, case_gen),
                lambda: index_page(division, sort, gen, all_cases, picked, case_gen),
            )
        )

    def index_page(
        division: str,
        sort: str,
        gen: tuple[int, ...],
        all_cases: list[ranking.Case],
        picked: ranking.Case | None,
        case_gen: tuple[int, ...],
    ) -> str:
        labels = {json.dumps(c): ranking.case_label(c) for c in all_cases}
        show_seed = picked is None or picked[:2] == (SEED_WORKLOAD, SEED_VARIANT)
        rows = ranked(division, picked, case_gen) if picked else []
        values = [{k: f(i, row) for k, f in SORTS.items()} for i, row in enumerate(rows)]
        key, desc = sort.removeprefix("-"), sort.startswith("-")
        order = list(range(len(rows)))
        if key:
            order = sorted_by(values, key, desc)
        query = {"case": json.dumps(picked) if picked else "", "division": division}
        # a header link sorts by its column, ascending; the sorted column's link reverses it
        flip = {k: f"-{k}" if k == key and not desc else k for k in SORTS}
        links = {k: "/?" + urlencode(query | {"sort": flip[k]}) for k in SORTS}
        return pages.get_template("index.html").render(
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

    @app.get("/runs/{run_id}", response_class=HTMLResponse, dependencies=[Reader])
    def run_page(run_id: str) -> HTMLResponse:
        run, division = submitted_run(run_id)
        html = pages.get_template("run.html").render(
            run=run,
            division=division,
            why_custom=ranking.nonstandard_flags(run),
            models={r.device: ranking.device_model(run, r.device) for r in run.results},
            # each verdict with its reasons, as the CLI's footnotes give them
            said=["; ".join([verdicts.says(r), *verdicts.reasons(r)[1:]]) for r in run.results],
        )
        return HTMLResponse(html)

    @app.get("/runs/{run_id}/report", response_class=HTMLResponse, dependencies=[Reader])
    async def run_report(run_id: str, request: Request) -> Response:
        """The page `torchmark report` makes for this run: its tables, charts and notes."""
        if not usable_run_id(run_id) or run_id == "latest":
            raise HTTPException(404, f"no run {run_id!r}")
        drawer: Reports = app.state.reports
        found = await run_in_threadpool(drawer.find, run_id)
        if found is None:
            raise HTTPException(404, f"no submitted run {run_id!r}")
        key, page = found
        if page is None:
            try:
                page = await drawer.page(run_id, key, functools.partial(load_run, run_id))
            except Busy as e:
                retry = {"Retry-After": str(RETRY_AFTER_S)}
                raise HTTPException(503, str(e), headers=retry) from None
        headers = {"Content-Security-Policy": REPORT_CSP, "Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"  # stored gzipped: sent as it is
        else:
            page = await run_in_threadpool(gzip.decompress, page)
        return Response(page, media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/machines/{machine}", response_class=HTMLResponse, dependencies=[Reader])
    def machine_page(machine: str) -> HTMLResponse:
        found = dict(cases.machine_runs(engine, machine))
        if not found:
            raise HTTPException(404, f"no machine {machine!r}")
        mine = sorted(runs_by_id(list(found)), key=lambda r: r.created_utc)
        html = pages.get_template("machine.html").render(
            machine=machine,
            runs=mine,
            divisions=found,
            devices=mine[-1].environment.get("devices") or {},
            software=mine[-1].environment.get("software") or {},
        )
        return HTMLResponse(html)

    return app


# The settings of `torchmark serve --workers N` for its worker processes (JSON: create_app's
# keyword arguments), set by the command and read by from_settings only.
SERVE_SETTINGS = "TORCHMARK_SERVE_SETTINGS"


def from_settings() -> FastAPI:
    """uvicorn's app factory in each worker process of `torchmark serve --workers N`."""
    return create_app(**json.loads(os.environ[SERVE_SETTINGS]))


def _where(r: Result) -> dict[str, Any]:
    """A placed result's case, as /api/v1/place names it."""
    return {"workload": r.workload, "variant": r.variant, "device": r.device, "params": r.params}


def run_links(run_ids: list[str]) -> Markup:
    """A ranking row's runs as numbered links: one join, not a template loop (1,000 links on
    a page of 50 machines x 20 runs took ~10 ms in Jinja)."""
    links = (f'<a href="/runs/{escape(r)}">{i}</a> ' for i, r in enumerate(run_ids, 1))
    return Markup("".join(links))


def public_view(run: RunRecord) -> RunRecord:
    """``run`` as every reader of the board sees it: no command line and of the config only
    the options that define its cases, also for runs stored before the server removed them
    from each submission (a command as typed can carry a password), and no text that cannot
    be sent (a lone surrogate, a NUL: escaped)."""
    doc = run.model_dump(mode="json")
    shown, removed = shareable(doc)
    safe = escape_text(shown)  # text stored before the door refused it: shown escaped
    return RunRecord.model_validate(safe) if removed or safe != shown else run


def _run_bytes(run: RunRecord) -> int:
    return len(run.model_dump_json())


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


def _case(workload: str, variant: str, params: str) -> ranking.Case:
    try:
        parsed = json.loads(params)
    except json.JSONDecodeError:
        raise HTTPException(422, 'params must be a JSON object, e.g. {"batch": 64}') from None
    if not isinstance(parsed, dict):
        raise HTTPException(422, 'params must be a JSON object, e.g. {"batch": 64}')
    return (workload, variant, json.dumps(parsed, sort_keys=True, default=str))
