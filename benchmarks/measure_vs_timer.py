"""Does torchmark.measure agree with torch.utils.benchmark.Timer.adaptive_autorange?

Both tools time the same callables on the CPU in one process, interleaved round by round
with the order flipped each round (AB, BA, AB, ...) so that a slow drift of the machine
(another job starting, the CPU warming) falls on both alike. The headline is the median over
rounds of the ratio of the two tools' medians in each round. Target: within 3 %.

A torchmark sample holds k calls (>= 10 ms on the CPU, METHOD.md); Timer's blocked sample of
a millisecond op holds one. Where the calls' times are skewed, a median of k-call means sits
above a median of single calls, so a second line compares torchmark with Timer's own
calls grouped k at a time (the statistic torchmark reports, from Timer's data) and prints
that grouping's effect on Timer's median; `--reference same-k` has Timer time k-call blocks.

    python benchmarks/measure_vs_timer.py [--rounds 10] [--threads 1] [--rule quick|micro]
                                          [--clock wall|cpu] [--reference blocked|adaptive]
                                          [--sittings 5] [--only OP ...]

`--sittings N` repeats the whole comparison N times and counts the sittings whose every op
met the target (the memory-bound goal: add on 4M floats and mm 384 within 3 % of the
blocked median in 5 of 5 sittings on a quiet machine).

An op meets the target where its median ratio's 95 % interval lies inside the band, misses
it where the interval lies outside, and can't tell otherwise. Exit status 0 when every op
met it, 1 when one MISSED it, else 3. The machine's load is printed: on a shared, loaded
machine rerun before believing a miss.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import figures
import torch
from torch.utils.benchmark import Timer

import torchmark
from torchmark.devices.base import HostTimer, SampleTimer, TimingMode
from torchmark.devices.cpu import CPUDevice
from torchmark.timing import preset

TARGET = 0.03  # the medians agree within 3 %


def ops() -> dict[str, Callable[[], Any]]:
    """Random inputs made once, outside the timed region (METHOD.md §2.2)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1_000_000, generator=g), torch.randn(1_000_000, generator=g)
    x4, y4 = torch.randn(4_000_000, generator=g), torch.randn(4_000_000, generator=g)
    a384, b384 = torch.randn(384, 384, generator=g), torch.randn(384, 384, generator=g)
    a256, b256 = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    a1k, b1k = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    ).eval()
    batch = torch.randn(64, 512, generator=g)

    def mlp_forward() -> torch.Tensor:
        with torch.no_grad():
            return mlp(batch)

    return {
        "add 1e6 fp32": lambda: x + y,
        "add 4M fp32": lambda: x4 + y4,
        "mm 384": lambda: a384 @ b384,
        "matmul 256^3": lambda: a256 @ b256,
        "matmul 1024^3": lambda: a1k @ b1k,
        "mlp 512-1024-512 b64": mlp_forward,
    }


class Run:
    """One tool's measurement of one op in one round."""

    def __init__(
        self, median: float, n: int, rel_iqr: float, calls: int, grouped: float | None = None
    ) -> None:
        self.median, self.n, self.rel_iqr = median, n, rel_iqr
        self.calls = calls  # calls per sample (torchmark) or per block (Timer)
        # Timer: the median of its own blocks' times grouped into samples of torchmark's k
        # calls (consecutive blocks averaged): the statistic torchmark reports, from Timer's
        # data. A median of k-call means exceeds a median of single calls by the skew of
        # the calls' times; this column holds that apart from how each tool times.
        self.grouped = grouped


def grouped_median(times: list[float], per_block: int, k: int) -> float | None:
    """The median of means of consecutive groups of blocks holding ~``k`` calls."""
    g = max(1, round(k / per_block))
    groups = [statistics.fmean(times[i : i + g]) for i in range(0, len(times) - g + 1, g)]
    return statistics.median(groups) if len(groups) >= 5 else None


class CPUTimeDevice(CPUDevice):
    """The CPU, timed by the process's CPU time instead of the wall clock."""

    def timer(self, mode: TimingMode = "device") -> SampleTimer:
        return HostTimer(self.synchronize, time.process_time)


def with_torchmark(fn: Callable[[], Any], rule: str, cpu_time: bool, calls: int | None) -> Run:
    """``calls``: the calls each sample holds (None: torchmark's own choice, >= 10 ms)."""
    device = CPUTimeDevice() if cpu_time else "cpu"
    m = torchmark.measure(fn, device, rule=preset(rule), calls_per_sample=calls)
    return Run(m.median, m.n, m.rel_iqr, m.calls_per_sample)


def with_timer(
    fn: Callable[[], Any], threads: int, cpu_time: bool, reference: str, calls: int
) -> Run:
    """``blocked``: blocked_autorange for 1 s (its block: one call for ops of a millisecond
    or more); ``adaptive``: adaptive_autorange; ``same-k``: blocks of ``calls`` calls, as
    many as 1 s holds (Timer.timeit each), the sample torchmark times."""
    clock = time.process_time if cpu_time else time.perf_counter
    timer = Timer("fn()", globals={"fn": fn}, num_threads=threads, timer=clock)
    if reference == "same-k":
        times: list[float] = []
        while math.fsum(times) * calls < 1.0:
            times.append(timer.timeit(number=calls).median)
        q1, _, q3 = statistics.quantiles(times, n=4)
        median = statistics.median(times)
        return Run(median, len(times), (q3 - q1) / median, calls)
    m = timer.blocked_autorange(min_run_time=1.0) if reference == "blocked" else None
    m = m or timer.adaptive_autorange()
    grouped = grouped_median(list(m.times), m.number_per_run, calls)
    return Run(m.median, len(m.times), m.iqr / m.median, m.number_per_run, grouped)


def sitting(args: argparse.Namespace, cpu_time: bool) -> list[str]:
    """One sitting: every op, ``args.rounds`` ABBA rounds; each op's verdict."""
    said: list[str] = []
    for name, fn in ops().items():
        if args.only and not any(part in name for part in args.only):
            continue
        fn()  # first call outside both tools: neither should pay for lazy init
        # same-k: both tools' samples hold the same calls, fixed for the op (torchmark's
        # own choice moves with its warm-up's estimate of a call, from sample to sample)
        calls = with_torchmark(fn, args.rule, cpu_time, None).calls
        fixed = calls if args.reference == "same-k" else None
        tm: list[Run] = []
        tt: list[Run] = []
        for r in range(args.rounds):
            for tool in ("tm", "timer") if r % 2 == 0 else ("timer", "tm"):
                if tool == "tm":
                    tm.append(with_torchmark(fn, args.rule, cpu_time, fixed))
                else:
                    tt.append(with_timer(fn, args.threads, cpu_time, args.reference, calls))
        # pairs taken back to back share the machine's state: their ratio cancels drift
        ratios = [a.median / b.median for a, b in zip(tm, tt, strict=True)]
        # the median ratio with its own 95 % interval over the rounds: agreement is shown
        # where the interval lies inside the band, a disagreement where it lies outside
        ratio, lo, hi, verdict = figures.judged(ratios, 1 - TARGET, 1 + TARGET)
        ok = verdict == "met"
        said.append(verdict)
        figures.figure(f"{name}: torchmark / Timer", ratio, "x", f"within {TARGET:.0%}", ok)
        figures.timed(f"{name}: torchmark's median", [a.median for a in tm])
        grouped = [a.median / b.grouped for a, b in zip(tm, tt, strict=True) if b.grouped]
        print(
            f"{name:22} {fmt(statistics.median(a.median for a in tm)):>10} "
            f"{fmt(statistics.median(b.median for b in tt)):>10} {ratio:6.3f} "
            f"{lo:6.3f}-{hi:.3f} "
            f"{statistics.median(a.rel_iqr for a in tm):5.1%}/"
            f"{statistics.median(b.rel_iqr for b in tt):5.1%} "
            f"{statistics.median(a.n for a in tm):>4.0f}/{statistics.median(b.n for b in tt):<4.0f}"
            f" {tm[0].calls:>2}/{tt[0].calls:<2} {verdict}"
        )
        if len(grouped) >= 5 and args.reference != "same-k":
            # the same comparison against Timer's own calls taken k at a time
            g, glo, ghi, _ = figures.judged(grouped)
            skew = statistics.median(b.grouped / b.median for b in tt if b.grouped)
            print(
                f"{'':22} Timer's calls as {tm[0].calls}-call means: torchmark / that "
                f"{g:.3f} ({glo:.3f}-{ghi:.3f}); their median / Timer's {skew:.3f}"
            )
            figures.figure(f"{name}: torchmark / Timer as k-call means", g, "x")
    return said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both tools")
    ap.add_argument("--rule", default="quick", help="torchmark stopping preset")
    ap.add_argument(
        "--only", action="append", help="run only the ops whose name contains this (repeatable)"
    )
    ap.add_argument(
        "--reference",
        choices=("blocked", "adaptive", "same-k"),
        default="blocked",
        help="torch.utils.benchmark's blocked_autorange (1 s), adaptive_autorange, or "
        "same-k: both tools' samples of the same calls, as many as torchmark's first "
        "sample held (Timer's blocks for 1 s)",
    )
    ap.add_argument("--sittings", type=int, default=1, help="repeat it all this many times")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: what a user waits (default); cpu: process CPU time, which other jobs "
        "on a shared machine cannot inflate by taking the core away",
    )
    args = ap.parse_args()
    cpu_time = args.clock == "cpu"

    # Timer sets torch's thread count to its num_threads while it runs: give both the same.
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPUs")
    print(f"load average {os.getloadavg()[0]:.2f} at start; torchmark rule {args.rule!r}")
    print(f"clock: {'process CPU time' if cpu_time else 'wall (perf_counter)'}")
    print(f"{args.rounds} rounds, order AB BA AB ...; ratio = torchmark / Timer per round,")
    print("headline = median over rounds, with its 95 % interval (order statistics);")
    print("met: the interval inside the target band; MISSED: outside it; CAN'T TELL:")
    print("it straddles an edge (more --rounds);")
    print("spread = median rel. IQR within a run,")
    print("n = median samples (torchmark) / blocks (Timer) a run; k = calls in each")
    print("(a median of k-call means exceeds a median of single calls by the times' skew)\n")
    head = (
        f"{'op':22} {'torchmark':>10} {'Timer':>10} {'ratio':>6} {'95% CI':>13}"
        f" {'spread tm/T':>12} {'n tm/T':>9} {'k tm/T':>6}"
    )
    print(head)
    print("-" * (len(head) + 6))

    t0 = time.perf_counter()
    said: list[str] = []
    good = 0
    for k in range(args.sittings):
        if args.sittings > 1:
            print(f"sitting {k + 1} of {args.sittings} (load {os.getloadavg()[0]:.2f})")
        ops_said = sitting(args, cpu_time)
        good += all(v == "met" for v in ops_said)
        said += ops_said
    if args.sittings > 1:
        print(f"{good} of {args.sittings} sittings met the target for every op")
    print(f"\n{time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"target: |median ratio - 1| <= {TARGET:.0%}, its 95 % interval inside that band")
    return figures.exit_status(said)


def fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


if __name__ == "__main__":
    sys.exit(main())
