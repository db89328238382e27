"""Which cores the load generator and the server each run on, as served on one host.

The client spins: uvloop rounds its sub-millisecond sleeps to none, so it spends ~0.2 ms of
CPU a request (0.46 of a core at 2,200 requests/s on a 2-core VM). On cores it shares with
the server it measures, it takes its share from the server, and the server's load makes it
late. Where this process may run on ``MIN_CORES`` or more cores (its affinity: taskset,
Slurm or a cgroup's cpuset decide it, not the machine's core count), the client gets one
core of its own, the last allowed, and the server the rest (its front end and model workers
inherit its affinity); the split between front end and model workers is searched over the
server's share. With fewer, both float over every allowed core: the client on one of two
would take half the server's.

Each process pins itself as it starts (``pin``), before its first request, and the parent
reads back what each had (``affinity``): that is what a run stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from torchmark.devices.host import allowed_cores

MIN_CORES = 3  # the fewest allowed cores on which the client gets one of its own


@dataclass(frozen=True)
class CorePlan:
    """The cores the client and the server are pinned to (both () where not pinned), out of
    ``allowed`` (() where this platform cannot say), and why not pinned, in one line."""

    client: tuple[int, ...] = ()
    server: tuple[int, ...] = ()
    allowed: tuple[int, ...] = ()
    note: str = ""

    @property
    def server_cores(self) -> int:
        """How many cores the server's front end and model workers share."""
        return len(self.server or self.allowed) or os.cpu_count() or 1


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def plan(
    allowed: Iterable[int] | None = None,
    pinnable: bool | None = None,
    min_cores: int = MIN_CORES,
) -> CorePlan:
    """The plan for ``allowed`` (default: this process's affinity): the last core to the
    client, the rest to the server, where there are ``min_cores`` (``MIN_CORES``) or more."""
    cores = tuple(sorted(set(allowed))) if allowed is not None else allowed_cores()
    if not (can_pin() if pinnable is None else pinnable):
        return CorePlan(
            allowed=cores,
            note="the load generator and the server are not pinned to cores: this platform "
            "has no CPU affinity (sched_setaffinity), so they share every core",
        )
    if len(cores) < min_cores:
        n = len(cores)
        return CorePlan(
            allowed=cores,
            note=f"the load generator shares the {n} core{'s' if n != 1 else ''} with the "
            f"server (a machine with {min_cores} or more gives it one of its own)",
        )
    return CorePlan(client=cores[-1:], server=cores[:-1], allowed=cores)


def pin(cores: Iterable[int]) -> None:
    """This process (and what it starts later) on ``cores``; nothing where () or the
    platform has no affinity. ``OSError`` where a core is not one it may run on."""
    wanted = set(cores)
    if wanted and can_pin():
        os.sched_setaffinity(0, wanted)


def affinity(pid: int = 0) -> tuple[int, ...] | None:
    """The cores process ``pid`` may run on (None: the platform cannot say, or it is gone)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return tuple(sorted(get(pid)))
    except OSError:
        return None
