"""Is adaptive stopping biased toward quiet, fast stretches? A simulation with a fake clock.

Samples are drawn from a fixed noise model (nothing real is timed); each replication feeds
them one by one to a stopping rule, the elapsed time being the sum of the samples so far
(one sample = ``k`` calls of a ~10 ms block, as on a CPU). The headline of a replication is
the median of its samples when the rule stops. Compared, on the same streams: a fixed
sample count (the rule's median n: no data-dependent stopping) and a fixed 0.2 s (Timer.
blocked_autorange), each against the stream's long-run median. Part 2 shows the other
thing that moves a median by percents: sample length.

    python benchmarks/stopping_bias.py [--reps 2000] [--rule quick|micro|model]

Noise models (per-sample time in units of the quiet time 1.0):
    iid-skewed   1 + lognormal tail: every sample independent (no stretches)
    stretches    quiet stretches (1.0 ± 0.5 %) alternate with busy ones (1.0-1.3, spread)
                 lasting 0.2-2 s each: what other jobs on a shared machine look like
Printed: mean ratio adaptive / fixed (the bias), its standard error, and the mean n.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import numpy as np

from torchmark.timing.stopping import PRESETS, StoppingRule

SAMPLE_S = 0.01  # one sample ~10 ms (METHOD.md §2.5, CPU)


def iid_skewed(rng: np.random.Generator) -> Iterator[float]:
    while True:
        yield 1.0 + 0.02 * rng.lognormal(0.0, 1.0)


def stretches(rng: np.random.Generator) -> Iterator[float]:
    busy = rng.random() < 0.5
    left = rng.uniform(0.2, 2.0)
    while True:
        if busy:
            x = 1.0 + rng.uniform(0.0, 0.3) + 0.05 * rng.standard_normal() ** 2
        else:
            x = 1.0 + 0.005 * rng.standard_normal()
        yield x
        left -= x * SAMPLE_S
        if left <= 0:
            busy, left = not busy, rng.uniform(0.2, 2.0)


MODELS: dict[str, Callable[[np.random.Generator], Iterator[float]]] = {
    "iid-skewed": iid_skewed,
    "stretches": stretches,
}


def run_rule(rule: StoppingRule, stream: Iterator[float]) -> tuple[list[float], float]:
    samples: list[float] = []
    elapsed = 0.0
    while True:
        x = next(stream)
        samples.append(x)
        elapsed += x * SAMPLE_S
        if rule.decide(samples, elapsed):
            return samples, elapsed


def fixed_time(stream: Iterator[float], seconds: float) -> list[float]:
    """Samples until ``seconds`` have passed: Timer.blocked_autorange's rule (0.2 s)."""
    out: list[float] = []
    t = 0.0
    while t < seconds:
        out.append(next(stream))
        t += out[-1] * SAMPLE_S
    return out


def study(model: str, rule: StoppingRule, reps: int, seed: int = 0) -> None:
    """Each rule's mean headline against the stream's long-run median (the machine's
    typical time over a 10-minute stretch, what any protocol should estimate)."""
    long_run = MODELS[model](np.random.default_rng([seed, 10**6]))
    truth = float(np.median([next(long_run) for _ in range(60_000)]))
    adaptive, ns = [], []
    for i in range(reps):
        samples, _ = run_rule(rule, MODELS[model](np.random.default_rng([seed, i])))
        adaptive.append(float(np.median(samples)))
        ns.append(len(samples))
    n_fixed = int(np.median(ns))
    fixed_n, timer = [], []
    for i in range(reps):
        stream = MODELS[model](np.random.default_rng([seed, i]))
        fixed_n.append(float(np.median([next(stream) for _ in range(n_fixed)])))
        stream = MODELS[model](np.random.default_rng([seed, i]))
        timer.append(float(np.median(fixed_time(stream, 0.2))))

    def bias(xs: list[float]) -> str:
        d = np.asarray(xs) / truth - 1
        return f"{100 * d.mean():+.2f} % (± {100 * d.std(ddof=1) / len(d) ** 0.5:.2f})"

    print(
        f"{model:11} {rule.name}/{rule.describe().split('target=')[1].split(',')[0]:6} "
        f"adaptive {bias(adaptive)}   fixed n={n_fixed:<3} {bias(fixed_n)}   "
        f"fixed 0.2 s {bias(timer)}"
    )


def sample_length(rate_hz: float, cost_s: float, reps: int = 2000, seed: int = 1) -> None:
    """Median per-call time of samples 10 ms long (torchmark) and 100 ms long (Timer's
    blocks grow by powers of ten until its overhead is under 1e-4: often 10-100 ms) when
    the process is interrupted at ``rate_hz`` for ``cost_s`` each (another job's slice)."""
    rng = np.random.default_rng(seed)
    out = []
    for length in (0.01, 0.1):
        hits = rng.poisson(rate_hz * length, size=(reps, 50))
        per_call = (length + hits * cost_s) / length  # quiet per-call time = 1
        out.append(float(np.mean(np.median(per_call, axis=1))))
    print(
        f"interrupts {rate_hz:g}/s x {cost_s * 1e3:g} ms ({rate_hz * cost_s:.1%} of the "
        f"time): median per call, 10 ms samples {out[0]:.4f}, 100 ms samples {out[1]:.4f} "
        f"-> ratio {out[0] / out[1]:.4f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--rule", default="all", help="quick, micro, model or all")
    args = ap.parse_args()
    names = ["quick", "micro", "model"] if args.rule == "all" else [args.rule]
    print("1. mean headline vs the long-run median (± s.e.); same streams for every rule")
    for model in MODELS:
        for name in names:
            study(model, PRESETS[name], args.reps)
    print("2. sample length: what a median of longer samples folds in")
    for rate, cost in ((2.0, 4e-3), (5.0, 4e-3), (10.0, 4e-3)):
        sample_length(rate, cost)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
