"""The line a report shows for a run measured in parts (``torchmark run --resume``), from
``record.payload.parts``, and whether a stored run can be resumed. Kept apart from
``torchmark.run.resume``: reports of stored runs (``torchmark show``) start without importing
torch."""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Any

from torchmark import format as fmt
from torchmark.results import RunRecord
from torchmark.results.payloads import RunPayload

__all__ = ["parts_note", "resume_hint"]


def resume_hint(run_id: str, db: str | None) -> str:
    """What an interrupted `torchmark run` says (and `show` of it): the command that
    finishes it in the same run."""
    where = f" --db {shlex.quote(db)}" if db else ""
    return f"`torchmark run --resume {run_id}{where}` measures the cases left in the same run"


def parts_note(record: RunRecord) -> str | None:
    """``measured in 2 parts: 37 results 2026-11-23 04:40-04:49 UTC; 93 results
    2026-11-23 04:51-05:05 UTC, begun 2 min after the part before ended``; None for a run
    measured in one part."""
    parts = record.payload.parts if isinstance(record.payload, RunPayload) else None
    if not parts or len(parts) < 2:
        return None
    said = []
    prev_end: datetime | None = None
    for i, p in enumerate(parts):
        start, end = p.started_utc, p.finished_utc
        span = f"{start:%Y-%m-%d %H:%M}" if start else "?"
        span += f"-{end:%H:%M} UTC" if end else " UTC (end not recorded)"
        n = p.results
        what = (fmt.plural(n, "result") if n is not None else "? results") + f" {span}"
        if i and start and prev_end:
            what += f", begun {_gap(start - prev_end)} after the part before ended"
        elif i:
            what += " (gap unknown: the part before was killed)"
        said.append(what)
        prev_end = end
    return f"measured in {len(parts)} parts: " + "; ".join(said)


def _gap(delta: Any) -> str:
    s = max(0.0, delta.total_seconds())
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
