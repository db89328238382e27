"""``shared_queue``: several serving instances on one queue in simulated time, as the CPU's
worker processes serve, on ``torchmark.testing``'s fake clock and executor of known service
time (tests and the generator's own benchmark)."""

from __future__ import annotations

from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.fleet import LEAD_S
from torchmark.kinds.serving.server import DONE, Batching, Queue, Requests, Server
from torchmark.testing import FakeClock, FakeExecutor


def shared_queue(
    instances: int,
    fixed_s: float,
    rate: float,
    seconds: float,
    batching: Batching = Batching(),
    seed: int = 0,
) -> Requests:
    """``instances`` servers of a fake executor on one shared queue (``server.Queue``, as the
    worker processes share theirs), each on its own fake clock: a discrete-event
    simulation that always steps the server whose clock is earliest, so every take from
    the queue happens in time order. The Poisson arrivals of ``seconds`` at ``rate``."""
    queue = Queue()
    clocks = [FakeClock(0.0) for _ in range(instances)]
    servers = [Server(FakeExecutor(c, fixed_s), batching, c, queue=queue) for c in clocks]
    times = Arrivals(rate, LEAD_S, seed).until(LEAD_S + seconds)
    for s in servers:
        s.extend(times)
    live = list(range(instances))
    while live:
        i = min(live, key=lambda k: clocks[k].t)  # ties: the lowest index, as a lock might
        if servers[i].step(times.size) == DONE:
            live.remove(i)
    return Requests.combine([s.requests(0, times.size) for s in servers])
