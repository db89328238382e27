"""What a workload is: it plans cases for a device and prepares one step to time.

A workload declares the work one call does (``Work``: FLOPs, bytes, items); the framework
derives throughput, arithmetic intensity and % of the measured ceiling.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from torchmark.devices.base import Device, TimingMode
from torchmark.format import case_label  # the one way a case is named
from torchmark.registry import Registry
from torchmark.results import Headline, Work
from torchmark.stats.measurement import Measurement

Suite = Literal["quick", "standard", "extended", "full"]
# The suites' own tables (sizes, batch caps, precisions) exist for these; ``extended`` reads
# standard's.
TableSuite = Literal["quick", "standard", "full"]


def table_suite(suite: Suite) -> TableSuite:
    """The key of a per-suite table: ``extended`` is the standard suite as it was before it
    was trimmed to fit a GPU in 8 minutes, so it reads standard's tables whole."""
    return "standard" if suite == "extended" else suite


def trimmed(suite: Suite, device: Device) -> bool:
    """Whether ``suite`` on ``device`` is the standard suite trimmed to fit a GPU in one
    sitting (8 minutes on an H100, benchmarks/gpu_standard_estimate.py): batch sweeps in 4x
    steps and the input pipeline's sweep bounded; ``extended`` has the rest."""
    return suite == "standard" and device.is_accelerator


def every_other(sweep: Sequence[int]) -> tuple[int, ...]:
    """A 2x sweep in 4x steps, its largest point kept: 1, 4, 16, 64, 256 of 1 ... 256."""
    kept = list(sweep[::2])
    if sweep and kept[-1] != sweep[-1]:
        kept.append(sweep[-1])
    return tuple(kept)


def swept(sweep: Sequence[int], suite: Suite, device: Device) -> tuple[int, ...]:
    """``sweep`` as ``suite`` runs it on ``device``: in 4x steps where ``trimmed``."""
    return every_other(sweep) if trimmed(suite, device) else tuple(sweep)


@dataclass(frozen=True)
class PlanOptions:
    """What the user asked to run; workloads read it to choose their cases."""

    suite: Suite = "standard"
    scenarios: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    batches: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    cache_dir: str | None = None  # where workloads write data sets (input: JPEGs)


@dataclass(frozen=True)
class Case:
    """One thing to measure: workload x variant x params on one device."""

    workload: str
    variant: str
    device: Device
    params: tuple[tuple[str, Any], ...] = ()
    # Cases of one sweep run in order; after an OOM the rest of the sweep is skipped.
    sweep: str | None = None
    # Stopping preset the suite chose at planning ("quick", "micro", "model"); prepare()
    # passes it on, so a case prepares the same however its workload object was used.
    rule: str | None = None
    # What the workload sized the case to fit where it chose a size (seed-add: "quick", a
    # quick run's 2 GB), so its notes give that reason; None where the size was asked for
    # (--size) or is the workload's own. Not part of the case's key.
    sized_for: str | None = None

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def label(self) -> str:
        return case_label(self.variant, self.params, self.workload, self.device.name)


@dataclass
class Prepared:
    """A case ready to time: ``fn()`` is one step; everything else describes it."""

    fn: Callable[[], object]
    work: Work
    headline: Headline = "items"
    ceiling: str | None = None  # key of the ceiling this is a fraction of, e.g. "bandwidth"
    # Correctness guard, run once before timing: raises WrongResultError, returns notes
    # (observations worth printing, e.g. "every call returns the same tensor").
    check: Callable[[], list[str]] | None = None
    timing: TimingMode = "device"
    rule: str = "micro"  # stopping preset: "micro" or "model"
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    teardown: Callable[[], None] | None = None
    # Figures derived from the finished measurement, merged into Result.extra (e.g. p99).
    summarize: Callable[[Measurement], dict[str, Any]] | None = None
    # False where ``fn`` must not be called after the measurement (the one-thread check of a
    # stalled CPU case): it records each call for ``summarize`` (an epoch's breakdown), or
    # other processes must make the same calls (a collective)
    repeatable: bool = True


class Workload(ABC):
    """Base of every workload. Subclasses register with ``@WORKLOADS.register(name)``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    group: ClassVar[str] = "micro"  # "micro" | "model" | "user"
    in_quick: ClassVar[bool] = False

    @abstractmethod
    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        """The cases to run on ``device`` for this suite and these filters."""

    @abstractmethod
    def prepare(self, case: Case) -> Prepared:
        """Allocate inputs (outside any timed region) and return the step; may raise
        CaseSkipped (e.g. dtype unsupported, out of memory)."""

    def describe(self) -> dict[str, Any]:
        """Static facts for ``torchmark list`` (e.g. parameter count, FLOPs per item)."""
        return {}

    def memory_bytes(self, case: Case) -> int | None:
        """Bytes the case's buffers hold at once while it runs, for the plan's estimate
        (``workloads.budget``); None where it is not known before the case is built."""
        return None

    @classmethod
    def plan_note(cls, cases: Sequence[Case]) -> list[str]:
        """Lines said with the plan: what it will write, how long it should take."""
        return []


WORKLOADS: Registry[type[Workload]] = Registry("workload", "torchmark.workloads")


def plan_notes(cases: Sequence[Case]) -> list[str]:
    """Each planned workload's ``plan_note`` over its own cases."""
    names = [n for n in dict.fromkeys(c.workload for c in cases) if n in WORKLOADS]
    return [
        line
        for n in names
        for line in WORKLOADS.get(n).plan_note([c for c in cases if c.workload == n])
    ]
