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
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from torchmark.store import open_store
from torchmark.web import api, pages
from torchmark.web.auth import NEED_TOKEN, bearer
from torchmark.web.state import HERE, RATE_LIMIT, RUN_CACHE_BYTES, RUN_CACHE_RUNS, Board

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
) -> FastAPI:
    """The app over the store at ``db``. Several processes may serve one PostgreSQL
    database: what must be shared (submissions, the ranking index, drawn reports) lives in
    it, and each process keeps only caches. ``render_workers``: processes drawing report
    pages; ``run_cache``: (runs, approximate bytes) kept in memory."""
    store = open_store(db)
    state = Board(
        store,
        rate_limit=rate_limit,
        private=private,
        public_url=public_url,
        render_workers=render_workers,
        run_cache=run_cache,
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
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)  # the report sets its own
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _error_page(request: Request, exc: StarletteHTTPException) -> Response:
        if not wants_page(request):
            return await http_exception_handler(request, exc)
        retry = (exc.headers or {}).get("Retry-After")
        html = state.error_page(exc.status_code, exc.detail, retry)
        return HTMLResponse(html, status_code=exc.status_code, headers=exc.headers)

    return app


def wants_page(request: Request) -> bool:
    # a browser gets a page with its way back to the board; the API and scripts get JSON
    html = "text/html" in request.headers.get("accept", "")
    return html and not request.url.path.startswith("/api/")


# The settings of `torchmark serve --workers N` for its worker processes (JSON: create_app's
# keyword arguments), set by the command and read by from_settings only.
SERVE_SETTINGS = "TORCHMARK_SERVE_SETTINGS"


def from_settings() -> FastAPI:
    """uvicorn's app factory in each worker process of `torchmark serve --workers N`."""
    return create_app(**json.loads(os.environ[SERVE_SETTINGS]))
