"""``torchmark tune``: measure the settings that matter for the user's model and recommend.

Per device, a staged search (each stage starts from the best of the previous one):

    baseline   the user's way: fp32, eval, torch.no_grad(), default threads, --batch
    settings   inference_mode; CPU thread counts (1, physical cores, logical cores)
    variants   channels_last, TF32, fp16 / bf16 autocast, int8 dynamic (CPU), CUDA graphs,
               torch.compile (only while the time budget allows: its compile is measured)
    combined   the winning variants together, when they combine
    batch      with --max-latency-ms: the largest batch whose latency stays in the budget;
               without: the batch with the most items/s, and the latency it costs

Every candidate's output is checked against the fp32 reference (``variants.check``
tolerance); a candidate past it is *rejected* with the error measured. Each candidate is
timed in rounds interleaved with the baseline; its speedup is the baseline's median over
those rounds divided by the candidate's (the two latencies shown), and it counts only when
``comparison.paired`` calls it FASTER (Wilcoxon on the rounds, 2 % practical threshold).

Tune has its own loop, not ``run_planned``'s: its cases are not known before it measures
(each stage starts from the best of the previous one, the batch search from the winner),
and a candidate is timed in rounds interleaved with the baseline, not by one ``run_case``.
Its session is opened like every run's (``run.open_run``).

    candidates  what is tried (``Candidate``) and the code that applies the recommendation
    workload    builds each candidate (untimed) and checks its output
    search      ``Tuner``: the interleaved rounds and the staged search on one device
    summary     the ranking and the recommendation, into the record's ``extra``
    kind        ``tune()`` and ``TuneConfig``: the run around one ``Tuner`` per device (here)

The search's knobs (``search.MIN_ROUNDS``, ``search.BASELINE_MAX_REL_IQR``, ...) are read
where they are used: tests shrink them on ``search``, not on this package.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from torchmark import variants
from torchmark.devices import resolve
from torchmark.errors import InputError
from torchmark.kinds.tune.search import (
    CANDIDATE_RESERVE_S,
    COMPILE_RESERVE_S,
    PER_CANDIDATE_S,
    Tuner,
)
from torchmark.kinds.tune.summary import summarise
from torchmark.kinds.tune.workload import TuneWorkload, _Keywords
from torchmark.results import RunRecord
from torchmark.run.record import open_run
from torchmark.run.session import Events
from torchmark.store.base import ResultStore
from torchmark.telemetry.host import OtherLoad
from torchmark.user.workload import _as_model, _eval, _factory

DEFAULT_BUDGET_S = 150.0


@dataclass(frozen=True)
class TuneConfig:
    """What a ``tune`` run searched, as its record stores it (``as_dict``)."""

    model: str  # the model's name in tables
    batch: int
    devices: tuple[str, ...]
    max_latency_ms: float | None
    budget_s: float
    per_candidate_s: float
    given: Mapping[str, Any] = field(default_factory=dict)  # the caller's own (CLI: SPEC)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["devices"] = list(self.devices)
        d.update(d.pop("given"))
        return d


# Other processes using more than this many cores during tune: its speedups are suspect.
BUSY_CORES = 0.5


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
    if not budget_s > 0:
        raise InputError(f"the time budget must be more than 0 s, got {budget_s:g} s")
    factory, _ = _factory(example_inputs)
    probe = factory(batch)
    if probe.kwargs:
        module = _Keywords(module, len(probe.args), list(probe.kwargs))
    devs = resolve(devices)
    settings = TuneConfig(
        label,
        batch,
        tuple(d.name for d in devs),
        max_latency_ms,
        budget_s,
        per_candidate_s,
        dict(config or {}),
    )
    wl = TuneWorkload(label, module, factory, "quick")
    tuners: list[Tuner] = []
    load = OtherLoad()

    def analyse(rec: RunRecord) -> None:  # complete or not: what was measured is summarised
        load.stop()
        if load.cores is not None and load.cores > BUSY_CORES:
            # Seen here: with 2 other jobs on 2 cores, threads=1 measured 418x "faster".
            rec.payload.notes.append(
                f"other processes used {load.cores:.1f} cores during the search: speedups, "
                "threads above all, may reflect that load; tune again on a quiet machine"
            )
        summarise(rec, tuners)

    session = open_run("tune", settings, devs, store, events, analyse=analyse)
    record = session.record
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
                record.payload.notes.append(
                    f"{dev.name}: torch.compile not tried: "
                    + (
                        "--no-compile"
                        if not try_compile
                        else f"a {share:.0f} s budget share leaves too little for its compile "
                        f"(~{COMPILE_RESERVE_S:.0f} s here; raise --budget)"
                    )
                )
            if tuner.baseline is not None:
                start_from = best.cand if best else tuner.baseline.cand
                if max_latency_ms is not None:
                    tuner.batch_search(start_from)
                else:  # both questions: latency at --batch above, throughput over batches
                    tuner.throughput_search(start_from)
        raised = [t.baseline_raised for t in tuners]
        if raised and all(raised):
            # as `model` and `serving` say it: a forward that raises on every device is the
            # user's to fix (one line, exit 2), not a search that keeps the baseline
            raise InputError(f"the model failed on inputs {probe.describe()}: {raised[0]}")
    return session.record
