"""A fake device of known service time, for tests and for the generator's own benchmark:
serving a batch of n takes ``fixed_s + per_item_s * n`` on its clock (on a FakeClock that
is simulated time, so a queue's behaviour is exact and repeatable); and ``shared_queue``,
several instances on one queue in simulated time, as the CPU's worker processes serve."""

from __future__ import annotations

from collections.abc import Collection

from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.clock import Clock, FakeClock
from torchmark.kinds.serving.fleet import LEAD_S
from torchmark.kinds.serving.server import DONE, Batching, Queue, Requests, Server


class FakeDevice:
    """An executor: a batch of n takes ``fixed_s + per_item_s * n``; a batch holding a
    request in ``failing`` raises after its time (as a model that raises on one input)."""

    def __init__(
        self,
        clock: Clock,
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


def shared_queue(
    instances: int,
    fixed_s: float,
    rate: float,
    seconds: float,
    batching: Batching = Batching(),
    seed: int = 0,
) -> Requests:
    """``instances`` servers of a fake device on one shared queue (``server.Queue``, as the
    worker processes share theirs), each on its own fake clock: a discrete-event
    simulation that always steps the server whose clock is earliest, so every take from
    the queue happens in time order. The Poisson arrivals of ``seconds`` at ``rate``."""
    queue = Queue()
    clocks = [FakeClock() for _ in range(instances)]
    servers = [Server(FakeDevice(c, fixed_s), batching, c, queue=queue) for c in clocks]
    times = Arrivals(rate, LEAD_S, seed).until(LEAD_S + seconds)
    for s in servers:
        s.extend(times)
    live = list(range(instances))
    while live:
        i = min(live, key=lambda k: clocks[k].t)  # ties: the lowest index, as a lock might
        if servers[i].step(times.size) == DONE:
            live.remove(i)
    return Requests.combine([s.requests(0, times.size) for s in servers])
