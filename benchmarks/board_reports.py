"""Does `/runs/ID/report` starve the rest of `torchmark board`?

    python benchmarks/board_reports.py [--runs 12] [--clients 6] [--db URL] [--workers 1]
                                       [--warm 1]

Starts `torchmark board` on 127.0.0.1 (a free port) over a fresh SQLite file (or --db),
submits --runs distinct copies of tests/fixtures/runs/cpu-gpu.json (19 results, 4 charts:
~1 s of matplotlib each on a quiet core), then prints:

  1. `/` alone (quiet): p50/p95 over 40 requests;
  2. `/` while --clients clients ask for every run's report at once (none rendered yet):
     p50/p95 of `/`, and each report's latency and status (503 = over the render bound,
     answered at once with Retry-After; the client retries after it);
  3. every report again (rendered already), --warm times: p50/p95.

Every request is bounded (a 120 s time-out); exits non-zero on a 5xx other than 503 or a
report that never came. No target: compare the figures of one run before and after a change
on one machine, with the load average printed at the start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from boardtest import cli_token, p50_p95, serve, stop

ROOT = Path(__file__).resolve().parents[1]


def documents(n: int) -> list[bytes]:
    doc = json.loads((ROOT / "tests/fixtures/runs/cpu-gpu.json").read_text())
    out = []
    for i in range(n):  # distinct contents, so none is a duplicate of another
        d = json.loads(json.dumps(doc))
        for r in d["results"]:
            r["samples_s"] = [s * (1 + (i + 1) * 1e-6) for s in r.get("samples_s") or []]
        out.append(json.dumps(d).encode())
    return out


async def quiet(client: httpx.AsyncClient, url: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        (await client.get(url + "/")).raise_for_status()
        times.append(time.perf_counter() - t0)
    return times


async def report(client: httpx.AsyncClient, url: str, run_id: str) -> tuple[float, list[int]]:
    """One report, retried after a 503 as its Retry-After says (at most 60 tries)."""
    codes = []
    t0 = time.perf_counter()
    for _ in range(60):
        r = await client.get(f"{url}/runs/{run_id}/report")
        codes.append(r.status_code)
        if r.status_code != 503:
            break
        await asyncio.sleep(min(float(r.headers.get("retry-after", "1")), 5))
    return time.perf_counter() - t0, codes


async def loaded(url: str, ids: list[str], clients: int, rounds: int = 1) -> int:
    limits = httpx.Limits(max_connections=clients + 1)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        print(f"/ quiet                   {p50_p95(await quiet(client, url, 40))}")
        gate = asyncio.Semaphore(clients)

        async def one(run_id: str) -> tuple[float, list[int]]:
            async with gate:
                return await report(client, url, run_id)

        t0 = time.perf_counter()
        work = asyncio.gather(*(one(i) for i in ids))
        pages: list[float] = []
        while not work.done():
            t = time.perf_counter()
            (await client.get(url + "/")).raise_for_status()
            pages.append(time.perf_counter() - t)
            await asyncio.sleep(0.05)
        done = await work
        wall = time.perf_counter() - t0
        print(f"/ during cold reports     {p50_p95(pages)}")
        codes = [c for _, cs in done for c in cs]
        print(
            f"cold reports ({clients} clients)  {p50_p95([t for t, _ in done])}, "
            f"all {len(ids)} in {wall:.1f} s; answers: "
            + ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes)))
        )
        warm = [await report(client, url, i) for _ in range(rounds) for i in ids]
        print(f"warm reports              {p50_p95([t for t, _ in warm])}")
        bad = [c for c in codes if c >= 500 and c != 503] + [
            cs[-1] for _, cs in done if cs[-1] != 200
        ]
        return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default=None)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--warm", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tmreports"))
    db = args.db or f"sqlite:///{tmp / 'board.db'}"
    print(f"load average at start: {os.getloadavg()}; store {db.split('?')[0]}")
    token = cli_token(db, f"bench{os.getpid()}")
    extra = ["--rate-limit", "1000000"]
    extra += ["--workers", str(args.workers)] if args.workers > 1 else []
    try:
        proc, url = serve(db, tmp / "serve.log", extra, start_s=120)
    except RuntimeError as e:
        print(e)
        return 1
    try:
        headers = {"Authorization": f"Bearer {token}"}
        ids = []
        for body in documents(args.runs):
            r = httpx.post(url + "/api/v1/runs", content=body, headers=headers, timeout=60)
            r.raise_for_status()
            ids.append(r.json()["run_id"])
        failed = asyncio.run(loaded(url, ids, args.clients, args.warm))
    finally:
        stop(proc)
    print(f"load average at end: {os.getloadavg()}")
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
