"""Fakes for deterministic tests of the harness: one fake clock, a fake device and a fake
serving executor.

``FakeClock`` only moves when told; ``FakeDevice`` times samples on that clock, so a
callable that advances the clock by a known schedule yields known samples; the serving
loop runs on the same clock, and ``FakeExecutor`` serves a batch in a known time on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, ClassVar, Protocol

from torchmark.devices.base import Device, HostTimer, SampleTimer, TimingMode


class FakeClock:
    """Time that moves only when told: by ``advance``, or by ``sleep_until`` (the serving
    loop's clock). The timing loop reads it as a callable, the serving loop by ``now()``:
    the same time. ``wake_late_s``: every sleep wakes this much after its target (a host
    whose timer cannot keep up); ``read_s``: every ``now()`` costs this much (a loop whose
    own work takes time)."""

    def __init__(
        self, start: float = 1000.0, wake_late_s: float = 0.0, read_s: float = 0.0
    ) -> None:
        self.t = start
        self.wake_late_s, self.read_s = wake_late_s, read_s

    def __call__(self) -> float:
        return self.t

    def now(self) -> float:
        self.t += self.read_s
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t + self.wake_late_s)

    def advance(self, seconds: float) -> None:
        self.t += seconds


class _ServingClock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None: ...


class FakeExecutor:
    """A serving executor of known service time: a batch of n takes ``fixed_s +
    per_item_s * n`` on its clock (on a FakeClock, simulated time: a queue's behaviour is
    exact and repeatable); a batch holding a request in ``failing`` raises after its time
    (as a model that raises on one input)."""

    def __init__(
        self,
        clock: _ServingClock,
        fixed_s: float,
        per_item_s: float = 0.0,
        failing: Collection[int] = (),
    ) -> None:
        self.clock, self.fixed_s, self.per_item_s = clock, fixed_s, per_item_s
        self.failing = frozenset(failing)
        self.batches: list[int] = []

    def service_s(self, n: int) -> float:
        return self.fixed_s + self.per_item_s * n

    def __call__(self, first: int, n: int) -> None:
        self.batches.append(n)
        advance = getattr(self.clock, "advance", None)
        if advance is not None:  # simulated time: exactly the service time, never late
            advance(self.service_s(n))
        else:
            self.clock.sleep_until(self.clock.now() + self.service_s(n))
        bad = [i for i in range(first, first + n) if i in self.failing]
        if bad:
            raise ValueError(f"request {bad[0]} is malformed\n(a second line never shown)")


class FakeDevice(Device):
    """A device whose timer reads a FakeClock. ``syncs`` counts synchronize() calls."""

    kind: ClassVar[str] = "fake"
    is_accelerator: ClassVar[bool] = True
    min_sample_s: ClassVar[float] = 0.001

    def __init__(self, clock: FakeClock, index: int | None = 0, model: str = "FakeGPU") -> None:
        super().__init__(index)
        self.clock, self.model, self.syncs = clock, model, 0

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def synchronize(self) -> None:
        self.syncs += 1

    def timer(self, mode: TimingMode = "device") -> SampleTimer:
        return HostTimer(self.synchronize, self.clock)

    def info(self) -> dict[str, Any]:
        return {"kind": "fake", "model": self.model}


class FakeH100(FakeDevice):
    """``cuda:N`` as an H100 describes itself to the planner (80 GB, 50 MB L2, TF32, graphs,
    pinned copies, compile): the GPU suite planned where there is none (tests, estimates)."""

    kind: ClassVar[str] = "cuda"

    def supports_tf32(self) -> str | None:
        return None

    def supports_graphs(self) -> str | None:
        return None

    def supports_async_copy(self) -> str | None:
        return None

    def supports_compile(self) -> str | None:
        return None

    def total_memory_bytes(self) -> int | None:
        return 80 * 2**30

    def available_memory_bytes(self) -> int | None:
        return 79 * 2**30

    def cache_bytes(self) -> int | None:
        return 50 * 2**20

    def info(self) -> dict[str, Any]:
        return {"kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "l2_bytes": 50 * 2**20}


def scripted(clock: FakeClock, durations: Iterable[float]) -> Callable[[], None]:
    """A callable whose n-th call takes ``durations[n]`` seconds (the last one repeats)."""
    it: Iterator[float] = iter(durations)
    last = [0.0]

    def fn() -> None:
        last[0] = next(it, last[0])
        clock.advance(last[0])

    return fn


class MemoryStore:
    """An in-memory ResultStore for runner tests (the real one is SQL)."""

    url = "memory://"

    def __init__(self) -> None:
        from torchmark.results import Ceiling, RunRecord

        self.runs: dict[str, RunRecord] = {}
        self.cache: dict[tuple[str, str], list[Ceiling]] = {}

    def begin_run(self, run: Any) -> str:
        run_id = f"run-{len(self.runs) + 1}"
        self.runs[run_id] = run.model_copy(update={"run_id": run_id, "results": []})
        return run_id

    def add_result(self, run_id: str, result: Any) -> None:
        self.runs[run_id].results.append(result)

    def set_ceilings(self, run_id: str, ceilings: list[Any]) -> None:
        self.runs[run_id].ceilings = list(ceilings)

    def finish_run(self, run_id: str, run: Any) -> None:
        self.runs[run_id].status = run.status
        self.runs[run_id].finished_utc = run.finished_utc
        self.runs[run_id].payload = run.payload.model_copy(deep=True)

    def reopen_run(self, run_id: str, run: Any) -> None:
        from torchmark.errors import InputError

        stored = self.runs[run_id]
        if stored.status != "incomplete":
            raise InputError(f"run {run_id} is {stored.status} now: it cannot be resumed")
        self.runs[run_id] = run.model_copy(update={"results": stored.results})

    def load(self, run_id: str) -> Any:
        from torchmark.errors import RunNotFoundError

        if run_id not in self.runs:
            raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
        return self.runs[run_id].model_copy(deep=True)

    def list_runs(self, limit: int | None = None) -> list[Any]:
        from torchmark.judge.verdicts import counted
        from torchmark.store.base import RunSummary

        return [
            RunSummary(
                run_id=i,
                kind=r.kind,
                created_utc=r.created_utc,
                status=r.status,
                devices=list(r.environment.get("devices") or {}),
                n_results=len(r.results),
                n_ok=counted(r.results),
                tool_version=r.tool_version,
                command=r.command,
                host=str(r.environment.get("host") or ""),
            )
            for i, r in reversed(self.runs.items())
        ][:limit]

    def runs_holding(self, workload: str, variant: str) -> list[str]:
        return [
            i
            for i, r in reversed(self.runs.items())
            if r.status != "running"
            and any(x.workload == workload and x.variant == variant for x in r.results)
        ]

    def cached_ceilings(self, fingerprint: str, device: str) -> list[Any] | None:
        return self.cache.get((fingerprint, device))

    def cache_ceilings(self, fingerprint: str, device: str, ceilings: list[Any]) -> None:
        self.cache[(fingerprint, device)] = list(ceilings)
