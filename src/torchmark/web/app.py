"""The leaderboard server: a FastAPI app over the results store (``create_app``).

JSON API under ``/api/v1/`` (``api.py``; OpenAPI at ``/api/v1/openapi.json``), HTML pages
(``pages.py``) from Jinja2 templates with autoescape, every asset served from ``static/`` (no
CDN, no inline script). Reads are public unless ``private``; writes need ``Authorization:
Bearer <token>`` (``auth.py``). What the routes share is one ``Board`` (``state.py``), the
app's ``state``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from torchmark.errors import RunNotFoundError, StoreError, first_line
from torchmark.store import open_store
from torchmark.web import api, pages
from torchmark.web.auth import NEED_TOKEN, bearer
from torchmark.web.state import (
    HERE,
    PLACE_PER_MINUTE,
    RATE_LIMIT,
    RUN_CACHE_BYTES,
    RUN_CACHE_RUNS,
    Board,
)

log = logging.getLogger(__name__)
# While the database does not answer (PostgreSQL restarting, a network cut), every request
# that needs it is answered 503 with this Retry-After: SQLAlchemy's connection errors, and
# the store's own (StoreError: it wraps them, after its retries for writes).
DB_RETRY_S = 5
UNAVAILABLE: tuple[type[Exception], ...] = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    sa.exc.DisconnectionError,
    sa.exc.TimeoutError,
    StoreError,
)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def create_app(
    db: str | None = None,
    *,
    rate_limit: int = RATE_LIMIT,
    private: bool = False,
    public_url: str = "",
    render_workers: int = 1,
    run_cache: tuple[int, int] = (RUN_CACHE_RUNS, RUN_CACHE_BYTES),
    place_per_minute: int = PLACE_PER_MINUTE,
) -> FastAPI:
    """The app over the store at ``db``. Several processes may serve one PostgreSQL
    database: what must be shared (submissions, the ranking index, drawn reports) lives in
    it, and each process keeps only caches. ``render_workers``: processes drawing report
    pages; ``run_cache``: (runs, approximate bytes) kept in memory; ``place_per_minute``:
    placements a caller may ask for a minute."""
    store = open_store(db)
    state = Board(
        store,
        rate_limit=rate_limit,
        private=private,
        public_url=public_url,
        render_workers=render_workers,
        run_cache=run_cache,
        place_per_minute=place_per_minute,
    )

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
    app.state = state
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(api.router)
    app.include_router(pages.router)

    if private:
        # Every path, not only the routes that declare `Reader`: the static files and the
        # OpenAPI document too, and a 404 (which would tell which run ids exist).
        @app.middleware("http")
        async def _private(request: Request, call_next: Any) -> Response:
            authorization = request.headers.get("authorization")
            if await run_in_threadpool(bearer, state, authorization) is None:
                need = {"WWW-Authenticate": "Bearer"}
                if wants_page(request):
                    html = state.error_page(401, NEED_TOKEN)
                    return HTMLResponse(html, status_code=401, headers=need)
                return JSONResponse({"detail": NEED_TOKEN}, status_code=401, headers=need)
            response: Response = await call_next(request)
            return response

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        return secure(await call_next(request))

    @app.exception_handler(StarletteHTTPException)
    async def _error_page(request: Request, exc: StarletteHTTPException) -> Response:
        if not wants_page(request):
            return await http_exception_handler(request, exc)
        retry = (exc.headers or {}).get("Retry-After")
        html = state.error_page(exc.status_code, exc.detail, retry)
        return HTMLResponse(html, status_code=exc.status_code, headers=exc.headers)

    async def _unavailable(request: Request, exc: Exception) -> Response:
        log.warning("results database unavailable: %s", first_line(exc, 300))
        detail = (
            f"the leaderboard's database is not answering; try again in {DB_RETRY_S} s "
            "(nothing was stored)"
        )
        return error(request, 503, detail, {"Retry-After": str(DB_RETRY_S)})

    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, _unavailable)

    @app.exception_handler(RunNotFoundError)  # a StoreError, but no outage
    async def _gone(request: Request, exc: RunNotFoundError) -> Response:
        return error(request, 404, "no such run (it was removed from the database)")

    # Anything else is a bug: logged with its traceback (uvicorn's log), answered with one
    # line and the security headers. Starlette calls this handler outside every middleware,
    # so the headers are set here.
    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        if isinstance(exc, UNAVAILABLE) and not isinstance(exc, RunNotFoundError):
            # raised in a middleware (the private check), outside the handlers above
            return await _unavailable(request, exc)
        return error(request, 500, "the server failed on this request; it is logged")

    def error(
        request: Request, status: int, detail: str, headers: dict[str, str] | None = None
    ) -> Response:
        response: Response
        if wants_page(request):
            retry = (headers or {}).get("Retry-After")
            page = state.error_page(status, detail, retry)
            response = HTMLResponse(page, status_code=status, headers=headers)
        else:
            response = JSONResponse({"detail": detail}, status_code=status, headers=headers)
        response.headers["Cache-Control"] = "no-store"
        return secure(response)

    return app


def secure(response: Response) -> Response:
    """The headers every answer carries: the page's CSP (the report sets its own), no MIME
    sniffing, no referrer sent to other sites, and revalidation before a cached copy is
    shown (a ranking changes with each submission)."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers.setdefault("Cache-Control", "no-cache")
    return response


def wants_page(request: Request) -> bool:
    # a browser gets a page with its way back to the board; the API and scripts get JSON
    html = "text/html" in request.headers.get("accept", "")
    return html and not request.url.path.startswith("/api/")


# The settings of `torchmark board --workers N` for its worker processes (JSON: create_app's
# keyword arguments), set by the command and read by from_settings only.
SERVE_SETTINGS = "TORCHMARK_SERVE_SETTINGS"


def from_settings() -> FastAPI:
    """uvicorn's app factory in each worker process of `torchmark board --workers N`."""
    return create_app(**json.loads(os.environ[SERVE_SETTINGS]))
