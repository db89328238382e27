"""``torchmark tune``: measure the settings that matter for the user's model and recommend.

Per device, a staged search (each stage starts from the best of the previous one):

    baseline   the user's way: fp32, eval, torch.no_grad(), default threads, --batch
    settings   inference_mode; CPU thread counts (1, physical cores, logical cores)
    variants   channels_last, TF32, fp16 / bf16 autocast, int8 dynamic (CPU), CUDA graphs,
               torch.compile (only while the time budget allows: its compile is measured)
    combined   the winning variants together, when they combine
    batch      with --max-latency-ms: the largest batch whose latency stays in the budget

Every candidate's output is checked against the fp32 reference (``variants.check``
tolerance); a candidate past it is *rejected* with the error measured. Each candidate is
timed in rounds interleaved with the baseline; its speedup is the baseline's median over
those rounds divided by the candidate's (the two latencies shown), and it counts only when
``comparison.paired`` calls it FASTER (Wilcoxon on the rounds, 2 % practical threshold).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

import numpy as np
import psutil
import torch
from torch import nn

from torchmark import variants
from torchmark.comparison import MIN_ROUNDS, Judgement, paired
from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, InputError, UnknownNameError, WrongResultError
from torchmark.results import Result, RunRecord, Work
from torchmark.runner import new_record
from torchmark.session import (
    CALL_TIMED_OUT,
    MIN_CALL_BOUND_S,
    CallTimedOut,
    Events,
    Session,
    skipped,
)
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.timing import Fixed, StoppingRule, measure
from torchmark.user.bench import _as_model, _eval, _factory, _host_alloc_failed, count_flops
from torchmark.user.inputs import InputFactory, Inputs, one_line
from torchmark.workloads.base import Case, PlanOptions, Prepared, Workload

# Precisions and optimisations tried one at a time; variants.applies() skips what cannot run.
SINGLE_VARIANTS = ("channels-last", "tf32", "amp-bf16", "amp-fp16", "int8-dynamic", "cuda-graphs")
PRECISION_ORDER = ("int8-dynamic", "amp-fp16", "amp-bf16", "tf32")
DEFAULT_BUDGET_S = 150.0
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


@dataclass(frozen=True)
class Candidate:
    """One configuration to measure. ``grad``: ``no_grad`` (baseline) or ``inference_mode``."""

    name: str
    variant: str = "fp32"
    grad: str = "inference_mode"
    threads: int | None = None  # None: torch's default for this process
    batch: int = 1
    compile_mode: str | None = None
    stage: str = "variant"

    def config(self) -> dict[str, Any]:
        d = asdict(self)
        del d["name"], d["stage"]
        return d


class TuneWorkload(Workload):
    """Builds each candidate (untimed: quantize, compile, capture) and guards its output."""

    name = "tune"
    summary = "optimisation advisor for your model"
    group = "user"

    def __init__(self, label: str, model: nn.Module, factory: InputFactory, rule: str) -> None:
        self.label, self.model, self.factory, self.rule = label, model, factory, rule
        self.candidates: dict[str, Candidate] = {}
        self.errors: dict[tuple[str, str], float] = {}  # (device, candidate) -> max error
        self.build_s: dict[tuple[str, str], float] = {}
        self._refs: dict[tuple[str, int], tuple[tuple[Any, ...], Any]] = {}
        self.flops_per_item = 0.0

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return []  # tune plans stage by stage, see tune()

    def case(self, cand: Candidate, device: Device) -> Case:
        self.candidates[cand.name] = cand
        params = (("batch", cand.batch), ("threads", cand.threads or torch.get_num_threads()))
        return Case(self.label, cand.name, device, params)

    def args_and_reference(self, device: Device, batch: int) -> tuple[tuple[Any, ...], Any]:
        """Positional inputs on the device and the fp32 (IEEE) reference output for them."""
        key = (device.name, batch)
        if key not in self._refs:
            self._refs.clear()  # one batch at a time: the stages move forward
            args = positional(self.factory(batch)).to(device.torch_device).args
            model = _eval(copy.deepcopy(self.model).to(device.torch_device))
            ref, flops = count_flops(lambda: variants.reference(model, args, device, "infer"))
            self.flops_per_item = self.flops_per_item or flops / batch
            self._refs[key] = (args, ref)
        return self._refs[key]

    def prepare(self, case: Case) -> Prepared:
        cand, device = self.candidates[case.variant], case.device
        args, ref = self.args_and_reference(device, cand.batch)
        model = _eval(copy.deepcopy(self.model).to(device.torch_device))
        notes: list[str] = []
        extra: dict[str, Any] = {"config": cand.config()}
        t0 = time.perf_counter()
        if cand.grad == "no_grad":

            def step() -> Any:
                with torch.no_grad():
                    return model(*args)

            output = step()
            tolerance = variants.TOLERANCE["fp32"]
        else:
            built = variants.build(
                cand.variant, model, args, device, "infer", compile_mode=cand.compile_mode
            )
            step, output, tolerance = built.step, built.output, built.variant.tolerance
            notes += built.notes
            extra["compile_s"] = built.compile_s
            extra["first_call_s"] = built.first_call_s
        self.build_s[(device.name, cand.name)] = time.perf_counter() - t0

        def check() -> list[str]:
            err = variants.max_error(output, ref)
            self.errors[(device.name, cand.name)] = err
            if err > tolerance:
                raise WrongResultError(
                    f"max error {err:.3g} > tolerance {tolerance:.3g} (relative to the fp32 "
                    "output scale)"
                )
            return [f"max error {err:.2g} vs fp32 reference (tolerance {tolerance:g})"]

        return Prepared(
            fn=step,
            work=Work(flops=self.flops_per_item * cand.batch, items=cand.batch, item_unit="item"),
            check=check,
            timing="device",
            rule=self.rule,
            notes=notes,
            extra=extra,
        )


class _Keywords(nn.Module):
    """Calls a keyword-argument model positionally (variants build and call positionally)."""

    def __init__(self, model: nn.Module, n_args: int, names: Sequence[str]) -> None:
        super().__init__()
        self.model, self.n_args, self.names = model, n_args, tuple(names)

    def forward(self, *args: Any) -> Any:
        kw = dict(zip(self.names, args[self.n_args :], strict=True))
        return self.model(*args[: self.n_args], **kw)


def positional(inputs: Inputs) -> Inputs:
    return Inputs(inputs.args + tuple(inputs.kwargs.values()))


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


def paired_verdict(base: Sequence[float], cand: Sequence[float], items: float = 1.0) -> str:
    """faster / slower / same / unclear (``comparison.paired``) in tune's lower case."""
    return paired(base, cand, items).verdict.lower()


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
        self.baseline: Measured | None = None
        self.stopped: str | None = None  # why the search stopped after the baseline
        self._base: dict[int, Prepared] = {}
        self._calls: dict[int, int] = {}  # id(prepared) -> calls per sample

    def left_s(self) -> float:
        return self.deadline - time.perf_counter()

    def _store(self, case: Case, result: Result) -> None:
        self.session.add(case, result)  # kept, stored (or kept for a re-sync), events told

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
                f"~{reserve_s:.0f} s (raise --budget-s)",
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
        self._store(case, m.result)
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
        return Result(
            workload=case.workload,
            variant=case.variant,
            device=self.device.name,
            params=case.param_dict,
            samples_s=mine,
            calls_per_sample=1,
            stop_reason=f"{len(mine)} interleaved rounds",
            rule=f"interleaved(rounds={len(mine)}, sample >= {ROUND_SAMPLE_S * 1e3:g} ms)",
            timing="device" if self.device.is_accelerator else "e2e",
            work=prep.work,
            notes=prep.notes + ([m.judgement.why] if m.judgement else []),
            extra={
                **prep.extra,
                "baseline_samples_s": base_rounds,
                "speedup": m.speedup,
                "verdict": m.verdict,
            },
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
        wins = [m for m in among if m.verdict == "FASTER" and self.fits(m) and m.speedup]
        if not wins and self.baseline is not None and not self.fits(self.baseline):
            wins = [
                m
                for m in among
                if m is not self.baseline and m.result.ok and m.speedup and self.fits(m)
            ]
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


def code_lines(c: Candidate, device: Device) -> list[str]:
    """The few lines of PyTorch that apply ``c`` to ``model`` and input ``x``."""
    v = variants.parse(c.variant)
    lines = ["import torch", "", "model.eval()"]
    if c.threads:
        lines.append(f"torch.set_num_threads({c.threads})")
    lines.append(f'model = model.to("{device.torch_device}")')
    if v.precision == "tf32":
        lines += [
            "torch.backends.cuda.matmul.allow_tf32 = True",
            "torch.backends.cudnn.allow_tf32 = True",
        ]
    if v.precision == "int8-dynamic":
        lines.append(
            "model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, "
            "dtype=torch.qint8)"
        )
    if v.channels_last:
        lines += [
            "model = model.to(memory_format=torch.channels_last)",
            "x = x.contiguous(memory_format=torch.channels_last)",
        ]
    if v.compile:
        mode = f', mode="{c.compile_mode}"' if c.compile_mode else ""
        lines.append(f"model = torch.compile(model{mode})  # compiles on the first call")
    ctx = "torch.no_grad()" if c.grad == "no_grad" else "torch.inference_mode()"
    if v.amp_dtype is not None:
        dt = str(v.amp_dtype).removeprefix("torch.")
        ctx += f', torch.autocast("{device.torch_device.type}", dtype=torch.{dt})'
    if c.batch > 1:
        lines.append(f"# feed {c.batch} inputs per call (x has batch dimension {c.batch})")
    if v.cuda_graphs:
        lines += [
            "static_x = x.clone()",
            "g = torch.cuda.CUDAGraph()",
            f"with {ctx}:",
            "    for _ in range(3):  # warm up before capture",
            "        model(static_x)",
            "    with torch.cuda.graph(g):",
            "        static_out = model(static_x)",
            "# per call: static_x.copy_(x); g.replay(); out = static_out",
        ]
        return lines
    lines += [f"with {ctx}:", "    out = model(x)"]
    return lines


def tune(
    model: nn.Module | str,
    example_inputs: Any,
    *,
    devices: Sequence[str] | str | None = None,
    batch: int = 1,
    max_latency_ms: float | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    per_candidate_s: float = PER_CANDIDATE_S,
    try_compile: bool = True,
    store: ResultStore | None = None,
    events: Events | None = None,
    name: str | None = None,
    config: dict[str, Any] | None = None,
) -> RunRecord:
    """Search the settings of ``model`` per device; the RunRecord's ``extra`` holds
    ``candidates`` (each with speedup, max_error, status) and ``recommendation``."""
    module, label = _as_model(model)
    label = name or label
    _eval(module)
    if batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    if max_latency_ms is not None and not max_latency_ms > 0:
        raise InputError(f"--max-latency-ms must be > 0, got {max_latency_ms}")
    factory, _ = _factory(example_inputs)
    probe = factory(batch)
    if probe.kwargs:
        module = _Keywords(module, len(probe.args), list(probe.kwargs))
    devs = resolve(devices)
    record = new_record(
        "tune",
        {
            "model": label,
            "batch": batch,
            "devices": [d.name for d in devs],
            "max_latency_ms": max_latency_ms,
            "budget_s": budget_s,
            "per_candidate_s": per_candidate_s,
            **(config or {}),
        },
        devs,
    )
    wl = TuneWorkload(label, module, factory, "quick")
    tuners: list[Tuner] = []
    load = OtherLoad()

    def analyse(rec: RunRecord) -> None:  # complete or not: what was measured is summarised
        load.stop()
        if load.cores is not None and load.cores > BUSY_CORES:
            # Seen here: with 2 other jobs on 2 cores, threads=1 measured 418x "faster".
            rec.extra.setdefault("notes", []).append(
                f"other processes used {load.cores:.1f} cores during the search: speedups, "
                "threads above all, may reflect that load; tune again on a quiet machine"
            )
        summarise(rec, tuners)

    session = Session(record, store, events, analyse=analyse)
    start = time.perf_counter()
    # builds set TF32 flags; the user's come back
    with variants.preserved_flags(), session:
        load.start()
        for i, dev in enumerate(devs):
            # each device gets an equal share of what is left of the budget
            share = (budget_s - (time.perf_counter() - start)) / (len(devs) - i)
            tuner = Tuner(
                wl,
                dev,
                session,
                time.perf_counter() + share,
                None if max_latency_ms is None else max_latency_ms / 1e3,
                per_candidate_s,
            )
            tuners.append(tuner)
            compile_ok = try_compile and share >= COMPILE_RESERVE_S + 8 * CANDIDATE_RESERVE_S
            best = tuner.search(batch, compile_ok)
            if not compile_ok:
                record.extra.setdefault("notes", []).append(
                    f"{dev.name}: torch.compile not tried: "
                    + (
                        "--no-compile"
                        if not try_compile
                        else f"a {share:.0f} s budget share leaves too little for its compile "
                        f"(~{COMPILE_RESERVE_S:.0f} s here; raise --budget-s)"
                    )
                )
            if max_latency_ms is not None and tuner.baseline is not None:
                start_from = best.cand if best else tuner.baseline.cand
                tuner.batch_search(start_from)
    return session.record


# Other processes using more than this many cores during tune: its speedups are suspect.
BUSY_CORES = 0.5


def summarise(record: RunRecord, tuners: Sequence[Tuner]) -> None:
    """``extra["candidates"]`` (ranked) and ``extra["recommendation"]`` per device.

    Each candidate's ``speedup`` is ``items * baseline_ms / latency_ms`` of the same row:
    ``baseline_ms`` is the baseline's median over that candidate's own rounds (under drift
    it differs from the baseline row's latency, measured in rounds of its own)."""
    rank = {
        "baseline": 1,
        "faster": 0,
        "same": 2,
        "unclear": 3,
        "slower": 4,
        "over-budget": 5,
    }
    candidates: list[dict[str, Any]] = []
    recommendation: dict[str, Any] = {}
    for t in tuners:
        rows = sorted(t.measured, key=lambda m: (rank.get(m.status, 6), -(m.speedup or 0)))
        for m in rows:
            r = m.result
            candidates.append(
                {
                    "device": t.device.name,
                    "name": m.cand.name,
                    "stage": m.cand.stage,
                    "config": m.cand.config(),
                    "status": m.status,
                    "verdict": m.verdict,
                    "speedup": m.speedup,
                    "max_error": m.max_error,
                    "tolerance": m.tolerance,
                    "latency_ms": None if m.latency_s is None else m.latency_s * 1e3,
                    "baseline_ms": None if m.baseline_s is None else m.baseline_s * 1e3,
                    "items_ratio": m.items,
                    "items_per_s": r.rate("items"),
                    "rel_iqr": r.measurement.rel_iqr if r.ok else None,
                    "compile_s": r.extra.get("compile_s")
                    if variants.parse(m.cand.variant).compile
                    else None,
                    "why": m.judgement.why if m.judgement else None,
                    "reason": r.reason,
                }
            )
        recommendation[t.device.name] = _recommend(t)
        base = t.baseline
        if base is not None and base.result.ok:
            record.extra.setdefault("notes", []).append(
                f"{t.device.name}: baseline {(base.latency_s or 0) * 1e3:.3g} ms, spread (IQR) "
                f"{base.result.measurement.rel_iqr:.0%} of its median; each speedup is the "
                "baseline's median over that candidate's own rounds divided by its latency"
            )
    record.extra["candidates"] = candidates
    record.extra["recommendation"] = recommendation


def _recommend(t: Tuner) -> dict[str, Any]:
    base = t.baseline
    spread: dict[str, Any] = {}
    if base is not None and base.result.ok:
        spread = {
            "baseline_ms": (base.result.median_s or 0) * 1e3,
            "baseline_rel_iqr": base.result.measurement.rel_iqr,
        }
    if t.stopped:
        return {"name": "no recommendation", "speedup": None, "reason": t.stopped, **spread}
    best = t.best(t.measured)
    if best is not None:
        return {
            "name": best.cand.name,
            "speedup": best.speedup,
            "max_error": best.max_error,
            "config": best.cand.config(),
            "code": code_lines(best.cand, t.device),
            **spread,
        }
    if base is not None and t.max_latency_s is not None and not t.fits(base):
        return {
            "name": "nothing fits the budget",
            "speedup": None,
            "reason": f"no correct configuration measured runs within "
            f"{t.max_latency_s * 1e3:g} ms (the baseline takes "
            f"{(base.latency_s or 0) * 1e3:.3g} ms); raise --max-latency-ms or try a "
            "faster device",
            **spread,
        }
    unclear = sum(m.status == "unclear" for m in t.measured)
    why = "no candidate was faster beyond the noise and correct"
    if unclear:
        why += f" ({unclear} too noisy to tell: UNCLEAR)"
    return {
        "name": "keep the baseline",
        "speedup": 1.0,
        "reason": why,
        "config": base.cand.config() if base else None,
        "code": code_lines(base.cand, t.device) if base else [],
        **spread,
    }
