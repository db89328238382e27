"""What the board's reads cost in queries and time, in process (no HTTP, no other client):

    python benchmarks/board_queries.py --db URL [--repeat 30]

--db: a store `benchmarks/leaderboard_load.py --page-results N --db URL` seeded (its runs
of add/seed cases, and --empty result-less ones). Prints, each with its statement count
(SQLAlchemy's before_cursor_execute; SQLite's explicit BEGIN left out) and the min and median
of --repeat timings: opening the app on the store (the ranking-index backfill included),
`/api/v1/place` of a run of the store's case count with its rankings cached, a stored
`/runs/ID/report` view, and a second `/runs/ID` view. The minimum is the figure to compare
on a shared machine: the median shows how much the load moved it. Run it with PYTHONPATH
at two checkouts to compare code on one store.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from leaderboard_load import bench_run

from torchmark.store.exchange import export_run


def timed(repeat: int, engine: sa.Engine, what: Callable[[], object]) -> str:
    sent: list[str] = []

    def count(conn, cursor, statement, *rest):  # type: ignore[no-untyped-def]
        if statement.strip().upper() != "BEGIN":
            sent.append(statement)

    what()  # once first: caches filled, as a server that has served it before
    times = []
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            what()
            times.append(time.perf_counter() - t0)
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    return (
        f"{len(sent) / repeat:5.0f} statements, min {min(times) * 1e3:6.1f} ms, "
        f"median {statistics.median(times) * 1e3:6.1f} ms (n={repeat})"
    )


def main() -> int:
    from fastapi.testclient import TestClient

    from torchmark.web import cases
    from torchmark.web.app import create_app

    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    starts = []
    for _ in range(5):
        t0 = time.perf_counter()
        app = create_app(args.db)
        starts.append(time.perf_counter() - t0)
        app.state.store.close()
    print(f"app opened on the store: min {min(starts) * 1e3:.0f} ms (n=5)")
    app = create_app(args.db, place_per_minute=10**6)  # timed back to back, from one caller
    engine = app.state.accounts.engine
    client = TestClient(app)
    run_id = cases.runs_with(engine, "add")[0]  # the first with results
    n_cases = len(client.get(f"/api/v1/runs/{run_id}", params={"format": "json"}).json()["results"])
    mine = export_run(bench_run(10**6, n_cases, 1)).encode()

    def place() -> None:
        client.post("/api/v1/place", content=mine).raise_for_status()

    def report() -> None:
        client.get(f"/runs/{run_id}/report").raise_for_status()

    def page() -> None:
        client.get(f"/runs/{run_id}").raise_for_status()

    print(f"/api/v1/place ({n_cases} cases)  {timed(args.repeat, engine, place)}")
    print(f"/runs/ID/report stored    {timed(args.repeat, engine, report)}")
    print(f"/runs/ID again            {timed(args.repeat, engine, page)}")
    client.close()
    app.state.reports.close()
    app.state.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
