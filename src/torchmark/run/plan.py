"""What a run measures: its workloads built, its devices resolved, its cases listed, once.

The CLI checks the options against the plan, shows it (``--dry-run``) or runs it
(``runner.run``), without planning again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from torchmark.devices import Device, resolve
from torchmark.run.config import RunConfig, validate
from torchmark.workloads import WORKLOADS, Case, Workload, load_builtins

__all__ = ["Plan", "make_plan", "plan", "planned", "select_workloads"]


def select_workloads(cfg: RunConfig) -> dict[str, Workload]:
    load_builtins()
    names = list(cfg.workloads) or [
        n
        for n in WORKLOADS.names()
        if WORKLOADS.get(n).group != "user" and (cfg.suite != "quick" or WORKLOADS.get(n).in_quick)
    ]
    return {n: WORKLOADS.get(n)() for n in names}  # get() names the valid choices


def plan(workloads: dict[str, Workload], devices: list[Device], cfg: RunConfig) -> list[Case]:
    return [c for d in devices for w in workloads.values() for c in w.cases(d, cfg.plan_options)]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The suite planned once: workloads built, devices resolved, cases listed. The CLI
    checks the options against it, shows it (--dry-run) or runs it, without planning again."""

    cfg: RunConfig
    workloads: dict[str, Workload]
    devices: list[Device]
    cases: list[Case]

    def cases_for(self, cfg: RunConfig) -> list[Case]:
        """The cases under other selectors (``ignored_options`` clears one at a time), from
        the same built workloads and devices; the planned config gives the planned list."""
        return self.cases if cfg == self.cfg else plan(self.workloads, self.devices, cfg)

    def set_threads(self) -> None:
        """Apply ``--threads`` to every planned device (before measuring, and before a
        resume collects the environment it compares: the thread count is part of it)."""
        if self.cfg.threads:
            for d in self.devices:
                d.set_threads(self.cfg.threads)


def make_plan(
    cfg: RunConfig,
    devices: list[Device] | None = None,
    workloads: dict[str, Workload] | None = None,
    memory: Mapping[str, int | None] | None = None,
) -> Plan:
    """``cfg`` checked and planned: its workloads built, its devices resolved, its cases
    listed. ``devices``/``workloads``: already chosen (tests' fakes); by default ``cfg``
    chooses them. Each device's available memory is read once, where a size needs it, and
    every size comes from that reading (``Device.plan_memory_bytes``; the run keeps it in
    its environment);
    ``memory``: the readings of a resumed run's first part, so its parts plan the same."""
    validate(cfg)
    workloads = workloads if workloads is not None else select_workloads(cfg)
    devices = devices if devices is not None else resolve(cfg.devices)
    stored = memory or {}
    for d in devices:
        d.plan_from((stored[d.name],) if d.name in stored else None)
    return Plan(cfg, workloads, devices, plan(workloads, devices, cfg))


def planned(cfg: RunConfig) -> list[Case]:
    """The cases ``run`` would measure, without measuring (``torchmark run --dry-run``)."""
    return make_plan(cfg).cases
