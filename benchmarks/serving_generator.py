"""The serving load generator's own limit on this host: how many arrivals per second it
issues on time, and its timing error.

    python benchmarks/serving_generator.py [--seconds 1.0] [--rates 1000,2000,...]

The serving loop (``torchmark.kinds.serving.server``) runs with a device that takes no time, so a
request's wait (due -> served) is the loop's own delay, for every arrival: how late it
woke for the ones it was idle before, and how long it took to catch up on the others. Per
rate: arrivals, median / p99 / max lateness. Also the loop's cost per request with every
request queued at once (no sleeping: its bookkeeping alone).

Target: >= 10,000 arrivals/s issued with a median lateness under 50 µs on
2 cores. The load average is printed at the start and the end: on a loaded host the p99
is the scheduler's (a preempted loop wakes milliseconds late), the median is the loop's.
Exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from torchmark.kinds.serving import generator
from torchmark.kinds.serving.clock import RealClock
from torchmark.kinds.serving.fleet import offline

TARGET_RATE = 10_000
TARGET_MEDIAN_S = 50e-6


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def per_request_cost(n: int = 200_000) -> float:
    """Seconds of loop bookkeeping per request with every request due at once (batch 1)."""
    clock = RealClock()
    t0 = time.perf_counter()
    offline(lambda first, k: None, clock, 1, n, 60.0)
    return (time.perf_counter() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="per rate")
    ap.add_argument("--rates", default=",".join(str(r) for r in generator.RATES))
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    print(f"start: {load()}")
    print(f"timer slack tightened to 1 ns: {RealClock().tight}")
    cost = per_request_cost()
    print(f"loop bookkeeping per request (all due at once, batch 1): {1e6 * cost:.2f} µs")
    print(f"{'rate/s':>9} {'arrivals':>9} {'median':>10} {'p99':>10} {'max':>10}  on time")
    result = generator.measure(rates, args.seconds)
    for c in result.checks:
        print(
            f"{c.rate:>9,.0f} {c.arrivals:>9,} {1e6 * c.median_s:>8.1f}µs "
            f"{1e6 * c.p99_s:>8.0f}µs {1e6 * c.max_s:>8.0f}µs  {'yes' if c.on_time else 'no'}"
        )
    print(result.sentence())
    print(f"end: {load()}")
    ok = result.limit >= TARGET_RATE
    print(
        f"target: >= {TARGET_RATE:,} arrivals/s with median lateness < "
        f"{1e6 * TARGET_MEDIAN_S:.0f} µs: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
