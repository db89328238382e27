"""Time to a result: torchmark's stopping rules against torch.utils.benchmark's
``blocked_autorange`` on the same six CPU workloads.

    python benchmarks/stopping_vs_timer.py [--rounds 3] [--threads 2]
    PYTHONPATH=/other/tree/src python benchmarks/stopping_vs_timer.py    # "before"

Per workload and round, in one process, the tools take turns (order rotated each round, so a
drift of the machine falls on all): torchmark's default rule (``Adaptive()``: target 0.5 %,
time-out 10 s), its ``quick`` preset, and ``Timer.blocked_autorange(min_run_time=0.2)``.
Printed per workload: wall time to a result (first call and warm-up included, median over
rounds), the median's run-to-run spread (largest / smallest median over the rounds) and the
median against Timer's (median of the per-round ratios). The goal: the default
rule no slower than blocked_autorange where it gains nothing: no smaller spread, the same
medians. The machine and its load are printed; no target is checked (exit 0).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from measure_vs_timer import ops  # benchmarks/: the same four ops
from torch.utils.benchmark import Timer

import torchmark
from torchmark.timing import Adaptive, preset


def workloads() -> dict[str, Callable[[], Any]]:
    """measure_vs_timer.py's four ops, a 3x3 conv and a softmax (random inputs, made once)."""
    g = torch.Generator().manual_seed(1)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()
    image = torch.randn(1, 64, 56, 56, generator=g)
    logits = torch.randn(256, 4096, generator=g)

    def conv_forward() -> Any:
        with torch.no_grad():
            return conv(image)

    four = {f"W{i} {name}": fn for i, (name, fn) in enumerate(ops().items(), start=1)}
    return four | {
        "W5 conv3x3 64ch 56x56": conv_forward,
        "W6 softmax 256x4096": lambda: torch.softmax(logits, dim=-1),
    }


def with_torchmark(fn: Callable[[], Any], rule: Any) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    m = torchmark.measure(fn, "cpu", rule=rule)
    return time.perf_counter() - t0, m.median, m.stop_reason


def with_timer(fn: Callable[[], Any], threads: int) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    m = Timer("fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=0.2)
    return time.perf_counter() - t0, m.median, "0.2 s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads, every tool")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    src = os.path.dirname(os.path.dirname(torchmark.__file__))
    print(f"torchmark from {src}; torch {torch.__version__}, {args.threads} thread(s)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"load average {os.getloadavg()[0]:.2f} at start; {args.rounds} rounds, order rotated")
    tools: dict[str, Callable[[Callable[[], Any]], tuple[float, float, str]]] = {
        "default": lambda fn: with_torchmark(fn, Adaptive()),
        "quick": lambda fn: with_torchmark(fn, preset("quick")),
        "Timer": lambda fn: with_timer(fn, args.threads),
    }
    names = list(tools)
    head = (
        f"{'workload':24} {'time to result s':>22}  {'run-to-run spread':>20}  "
        f"{'median / Timer':>15}  default stops"
    )
    print("\n" + " " * 25 + "default / quick / Timer".rjust(22) + "  " + "(same order)".rjust(20))
    print(head)
    print("-" * len(head))
    totals = dict.fromkeys(names, 0.0)
    t_all = time.perf_counter()
    for label, fn in workloads().items():
        fn()  # the first call outside every tool
        got: dict[str, list[tuple[float, float, str]]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % 3 :] + names[: r % 3]
            for n in order:
                got[n].append(tools[n](fn))
        took = {n: statistics.median(t for t, _, _ in got[n]) for n in names}
        spread = {n: max(m for _, m, _ in got[n]) / min(m for _, m, _ in got[n]) for n in names}
        ratio = {
            n: statistics.median(a[1] / b[1] for a, b in zip(got[n], got["Timer"], strict=True))
            for n in names
        }
        for n in names:
            totals[n] += sum(t for t, _, _ in got[n])
        stops = ",".join(sorted({s for _, _, s in got["default"]}))
        print(
            f"{label:24} {took['default']:6.2f} /{took['quick']:5.2f} /{took['Timer']:5.2f}  "
            f"{spread['default']:6.3f} /{spread['quick']:6.3f} /{spread['Timer']:6.3f}  "
            f"{ratio['default']:6.3f} /{ratio['quick']:6.3f}  {stops}"
        )
    print(
        f"\nall rounds, wall s: default {totals['default']:.1f}, quick {totals['quick']:.1f}, "
        f"Timer {totals['Timer']:.1f} ({time.perf_counter() - t_all:.0f} s in all)"
    )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
