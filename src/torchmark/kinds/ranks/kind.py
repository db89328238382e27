"""A distributed run, as one rank sees it (``torchmark run`` under torchrun or Slurm, a
``--scaling`` rung): the same plan, ``run_planned`` and ``run_case`` as a local run, on a
``RankSession`` that gathers every rank's samples into rank 0's record.

    device, backend  = pick_device(cfg, world), pick_backend(...)   # one device per rank
    init(world, ...)                                                # the process group
    plan; handshake(identity(...))       # every rank plans the same cases, or all refuse
    session = open_run("run", RanksConfig(cfg, world), ..., session=RankSession)
    run_planned(session, ...)            # lockstep samples; rank 0 stores and prints

The lockstep timing, the handshake and the merge are ``launch.rank``'s.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from torchmark.devices.host import available_cores
from torchmark.errors import InputError, RunInterrupted
from torchmark.kinds.ranks import buckets
from torchmark.kinds.ranks.rank import (
    COLLECTIVE_TIMEOUT_S,
    Lockstep,
    handshake,
    header,
    identity,
    init,
    merged,
    pick_backend,
    pick_device,
    planned_strategy,
)
from torchmark.launch.env import World
from torchmark.results import Result, RunRecord
from torchmark.run.config import RunConfig, validate
from torchmark.run.plan import plan, select_workloads
from torchmark.run.record import open_run
from torchmark.run.runner import run_planned
from torchmark.run.session import Events, Session
from torchmark.run.watchdog import in_main_thread
from torchmark.store.base import ResultStore
from torchmark.workloads import Case
from torchmark.workloads.models.ddp import STRATEGIES, take_logging_data, using

__all__ = ["RankLost", "RankSession", "RanksConfig", "lost_peer", "run"]


@dataclass(frozen=True)
class RanksConfig:
    """What a distributed run measured, as its record stores it (``as_dict``): the run's
    options and the world that measured them."""

    run: RunConfig
    distributed: Mapping[str, Any]  # world size, backend, launcher, master, strategy

    def as_dict(self) -> dict[str, Any]:
        return {**self.run.as_dict(), "distributed": dict(self.distributed)}


class RankSession(Session):
    """A Session on every rank; only rank 0's has the store and the events. Each result is
    gathered on rank 0 before it is added there."""

    def __init__(
        self,
        record: RunRecord,
        store: ResultStore | None,
        events: Events | None,
        *,
        world: World,
        lockstep: Lockstep,
        json_path: Path | None = None,
        backend: str | None = None,
        strategy: str = "ddp",
        **options: Any,
    ) -> None:
        main = world.is_main
        super().__init__(
            record,
            store if main else None,
            events if main else None,
            json_path=json_path if main else None,
            host_clock=lockstep.clock,
            **options,
        )
        self.world, self.lockstep, self.backend = world, lockstep, backend
        self.strategy = strategy

    def add(self, case: Case | None, result: Result) -> None:
        timings = take_logging_data()
        # after the case's samples, outside its timed region; every rank takes part
        lock = self.lockstep
        alone = buckets.check(timings, lock.comm_device, lock.clock, lock.device.synchronize)
        if timings is not None and alone is not None and self.world.is_main:
            timings["alone"] = alone
        mine = {
            "rank": self.world.rank,
            "host": socket.gethostname(),
            "device": result.device,
            "torch": torch.__version__,
            "status": result.status,
            "reason": result.reason,
            "samples_s": self.lockstep.local_samples(result),
            "ddp": timings,
        }
        everyone: list[Any] | None = [None] * self.world.world_size if self.world.is_main else None
        dist.gather_object(mine, everyone, dst=0)
        if everyone is not None:
            result = merged(case, result, everyone, self.backend, self.strategy)
        super().add(case, result)


def run(
    cfg: RunConfig,
    store: ResultStore | None,
    events: Events | None,
    world: World,
    backend: str | None = None,
    json_path: Path | None = None,
    timeout_s: float = COLLECTIVE_TIMEOUT_S,
    say: Callable[[str], None] | None = None,
    strategy: str = "ddp",
) -> RunRecord:
    """This rank's part of a distributed run; rank 0's record holds every rank's samples.
    ``say``: where rank 0 prints the run's header (world size, backend, DDP)."""
    # Ceilings would be measured on every rank at once, each slowing the others: a
    # distributed run reports throughput, algbw and busbw without % of ceiling.
    cfg = replace(cfg, ceilings=False)
    validate(cfg)
    if strategy not in ("ddp", "fsdp"):
        valid = ", ".join(s for s in STRATEGIES if s != "dp")
        raise InputError(f"--strategy {strategy} is not one for ranks; valid: {valid}")
    device = pick_device(cfg, world)
    chosen = pick_backend(device, backend)
    # the node's cores shared among its ranks unless --threads says otherwise
    device.set_threads(cfg.threads or world.threads(available_cores()))
    if world.is_main and in_main_thread():
        # When a rank dies, torchrun's agent sends the others SIGTERM. Inside the session
        # that stops the run (results kept); after it, rank 0 must still finish storing,
        # showing and writing what it measured, so a late SIGTERM is ignored here (the
        # agent's SIGKILL after its grace period still bounds the wait).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    init(world, chosen, device, timeout_s)
    try:
        lockstep = Lockstep(device)
        workloads = select_workloads(cfg)
        cases = plan(workloads, [device], cfg)
        handshake(identity(cfg, cases, strategy), world)
        dist_info = {
            "world_size": world.world_size,
            "backend": chosen,
            "launched_by": world.source,
            "master": f"{world.master_addr}:{world.master_port}",
            "strategy": planned_strategy(cases, strategy),
        }
        if world.is_main and say is not None:
            say(header(dist_info))
        rank_session = partial(
            RankSession, world=world, lockstep=lockstep, backend=chosen, strategy=strategy
        )
        session = open_run(
            "run",
            RanksConfig(cfg, dist_info),
            [device],
            store,
            events,
            json_path=json_path,
            session=rank_session,
        )
        try:
            with using(strategy):
                record = run_planned(session, cases, workloads, cfg)
            # Every rank done before any tears its group down: a rank that destroyed its
            # gloo group while rank 0 still stored the run died once of SIGABRT
            # ("terminate called without an active exception") and failed the ladder.
            dist.barrier()
            return record
        except RuntimeError as e:
            if not lost_peer(e):
                raise
            # a peer died or hung; the session has stored the run as incomplete
            raise RankLost(session.record, session.record.run_id, world.rank, e) from None
    finally:
        with contextlib.suppress(Exception):  # a group with a dead peer may not close cleanly
            dist.destroy_process_group()


def lost_peer(e: RuntimeError) -> bool:
    """A collective that failed because of another rank (gloo raises a plain RuntimeError
    "Connection reset by peer"; NCCL and timeouts raise DistError)."""
    text = str(e)
    return isinstance(e, dist.DistError) or any(
        w in text for w in ("gloo", "NCCL", "Connection reset", "Connection closed", "peer")
    )


class RankLost(RunInterrupted):
    """A collective failed because another rank died or stopped answering."""

    def __init__(self, record: RunRecord, run_id: str | None, rank: int, cause: Exception):
        super().__init__(record, run_id)
        self.exit_code = 1
        text = str(cause).strip()
        # gloo starts with its source position: "[.../pair.cc:537] Read error ..."
        first = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0] if text else "")[:120]
        where = f"run {run_id} saved" if run_id else "the run (not stored) kept"
        self.args = (
            f"rank {rank} lost a peer mid-run ({type(cause).__name__}: {first}): {where} "
            "as incomplete with the cases measured so far",
        )
