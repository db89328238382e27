"""A profile under other processes' load says "can't tell" instead of a verdict, as `run`
does: checked on a recorded trace with a fake load, not on this
machine's speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.advice import advise
from torchmark.kinds.profile.ops import verdict
from torchmark.report.profile import overhead_line
from torchmark.results.payloads import ProfileSummary

# linear10 infer on the 2-core dev VM while other jobs held the cores: its unprofiled median
# 16 µs, its profiled steps ~6 ms, 95 % of them "matmul/conv" (the scheduler's time spent
# inside addmm). Printed as it was, this read "compute-heavy" and advised amp-bf16 for a
# 10-input linear layer.
LOADED = Path(__file__).parent.parent / "fixtures/profile/cpu_linear10_infer_loaded.json"
QUIET = {"other_cores": 0.1, "logical_cores": 2, "other_processes": 0}


def recorded() -> tuple[c.Breakdown, dict[str, Any]]:
    doc = json.loads(LOADED.read_text())
    return c.cpu_breakdown(doc["traceEvents"]), doc


def test_the_recorded_load_gives_cant_tell_and_names_it() -> None:
    bd, doc = recorded()
    said = verdict(bd, doc["unprofiled_median_s"], doc["load"])
    assert said.startswith("can't tell under load: 4 other processes used 1.6 of 2 cores")
    assert "profile again on a quiet machine" in said


def test_the_same_trace_on_a_quiet_reading_is_judged_by_its_shares() -> None:
    bd, doc = recorded()
    said = verdict(bd, doc["unprofiled_median_s"], QUIET)
    assert said.startswith("compute-heavy: 95 % of the step is matmul/conv")
    assert verdict(bd, doc["unprofiled_median_s"]) == said  # no load known: as before


def test_nothing_is_advised_and_the_overhead_is_not_read_under_load() -> None:
    bd, doc = recorded()
    shares = bd.shares()
    p: dict[str, Any] = {
        "kind": "cpu",
        "categories": [{"name": k, "share": v} for k, v in shares.items()],
        "steps": bd.steps,
        "profiled_step_s": 6.6e-3,
        "profiled_mean_s": None,
        "unprofiled_median_s": doc["unprofiled_median_s"],
        "overhead_pct": 40_000.0,
        "spread_pct": 10.0,
        "under_load": True,
    }
    params = {"scenario": "infer", "precision": "fp32", "batch": 1000}
    assert advise(p, params, "linear10", "cpu") == []
    stored = ProfileSummary.model_validate({**p, "case": "linear10", "categories": []})
    assert overhead_line(stored).endswith("+40000 %, can't tell under load (see the verdict)")
    quiet = {**p, "under_load": False}
    assert [a.variant for a in advise(quiet, params, "linear10", "cpu")] == ["amp-bf16"]
