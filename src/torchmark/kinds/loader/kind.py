"""``torchmark model SPEC --loader file.py:make_loader``: the user's model fed by the user's
loader on each device, through the one case loop (``run_planned``): the input breakdown per
DataLoader setting, and its advice (``report.pipeline``).

The workload is ``workloads.pipeline.user.UserPipeline``; this module only runs it. The run
is stored as a ``model`` run whose config names the loader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from torchmark.devices import resolve
from torchmark.kinds.loader.workload import USER_INPUT, UserPipeline
from torchmark.results import RunRecord
from torchmark.run.config import RunConfig
from torchmark.run.record import open_run
from torchmark.run.runner import run_planned
from torchmark.run.session import Events
from torchmark.store.base import ResultStore
from torchmark.workloads.base import PlanOptions

__all__ = ["LoaderRunConfig", "benchmark_loader"]


@dataclass(frozen=True)
class LoaderRunConfig:
    """What a loader run measured, as its record stores it (``as_dict``)."""

    loader: str  # how the loader is named: ``--loader file.py:make_loader``
    given: Mapping[str, Any] = field(default_factory=dict)  # the caller's own (CLI: SPEC)

    def as_dict(self) -> dict[str, Any]:
        return {"loader": self.loader, **self.given}


def benchmark_loader(
    model: nn.Module,
    make_loader: Callable[[], Any],
    *,
    devices: Sequence[str] | str | None = None,
    what: str = "loader",
    rule: str | None = None,
    ceilings: bool = True,
    telemetry: bool = True,
    store: ResultStore | None = None,
    events: Events | None = None,
    config: Mapping[str, Any] | None = None,
) -> RunRecord:
    """The user's model fed by the user's loader on each device: the breakdown per
    setting (stored like a run's, shown by ``report.pipeline``). Errors in the factory,
    its batches or the model's call on them: one InputError line, before any timing."""
    w = UserPipeline(model, make_loader, what)
    devs = resolve(devices)
    cfg = RunConfig(
        devices=tuple(d.name for d in devs), rule=rule, ceilings=ceilings, telemetry=telemetry
    )
    cases = [c for d in devs for c in w.cases(d, PlanOptions())]
    session = open_run("model", LoaderRunConfig(what, dict(config or {})), devs, store, events)
    return run_planned(session, cases, {USER_INPUT: w}, cfg)
