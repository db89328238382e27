"""The staged search on one device: each candidate interleaved with the baseline in rounds,
its speedup the ratio of the two medians, its verdict the paired test's (see ``Tuner``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import psutil
import torch

from torchmark import variants
from torchmark.devices import Device
from torchmark.errors import CaseSkipped, UnknownNameError, WrongResultError
from torchmark.judge import verdicts
from torchmark.judge.comparison import MIN_ROUNDS, PRACTICAL, Judgement, paired
from torchmark.kinds.tune.candidates import PRECISION_ORDER, SINGLE_VARIANTS, Candidate
from torchmark.kinds.tune.workload import TuneWorkload
from torchmark.results import Result
from torchmark.run.case import CALL_TIMED_OUT, measured, skipped
from torchmark.run.session import Session
from torchmark.run.watchdog import MIN_CALL_BOUND_S, CallTimedOut
from torchmark.stats.measurement import Measurement
from torchmark.timing import Fixed, StoppingRule, measure
from torchmark.user.inputs import one_line
from torchmark.user.workload import _host_alloc_failed
from torchmark.variants.flags import matmul_precision
from torchmark.workloads.base import Case, Prepared

# torch.compile of a small CNN took 49 s on this project's loaded 2-core CPU (inductor builds
# C++ with g++); on a GPU box ~20-60 s. Compile is tried only with this much budget left.
COMPILE_RESERVE_S = 60.0
# Interleaved rounds: each round is one sample of the baseline and one of the candidate,
# k calls each, k sized once so a sample takes >= 2 ms. The host timer costs ~1 µs, so 2 ms
# keeps it under 0.1 %; short rounds let both sides see the same machine load.
# The Wilcoxon test on the per-round ratios needs >= 6 rounds for p < 0.05 (2 / 2**6 = 3 %).
ROUND_SAMPLE_S = 0.002
ONE_SAMPLE = cast(StoppingRule, Fixed(samples=1))
# A baseline whose IQR is half its median cannot pin a candidate's speedup to the 2 % that
# matters in the 6-500 rounds a candidate gets: the search stops and says so. (Seen here:
# 1022 % on a 2-core machine with other jobs, every speedup then read 4-53x at random.)
BASELINE_MAX_REL_IQR = 0.5
# The spread that decides it needs more than 6 rounds: with 6, one preempted sample moves
# the IQR by half (20 rounds of >= 2 ms cost ~40 ms).
BASELINE_MIN_ROUNDS = 20
MAX_ROUNDS = 500
PER_CANDIDATE_S = 3.0
CANDIDATE_RESERVE_S = 4.0
MAX_TUNE_BATCH = 1024


@dataclass
class Measured:
    """One candidate. ``speedup`` = ``items`` x ``baseline_s`` / the result's median: the
    baseline's and the candidate's median per-call times over the same rounds."""

    cand: Candidate
    result: Result
    speedup: float | None = None
    # baseline | faster | same | slower | unclear | rejected | skipped | over-budget
    status: str = "skipped"
    max_error: float | None = None
    tolerance: float | None = None
    baseline_s: float | None = None  # the baseline's median over this candidate's rounds
    items: float = 1.0  # items per call over the baseline's (batch stage: 2, 4, ...)
    judgement: Judgement | None = None

    @property
    def latency_s(self) -> float | None:
        return self.result.median_s if self.result.ok else None

    @property
    def verdict(self) -> str | None:
        return None if self.judgement is None else self.judgement.verdict


class Tuner:
    """The staged search on one device; every measured candidate lands in ``measured``.

    A loaded machine drifts: on this project's 2-core CPU the same call took 0.2 ms or
    86 ms depending on what else ran (two OpenMP threads spin against any other process).
    So each candidate is measured *interleaved* with the baseline, in rounds
    (baseline, candidate, candidate, baseline, ...), each round a short ``measure`` of both.
    The speedup is the baseline's median over those rounds divided by the candidate's:
    the very latencies a table shows, so the two can never contradict each other. The
    median of the per-round ratios is not used for it: under load samples snap to
    scheduler slices and that median lands in whichever pairing of clusters is most common
    (53x beside medians 5.3x apart was printed). The Wilcoxon signed-rank test on the
    rounds only decides whether the speedup is beyond the noise (``comparison.paired``).
    """

    def __init__(
        self,
        wl: TuneWorkload,
        device: Device,
        session: Session,
        deadline: float,
        max_latency_s: float | None,
        per_candidate_s: float = PER_CANDIDATE_S,
    ) -> None:
        self.wl, self.device, self.session = wl, device, session
        self.record, self.events, self.deadline = session.record, session.events, deadline
        self.max_latency_s, self.per_candidate_s = max_latency_s, per_candidate_s
        self.measured: list[Measured] = []
        self.baseline_raised: str | None = None  # why the model raised at the baseline
        self.baseline: Measured | None = None
        self.stopped: str | None = None  # why the search stopped after the baseline
        self._base: dict[int, Prepared] = {}
        self._calls: dict[int, int] = {}  # id(prepared) -> calls per sample

    def left_s(self) -> float:
        return self.deadline - time.perf_counter()

    def _prepare(self, case: Case) -> Prepared:
        prep = self.wl.prepare(case)
        if prep.check:
            prep.notes += prep.check()
        return prep

    def _sample(self, prep: Prepared, threads: int | None) -> list[float]:
        """One sample of ``prep``: the first time with warm-up, to size it (``calls``)."""
        before = torch.get_num_threads()
        if threads:
            self.device.set_threads(threads)
        try:
            # the candidate's own TF32 flags for its sample (the baseline's: IEEE fp32)
            with matmul_precision(bool(prep.extra.get("tf32"))):
                k = self._calls.get(id(prep))
                if k is None:
                    m = measure(prep.fn, self.device, rule=ONE_SAMPLE, min_sample_s=ROUND_SAMPLE_S)
                    self._calls[id(prep)] = m.calls_per_sample
                else:  # already warm: one untimed call after the thread switch, then k calls
                    m = measure(
                        prep.fn,
                        self.device,
                        rule=ONE_SAMPLE,
                        warmup_s=0.0,
                        warmup_calls=0,
                        calls_per_sample=k,
                    )
        finally:
            self.device.set_threads(before)
        return list(m.samples_s)

    def run(self, cand: Candidate, reserve_s: float = CANDIDATE_RESERVE_S) -> Measured:
        """Build, guard and measure one candidate interleaved with the baseline."""
        case = self.wl.case(cand, self.device)
        self.events.case_started(case)
        m = Measured(cand, skipped(case, "not measured"))
        m.tolerance = (
            variants.TOLERANCE["fp32"]
            if cand.grad == "no_grad"
            else variants.parse(cand.variant).tolerance
        )
        if self.left_s() < reserve_s:
            m.result = skipped(
                case,
                f"time budget: {max(self.left_s(), 0):.0f} s left, this candidate needs "
                f"~{reserve_s:.0f} s (raise --budget)",
            )
        else:
            # a hung forward cannot outlast the budget by more than one compile's reserve
            bound = max(MIN_CALL_BOUND_S, self.left_s()) + COMPILE_RESERVE_S
            why = f"the time budget left plus {COMPILE_RESERVE_S:.0f} s for a compile"
            try:
                with self.session.watchdog.armed(bound, f"candidate {cand.name}", why):
                    m.result = self._rounds(case, cand, m)
            except CallTimedOut as e:
                m.result = skipped(case, str(e), flag=CALL_TIMED_OUT)
        m.max_error = self.wl.errors.get((self.device.name, cand.name))
        if m.result.status == "wrong":
            m.status = "rejected"
        self.session.add(case, m.result)  # kept, stored (or kept for a re-sync), events told
        self.measured.append(m)
        return m

    def _rounds(self, case: Case, cand: Candidate, m: Measured) -> Result:
        try:
            prep = self._prepare(case)
            is_base = cand.stage == "baseline"
            # the baseline is measured at --batch only; batch_search candidates at 2x, 4x, ...
            # are paired with it (their speedup is per item, see `items` below)
            base = prep if is_base else self._base[self._baseline_batch()]
            mine: list[float] = []  # one per-call time per round, each side
            base_rounds: list[float] = []
            t0 = time.perf_counter()
            while len(mine) < MAX_ROUNDS:
                # the baseline's own rounds: one sample each (sampling it twice would only
                # keep the second)
                order = [(base, None)] if is_base else [(base, None), (prep, cand.threads)]
                if len(mine) % 2:
                    order.reverse()  # ABBA: neither side always runs first
                got = {id(p): self._sample(p, th) for p, th in order}
                base_rounds.append(float(np.median(got[id(base)])))
                mine.append(float(np.median(got[id(prep)])))
                spent = time.perf_counter() - t0
                least = BASELINE_MIN_ROUNDS if is_base else MIN_ROUNDS
                if len(mine) >= least and (spent > self.per_candidate_s or self.left_s() < 0):
                    break
        except CaseSkipped as e:
            return skipped(case, str(e))
        except WrongResultError as e:
            return skipped(case, str(e), status="wrong")
        except Exception as e:  # the user's model failing under one setting: recorded
            self.device.empty_cache()
            if self.device.is_out_of_memory(e) or _host_alloc_failed(e):
                return skipped(case, f"out of memory at batch {cand.batch}", oom=True)
            if cand.stage == "baseline":
                self.baseline_raised = one_line(e)
            return skipped(case, f"the model raised {one_line(e)} under {cand.name}")
        if is_base:
            self._base[cand.batch] = prep
        # per item: a batch_search candidate at 4x the batch takes longer per call yet wins
        # when it takes under 4x as long (items = 1 for every other stage)
        m.items = cand.batch / (self.baseline.cand.batch if self.baseline else cand.batch)
        m.baseline_s = float(np.median(base_rounds))
        if is_base:
            m.speedup, m.status = 1.0, "baseline"
        else:
            m.judgement = paired(base_rounds, mine, m.items)
            m.speedup, m.status = m.judgement.speed, m.judgement.verdict.lower()
        if self.max_latency_s is not None and float(np.median(mine)) > self.max_latency_s:
            m.status = "over-budget"
        rounds = Measurement(
            tuple(mine),
            stop_reason=f"{len(mine)} interleaved rounds",
            rule=f"interleaved(rounds={len(mine)}, sample >= {ROUND_SAMPLE_S * 1e3:g} ms)",
            timing="device" if self.device.is_accelerator else "e2e",
        )
        return measured(
            case,
            rounds,
            prep,
            notes=[m.judgement.why] if m.judgement else [],
            extra={"baseline_samples_s": base_rounds, "speedup": m.speedup, "verdict": m.verdict},
        )

    def _baseline_batch(self) -> int:
        if self.baseline is None:
            raise CaseSkipped("the baseline did not run: nothing to compare with")
        return self.baseline.cand.batch

    def fits(self, m: Measured) -> bool:
        """Inside --max-latency-ms (always, without one)."""
        lat = m.latency_s
        return self.max_latency_s is None or (lat is not None and lat <= self.max_latency_s)

    def best(self, among: Sequence[Measured]) -> Measured | None:
        """The fastest candidate judged FASTER (and inside the budget). With a baseline over
        the budget, any correct candidate inside it wins over the baseline, which does not
        fit: the fastest of those."""
        # a candidate its own verdict keeps from being recommended (verdicts: unreliable,
        # invalid, WRONG) never wins, however fast its rounds read
        fair = [m for m in among if verdicts.may(m.result, "recommend")]
        wins = [m for m in fair if m.verdict == "FASTER" and self.fits(m) and m.speedup]
        if not wins and self.baseline is not None and not self.fits(self.baseline):
            wins = [m for m in fair if m is not self.baseline and m.speedup and self.fits(m)]
        return max(wins, key=lambda m: m.speedup or 0) if wins else None

    def too_noisy(self, base: Measured) -> str | None:
        """Why the baseline cannot be compared against, or None."""
        spread = base.result.measurement.rel_iqr
        if spread < BASELINE_MAX_REL_IQR:
            return None
        return (
            f"the baseline is too noisy to compare against: its spread (IQR) is "
            f"{spread:.0%} of its {(base.result.median_s or 0) * 1e3:.3g} ms median "
            f"(limit {BASELINE_MAX_REL_IQR:.0%}); search stopped. Tune on a quiet machine, "
            "or, when other processes run, with fewer threads than cores (OMP_NUM_THREADS=1 "
            "torchmark tune ...)"
        )

    def search(self, batch: int, compile_ok: bool) -> Measured | None:
        base = self.run(
            Candidate("baseline (fp32, no_grad)", grad="no_grad", batch=batch, stage="baseline")
        )
        if base.status not in ("baseline", "over-budget") or not base.result.ok:
            return None  # the baseline itself could not run: nothing to compare with
        self.baseline = base
        self.stopped = self.too_noisy(base)
        if self.stopped:
            base.result.notes.append(self.stopped)
            return None
        lat = base.result.median_s or 0
        if self.max_latency_s is not None and lat > self.max_latency_s:
            # the search goes on: a faster setting or a smaller batch may fit the budget
            base.result.notes.append(
                f"baseline latency {lat * 1e3:.3g} ms is over the "
                f"{self.max_latency_s * 1e3:g} ms budget"
            )
        settings = [self.run(Candidate("inference_mode", batch=batch, stage="setting"))]
        if not self.device.is_accelerator:
            default = torch.get_num_threads()
            counts = {1, psutil.cpu_count(logical=False) or 1, psutil.cpu_count() or 1}
            for n in sorted(counts - {default}):
                cand = Candidate(
                    f"threads={n}", grad="no_grad", threads=n, batch=batch, stage="setting"
                )
                settings.append(self.run(cand))
        best_threads = self.best([m for m in settings if m.cand.threads])
        threads = best_threads.cand.threads if best_threads else None
        on = f", threads={threads}" if threads else ""  # stages build on the best threads
        singles = [
            self.run(Candidate(v + on, variant=v, threads=threads, batch=batch))
            for v in SINGLE_VARIANTS
        ]
        if compile_ok:
            cand = Candidate("compile" + on, variant="compile", threads=threads, batch=batch)
            singles.append(self.run(cand, reserve_s=COMPILE_RESERVE_S))
        combo = self.combine(singles)
        if combo is not None:
            reserve = COMPILE_RESERVE_S if "compile" in combo.variant else CANDIDATE_RESERVE_S
            combo = replace(combo, name=combo.name + on, threads=threads, batch=batch)
            self.run(combo, reserve_s=reserve)
        return self.best(self.measured)

    def combine(self, singles: Sequence[Measured]) -> Candidate | None:
        """The winning precision and optimisations as one variant, when they combine."""
        wins = {m.cand.variant for m in singles if m.verdict == "FASTER"}
        precision = next((p for p in PRECISION_ORDER if p in wins), None)
        opts = [o for o in variants.OPTIMISATIONS if o in wins]
        parts = ([precision] if precision else []) + opts
        if len(parts) < 2:
            return None
        v: variants.Variant | None
        try:
            v = variants.parse("+".join(parts))
        except UnknownNameError:  # e.g. int8 + compile: not a combination variants builds
            v = variants.parse("+".join(opts)) if len(opts) >= 2 else None
        if v is None:
            return None
        return Candidate(f"combined: {v.name}", variant=v.name, stage="combined")

    def throughput_search(self, best: Candidate) -> Measured | None:
        """Without --max-latency-ms, the second question: the batch that moves the most
        items per second. Doubling from ``best``'s batch while each doubling is FASTER per
        item than the baseline and beats the previous by more than the 2 % that matters;
        each measured batch is kept with the latency it costs."""
        if self.stopped:
            return None
        start = next((m for m in self.measured if m.cand == best), None)
        top = start if start is not None and start.result.ok else None
        b = best.batch * 2
        while b <= MAX_TUNE_BATCH:
            m = self.run(replace(best, name=f"{best.name} @ batch {b}", batch=b, stage="batch"))
            if not m.result.ok or m.verdict != "FASTER" or not m.speedup:
                break
            if top is not None and top.speedup and m.speedup < top.speedup * (1 + PRACTICAL):
                break  # no longer worth its latency
            top = m
            b *= 2
        return top

    def batch_search(self, best: Candidate) -> Measured | None:
        """The largest batch whose median latency fits --max-latency-ms: doubling from
        ``best``'s batch while it fits, halving from it while it does not."""
        assert self.max_latency_s is not None
        if self.stopped:
            return None  # the baseline was too noisy: no batch can be judged against it
        start = next((m for m in self.measured if m.cand == best), None)
        if start is not None and not self.fits(start):
            b = best.batch // 2
            while b >= 1:
                m = self.run(replace(best, name=f"{best.name} @ batch {b}", batch=b, stage="batch"))
                if m.result.ok and self.fits(m):
                    return m
                b //= 2
            return None
        fits: Measured | None = None
        b = best.batch * 2
        while b <= MAX_TUNE_BATCH:
            m = self.run(replace(best, name=f"{best.name} @ batch {b}", batch=b, stage="batch"))
            if not m.result.ok or not self.fits(m):
                break
            if m.verdict == "FASTER":
                fits = m
            b *= 2
        return fits
