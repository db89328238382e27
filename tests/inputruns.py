"""The input fixture run (H100, 2026-11-23) and a second run derived from it with one
loader configuration slowed by a stated factor: comparisons with a known answer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from torchmark.results import RunRecord

RUNS = Path(__file__).parent / "fixtures" / "runs"
PERSISTENT = {"workers": 16, "persistent": 1, "batch": 64}
RAW: dict[str, Any] = json.loads((RUNS / "input-h100.json").read_text())


def run(raw: dict[str, Any] = RAW) -> RunRecord:
    return RunRecord.model_validate(raw)


def slowed(factor: float, params: dict[str, Any] = PERSISTENT, name: str = "slowed") -> RunRecord:
    """The fixture with one configuration's step ``factor`` times as long, the extra time
    spent waiting for data (what a slower disk or fewer cores would do)."""
    raw = copy.deepcopy(RAW)
    raw["run_id"] = name
    hits = [r for r in raw["results"] if r["params"] == params]
    assert len(hits) == 1
    r = hits[0]
    r["samples_s"] = [t * factor for t in r["samples_s"]]
    b = r["extra"]["input"]
    more = b["step_s"] * (factor - 1)
    b["wait_s"] += more
    b["step_s"] += more
    return RunRecord.model_validate(raw)
