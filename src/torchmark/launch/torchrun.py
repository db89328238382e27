"""``torchmark run --nproc-per-node N``: start the ranks through torchrun's launcher API.

Each worker is this same command (``python -m torchmark ...``) started by the elastic
agent, which sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*: the worker sees them and joins
(env.joined) instead of launching again. ``--nnodes M --rdzv-endpoint HOST:PORT
--node-rank K`` mean what they mean to torchrun (c10d rendezvous).
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchmark.errors import InputError, TorchmarkError, UsageError, first_line

# A rendezvous that never completes (a node that never comes, an endpoint nobody listens
# on) ends after this many seconds instead of torchrun's 900.
DEFAULT_RDZV_TIMEOUT_S = 60


class LaunchFailed(TorchmarkError):
    """A rank failed or the rendezvous did not complete; the message names which."""


@dataclass(frozen=True)
class Launch:
    # None: not asked for. ``--nproc-per-node 1`` is asked for: one rank under DDP, the
    # ladder's "DDP x1" row (DDP's own overhead), not a plain run.
    nproc_per_node: int | None = None
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S

    @property
    def wanted(self) -> bool:
        return self.nproc_per_node is not None or self.nnodes > 1

    @property
    def nproc(self) -> int:
        return self.nproc_per_node or 1


def validate(launch: Launch) -> Launch:
    if launch.nproc_per_node is not None and launch.nproc_per_node < 1:
        raise InputError(f"--nproc-per-node must be >= 1, got {launch.nproc_per_node}")
    if launch.nnodes < 1:
        raise InputError(f"--nnodes must be >= 1, got {launch.nnodes}")
    if launch.nnodes > 1 and not launch.rdzv_endpoint:
        raise InputError(
            f"--nnodes {launch.nnodes} needs --rdzv-endpoint HOST:PORT (the same on every node)"
        )
    if launch.rdzv_timeout_s < 1:
        raise InputError(f"--rdzv-timeout must be >= 1 s, got {launch.rdzv_timeout_s}")
    return launch


def launch(opts: Launch, argv: Sequence[str]) -> None:
    """Run ``python -m torchmark ARGV`` on every local rank; raise LaunchFailed naming the
    ranks that failed (rank 0 has already printed and stored what it measured)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    validate(opts)
    endpoint = opts.rdzv_endpoint or "127.0.0.1:0"
    # read_timeout bounds connecting to the store (60 s by default, tried twice)
    configs: dict[str, object] = {
        "join_timeout": opts.rdzv_timeout_s,
        "read_timeout": opts.rdzv_timeout_s,
    }
    if opts.node_rank is not None:
        configs["rank"] = opts.node_rank
    # torchrun's rule: the node that owns the endpoint hosts the store. Node rank 0 is the
    # host when --node-rank is given; alone on this machine, it is always us.
    configs["is_host"] = opts.nnodes == 1 or opts.node_rank == 0
    config = LaunchConfig(
        min_nodes=opts.nnodes,
        max_nodes=opts.nnodes,
        nproc_per_node=opts.nproc,
        run_id=f"torchmark-{uuid.uuid4().hex[:8]}" if opts.nnodes == 1 else "torchmark",
        rdzv_endpoint=endpoint,
        rdzv_backend="c10d",
        rdzv_configs=configs,
        rdzv_timeout=opts.rdzv_timeout_s,
        max_restarts=0,  # a benchmark rank that died is a result, not something to retry
        monitor_interval=0.1,
    )
    where = f"rendezvous {endpoint}" if opts.rdzv_endpoint else "the local rendezvous"
    t0 = time.monotonic()
    try:
        elastic_launch(config, sys.executable)("-m", "torchmark", *argv)
    except ChildFailedError as e:
        failed = LaunchFailed(failed_ranks(e.failures))
        if all(int(getattr(f, "exitcode", 1)) == UsageError.exit_code for f in e.failures.values()):
            failed.exit_code = UsageError.exit_code  # each rank refused and said why above
        raise failed from None
    except (RendezvousError, TimeoutError, RuntimeError) as e:
        # torch tries the store twice with a pause between: the wait is about 2x the timeout
        raise LaunchFailed(
            f"cannot join {where}: gave up after {time.monotonic() - t0:.0f} s "
            f"(--rdzv-timeout {opts.rdzv_timeout_s} s per try; {first_line(e)}); check that "
            "HOST:PORT is reachable from every node and the same on each"
        ) from None


def failed_ranks(failures: Mapping[int, object]) -> str:
    """'rank 1 was killed by SIGKILL; rank 0 exited with 1' from torchrun's failures."""
    parts = []

    # the cause first: the agent stops the other ranks with SIGTERM because of it
    def cause_first(kv: tuple[int, object]) -> tuple[bool, float, int]:
        code = int(getattr(kv[1], "exitcode", 1))
        return (
            code in (-signal.SIGTERM, 128 + signal.SIGTERM),
            getattr(kv[1], "timestamp", 0),
            kv[0],
        )

    order = sorted(failures.items(), key=cause_first)
    for rank, f in order:
        code = int(getattr(f, "exitcode", 1))
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            refused = " (refused, said above)" if code == UsageError.exit_code else ""
            how = f"exited with {code}{refused}"
        parts.append(f"rank {rank} {how}")
    return "distributed run failed: " + "; ".join(parts)


__all__ = ["DEFAULT_RDZV_TIMEOUT_S", "Launch", "LaunchFailed", "launch", "validate"]
