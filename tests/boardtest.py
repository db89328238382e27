"""Run documents for the leaderboard tests: small, made here, with identifiers to strip."""

from __future__ import annotations

import json
from typing import Any

from torchmark.results import Ceiling, Result, RunRecord, Verdict, Work
from torchmark.store.exchange import export_run


def make_run(
    model: str = "Test CPU 9000",
    scale: float = 1.0,
    n: int = 12,
    *,
    spread: float = 0.01,
    pct_of_bw: float | None = None,
    verdict: str | None = None,
    note: str = "",
) -> RunRecord:
    """One result of case add/seed on cpu; median time ``scale`` ms (spread relative)."""
    samples = [scale * 1e-3 * (1 + spread * ((i * 7) % n - n / 2) / n) for i in range(n)]
    ceiling = None
    work = Work(items=1000.0)
    if pct_of_bw is not None:
        bw = 1e10
        # bytes per call such that the median rate is pct_of_bw % of the ceiling
        work = Work(items=1000.0, bytes=pct_of_bw / 100 * bw * scale * 1e-3)
        ceiling = Ceiling(device="cpu", key="bandwidth", value=bw, unit="B/s", method="mul_")
    result = Result(
        workload="add",
        variant="seed",
        device="cpu",
        params={"n": 1000},
        samples_s=samples,
        work=work,
        ceiling=ceiling,
        notes=[note] if note else [],
        verdict=Verdict(level=verdict) if verdict else None,  # type: ignore[arg-type]
    )
    return RunRecord(
        tool_version="0.test",
        run_id=None,
        status="complete",
        command="torchmark run --output /home/alice/runs/x.json",
        environment={
            "host": "alice-laptop",
            "pid": 4242,
            "python_executable": "/home/alice/.venv/bin/python",
            "software": {"torch": "2.13.0", "python": "3.12"},
            "devices": {"cpu": {"kind": "cpu", "model": model, "physical_cores": 8,
                                "uuid": "GPU-1234-secret", "serial_number": "SN99"}},
            "env_vars": {"OMP_NUM_THREADS": "8", "HOME": "/home/alice", "AWS_SECRET": "xyz"},
        },
        fingerprint="0123456789abcdef",
        ceilings=[ceiling] if ceiling else [],
        results=[result],
    )  # fmt: skip


def body(run: RunRecord) -> bytes:
    return export_run(run).encode()


def doc(run: RunRecord) -> dict[str, Any]:
    return dict(json.loads(export_run(run)))
