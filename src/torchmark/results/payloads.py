"""What each kind of run found beyond its results: one typed payload per kind, discriminated
by ``kind``, stored as ``RunRecord.payload``.

    run      RunPayload      parts (a run measured in parts, ``run --resume``)
    model    ModelPayload    model facts, break-even per accelerator, cost per million items
                             (a ``run`` may carry a break-even too: ``BreakEvenFindings``)
    tune     TunePayload     every candidate ranked, the recommendation (and without a
                             latency bound the best throughput) per device
    soak     SoakPayload     throughput per time window beside the telemetry
    profile  ProfilePayload  where the step's time goes: categories, top ops, advice, memory
    serving  ServingRunPayload  load points, each fleet's search, the answer per device
    predict  PredictPayload  your model's cases predicted on another machine: no results
                             (a Result is a measurement with samples), each case's time,
                             interval, dominant term and basis; predicted vs measured
    bench    BenchPayload    torchmark's own suite (``python -m benchmarks``): each script's
                             question, goal and outcome, its figures that are not times
                             (its timed figures are results, so ``compare`` judges them)

Every payload also carries ``notes`` (said under the run's tables) and ``not_stored`` (why
the store failed, when it did). Two kinds of run are variants stored under another kind, as
schema 1 stored them: ``model --loader`` is a ``model`` run whose ``config`` names the loader
and whose payload is empty (its results carry the input pipeline's breakdown,
``Result.extra["input"]``); a distributed run (ranks, ``run --nproc-per-node``) is a ``run``
whose ``config["distributed"]`` names the world (its results carry every rank's samples,
``Result.extra["per_rank"]``). Readers take the typed fields and never re-check a shape;
keys a document holds beyond the fields (written by an older or newer torchmark) are kept
as they are and written back.

A new kind of run adds its payload in three steps (as ``serving`` did):

1. here, a class ``ServingRunPayload(Payload)`` with ``kind: Literal["serving"] =
   "serving"`` and its typed fields (nested models for what readers depend on; serving's
   own document lives in ``results/serving.py``, which imports nothing else of ``results``);
2. that class added to ``AnyPayload`` below (``PAYLOADS`` and ``KINDS`` follow from it);
3. its run opened with ``open_run("serving", ...)``: the payload starts empty
   (``ServingRunPayload()``) and the kind's loop fills ``record.payload``.

No schema bump is needed: no older document holds the new kind, and an older torchmark
refuses a run of a kind it does not know with one line saying to upgrade.
"""

from __future__ import annotations

import typing
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from torchmark.results.serving import ServingPayload


class Kept(BaseModel):
    """Keys no field names are kept and written back; validators built on first use (the
    commands that list runs never validate one)."""

    model_config = ConfigDict(extra="allow", defer_build=True)


class Part(Kept):
    """One part of a run measured in parts: when, how many results, under what load."""

    started_utc: datetime | None = None
    finished_utc: datetime | None = None
    results: int | None = None
    pid: int | None = None
    load_at_start: dict[str, Any] | None = None
    command: str | None = None


class Payload(Kept):
    """What every kind's payload carries; unknown keys are kept (``extra="allow"``)."""

    kind: str
    notes: list[str] = []
    not_stored: str | None = None  # why the store failed: the run was kept in memory only


# -- model -------------------------------------------------------------------------------


class ModelInfo(Kept):
    name: str
    parameters: int | None = None
    flops_per_item: float | None = None
    inputs_at_smallest_batch: str | None = None
    mode: str | None = None


class BreakEvenRow(Kept):
    """One batch, one view of time: the GPU against the CPU beyond the noise of both."""

    batch: int
    mode: str  # "e2e" | "device"
    gpu_s: float | None = None
    cpu_s: float | None = None
    speedup: float | None = None
    verdict: str = "n/a"  # faster / slower / same / unclear / n/a


class BreakEven(Kept):
    """One accelerator against the CPU: the batch from which it wins, per view of time
    (a batch, or "always" / "never" / "unclear" / "not measured")."""

    label: str | None = None
    cpu: str | None = None
    e2e: int | str = "not measured"
    device: int | str = "not measured"
    range: list[int] | None = None  # [smallest, largest] batch tried
    per_batch: list[BreakEvenRow] = []
    notes: list[str] = []


class CostRow(Kept):
    batch: int
    device: str
    price_per_hour: float
    seconds_per_item: float
    cost_per_million: float
    j_per_item: float | None = None


class CostTable(Kept):
    prices: dict[str, float] = {}
    unit: str = "currency per device-hour"
    rows: list[CostRow] = []
    cheaper: dict[str, str] = {}  # batch -> the cheaper device


class BreakEvenFindings(Kept):
    """A CPU-vs-GPU break-even over a batch sweep: ``model`` computes it; a ``run`` may
    carry one too (it is a pure function of results measured on both, ``user.breakeven``),
    and the break-even chart draws it from either."""

    break_even: dict[str, BreakEven] | None = None  # accelerator -> its break-even
    break_even_note: str | None = None  # why there is none (no GPU, no CPU measured)


class RunPayload(BreakEvenFindings, Payload):
    kind: Literal["run"] = "run"
    parts: list[Part] | None = None  # None: measured in one part


class ModelPayload(BreakEvenFindings, Payload):
    """``torchmark model``; a ``--loader`` run keeps every field None."""

    kind: Literal["model"] = "model"
    model: ModelInfo | None = None
    cost: CostTable | None = None  # with --price


# -- tune --------------------------------------------------------------------------------


class Candidate(Kept):
    """One configuration tune measured (or skipped, or rejected), ranked per device."""

    device: str
    name: str
    status: str  # baseline / faster / same / unclear / slower / over-budget / rejected / skipped
    stage: str | None = None
    config: dict[str, Any] = {}
    verdict: str | None = None
    speedup: float | None = None
    max_error: float | None = None
    tolerance: float | None = None
    latency_ms: float | None = None
    baseline_ms: float | None = None  # the baseline's median over this candidate's rounds
    items_ratio: float | None = None  # items per call over the baseline's
    items_per_s: float | None = None
    rel_iqr: float | None = None
    compile_s: float | None = None
    why: str | None = None
    reason: str | None = None


class Recommendation(Kept):
    """What tune recommends on one device, or why nothing (``speedup`` None)."""

    name: str
    speedup: float | None = None
    reason: str | None = None
    max_error: float | None = None
    config: dict[str, Any] | None = None
    code: list[str] = []
    baseline_ms: float | None = None
    baseline_rel_iqr: float | None = None


class BestThroughput(Kept):
    """tune's second answer without a latency bound: the most items/s over the batches
    measured (FASTER per item than the baseline), and the latency a call then costs."""

    name: str
    batch: int
    speedup: float | None = None  # per item, over the baseline; 1.0: the baseline itself
    items_per_s: float | None = None
    latency_ms: float
    baseline_latency_ms: float | None = None
    baseline_batch: int = 1
    config: dict[str, Any] = {}
    code: list[str] = []
    # faster batches whose own spread rejects them, each with why (not picked)
    passed_over: list[str] = []


class TunePayload(Payload):
    kind: Literal["tune"] = "tune"
    candidates: list[Candidate] = []
    recommendation: dict[str, Recommendation] = {}  # per device
    throughput: dict[str, BestThroughput] = {}  # per device


# -- soak --------------------------------------------------------------------------------


class SoakWindow(Kept):
    """Throughput over one time window, with the telemetry of the same span."""

    t0_s: float
    t1_s: float
    rate: float | None = None  # in SoakSeries.unit
    clock_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    throttle: dict[str, int] = {}  # reason -> % of the window
    other_cores: float | None = None  # other processes' CPU time over the window, in cores


class SoakSeries(Kept):
    case: str
    unit: str | None = None
    chunk_calls: int | None = None
    elapsed_s: float = 0.0
    logical_cores: int | None = None  # the host's, for what other processes' load means
    accelerator: bool = False  # a GPU soak needs one free host core, a CPU soak all of them
    windows: list[SoakWindow] = []


class SoakPayload(Payload):
    kind: Literal["soak"] = "soak"
    soak: SoakSeries | None = None


# -- profile -----------------------------------------------------------------------------


class Schedule(Kept):
    wait: int | None = None
    warmup: int | None = None
    active: int = 0
    requested: int | None = None  # active steps asked for (fewer for a long step)


class Category(Kept):
    name: str
    us_per_step: float
    share: float  # % of the step


class OpRow(Kept):
    """One of the top ops by self time per step (``profile.ops.OpRow``, stored)."""

    name: str
    category: str
    calls: float  # per step
    self_us: float  # per step
    share: float  # % of the step's wall time
    flops: float | None = None
    bytes: float | None = None
    flop_rate: float | None = None
    byte_rate: float | None = None
    pct_ceiling: float | None = None
    ceiling_key: str | None = None
    bound: str = ""
    peak_key: str | None = None  # the matmul peak its FLOPs are placed against (its dtype's)

    @property
    def above_ceiling(self) -> bool:
        return self.pct_ceiling is not None and self.pct_ceiling > 100


class GemmRow(Kept):
    op: str
    dims: list[list[int]]
    dtype: str | None = None
    calls: float = 0.0
    us_per_step: float = 0.0
    share: float = 0.0


class Launches(Kept):
    per_step: float
    launch_us_median: float
    queue_us_median: float


class StepPeak(Kept):
    allocated_bytes: int
    reserved_bytes: int | None = None


class StepMemory(Kept):
    """The device allocator's peak per active step."""

    steps: list[StepPeak] = []
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None = None
    smallest_allocated_bytes: int | None = None
    largest_step: int | None = None


class MemoryCategory(Kept):
    name: str
    bytes: int
    largest_bytes: int


class MemoryAtPeak(Kept):
    """Memory by what it holds at the step's peak, or ``error``: why it is not known."""

    peak_bytes: int | None = None
    categories: list[MemoryCategory] = []
    note: str | None = None
    error: str | None = None


class Checked(Kept):
    """A suggestion measured (``profile --check``) against the profiled case."""

    status: str  # ok / skipped / wrong
    verdict: str | None = None  # FASTER / SLOWER / SAME / UNCLEAR
    speed: float | None = None
    why: str | None = None
    reason: str | None = None


class Advice(Kept):
    """A change the profile calls for (``profile.advice.Advice``, stored)."""

    variant: str
    why: str
    command: str = ""
    workload: str | None = None
    kind: str = "variant"  # "variant" | "shape"
    checked: Checked | None = None


class ProfileSummary(Kept):
    """One profiled case: plain data enough to render without the trace."""

    case: str
    kind: Literal["cpu", "gpu"]  # the breakdown's: host ops only, or kernels on streams
    schedule: Schedule = Field(default_factory=Schedule)
    steps: int
    profiled_step_s: float
    unprofiled_median_s: float | None = None
    overhead_pct: float | None = None
    verdict: str = ""
    categories: list[Category] = []
    ops: list[OpRow] = []
    rules: list[str] = []
    notes: list[str] = []
    workload: str | None = None
    device: str | None = None
    wall_us: float | None = None
    step_us: list[float] = []
    profiled_mean_s: float | None = None
    # None where a profile stored before the two spreads were kept apart has only the larger
    spread_pct: float | None = None
    profiled_spread_pct: float | None = None
    unprofiled_spread_pct: float | None = None
    gemms: list[GemmRow] = []
    load: dict[str, Any] | None = None  # other processes' load while measured and profiled
    under_load: bool = False  # then the verdict is "can't tell" and nothing is advised
    device_busy_s: float | None = None
    launches: Launches | None = None
    device_peak_bytes: int | None = None
    host_rss_peak_bytes: int | None = None
    step_memory: StepMemory | None = None
    memory: MemoryAtPeak | None = None  # None: --no-memory
    advice: list[Advice] = []
    trace_file: str | None = None


class ProfilePayload(Payload):
    kind: Literal["profile"] = "profile"
    profile: ProfileSummary | None = None  # None: stopped before a profile was captured


# -- serving -----------------------------------------------------------------------------


class ServingRunPayload(Payload):
    """``torchmark serving``: every load point, each fleet's search and the answer per
    device, as ``results/serving.py`` defines them (``results.serving.read``/``write``)."""

    kind: Literal["serving"] = "serving"
    serving: ServingPayload | None = None  # None: stopped before the first point was stored


# -- predict -----------------------------------------------------------------------------


class PredictTarget(Kept):
    """The machine a prediction is for, as the run that describes it teaches it."""

    name: str  # as given: "h100-quick", a run id, a file
    source: str  # committed reference run / stored run / file / server
    run_id: str | None = None
    fingerprint: str | None = None
    side: str  # "gpu" (its first accelerator) or "cpu" (its host)
    device: str  # the device's name in its run: "cuda:0"
    model: str  # "NVIDIA H100 80GB HBM3"
    host: str | None = None  # its host CPU's model
    threads: int | None = None  # its torch threads
    memory_bytes: int | None = None
    calibration: dict[str, Any] = {}  # e_c, e_m, h, h_cases


class PredictedCase(Kept):
    """One case predicted on the target: its time per call, with the interval the measured
    time should fall in and the term that sets it; or why it cannot be predicted."""

    case: str
    workload: str
    variant: str  # a user model's view ("device" / "e2e"); a built-in's scenario
    params: dict[str, Any] = {}
    side: str = "gpu"
    items: float = 1.0  # items per call (the batch)
    seconds: float | None = None
    low: float | None = None
    high: float | None = None
    dominant: str | None = None  # compute / memory / launch / transfer
    terms: dict[str, float] = {}
    floor_s: float | None = None  # the roofline device time: no call is faster
    basis: str = ""
    interval_basis: str = ""
    refused: str | None = None
    profile: dict[str, Any] = {}  # launches, FLOPs, bytes, families

    @property
    def predicted(self) -> bool:
        return self.refused is None and self.seconds is not None and self.low is not None


class Measured(Kept):
    """A predicted case against a measurement of the same case on the target's machine."""

    case: str
    measured_s: float
    source: str  # where the measurement is: the target's run, a stored run, a file
    run_id: str | None = None
    inside: bool
    error_pct: float  # predicted / measured - 1, in %


class HereRow(Kept):
    """Your model at one batch: measured on this CPU, predicted on the target."""

    batch: int
    view: str  # the target's view of time compared ("e2e": inputs copied in and out)
    cpu_s: float | None = None
    cpu_low: float | None = None  # the median's 95 % confidence interval
    cpu_high: float | None = None
    target_s: float | None = None
    target_low: float | None = None
    target_high: float | None = None
    verdict: str = "n/a"  # target faster / CPU faster / can't tell / not measured


class PredictPayload(Payload):
    """``torchmark predict``: predicted, never measured; its run holds no results."""

    kind: Literal["predict"] = "predict"
    model: str | None = None
    target: PredictTarget | None = None
    cases: list[PredictedCase] = []
    measured: list[Measured] = []  # predicted vs measured
    here: list[HereRow] = []
    here_run: str | None = None  # the model run that measured this CPU (--here)
    break_even: str | None = None  # in words: the batch from which the target wins
    refused: str | None = None  # the whole prediction refused, in one line


# -- bench -------------------------------------------------------------------------------


class BenchScript(Kept):
    """One script of the suite: the question it asks, its goal, how it ended."""

    name: str
    question: str
    goal: str
    outcome: str  # met / missed / can't tell / not available / failed / done (no goal)
    wall_s: float


class BenchFigure(Kept):
    """A figure that is not a time (a ratio, a bias, a rate) beside its goal."""

    script: str
    name: str
    value: float
    unit: str = ""
    goal: str = ""
    met: bool | None = None  # None: no goal for this figure


class BenchPayload(Payload):
    kind: Literal["bench"] = "bench"
    scripts: list[BenchScript] = []
    figures: list[BenchFigure] = []


AnyPayload = Annotated[
    RunPayload
    | ModelPayload
    | TunePayload
    | SoakPayload
    | ProfilePayload
    | ServingRunPayload
    | PredictPayload
    | BenchPayload,
    Field(discriminator="kind"),
]

# kind -> its payload class, from the union: the one list of kinds. A run's payload is
# validated by its own kind's class alone (``record._of_its_kind``): reading a run builds
# one payload validator, not the whole union's.
PAYLOADS: dict[str, type[Payload]] = {
    typing.get_args(cls.model_fields["kind"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(AnyPayload)[0])
}
KINDS: tuple[str, ...] = tuple(PAYLOADS)
