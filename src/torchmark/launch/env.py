"""The job this process was started in: torchrun's variables, or Slurm's.

torchrun (and ``torchmark run --nproc-per-node``) sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT. ``srun`` sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
the node list, whose first host becomes the master address.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from torchmark.errors import InputError

# torchrun's own default port; under Slurm the job id moves it so two jobs sharing a node
# do not meet on one port.
DEFAULT_PORT = 29500
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000
# Set by ``--scaling`` for each rung's ranks: the rung's --json file is the ladder's to read
# back, so the rung does not announce it (cli/output.py).
RUNG_ENV = "TORCHMARK_LADDER_RUNG"


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str  # "torchrun" | "slurm"
    local_world_size: int = 1  # ranks on this node: they share its cores

    def threads(self, cores: int) -> int:
        """Threads per rank by default: the node's cores shared among its ranks (two ranks
        of two threads each on two cores wait for time slices, not the hardware)."""
        return max(1, cores // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def export(self, environ: dict[str, str] | None = None) -> None:
        """The variables ``init_process_group(init_method="env://")`` reads."""
        env = os.environ if environ is None else environ
        env.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(self.local_rank),
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(self.master_port),
        )


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu[003-005,010],cpu1' -> 'gpu003'."""
    m = re.match(r"\s*([^,\[\s]+)(?:\[([^\]]+)\])?", nodelist)
    if not m:
        raise InputError(f"cannot read the Slurm node list {nodelist!r}: set MASTER_ADDR")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + re.split(r"[-,]", ranges, maxsplit=1)[0]


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise InputError(f"{name}={env[name]!r} is not an integer (check the launcher)") from None


def joined(env: Mapping[str, str] | None = None) -> World | None:
    """The job this process belongs to, or None when it runs alone.

    Slurm counts only inside a job step (``srun`` sets SLURM_STEP_ID): a batch script's own
    shell also has SLURM_PROCID=0, and joining there would wait for ranks that never come.
    """
    e = os.environ if env is None else env
    if "RANK" in e and "WORLD_SIZE" in e:
        return World(
            rank=_int(e, "RANK"),
            world_size=_int(e, "WORLD_SIZE"),
            local_rank=_int(e, "LOCAL_RANK") if "LOCAL_RANK" in e else 0,
            master_addr=e.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(e, "MASTER_PORT") if "MASTER_PORT" in e else DEFAULT_PORT,
            source="torchrun",
            local_world_size=_int(e, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in e else 1,
        )
    if "SLURM_PROCID" in e and "SLURM_STEP_ID" in e and _int(e, "SLURM_NTASKS") > 1:
        nodes = e.get("SLURM_STEP_NODELIST") or e.get("SLURM_JOB_NODELIST") or ""
        job = _int(e, "SLURM_JOB_ID") if "SLURM_JOB_ID" in e else 0
        return World(
            rank=_int(e, "SLURM_PROCID"),
            world_size=_int(e, "SLURM_NTASKS"),
            local_rank=_int(e, "SLURM_LOCALID") if "SLURM_LOCALID" in e else 0,
            master_addr=e.get("MASTER_ADDR") or (first_host(nodes) if nodes else "127.0.0.1"),
            master_port=_int(e, "MASTER_PORT")
            if "MASTER_PORT" in e
            else SLURM_PORT_BASE + job % SLURM_PORT_SPAN,
            source="slurm",
            local_world_size=_slurm_local(e),
        )
    return None


def _slurm_local(e: Mapping[str, str]) -> int:
    """Tasks on this node: SLURM_NTASKS_PER_NODE where it is one number, else the tasks
    spread evenly over the step's nodes."""
    per = e.get("SLURM_NTASKS_PER_NODE", "")
    if per.isdigit():
        return int(per)
    nodes = e.get("SLURM_NNODES", "")
    if nodes.isdigit() and int(nodes) > 0:
        return max(1, _int(e, "SLURM_NTASKS") // int(nodes))
    return 1


__all__ = ["World", "first_host", "joined"]
