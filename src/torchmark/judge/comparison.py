"""Is B faster than A? FASTER / SLOWER / SAME / UNCLEAR relative to the measured noise.

One vocabulary, two tests, chosen by how the samples were taken (METHOD.md §2.12):

- ``independent(a, b)``: two runs measured apart (``compare``, the CPU-vs-GPU break-even).
  Their samples are unpaired, so Mann-Whitney U (two-sided, ``ALPHA_INDEPENDENT`` = 1 %).
  Runs taken at different times see different machine load, which no test on the samples
  can tell from a real change; so a change counts only beyond the combined relative IQR of
  both runs (``noise``) as well as the practical 2 %.
- ``paired(base, cand)``: rounds interleaved on one machine (``tune``): round i holds one
  sample of each side, taken back to back, so load drifts hit both. The Wilcoxon
  signed-rank test on the per-round log ratios (``ALPHA_PAIRED`` = 5 %, >= 6 rounds)
  decides significance only; the speed itself is the ratio of the two medians, the very
  numbers a table shows beside it.

The decision, for ``speed`` = median time of A / median time of B (> 1: B is faster) and
``ci`` = [lo_A / hi_B, hi_A / lo_B] from the 95 % order-statistic CIs of both medians
(conservative: coverage >= 90 %)::

    SAME           ci lies inside 1 ± PRACTICAL: the data rule out any change that matters
    FASTER/SLOWER  the test says p < alpha, |speed - 1| >= the threshold (PRACTICAL, and
                   for independent runs their noise), and ci excludes 1
    UNCLEAR        anything else: too noisy or too few samples to tell, never "same"

Pure functions of samples (numpy and scipy only for ``paired``: `compare` starts without).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from torchmark.errors import InputError
from torchmark.judge import verdicts
from torchmark.judge.load import load_words, under_load
from torchmark.judge.worlds import world_difference
from torchmark.results import Result, RunRecord
from torchmark.stats.measurement import Measurement

Verdict = Literal["FASTER", "SLOWER", "SAME", "UNCLEAR"]
PRACTICAL = 0.02  # below 2 % no change matters in practice, whatever a test says
ALPHA_INDEPENDENT = 0.01
ALPHA_PAIRED = 0.05
# Wilcoxon's smallest two-sided p with n rounds all agreeing is 2 / 2**n: n >= 6 for 5 %.
MIN_ROUNDS = 6
# Below 2 samples a side nothing estimates the noise; Mann-Whitney cannot reach 1 % below 4.
MIN_SAMPLES = 2

INDEPENDENT_RULE = (
    f"verdict rule: SAME when the 95 % CI of the speed ratio lies within ±{PRACTICAL:.0%}; "
    f"FASTER/SLOWER when Mann-Whitney U on the raw samples gives p < {ALPHA_INDEPENDENT} and "
    f"the change exceeds max({PRACTICAL:.0%}, combined relative IQR); else UNCLEAR "
    "(too noisy to tell)"
)


@dataclass(frozen=True)
class Judgement:
    """B against A. ``speed`` > 1 means B is faster (median time A / median time B)."""

    verdict: Verdict
    speed: float
    ci: tuple[float, float]
    p_value: float | None
    threshold: float  # the smallest change this comparison may call FASTER/SLOWER
    why: str

    @property
    def time_change(self) -> float:
        """Relative change of the median time, B vs A (+0.10: B takes 10 % longer)."""
        return 1 / self.speed - 1


def _ratio_ci(a: Measurement, b: Measurement) -> tuple[float, float]:
    lo_a, hi_a = a.ci
    lo_b, hi_b = b.ci
    if not (lo_b > 0 and hi_b > 0) or not all(math.isfinite(x) for x in (lo_a, hi_a, lo_b, hi_b)):
        return (math.nan, math.nan)
    return (lo_a / hi_b, hi_a / lo_b)


def ci_text(ci: tuple[float, float]) -> str:
    if not all(math.isfinite(x) for x in ci):
        return "unbounded (too few samples)"
    return f"{ci[0]:.3g}-{ci[1]:.3g}"


def _within(ci: tuple[float, float], practical: float) -> bool:
    return math.isfinite(ci[0]) and 1 - practical <= ci[0] and ci[1] <= 1 + practical


def _excludes_one(ci: tuple[float, float], speed: float) -> bool:
    if not all(math.isfinite(x) for x in ci):
        return False
    return ci[0] > 1 if speed > 1 else ci[1] < 1


def _decide(
    speed: float,
    ci: tuple[float, float],
    p: float | None,
    alpha: float,
    threshold: float,
    practical: float,
    noise: float | None,
    n: str,
    separated: bool = False,
    unknown: str = "",
) -> Judgement:
    """``separated``: every sample of the faster beat every sample of the slower, which
    excludes 1 where a median's CI needs more samples than there are (fewer than 6 leave
    a 95 % CI unbounded: 5 epochs of a DataLoader at 2 s each read "can't tell" beside 14
    at 0.73 s, 2.8x apart, p=0.00017). ``unknown``: which side's spread is not known (under
    5 samples), said instead of a noise figure its own verdict disowns."""
    change = abs(speed - 1)
    if _within(ci, practical):
        why = f"ratio CI {ci_text(ci)} within ±{practical:.0%}"
        return Judgement("SAME", speed, ci, p, threshold, why)
    p_text = "p n/a" if p is None else f"p={p:.2g}"
    excluded = _excludes_one(ci, speed) or separated
    if p is not None and p < alpha and change >= threshold and excluded:
        verdict: Verdict = "FASTER" if speed > 1 else "SLOWER"
        why = f"{p_text}, {change:.1%} beyond the {threshold:.1%} threshold"
        if unknown and threshold > practical:  # the threshold is that spread
            why = f"{p_text}, {change:.1%} beyond the samples' scatter ({unknown})"
        return Judgement(verdict, speed, ci, p, threshold, why)
    if p is not None and p < alpha and noise is not None and change < threshold and unknown:
        why = f"{p_text} but the {change:.1%} change is within the samples' scatter ({unknown})"
    elif p is not None and p < alpha and noise is not None and change < threshold:
        why = (
            f"{p_text} but the {change:.1%} change is within the noise ({noise:.1%} combined "
            f"IQR): too noisy to tell"
        )
    elif p is None or p >= alpha:
        why = f"{p_text}; ratio CI {ci_text(ci)} wider than ±{practical:.0%}: too noisy to tell"
    else:
        why = f"{p_text}; ratio CI {ci_text(ci)} includes 1: too noisy to tell"
    return Judgement("UNCLEAR", speed, ci, p, threshold, f"{why} ({n})")


def _mann_whitney_p(xa: Sequence[float], xb: Sequence[float]) -> float:
    """Two-sided Mann-Whitney p as ``scipy.stats.mannwhitneyu`` computes it, without scipy
    or numpy (importing them cost ``compare`` ~0.4 s of a 1 s start): its normal
    approximation with average ranks, tie term and continuity correction where scipy uses
    it (both sides > 8 samples, or any tie), else its exact test. 1 where every value is
    identical, which scipy leaves undefined. Within 1e-10 of scipy's float (its normal
    tail is cephes', this one the C library's erfc), which no verdict at 1 % can feel.
    """
    n1, n2 = len(xa), len(xb)
    xy = [float(x) for x in (*xa, *xb)]
    if any(x != x for x in xy):
        return math.nan  # scipy propagates a NaN
    if min(xy) == max(xy):
        return 1.0  # every value identical: nothing to rank (Mann-Whitney is undefined)
    order = sorted(range(len(xy)), key=xy.__getitem__)
    ranks = [0.0] * len(xy)
    ties = 0  # sum of t**3 - t over the groups of t equal values, exact
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xy[order[j + 1]] == xy[order[i]]:
            j += 1
        t = j - i + 1
        ties += t**3 - t
        for k in order[i : j + 1]:
            ranks[k] = i + 1 + (t - 1) / 2
        i = j + 1
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    if (n1 <= 8 or n2 <= 8) and ties == 0:
        return _exact_p(int(u), n1, n2)
    n = n1 + n2
    s = math.sqrt(n1 * n2 / 12 * ((n + 1) - float(ties) / (n * (n - 1))))
    z = (u - n1 * n2 / 2 - 0.5) / s
    return min(1.0, max(0.0, math.erfc(z / math.sqrt(2))))  # 2 * the normal tail at z


def _exact_p(u: int, n1: int, n2: int) -> float:
    """Two-sided exact p of U >= ``u`` (``u`` >= n1 n2 / 2) with no ties: 2 P(U <= n1 n2 - u),
    at most 1. The counts of U's values are the coefficients of the Gaussian binomial
    [n1 + n2 choose n1]_q, built as the product of (1 - q^(n2 + i)) / (1 - q^i)."""
    m, n = min(n1, n2), max(n1, n2)
    coef = [1]
    for i in range(1, m + 1):
        coef += [0] * (n + i)
        for k in range(len(coef) - 1, n + i - 1, -1):  # times (1 - q^(n + i))
            coef[k] -= coef[k - n - i]
        for k in range(i, len(coef)):  # divided by (1 - q^i)
            coef[k] += coef[k - i]
        del coef[len(coef) - i :]
    return min(1.0, 2 * sum(coef[: m * n - u + 1]) / math.comb(m + n, m))


def independent(
    a: Measurement, b: Measurement, practical: float = PRACTICAL, alpha: float = ALPHA_INDEPENDENT
) -> Judgement | str:
    """B against A for two separately measured runs; a string says why they cannot be
    compared (a median time that is zero or not finite: nothing to divide by)."""
    xa, xb = a.kept, b.kept
    ma, mb = a.median, b.median
    if not (math.isfinite(ma) and math.isfinite(mb) and ma > 0 and mb > 0):
        side = "A" if not (math.isfinite(ma) and ma > 0) else "B"
        return f"median time {ma if side == 'A' else mb:g} s in {side}: no timing to compare"
    speed = ma / mb
    noise = math.hypot(a.rel_iqr, b.rel_iqr)
    threshold = max(practical, noise)
    ci = _ratio_ci(a, b)
    n = f"n={len(xa)}, {len(xb)}"
    if len(xa) < MIN_SAMPLES or len(xb) < MIN_SAMPLES:
        # one sample has no noise estimate: no test can call it anything
        why = f"too few samples to compare ({n})"
        return Judgement("UNCLEAR", speed, ci, None, threshold, why)
    p = _mann_whitney_p(xa, xb)
    separated = min(xa) > max(xb) or max(xa) < min(xb)
    few = [f"{m.n} samples in {side}" for side, m in (("A", a), ("B", b)) if not m.spread_known]
    unknown = f"{' and '.join(few)}: the spread is not known" if few else ""
    return _decide(speed, ci, p, alpha, threshold, practical, noise, n, separated, unknown)


def paired(
    base: Sequence[float],
    cand: Sequence[float],
    items: float = 1.0,
    practical: float = PRACTICAL,
    alpha: float = ALPHA_PAIRED,
) -> Judgement:
    """A candidate against the baseline over interleaved rounds: ``base[i]`` and ``cand[i]``
    are per-call times taken back to back. ``items``: candidate items per call over the
    baseline's (a batch-2x candidate at the same per-call time is 2x faster per item).

    ``speed`` = items * median(base) / median(cand): the latencies shown beside it, divided.
    The median of the per-round ratios is *not* the speed: under competing load samples
    snap to scheduler slices (one round 1.4 ms, the next 20 ms), and a median of ratios of
    such a mixture lands in whichever cluster pairing is most common (53x was printed
    beside medians 5.3x apart). It only has to agree in direction.
    """
    import numpy as np  # tune's rounds; `compare` starts without numpy

    xb = np.asarray(base, dtype=float)
    xc = np.asarray(cand, dtype=float)
    if xb.size != xc.size:
        raise ValueError(f"paired rounds differ in length: {xb.size} vs {xc.size}")
    mb, mc = Measurement(tuple(xb)), Measurement(tuple(xc))
    if xb.size == 0 or not (mb.median > 0 and mc.median > 0):
        return Judgement("UNCLEAR", math.nan, (math.nan, math.nan), None, practical, "no rounds")
    speed = items * mb.median / mc.median
    lo, hi = _ratio_ci(mb, mc)
    ci = (items * lo, items * hi)
    n = f"{xb.size} rounds"
    if xb.size < MIN_ROUNDS:
        why = f"too few rounds to compare ({n}, need {MIN_ROUNDS})"
        return Judgement("UNCLEAR", speed, ci, None, practical, why)
    logs = np.log(items * xb / xc)
    if np.ptp(logs) == 0:
        # every round agreeing exactly: wilcoxon is undefined (and would warn)
        p = 0.0 if logs[0] != 0 else 1.0
    else:
        from scipy.stats import wilcoxon

        p = float(wilcoxon(logs).pvalue)
    per_round = float(np.exp(np.median(logs)))
    if (per_round > 1) != (speed > 1) and abs(speed - 1) >= practical:
        why = (
            f"the median time ratio ({speed:.3g}x) and the median per-round ratio "
            f"({per_round:.3g}x) disagree in direction: clustered samples, too noisy to tell"
        )
        return Judgement("UNCLEAR", speed, ci, p, practical, f"{why} ({n})")
    return _decide(speed, ci, p, alpha, practical, practical, None, n)


# ---- runs, case by case ----------------------------------------------------------------

Key = tuple[str, str, str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Change:
    """B against A for one case. ``verdict`` None: not comparable (a side skipped, wrong,
    or with no timing); ``why`` says which."""

    key: Key
    a: Result
    b: Result
    verdict: Verdict | None
    speed: float | None = None
    ci: tuple[float, float] = (math.nan, math.nan)
    p_value: float | None = None
    threshold: float | None = None
    why: str = ""

    @property
    def time_change(self) -> float | None:
        """Relative change of the median time, B vs A (+0.10: B takes 10 % longer)."""
        return None if self.speed is None or not self.speed > 0 else 1 / self.speed - 1


@dataclass(frozen=True)
class Comparison:
    """Baseline ``runs[0]`` against each later run."""

    runs: tuple[RunRecord, ...]
    changes: tuple[tuple[Change, ...], ...]  # one tuple per later run, in key order
    only_in: dict[int, list[Result]] = field(default_factory=dict)  # run index -> unmatched

    @property
    def shared_keys(self) -> list[Key]:
        return [c.key for c in self.changes[0]] if self.changes else []


def judge(a: Result, b: Result) -> Change:
    """The verdict for one case measured in A (baseline) and B (``independent``). A side
    its own verdict keeps out of comparisons (skipped, WRONG, invalid: ``verdicts``) is
    never called FASTER / SLOWER / SAME: the change says which side and why."""
    for side, r in (("A", a), ("B", b)):
        if not verdicts.may(r, "compare"):
            word = r.status if r.status != "ok" else verdicts.rule_of(r).word
            why = verdicts.reasons(r)[0]  # the reason that decides it; the run's table has all
            return Change(a.key, a, b, None, why=f"{word} in {side}: {why}".strip())
    # DDP x2 vs no DDP, a working set in the cache (its speed is the cache's), other
    # processes' load on either side: said, always
    busy = loaded(a, b)
    said = "; ".join(filter(None, (world_difference(a, b), cached(a, b), busy)))
    j = independent(a.measurement, b.measurement)
    if isinstance(j, str):
        return Change(a.key, a, b, None, why=f"{said}; {j}" if said else j)
    why = f"{said}; {j.why}" if said else j.why
    unreliable = [s for s, r in (("A", a), ("B", b)) if verdicts.kind_of(r) == "unreliable"]
    if busy and unreliable and j.verdict in ("FASTER", "SLOWER"):
        # a spread of a quarter of the median or more, measured beside other jobs: the
        # change is as likely the load's as the code's (1.53x FASTER was read between two
        # runs both at 1.1-1.6 of 2 cores of other load)
        why = (
            f"can't tell: {' and '.join(unreliable)} unreliable under other load, "
            f"{j.verdict} {j.speed:.2f}x read; {said}"
        )
        return Change(a.key, a, b, "UNCLEAR", j.speed, j.ci, j.p_value, j.threshold, why)
    return Change(a.key, a, b, j.verdict, j.speed, j.ci, j.p_value, j.threshold, why)


def loaded(a: Result, b: Result) -> str:
    """``under other load in A (other processes used 1.4 of 2 cores)`` where either side's
    telemetry shows competing load, else ""."""
    sides = [
        f"{side} ({load_words(r.telemetry or {})})"
        for side, r in (("A", a), ("B", b))
        if under_load(r.telemetry)
    ]
    return f"under other load in {' and '.join(sides)}" if sides else ""


def cached(a: Result, b: Result) -> str:
    """``in cache in A and B: ...`` where either side's working set fits the cache (the
    ``in_cache`` verdict), else ""."""
    sides = [side for side, r in (("A", a), ("B", b)) if verdicts.kind_of(r) == "in_cache"]
    if not sides:
        return ""
    return f"in cache in {' and '.join(sides)}: the cache's speed, not DRAM's"


def run_name(record: RunRecord, i: int) -> str:
    return record.run_id or f"run {i + 1}"


def compare(runs: Sequence[RunRecord]) -> Comparison:
    """Every case the baseline ``runs[0]`` shares with each later run, and the leftovers."""
    if len(runs) < 2:
        raise InputError("compare needs at least two runs (or --reference NAME and one run)")
    indexed = [{r.key: r for r in run.results} for run in runs]
    base = indexed[0]
    shared = [k for k in base if all(k in other for other in indexed[1:])]
    if not shared:
        names = ", ".join(run_name(r, i) for i, r in enumerate(runs))
        what = "; ".join(
            f"{run_name(r, i)}: "
            f"{', '.join(sorted({x.workload for x in r.results})) or 'no results'}"
            for i, r in enumerate(runs)
        )
        raise InputError(
            f"runs {names} have no case in common ({what}); compare runs of the same "
            "workloads, sizes and devices"
        )
    changes = tuple(tuple(judge(base[k], other[k]) for k in shared) for other in indexed[1:])
    only = {
        i: [r for k, r in idx.items() if k not in shared]
        for i, idx in enumerate(indexed)
        if any(k not in shared for k in idx)
    }
    return Comparison(tuple(runs), changes, only)


def regressions(cmp: Comparison, pct: float) -> list[tuple[int, Change]]:
    """SLOWER cases whose median time grew by more than ``pct`` % (run index from 1)."""
    return [
        (i, c)
        for i, changes in enumerate(cmp.changes, start=1)
        for c in changes
        if c.verdict == "SLOWER" and (c.time_change or 0) * 100 > pct
    ]


def cannot_judge(cmp: Comparison, pct: float) -> list[tuple[int, Change]]:
    """Cases a regression gate cannot pass: UNCLEAR with a median time grown by more than
    ``pct`` %; measured in A but not in the later run (skipped, no timing); WRONG or
    invalid on either side (``verdicts``: never compared); and the cases of A that an
    incomplete later run never reached."""
    out = []
    for i, changes in enumerate(cmp.changes, start=1):
        for c in changes:
            unclear = c.verdict == "UNCLEAR" and (c.time_change or 0) * 100 > pct
            lost = c.verdict is None and (c.a.ok or "wrong" in (c.a.status, c.b.status))
            if unclear or lost:
                out.append((i, c))
        later = cmp.runs[i]
        if later.status == "incomplete":
            reached = {r.key for r in later.results}
            for r in cmp.only_in.get(0, []):
                if r.ok and r.key not in reached:
                    why = f"not measured in {run_name(later, i)}: the run is incomplete"
                    out.append((i, Change(r.key, r, r, None, why=why)))
    return out
