"""Several serving instances on one shared queue (the CPU's worker processes), checked in
simulated time against the M/D/c queue of queueing theory; and random routing (each arrival
sent to an instance at random: c separate M/D/1 queues, what the workers did before) shown
to fail the same check. Deterministic: fake clocks, a fake device of known service time."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.fleet import LEAD_S
from torchmark.kinds.serving.server import DONE, Batching, Queue, Requests, Server
from torchmark.testing import FakeClock, FakeExecutor

S = 0.010  # the fake device's service time per request
C = 2  # instances


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


def mdc_mean_wait(c: int, rho: float, d: float) -> float:
    """The exact mean wait in queue of an M/D/c queue (no simulation): Crommelin (1932,
    "Delay probability formulae when the holding times are constant", P.O.E.E. Journal
    25) as given through Spitzer's identity in H. C. Tijms, "A First Course in Stochastic
    Models" (Wiley, 2003), the M/D/c queue:

        Lq = sum_{k >= 1} (1/k) E[(A_k - k c)^+],   A_k ~ Poisson(k lam d),   Wq = Lq / lam

    (every customer among the first c present at t has left by t + d, so the count beyond
    c is a random walk reflected at 0 with Poisson(lam d) - c steps)."""
    lam = c * rho / d
    total = 0.0
    for k in range(1, 100_000):
        m = k * c
        j = np.arange(m)
        # E[(A - m)^+] = E[A] - m + E[(m - A)^+], a finite sum
        term = (k * lam * d - m + float(np.sum((m - j) * sps.poisson.pmf(j, k * lam * d)))) / k
        total += term
        if k > 5 and term < 1e-15 * total:
            break
    return total / lam


def test_the_mdc_formula_is_pollaczek_khinchine_at_one_server_and_near_cosmetatos() -> None:
    for rho in (0.5, 0.8):
        assert mdc_mean_wait(1, rho, S) == pytest.approx(rho * S / (2 * (1 - rho)), rel=1e-9)
    # Cosmetatos' approximation (1975) for c = 2: 0.1757 and 0.9010 service times
    assert mdc_mean_wait(2, 0.5, S) / S == pytest.approx(0.1757, rel=0.01)
    assert mdc_mean_wait(2, 0.8, S) / S == pytest.approx(0.9010, rel=0.01)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_two_instances_on_one_queue_wait_as_an_md2_queue(rho: float) -> None:
    lam = C * rho / S
    r = shared_queue(C, S, lam, seconds=1000.0, seed=1)  # 100,000 and 160,000 requests
    assert r.served.all() and len(r) > 90_000
    assert r.wait.mean() == pytest.approx(mdc_mean_wait(C, rho, S), rel=0.10)
    assert np.all(r.batch == 1) and np.all(r.finish - r.start == pytest.approx(S))
    # no instance ever serves two requests at once: c of them at most are in service
    starts = np.sort(r.start)
    assert np.all(starts[C:] - starts[:-C] >= S - 1e-9)


def random_routing(rho: float, seed: int = 1) -> Requests:
    """The same arrivals, each sent to one of C instances at random, each with its own
    queue (``fleet.Local``'s loop): what the worker processes did before the shared queue."""
    lam = C * rho / S
    times = Arrivals(lam, LEAD_S, seed).until(LEAD_S + 1000.0)
    to = np.random.default_rng(seed).integers(C, size=times.size)
    parts = []
    for i in range(C):
        clock = FakeClock(0.0)
        server = Server(FakeExecutor(clock, S), Batching(), clock)
        server.extend(times[to == i])
        assert server.serve_until(int(np.sum(to == i)))
        parts.append(server.requests(0, int(np.sum(to == i))))
    return Requests.concat(parts)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_random_routing_fails_the_md2_check(rho: float) -> None:
    """Random routing is C M/D/1 queues at the same utilisation: 2.8x (50 %) and 2.2x
    (80 %) the shared queue's mean wait, far outside 10 % of M/D/2."""
    r = random_routing(rho)
    md2 = mdc_mean_wait(C, rho, S)
    assert r.wait.mean() != pytest.approx(md2, rel=0.10)
    assert r.wait.mean() == pytest.approx(mdc_mean_wait(1, rho, S), rel=0.10)


def test_batches_from_a_shared_queue_never_take_a_request_twice() -> None:
    """With batching, every request is served once, in a batch of its recorded size, by
    one instance; a batch waits at most max wait once an instance is free."""
    r = shared_queue(3, S, 250.0, seconds=20.0, batching=Batching(8, 0.004), seed=2)
    assert r.served.all() and not r.failed.any()
    assert r.batch.max() <= 8 and r.batch.min() >= 1
    # requests of one batch share start and finish, and there are exactly `batch` of them
    _, first, counts = np.unique(r.start, return_index=True, return_counts=True)
    assert np.array_equal(counts, r.batch[first])


def test_combine_takes_each_request_from_the_instance_that_served_it() -> None:
    nan = np.nan
    a = Requests(
        np.array([1.0, 2.0, 3.0]),
        np.array([1.0, nan, 3.5]),
        np.array([1.5, nan, 4.0]),
        np.array([0.0, 5e-6, nan]),
        np.array([False, False, True]),
        np.array([1, 0, 1], dtype=np.int32),
    )
    b = Requests(  # stopped before the third request
        np.array([1.0, 2.0]),
        np.array([nan, 2.0]),
        np.array([nan, 2.5]),
        np.array([nan, 1e-6]),
        np.array([False, False]),
        np.array([0, 1], dtype=np.int32),
    )
    out = Requests.combine([a, b])
    assert out.start.tolist() == [1.0, 2.0, 3.5] and out.finish.tolist() == [1.5, 2.5, 4.0]
    assert out.failed.tolist() == [False, False, True] and out.batch.tolist() == [1, 1, 1]
    assert out.lateness.tolist()[:2] == [0.0, 1e-6] and np.isnan(out.lateness[2])
