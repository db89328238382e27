"""Run report pages for the server (``/runs/ID/report``): drawn once, away from the server's
own interpreter, and kept in the database beside the run.

Drawing one report is matplotlib work: 0.15-1.4 s on a quiet core for the fixture runs, 95 %
of it in savefig (cProfile of a `torchmark run --quick` run: 0.97 of 1.12 s in 4 charts'
savefig, the roofline alone 0.59 s). Drawn in the server's threads, six at once took 22 s
each and held the GIL the other requests need (benchmarks/board_reports.py); matplotlib's
rc settings are process-global, so threads drawing at once could also mix their charts.
So each report is drawn in a separate process (``workers`` spawned ones), at most
``workers + queue`` different reports are waited on at once per server process (one more
is answered 503 with Retry-After at once), a request waits at most ``wait_s`` (then 503;
the drawing goes on and is kept; one still drawing after ``kill_s``, 5x that, is killed
with its process, which a new one replaces), and the page is stored gzipped (~5x smaller)
under a key of the report code's version and the run's content: every server process
sharing the database serves it from there, and a new torchmark draws it again.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Engine

from torchmark import __version__
from torchmark.results import RunRecord, utcnow
from torchmark.run.isolation import exit_with_parent
from torchmark.web.accounts import metadata, submissions_t

log = logging.getLogger(__name__)

reports_t = sa.Table(
    "server_reports",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),  # one page per run: a new key replaces it
    sa.Column("key", sa.Text, nullable=False),  # report_version() + the run's content
    sa.Column("page", sa.LargeBinary, nullable=False),  # the HTML, gzipped
    sa.Column("rendered_utc", sa.Text, nullable=False),
)
RETRY_AFTER_S = 5  # a report draws in ~1 s on a quiet core; a few queued ahead of it
CLOSE_S = 10.0  # a closing server waits this long for drawings under way
KILLED_S = 5.0  # and this long for a killed drawing process to be gone


class Busy(Exception):
    """No report can be drawn for this request now: answer 503 with Retry-After."""


# What a page is drawn from, beyond the report code: bumped when the board's public view of a
# run changes (1: no command line, no config beyond the case options), so a page drawn from
# the stored run before is drawn again.
VIEW = "public-1"


@functools.cache
def report_version() -> str:
    """torchmark's version and a digest of the report package's code and templates: a page
    drawn by other report code is drawn again."""
    import torchmark.report

    root = Path(torchmark.report.__file__).parent
    digest = hashlib.sha256(f"{__version__}/{VIEW}".encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".html", ".css", ".j2", ".jinja"):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def render_page(run: RunRecord) -> bytes:
    """The gzipped page `torchmark report` makes for ``run`` (runs in a pool process)."""
    from torchmark.report import html

    return gzip.compress(html.render([run]).encode(), compresslevel=6, mtime=0)


def _processes(pool: Executor) -> list[multiprocessing.process.BaseProcess]:
    # ProcessPoolExecutor's own table (no public one before Python 3.14's kill_workers);
    # a thread pool (the tests') has none
    return list((getattr(pool, "_processes", None) or {}).values())


def _kill_workers(pool: Executor) -> None:
    """End ``pool``'s processes at once (a drawing that never finishes ignores shutdown).

    Returns once they are gone (a killed process lives on until the kernel has ended it),
    or after a few seconds if one will not go.
    """
    procs = _processes(pool)
    for proc in procs:
        proc.kill()
    deadline = time.monotonic() + KILLED_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))


def _spawned_pool(workers: int) -> Executor:
    # spawn, not fork: the server process has threads (uvicorn, SQLAlchemy's pool) that a
    # forked child would inherit mid-state
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exit_with_parent,
        initargs=(os.getpid(),),
    )


class Reports:
    """Stored report pages and the bounded drawing of missing ones (see the module)."""

    def __init__(
        self,
        engine: Engine,
        *,
        workers: int = 1,
        queue: int = 4,
        wait_s: float = 60.0,
        kill_s: float | None = None,
        render: Callable[[RunRecord], bytes] = render_page,
        pool: Callable[[int], Executor] = _spawned_pool,
        kill: Callable[[Executor], None] = _kill_workers,
    ) -> None:
        self.engine, self.workers, self.queue, self.wait_s = engine, workers, queue, wait_s
        # A drawing takes 0.15-1.4 s alone and 22 s with six at once (the module's
        # figures): one still going after 5x a request's wait never ends (a hung savefig, a
        # pathological run) and would hold its slot for ever.
        self.kill_s = 5 * wait_s if kill_s is None else kill_s
        self._render, self._make_pool, self._kill = render, pool, kill
        # load, draw and store one report: one thread per drawing process, each thread with
        # a pool of its own one process, so killing a hung drawing kills no other
        self._pools: dict[int, Executor] = {}
        self._jobs = ThreadPoolExecutor(workers, thread_name_prefix="torchmark-report")
        self._lock = threading.Lock()
        self._drawing: dict[tuple[str, str], Future[bytes]] = {}
        self._closed = False

    @staticmethod
    def _key(content_hash: str) -> str:
        return f"{report_version()}:{content_hash}"

    def key(self, run_id: str) -> str | None:
        """What the stored page of ``run_id`` must have been drawn from: this report code and
        the submitted content (a submitted run never changes: see app.py's run cache); None
        when ``run_id`` is not a submission."""
        with self.engine.connect() as conn:
            content = conn.execute(
                sa.select(submissions_t.c.content_hash).where(submissions_t.c.run_id == run_id)
            ).scalar()
        return None if content is None else self._key(content)

    def find(self, run_id: str) -> tuple[str, bytes | None] | None:
        """``run_id``'s key and the page stored under it (None: none stored yet) in one
        query, the report view's only one when the page is stored; None when ``run_id`` is
        not a submission."""
        s, r = submissions_t, reports_t
        drawn_from = sa.literal(self._key(""), sa.Text) + s.c.content_hash
        stored = s.outerjoin(r, sa.and_(r.c.run_id == s.c.run_id, r.c.key == drawn_from))
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(s.c.content_hash, r.c.page)
                .select_from(stored)
                .where(s.c.run_id == run_id)
            ).first()
        if row is None:
            return None
        return self._key(row.content_hash), None if row.page is None else bytes(row.page)

    def stored(self, run_id: str, key: str) -> bytes | None:
        with self.engine.connect() as conn:
            page = conn.execute(
                sa.select(reports_t.c.page).where(
                    reports_t.c.run_id == run_id, reports_t.c.key == key
                )
            ).scalar()
        return None if page is None else bytes(page)

    def keep(self, run_id: str, key: str, page: bytes) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(reports_t.delete().where(reports_t.c.run_id == run_id))
                conn.execute(
                    reports_t.insert().values(
                        run_id=run_id, key=key, page=page, rendered_utc=utcnow().isoformat()
                    )
                )
        except sa.exc.IntegrityError:
            pass  # another server process stored it first: the same page

    async def page(self, run_id: str, key: str, load: Callable[[], RunRecord]) -> bytes:
        """The gzipped page of ``run_id`` (stored under ``key``, else drawn from ``load()``);
        raises Busy when over the bound or after ``wait_s``."""
        loop = asyncio.get_running_loop()
        stored = await loop.run_in_executor(None, self.stored, run_id, key)
        if stored is not None:
            return stored
        with self._lock:
            job = self._drawing.get((run_id, key))
            new = job is None
            if job is None:  # the same report asked for twice waits on one drawing
                if len(self._drawing) >= self.workers + self.queue:
                    raise Busy(f"{len(self._drawing)} reports are being drawn; try again soon")
                job = self._jobs.submit(self._draw, run_id, key, load)
                self._drawing[(run_id, key)] = job
        if new:
            # Outside the lock: a job already done (its load failed at once) runs the
            # callback here, in this thread, and _done takes the lock (held: a deadlock of
            # the event loop). Until _done, the key maps to this job and no other.
            job.add_done_callback(functools.partial(self._done, (run_id, key)))
        # asyncio.wait, not wait_for: a request that gives up leaves the drawing going on
        waiting = asyncio.wrap_future(job)
        done, _ = await asyncio.wait({waiting}, timeout=self.wait_s)
        if not done:
            raise Busy(f"the report is still being drawn after {self.wait_s:.0f} s")
        return waiting.result()

    def _done(self, key: tuple[str, str], job: Future[bytes]) -> None:
        with self._lock:
            self._drawing.pop(key, None)
        failed = None if job.cancelled() else job.exception()
        if failed is not None and not isinstance(failed, Busy):
            log.error("drawing the report of run %s failed", key[0], exc_info=job.exception())

    def _draw(self, run_id: str, key: str, load: Callable[[], RunRecord]) -> bytes:
        run = load()
        thread = threading.get_ident()
        with self._lock:
            if self._closed:  # a drawing that was loading its run as the server closed
                raise Busy("the server is shutting down; try again")
            pool = self._pools.get(thread)
            if pool is None:
                pool = self._pools[thread] = self._make_pool(1)
        try:
            page = pool.submit(self._render, run).result(timeout=self.kill_s)
        except BrokenProcessPool:
            # a drawing process died (killed, out of memory): the next request starts anew
            self._drop(thread, pool)
            raise Busy("the process drawing reports stopped; try again") from None
        except TimeoutError:
            log.error("report of run %s: over %g s, its drawing killed", run_id, self.kill_s)
            self._kill(pool)
            self._drop(thread, pool)
            raise Busy(
                f"drawing the report took over {self.kill_s:g} s and was stopped; try again"
            ) from None
        self.keep(run_id, key, page)
        return page

    def _drop(self, thread: int, pool: Executor) -> None:
        with self._lock:
            if self._pools.get(thread) is pool:
                del self._pools[thread]
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self._jobs.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            # set with the table emptied: a drawing still loading its run would otherwise
            # start a process after this, which no one kills
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        procs = [proc for pool in pools for proc in _processes(pool)]
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        # waits for a drawing under way (seconds), then kills what is left: a uvicorn
        # worker leaves with os._exit, which would skip the pool's own clean-up and orphan
        # its processes, and a hung drawing would hold the shutdown for ever
        deadline = time.monotonic() + CLOSE_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(KILLED_S)
