"""The results store: a narrow interface, chosen by URL (``sqlite:///path`` default,
``postgresql://...`` for a team server).

Runs are written incrementally (begin, add each result, finish) so an interrupted run keeps
everything already measured.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `history` lists runs without importing the run documents' models
    from torchmark.results import Ceiling, Result, RunRecord


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One stored run's line in `history`: built by the store from its own columns (a
    dataclass: listing runs imports no pydantic)."""

    run_id: str
    kind: str
    created_utc: datetime
    status: str
    devices: list[str]
    n_results: int
    n_ok: int
    tool_version: str
    command: str
    host: str
    pid: int | None = None  # the measuring process, for runs still marked running


class ResultStore(ABC):
    url: str

    @abstractmethod
    def begin_run(self, run: RunRecord) -> str:
        """Store the run header (results may be empty) and return its new run id."""

    @abstractmethod
    def add_result(self, run_id: str, result: Result) -> None: ...

    @abstractmethod
    def set_ceilings(self, run_id: str, ceilings: list[Ceiling]) -> None: ...

    @abstractmethod
    def finish_run(self, run_id: str, run: RunRecord) -> None:
        """Final status, finish time, run-level telemetry, verdict and payload."""

    @abstractmethod
    def reopen_run(self, run_id: str, run: RunRecord) -> None:
        """Mark an incomplete run running again for this process (``torchmark run
        --resume``), with ``run``'s header; its results stay. Atomic: a run not incomplete
        (finished, or resumed by another process meanwhile) raises InputError."""

    @abstractmethod
    def save(self, run: RunRecord) -> str:
        """Store a whole run (import); keeps its run id unless that id is taken."""

    @abstractmethod
    def load(self, run_id: str) -> RunRecord:
        """A run by id, or ``latest``; RunNotFoundError names the fix."""

    @abstractmethod
    def list_runs(self, limit: int | None = None) -> list[RunSummary]:
        """Newest first."""

    @abstractmethod
    def runs_holding(self, workload: str, variant: str) -> list[str]:
        """Ids of the finished runs holding a result of ``workload`` ``variant``, newest
        first."""

    @abstractmethod
    def cached_ceilings(self, fingerprint: str, device: str) -> list[Ceiling] | None: ...

    @abstractmethod
    def cache_ceilings(self, fingerprint: str, device: str, ceilings: list[Ceiling]) -> None: ...

    def close(self) -> None:
        return None
