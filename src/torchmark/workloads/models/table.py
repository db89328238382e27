"""The work of every built-in model case at batch 1, as the leaderboard's catalogue keeps it
(``web/catalogue.py`` reads ``web/model_work.json``, written by ``scripts/make-work-catalogue``
from this function; a test holds the two equal). The server derives a submitted model
case's work from it instead of trusting the document, without importing torch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torchmark.workloads import WORKLOADS, load_builtins
from torchmark.workloads.models.base import ModelWorkload, Sizes, _MetaDevice

SUITES = ("quick", "standard", "full")


def key(workload: str, scenario: str, sizes: Sizes) -> str:
    """``gpt2/decode/new_tokens=16,seq=128``: a case's row, its batch left out (work is
    linear in it: items and FLOPs at batch 1 times the batch)."""
    knobs = ",".join(f"{k}={v}" for k, v in sorted(sizes.params()))
    return f"{workload}/{scenario}/{knobs}"


def model_work() -> dict[str, dict[str, Any]]:
    """Every (model, scenario, sizes) a suite plans on a CPU or an accelerator: FLOPs and
    items of one call at batch 1, and the item unit."""
    load_builtins()
    out: dict[str, dict[str, Any]] = {}
    for name in WORKLOADS.names():
        cls = WORKLOADS.get(name)
        if not (isinstance(cls, type) and issubclass(cls, ModelWorkload)):
            continue
        w = cls()
        for suite in SUITES:
            for accelerator in (False, True):
                device = _MetaDevice(is_accelerator=accelerator)
                for scenario in w.scenarios:
                    sizes = replace(w.plan_sizes(w.plans[suite], device, scenario), batch=1)
                    if scenario == "decode" and not sizes.new_tokens:
                        continue  # a plan without tokens to generate has no decode case
                    out[key(name, scenario, sizes)] = {
                        "flops": w.flops_per_call(scenario, sizes),
                        "items": w.items(scenario, sizes),
                        "item_unit": w.unit(scenario),
                    }
    return dict(sorted(out.items()))
