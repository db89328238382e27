"""Overhead of the telemetry sampler on the measurement it watches.

The same op is measured with and without ``watch()``, interleaved (A B A B ...) so drift in
machine load hits both alike; the figure is the ratio of the medians of the per-pair medians.
Target: under 1 %. Run: python benchmarks/telemetry_overhead.py [--rounds 10] [--size 256]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import torch

from torchmark.devices import available, resolve
from torchmark.telemetry import watch
from torchmark.timing import Fixed, measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--size", type=int, default=256, help="square matmul size")
    ap.add_argument("--device", default="cuda" if len(available()) > 1 else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1: less contention)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d = resolve(args.device)[0]
    a = torch.randn(args.size, args.size, device=d.torch_device)
    rule = Fixed(samples=30)
    ratios, overhead, spans = [], [], []
    for r in range(args.rounds):
        pair = {}
        for on in (False, True) if r % 2 == 0 else (True, False):
            ctx = watch(d) if on else contextlib.nullcontext()
            with ctx as trace:
                mark = trace.mark if trace is not None else None
                m = measure(lambda: a @ a, d, rule=rule, on_sample=mark)
            pair[on] = m.median
            if on:
                s = trace.summary()
                overhead.append(s["overhead_s"])
                spans.append(s.get("span_s") or 0.0)
        ratios.append(pair[True] / pair[False])
    med = statistics.median(ratios)
    q = statistics.quantiles(ratios, n=4)
    print(f"device {d.name}, {args.size}x{args.size} matmul, {args.rounds} interleaved pairs")
    print(
        f"median time with/without telemetry: {100 * (med - 1):+.2f} % "
        f"(IQR of pair ratios {100 * (q[0] - 1):+.2f} .. {100 * (q[2] - 1):+.2f} %)"
    )
    print(
        f"sampler's own reading time: {100 * sum(overhead) / sum(spans):.3f} % of the measured "
        f"span ({1e6 * sum(overhead) / len(overhead):.0f} µs per measurement)"
    )


if __name__ == "__main__":
    main()
