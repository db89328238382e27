"""A schema-1 run document stored as torchmark 0.1.0 (schema 1) stored it: the header, each
result and the ceilings as rows of their own, each JSON exactly as that version wrote it,
so a test can read it back through today's store on SQLite or PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from torchmark.store.sql import SQLStore, iso_utc, results_t, run_ceilings_t, runs_t


def _when(text: str | None) -> str | None:
    return iso_utc(datetime.fromisoformat(text)) if text else None


def store_v1(store: SQLStore, doc: dict[str, Any]) -> str:
    """Insert ``doc`` (an exported schema-1 run) as schema 1 stored it; returns its id."""
    assert doc["schema_version"] == 1
    run_id = doc["run_id"]
    header = {k: v for k, v in doc.items() if k not in ("results", "ceilings", "run_id")}
    devices = list(dict.fromkeys(r["device"] for r in doc["results"]))
    with store.engine.begin() as conn:
        seq = conn.execute(sa.select(sa.func.count()).select_from(runs_t)).scalar_one()
        conn.execute(
            runs_t.insert().values(
                run_id=run_id,
                kind=doc["kind"],
                created_utc=_when(doc["created_utc"]),
                finished_utc=_when(doc["finished_utc"]),
                status=doc["status"],
                schema_version=1,
                tool_version=doc["tool_version"],
                fingerprint=doc["fingerprint"],
                host=doc["environment"].get("host") or "",
                devices=json.dumps(devices),
                command=doc["command"],
                header=json.dumps(header),
                stored_seq=seq + 1,
            )
        )
        for i, r in enumerate(doc["results"]):
            conn.execute(
                results_t.insert().values(
                    run_id=run_id,
                    seq=i,
                    workload=r["workload"],
                    variant=r["variant"],
                    device=r["device"],
                    status=r["status"],
                    doc=json.dumps(r),
                )
            )
        if doc["ceilings"]:
            conn.execute(
                run_ceilings_t.insert().values(run_id=run_id, doc=json.dumps(doc["ceilings"]))
            )
    return str(run_id)
