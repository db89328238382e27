"""One rank of a distributed run: lockstep timing, the start-up handshake, and every
rank's samples merged into rank 0's result. The run itself is ``kinds.ranks``.

Every rank measures every case together, so every rank must take the same decisions (how
many warm-up calls, calls per sample, samples): otherwise one rank waits forever in a
collective the others never call. ``measure`` decides from its sample times and its
clock, so here both are made the same on every rank:

- the sample timer starts after a barrier and its time is the slowest rank's
  (all_reduce MAX): the time of a collective is its slowest rank's, as in nccl-tests;
- the stopping rule's clock is rank 0's clock, broadcast at every read.

Each rank keeps its own sample times too; rank 0 gathers them (gather_object) into the
result's ``extra["per_rank"]``, so one run record holds every rank's raw samples. A rank whose
check found a wrong result makes the case WRONG on rank 0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from torchmark import __version__
from torchmark import format as fmt
from torchmark.devices import Device, resolve
from torchmark.devices.base import SampleTimer, TimingMode
from torchmark.errors import InputError, UsageError
from torchmark.judge import stragglers
from torchmark.judge.validity import judge
from torchmark.launch.env import World
from torchmark.results import Result
from torchmark.run.case import skipped
from torchmark.run.config import RunConfig
from torchmark.workloads import Case
from torchmark.workloads.models.ddp import explain

BACKENDS = ("gloo", "nccl")
# Flag of a result whose ranks ran different torch versions or devices.
RANKS_DISAGREE = "ranks_disagree"
# A collective waiting on a rank that never comes raises after this (gloo's and NCCL's
# default is 30 min); a dead peer's closed socket usually ends it at once.
COLLECTIVE_TIMEOUT_S = 120.0


def pick_device(cfg: RunConfig, world: World) -> Device:
    """One device per rank: cuda:LOCAL_RANK where CUDA is asked for (or "all" and found),
    else the CPU."""
    asked = [d for d in cfg.devices if d != "all"]
    if len(asked) > 1:
        raise InputError(
            f"a distributed run measures one device per rank; got --device {','.join(asked)}"
        )
    kind = asked[0].split(":")[0] if asked else ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        n = torch.cuda.device_count()
        if world.local_rank >= n:
            raise InputError(
                f"local rank {world.local_rank} has no GPU: this node has {n}; "
                f"use --nproc-per-node {n} or fewer"
            )
        return resolve([f"cuda:{world.local_rank}"])[0]
    return resolve([kind])[0]


def pick_backend(device: Device, backend: str | None) -> str:
    chosen = backend or ("nccl" if device.kind == "cuda" else "gloo")
    if chosen not in BACKENDS:
        raise InputError(f"unknown --backend {chosen!r}; valid: {', '.join(BACKENDS)}")
    if chosen == "nccl" and device.kind != "cuda":
        raise InputError(f"--backend nccl needs CUDA devices, not {device.name}: use gloo")
    return chosen


def init(world: World, backend: str, device: Device, timeout_s: float) -> None:
    world.export()
    if device.kind == "cuda":
        torch.cuda.set_device(device.torch_device)
    dist.init_process_group(
        backend,
        init_method="env://",
        rank=world.rank,
        world_size=world.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


class LockstepTimer(SampleTimer):
    """The device's timer, started together and read as the slowest rank's time."""

    def __init__(self, inner: SampleTimer, device: torch.device) -> None:
        self.inner, self.device = inner, device
        self.local: list[float] = []  # this rank's own times, for its raw samples

    def start(self) -> None:
        dist.barrier()
        self.inner.start()

    def stop(self) -> float:
        t = self.inner.stop()
        self.local.append(t)
        slowest = torch.tensor([t], dtype=torch.float64, device=self.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest.item())


class Lockstep:
    """Makes ``device``'s timers lockstep ones; remembers the last for its local times."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.last: LockstepTimer | None = None
        self._inner_timer = device.timer
        # an instance attribute wins over the class's method for this device object only
        setattr(device, "timer", self.timer)  # noqa: B010

    def timer(self, mode: TimingMode = "device") -> SampleTimer:
        self.last = LockstepTimer(self._inner_timer(mode), self.comm_device)
        return self.last

    @property
    def comm_device(self) -> torch.device:
        return self.device.torch_device if self.device.kind == "cuda" else torch.device("cpu")

    def clock(self) -> float:
        """Rank 0's host clock, the same value on every rank."""
        t = torch.tensor([time.perf_counter()], dtype=torch.float64, device=self.comm_device)
        dist.broadcast(t, src=0)
        return float(t.item())

    def local_samples(self, result: Result) -> list[float]:
        n, k = len(result.samples_s), result.calls_per_sample or 1
        if not n or self.last is None or len(self.last.local) < n:
            return []
        return [t / k for t in self.last.local[-n:]]


# -- the start-up handshake ------------------------------------------------------------------

SAME_EVERYWHERE = "start every rank with the same torchmark, torch and command line"


class RanksDisagree(UsageError):
    """Ranks started with different versions, options or plans: refused before measuring
    (a rank planning other cases would wait forever in a collective the others never call)."""


def identity(cfg: RunConfig, cases: Sequence[Case], strategy: str = "ddp") -> dict[str, Any]:
    """What every rank must share. Cases are named without their device: rank k measures
    cuda:k, and two nodes may hold different GPU models (said per result, not refused)."""
    return {
        "torchmark": __version__,
        "torch": torch.__version__,
        "config": {**cfg.as_dict(), "strategy": strategy},
        "cases": [fmt.case_label(c.variant, c.params, c.workload) for c in cases],
    }


def disagreement(ids: Sequence[dict[str, Any]]) -> str | None:
    """The first difference between rank 0's identity and another rank's, in one line."""
    base = ids[0]
    for rank, other in enumerate(ids[1:], start=1):
        why = None
        for key, what in (("torchmark", "torchmark version"), ("torch", "torch version")):
            if other[key] != base[key]:
                why = f"the {what}: {other[key]} on rank {rank}, {base[key]} on rank 0"
                break
        if why is None and other["config"] != base["config"]:
            a, b = other["config"], base["config"]
            k = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            why = f"the option {k}: {a.get(k)!r} on rank {rank}, {b.get(k)!r} on rank 0"
        if why is None and other["cases"] != base["cases"]:
            a, b = other["cases"], base["cases"]
            i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            first = f"first {a[i]!r} vs {b[i]!r}" if i is not None else "one plan ends early"
            why = f"the planned cases: {len(a)} on rank {rank}, {len(b)} on rank 0 ({first})"
        if why is not None:
            return f"rank {rank} disagrees with rank 0 on {why}: {SAME_EVERYWHERE}"
    return None


def handshake(mine: dict[str, Any], world: World) -> None:
    """Every rank's identity, compared on every rank: each refuses the same way."""
    everyone: list[Any] = [None] * world.world_size
    dist.all_gather_object(everyone, mine)
    problem = disagreement(everyone)
    if problem is not None:
        raise RanksDisagree(problem)


def planned_strategy(cases: Sequence[Case], name: str = "ddp") -> str | None:
    """``name`` when the plan trains (the model is wrapped), else None (collectives)."""
    return name if any(c.param_dict.get("scenario") == "train" for c in cases) else None


def header(info: dict[str, Any]) -> str:
    """The run's first line on rank 0: which world, backend and launcher measure it."""
    from torchmark.judge.worlds import world_label

    line = (
        f"{world_label(info)}: world size {info['world_size']}, backend {info['backend']}, "
        f"started by {info['launched_by']} (master {info['master']})"
    )
    if info.get("strategy"):
        line += "; each rank trains its own batch, throughput is per rank"
    return line


def merged(
    case: Case | None,
    result: Result,
    ranks: Sequence[dict[str, Any]],
    backend: str | None = None,
    strategy: str = "ddp",
) -> Result:
    """Rank 0's result with every rank's raw samples; WRONG where any rank was wrong."""
    from torchmark.kinds.ranks.comm import comm_check, comm_check_text

    wrong = [r for r in ranks if r["status"] == "wrong"]
    if wrong and result.status != "wrong" and case is not None:
        r = wrong[0]
        result = skipped(case, f"rank {r['rank']}: {r['reason']}", status="wrong")
    extra: dict[str, Any] = {**result.extra, "world_size": len(ranks), "per_rank": list(ranks)}
    notes = list(result.notes)
    flags = list(result.extra_flags)
    for key in ("torch", "device"):  # never averaged silently: said and flagged
        seen: dict[str, list[int]] = {}
        for r in ranks:
            if key in r:
                seen.setdefault(str(r[key]), []).append(r["rank"])
        if len(seen) > 1:
            said = "; ".join(f"{v} on ranks {','.join(map(str, rs))}" for v, rs in seen.items())
            notes.append(f"ranks disagree on {key}: {said}")
            if RANKS_DISAGREE not in flags:
                flags.append(RANKS_DISAGREE)
    if "optimizer" in result.extra and result.ok:  # a training step: DDP, weak scaling
        per_rank = result.rate("items")
        if per_rank is not None:
            extra["total_items_per_s"] = per_rank * len(ranks)
            timings = ranks[0].get("ddp")
            why = explain(timings, result.median_s or 0.0) if timings else None
            if timings and why:
                extra["ddp"] = {**timings, **why}
                notes.append(
                    f"rank 0, from DDP's own timers: backward comm "
                    f"{timings['backward_comm_s'] * 1e3:.3g} ms, overlapped with compute "
                    f"{timings['overlap_s'] * 1e3:.3g} ms: exposed communication "
                    f"{why['exposed_comm_s'] * 1e3:.3g} ms = "
                    f"{100 * why['exposed_comm_share']:.3g} % of the step"
                )
                check = comm_check(extra["ddp"], result.measurement.rel_iqr)
                if check is not None:
                    notes.append(f"rank 0: {comm_check_text(check)}")
            over = f" over {backend}" if backend else ""
            notes.append(
                f"{strategy.upper()} x{len(ranks)}{over}, each rank its own batch: throughput "
                f"is per rank (slowest rank's time), "
                f"{fmt.si(per_rank * len(ranks))} {result.work.item_unit}/s in total"
            )
    out = result.model_copy(update={"extra": extra, "notes": notes})
    if stragglers.of_result(out) and stragglers.FLAG not in flags:
        flags.append(stragglers.FLAG)
    # judged on rank 0's samples alone; now that every rank's are here, judged again
    verdict = judge(out) if out.verdict is not None else None
    return out.model_copy(update={"extra_flags": flags, "verdict": verdict})


__all__ = [
    "BACKENDS",
    "COLLECTIVE_TIMEOUT_S",
    "RANKS_DISAGREE",
    "Lockstep",
    "LockstepTimer",
    "RanksDisagree",
    "disagreement",
    "handshake",
    "header",
    "identity",
    "init",
    "merged",
    "pick_backend",
    "pick_device",
    "planned_strategy",
]
