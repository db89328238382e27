"""Submissions/s and p95 latency of `torchmark board` at 1, 50 and 200 concurrent clients;
page latency of `/` over a large store.

    python benchmarks/leaderboard_load.py [--db URL] [--per-level 200] [--levels 1,50,200]
                                          [--workers N]   (N > 1: a PostgreSQL --db)
                                          [--kill-writers 200]
    python benchmarks/leaderboard_load.py --page-results 100000 [--db URL] [--cases 100]
                                          [--empty 0]

The second form fills the store (in process, through the submission endpoint; skipped when
--db already holds that many) with runs of --cases results each from --machines machines,
and --empty result-less runs, then starts `torchmark board` on it and times `/` (the default
case, then every case once: each a different ranking), `/api/v1/leaderboard` and
`/api/v1/place` of a run of --cases results (first with its rankings not computed yet, then
again). Target: p95 < 200 ms at 100,000 results. Run it twice on one --db: the second run's
"app opened" line times a start on a store already indexed.

Starts `torchmark board` on 127.0.0.1 (a free port) over a fresh SQLite file (or --db, e.g. a
throw-away PostgreSQL database), sends --per-level distinct runs at each concurrency with an
async client (bounded: a fixed count, a 60 s time-out per request), then checks that every
acknowledged run is readable and none is stored twice; then (--kill-writers) SIGKILLs the
server while that many writers send --per-level more, restarts it and checks the same.
Prints one line per level and one for the kill; exits non-zero on a lost or duplicated run
or any 5xx. No throughput target yet: the figures are
for comparing back ends and changes on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from boardtest import cli_token, make_run, p50_p95, serve, stop
from torchmark.results import RunRecord
from torchmark.store.exchange import export_run


async def level(
    url: str,
    token: str,
    bodies: list[bytes],
    clients: int,
    on_ack: Callable[[int], None] | None = None,
) -> tuple[list, list]:
    """Send ``bodies`` with ``clients`` at once: (latencies, (status, run id) answers). A
    request the server never answered (it was killed) is status 0: not acknowledged.
    ``on_ack(n)`` is told the count of 201s as each arrives."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    gate = asyncio.Semaphore(clients)
    latencies: list[float] = []
    answers: list[tuple[int, str]] = []
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one(body: bytes) -> None:
            async with gate:
                t0 = time.perf_counter()
                try:
                    r = await client.post(f"{url}/api/v1/runs", content=body, headers=headers)
                except httpx.TransportError:
                    answers.append((0, ""))
                    return
                latencies.append(time.perf_counter() - t0)
                answers.append((r.status_code, r.json().get("run_id", r.text)))
                if on_ack is not None and r.status_code == 201:
                    on_ack(sum(code == 201 for code, _ in answers))

        await asyncio.gather(*(one(b) for b in bodies))
    return latencies, answers


def bench_run(i: int, cases: int, machines: int) -> RunRecord:
    """Run ``i``: ``cases`` results (add/seed at n = 1000, 2000, ...) from machine
    ``i % machines``, 24 samples each, times distinct per run (so no two are duplicates)."""
    run = make_run(f"Bench CPU {i % machines}", scale=1 + (i % machines) / 10 + i * 1e-7, n=24)
    first = run.results[0]
    run.results = [
        first.model_copy(
            update={
                "params": {"n": 1000 * (k + 1)},
                "samples_s": [s * (k + 1) for s in first.samples_s],
            }
        )
        for k in range(cases)
    ]
    # begun an hour ago: long enough to have timed its samples (the board checks they fit)
    run.created_utc -= timedelta(hours=1)
    return run


def seed(db: str, results: int, cases: int, machines: int, empty: int = 0) -> None:
    from fastapi.testclient import TestClient

    from torchmark.web.app import create_app

    t0 = time.perf_counter()
    app = create_app(db, rate_limit=10**9)
    # a store from before the ranking index gets indexed here, once
    print(f"app opened on the store in {time.perf_counter() - t0:.1f} s")
    client = TestClient(app)
    runs = results // cases + empty
    have = len(client.get("/api/v1/runs").json())
    if have >= runs:
        print(f"store holds {have} runs already: not seeded")
        return
    token = app.state.accounts.create_token(f"seed{have}")
    headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    for i in range(have, runs):
        run = bench_run(i, 0 if i >= runs - empty else cases, machines)
        # a result-less run is distinct by its time (the server keeps no command line)
        run.created_utc -= timedelta(microseconds=i)
        r = client.post("/api/v1/runs", content=export_run(run), headers=headers)
        assert r.status_code == 201, r.text
    print(
        f"seeded {runs - have} runs ({empty} of them result-less, the others {cases} results) "
        f"in {time.perf_counter() - t0:.0f} s"
    )
    client.close()
    app.state.store.close()


def pages(url: str, cases: int) -> None:
    client = httpx.Client(timeout=300)  # one kept-alive connection, as a browser keeps

    def get(path: str, **params: str) -> float:
        t0 = time.perf_counter()
        client.get(url + path, params=params).raise_for_status()
        return time.perf_counter() - t0

    def place() -> float:
        t0 = time.perf_counter()
        client.post(url + "/api/v1/place", content=mine).raise_for_status()
        return time.perf_counter() - t0

    mine = export_run(bench_run(10**6, cases, 1)).encode()
    t0 = time.perf_counter()
    get("/")
    print(f"first / after start: {(time.perf_counter() - t0) * 1e3:.0f} ms")
    print(f"first /api/v1/place      {place() * 1e3:6.0f} ms ({cases} cases, rankings not made)")
    print(f"/ again (default case)   {p50_p95([get('/') for _ in range(20)])}")
    ns = [1000 * (k + 1) for k in range(cases)]
    print(f"/?case= each case once   {p50_p95([get('/', case=f'add/seed/n={n}') for n in ns])}")
    api = [
        get("/api/v1/leaderboard", workload="add", variant="seed", params=json.dumps({"n": n}))
        for n in ns
    ]
    print(f"/api/v1/leaderboard      {p50_p95(api)} (each case after its page)")
    print(f"/api/v1/place again      {p50_p95([place() for _ in range(20)])}")


def page_main(args: argparse.Namespace, tmp: Path) -> int:
    db = args.db or f"sqlite:///{tmp / 'board.db'}"
    print(f"load average at start: {os.getloadavg()}; store {db.split('?')[0]}")
    seed(db, args.page_results, args.cases, args.machines, args.empty)
    t0 = time.monotonic()
    # seeded with up to 100,000 results, the server's first open may take minutes here
    proc, url = serve(db, tmp / "serve.log", ["--rate-limit", "1000000"], start_s=600)
    print(f"server up in {time.monotonic() - t0:.1f} s")
    try:
        pages(url, args.cases)
    finally:
        stop(proc)
    print(f"load average at end: {os.getloadavg()}")
    if not args.db:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default=None)
    ap.add_argument("--per-level", type=int, default=200)
    ap.add_argument("--levels", default="1,50,200")
    ap.add_argument("--page-results", type=int, default=0)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--machines", type=int, default=50)
    ap.add_argument("--empty", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--kill-writers",
        type=int,
        default=200,
        help="then SIGKILL the server under this many concurrent writers (0: skip)",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tmboard"))
    if args.page_results:
        return page_main(args, tmp)
    db = args.db or f"sqlite:///{tmp / 'board.db'}"
    print(f"load average at start: {os.getloadavg()}; store {db.split('?')[0]}")
    token = cli_token(db, "bench")
    extra = ["--rate-limit", "1000000"]
    extra += ["--workers", str(args.workers)] if args.workers > 1 else []
    try:
        proc, url = serve(db, tmp / "serve.log", extra)
    except RuntimeError as e:
        print(e)
        return 1
    failed = False
    try:
        acked: list[str] = []
        for i, clients in enumerate(int(x) for x in args.levels.split(",")):
            bodies = [
                export_run(make_run(scale=1 + (i * args.per_level + k) / 1e4)).encode()
                for k in range(args.per_level)
            ]
            t0 = time.perf_counter()
            lat, answers = asyncio.run(level(url, token, bodies, clients))
            wall = time.perf_counter() - t0
            bad = [a for a in answers if a[0] != 201]
            failed |= bool(bad)
            acked += [rid for code, rid in answers if code == 201]
            p95 = statistics.quantiles(lat, n=20)[-1] if len(lat) > 1 else lat[0]
            print(
                f"{clients:>4} clients: {len(bodies) / wall:7.1f} submissions/s, "
                f"p50 {statistics.median(lat) * 1e3:7.1f} ms, p95 {p95 * 1e3:7.1f} ms, "
                f"not 201: {len(bad)}"
            )
        stored = httpx.get(url + "/api/v1/runs", timeout=60).json()
        ids = [r["run_id"] for r in stored]
        lost = set(acked) - set(ids)
        dup = len(ids) - len(set(ids))
        print(f"acknowledged {len(acked)}, stored {len(ids)}, lost {len(lost)}, duplicated {dup}")
        failed |= bool(lost) or dup > 0
        pages = []
        for _ in range(20):
            t0 = time.perf_counter()
            httpx.get(url + "/", timeout=120).raise_for_status()
            pages.append(time.perf_counter() - t0)
        p95 = statistics.quantiles(pages, n=20)[-1]
        print(
            f"page / with {len(ids)} runs: p50 {statistics.median(pages) * 1e3:.0f} ms, "
            f"p95 {p95 * 1e3:.0f} ms (the first reads every run; later ones walk them in memory)"
        )
    finally:
        stop(proc)
    if args.kill_writers:
        failed |= killed(args, db, token, tmp, extra)
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")
    return 1 if failed else 0


def killed(args: argparse.Namespace, db: str, token: str, tmp: Path, extra: list[str]) -> bool:
    """`torchmark board` SIGKILLed under --kill-writers concurrent writers once half of
    --per-level runs are acknowledged; restarted: every acknowledged run must be readable,
    none stored twice. True on a loss or a duplicate."""
    proc, url = serve(db, tmp / "serve.log", extra)
    before = {r["run_id"] for r in httpx.get(url + "/api/v1/runs", timeout=60).json()}
    bodies = [
        export_run(make_run(scale=2 + k / 1e4, note=f"kill {k}")).encode()
        for k in range(args.per_level)
    ]
    half = args.per_level // 2

    def kill_at_half(acks: int) -> None:
        if acks >= half and proc.poll() is None:
            proc.kill()  # SIGKILL: no shutdown handler runs

    try:
        _, answers = asyncio.run(level(url, token, bodies, args.kill_writers, kill_at_half))
    finally:
        stop(proc)
    acked = {rid for code, rid in answers if code == 201}
    proc, url = serve(db, tmp / "serve.log", extra)
    try:
        ids = [r["run_id"] for r in httpx.get(url + "/api/v1/runs", timeout=60).json()]
        readable = all(
            httpx.get(f"{url}/api/v1/runs/{rid}", timeout=60).status_code == 200 for rid in acked
        )
    finally:
        stop(proc)
    lost = acked - set(ids)
    dup = len(ids) - len(set(ids))
    new = len(set(ids) - before)
    print(
        f"SIGKILL under {args.kill_writers} writers: acknowledged {len(acked)} of "
        f"{len(bodies)} sent, {len(answers) - len(acked)} unanswered or refused; after the "
        f"restart stored {new} new, lost {len(lost)}, duplicated {dup}, every acknowledged "
        f"run readable: {readable}"
    )
    return bool(lost) or dup > 0 or not readable


if __name__ == "__main__":
    sys.exit(main())
