"""The board's one state object: ``app.state`` is a ``Board`` (settings, store, accounts,
caches, templates) and the reads every router shares."""

from __future__ import annotations

import functools
import http
import math
import threading
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from sqlalchemy import Engine
from starlette.datastructures import State

from torchmark.errors import RunNotFoundError
from torchmark.format import base_unit, case_label, si, sig, throughput
from torchmark.results import RunRecord
from torchmark.store import ResultStore, SQLStore
from torchmark.store.exchange import escape_text
from torchmark.store.sql import usable_run_id
from torchmark.web import cases, ranking, serving
from torchmark.web.accounts import Accounts
from torchmark.web.limits import Limiter
from torchmark.web.reports import Reports
from torchmark.web.strip import shareable

HERE = Path(__file__).parent
# Runs kept in memory per server process, by count and by their JSON size (the objects take
# a few times more): a run of 100 cases x 24 samples is ~100 kB of JSON, so the 1,000-run
# benchmark store fits, and a larger one is read again from the database as needed.
RUN_CACHE_RUNS = 2048
RUN_CACHE_BYTES = 128 * 2**20
RATE_LIMIT = 60  # submissions per token per hour
# /api/v1/place needs no token (`compare --server` works without one), so it is bounded:
# per caller (token, else address) a minute, and at once per process. Placing one suite
# run is ~0.1-0.5 s of CPU; 20 concurrent 5.4 MiB bodies took 33 s of CPU and 844 MB.
PLACE_PER_MINUTE = 30
PLACE_AT_ONCE = 2


class Board(State):
    """What every request of one server process shares. A ``starlette`` State, so that
    ``app.state.reports = ...`` (the tests' own drawing) replaces the one the routes use."""

    store: SQLStore
    accounts: Accounts
    engine: Engine
    reports: Reports
    rate_limit: int
    private: bool
    public_url: str
    pages: Environment
    # One submission at a time: check-duplicate, store and record stay one step, so the
    # same run sent twice at once is stored once (this lock in this process, and
    # accounts.writing() across the processes sharing a PostgreSQL database).
    write_lock: threading.Lock
    cache: cases.Cache  # rankings and case lists, keyed by their generations
    runs: cases.Cache  # submitted runs (see __init__)
    rendered: cases.Cache  # rendered ranking pages
    place_limit: Limiter  # /api/v1/place per caller
    place_slots: threading.BoundedSemaphore  # /api/v1/place at once

    def __init__(
        self,
        store: ResultStore,
        *,
        rate_limit: int,
        private: bool,
        public_url: str,
        render_workers: int,
        run_cache: tuple[int, int],
        place_per_minute: int = PLACE_PER_MINUTE,
    ) -> None:
        super().__init__()
        self.accounts = Accounts(store)  # refuses a store that is not SQL
        assert isinstance(store, SQLStore)
        self.store = store
        self.engine = self.accounts.engine
        self.rate_limit, self.private, self.public_url = rate_limit, private, public_url
        self.write_lock = threading.Lock()
        with self.write_lock, self.accounts.writing():
            cases.backfill(self.engine, store)  # runs submitted before the ranking index existed
            cases.name_machines(self.engine, store)  # and before machines were named
        self.cache = cases.Cache()
        self.reports = Reports(self.engine, workers=render_workers)
        self.pages = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True)
        )
        self.pages.filters.update(
            si=si,
            sig=sig,
            run_links=run_links,
            throughput=throughput,
            rate_ci=rate_ci,
            result_case=lambda r: f"{r.workload} {case_label(r.variant, r.params)}",
        )
        # A submitted run never changes, so each is read from the database once per process
        # while it stays in this LRU (a page over 200 runs took 270 ms reading them all on
        # every request). The server stores each accepted document under an id of its own;
        # the same content sent again is answered with that id and stores nothing; a run
        # resumed after it was submitted is other content, so another id; and `torchmark run
        # --resume` on the server's database refuses a submitted run (its host was stripped:
        # another environment). tests/web/test_board_queries.py holds this. Rankings never
        # read runs: they query the index of their cases.
        self.runs = cases.Cache(run_cache[0], max_bytes=run_cache[1], weigh=_run_bytes)
        # Rendered ranking pages, each a pure function of its query and the two generations:
        # a page over 50 machines x 20 runs took 18 ms of Jinja on every view (1,000 run
        # links). Up to ~100 kB each: bounded by bytes as well.
        self.rendered = cases.Cache(256, max_bytes=32 * 2**20, weigh=len)
        self.place_limit = Limiter(place_per_minute)
        self.place_slots = threading.BoundedSemaphore(PLACE_AT_ONCE)

    # -- runs ------------------------------------------------------------------------------

    def read(self, run_id: str) -> RunRecord:
        return public_view(self.store.load(run_id))

    def runs_by_id(self, run_ids: list[str]) -> list[RunRecord]:
        return [self.runs.get(r, functools.partial(self.read, r)) for r in run_ids]

    def load_run(self, run_id: str) -> RunRecord:
        return self.submitted_run(run_id)[0]

    def submitted_run(self, run_id: str) -> tuple[RunRecord, str, str]:
        """The submitted run ``run_id``, its division and machine; 404 when there is none."""
        if not usable_run_id(run_id) or run_id == "latest":
            raise HTTPException(404, f"no run {run_id!r}")
        found = self.accounts.submitted(run_id)
        if found is None:
            raise HTTPException(404, f"no submitted run {run_id!r}")
        try:
            return self.runs.get(run_id, functools.partial(self.read, run_id)), *found
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id!r}") from None

    # -- rankings --------------------------------------------------------------------------

    def ranked(
        self, division: str, case: ranking.Case, gen: tuple[int, ...] | None = None
    ) -> list[ranking.Row]:
        gen = gen or cases.generation(self.engine, division, case)
        return self.cache.get(
            ("rank", division, case, gen), lambda: cases.rank(self.engine, division, case)
        )

    def ranked_many(
        self, division: str, wanted: list[ranking.Case]
    ) -> dict[ranking.Case, list[ranking.Row]]:
        """``ranked`` of every case in ``wanted`` in one query for their generations and one
        for those not cached (per cases.CASES_PER_QUERY cases): a query or two per case
        made `/api/v1/place` ~100-200 queries for a suite run."""
        engine, cache = self.engine, self.cache
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

    def serving_board(self) -> list[serving.Group]:
        """Every submitted serving run's devices by model, inputs and bound (kept until the
        next serving submission: the division's count is the key, one query a request;
        reading every submission's id was the key before, the whole table a request)."""

        def board() -> list[serving.Group]:
            subs = self.accounts.submissions(serving.DIVISION)
            runs = self.runs_by_id(list(subs))
            return serving.board((run, subs[i][1]) for i, run in zip(subs, runs, strict=True))

        gen = cases.generation(self.engine, serving.DIVISION)
        return self.cache.get(("serving", gen), board)

    # -- pages -----------------------------------------------------------------------------

    def render(self, template: str, **values: Any) -> str:
        return self.pages.get_template(template).render(**values)

    def error_page(self, status: int, detail: str, retry_after: str | None = None) -> str:
        phrase = http.HTTPStatus(status).phrase
        return self.render(
            "error.html", status=status, phrase=phrase, detail=detail, retry_after=retry_after
        )


def public_view(run: RunRecord) -> RunRecord:
    """``run`` as every reader of the board sees it: no command line and of the config only
    the options that define its cases, also for runs stored before the server removed them
    from each submission (a command as typed can carry a password), and no text that cannot
    be sent (a lone surrogate, a NUL: escaped)."""
    doc = run.model_dump(mode="json")
    shown, removed = shareable(doc)
    safe = escape_text(shown)  # text stored before the door refused it: shown escaped
    return RunRecord.model_validate(safe) if removed or safe != shown else run


def run_links(run_ids: list[str]) -> Markup:
    """A ranking row's runs as numbered links: one join, not a template loop (1,000 links on
    a page of 50 machines x 20 runs took ~10 ms in Jinja)."""
    links = (f'<a href="/runs/{escape(r)}">{i}</a> ' for i, r in enumerate(run_ids, 1))
    return Markup("".join(links))


def rate_ci(row: ranking.Row) -> str:
    """A ranking row's 95 % CI of the median as rates, in the units the CLI prints."""
    r = row.result
    rate, (lo, hi) = r.rate(r.headline), r.measurement.ci
    if rate is None or not (math.isfinite(lo) and lo > 0 and math.isfinite(hi)):
        return "unbounded (too few samples)"
    scale, unit = rate * r.measurement.median, base_unit(r)
    return f"{si(scale / hi, unit, 4)} – {si(scale / lo, unit, 4)}"


def _run_bytes(run: RunRecord) -> int:
    return len(run.model_dump_json())
