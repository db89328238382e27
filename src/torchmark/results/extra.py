"""``Result.extra``: figures a workload, the case loop or the ranks add to one result.

A plain dict at run time (workloads build it as one), typed here for the keys that
verdicts and reports read: pydantic checks their shape when a result is loaded and mypy
checks their readers. Any other key (a workload's own facts: ``aliased``, ``source``,
``bytes_breakdown``, ...) is kept as it is (``extra="allow"``), so no key of an older or
newer document is lost. A figure is typed as its writer writes it (None only where it
may be missing: no copy on the CPU, no energy counter).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

_KEEP = ConfigDict(extra="allow")


@with_config(_KEEP)
class Energy(TypedDict, total=False):
    """Energy over the timed region (``telemetry.energy.per_item``), or why none."""

    available: bool
    reason: str
    source: str
    joules: float
    region_s: float
    mean_power_w: float | None
    calls: int
    items: float
    j_per_item: float | None
    notes: list[str]


@with_config(_KEEP)
class InputBreakdown(TypedDict, total=False):
    """An input pipeline's step, mean seconds per segment (``pipeline.feed.Epoch``)."""

    steps_timed: int
    steps_per_epoch: int
    wait_s: float
    copy_s: float | None  # None on the CPU: the batch is in its memory already
    compute_s: float
    step_s: float
    input_bound: float | None  # wait / step
    copy_device_s: float
    batch_bytes: int
    compute_device_s: float
    overlap: float  # share of the copy hidden behind compute (side stream)
    overlap_ideal: float
    copy_note: str


@with_config(_KEEP)
class AloneTimes(TypedDict, total=False):
    """DDP's buckets' all_reduce timed alone after the case (``launch.buckets``)."""

    samples_s: list[float]
    sizes_bytes: list[int]
    dtype: str


@with_config(_KEEP)
class DdpTimings(TypedDict, total=False):
    """DDP's own timers, averaged over its sampled steps (``launch.ddp``)."""

    forward_s: float
    backward_compute_s: float
    backward_comm_s: float
    overlap_s: float
    bucket_sizes_bytes: list[int]
    exposed_comm_s: float
    exposed_comm_share: float
    alone: AloneTimes


@with_config(_KEEP)
class RankSamples(TypedDict, total=False):
    """One rank's own samples of a distributed case, gathered on rank 0."""

    rank: int
    host: str
    device: str
    torch: str
    status: str
    reason: str | None
    samples_s: list[float]
    ddp: DdpTimings | None


@with_config(_KEEP)
class TimerCheck(TypedDict):
    """The sample whose timer read longer than the host clock around it (``timing.loop``)."""

    timer_s: float
    host_s: float


@with_config(_KEEP)
class ResultExtra(TypedDict, total=False):
    # the case loop (run.runner): what telemetry.verdict judges a result with
    peak_memory_bytes: int | None
    floor_s: float  # a micro case's roofline floor per call
    one_thread_s: float  # the same call on one thread, under competing load
    timer_check: TimerCheck  # only where the timer outran the host clock
    # memory-bound micro workloads: what their working set is held against (results.cache)
    working_set_bytes: int
    llc_bytes: int | None  # as the device reported it (None: it could not say)
    llc_counted_bytes: int  # as counted (devices.cache.estimate)
    # models (workloads.models)
    optimizer: str  # present: a training step
    max_error: float | None
    tolerance: float
    compile_s: float | None
    cold_call_s: float | None
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    # ranks (launch.rank) and the strategy a model trained under (launch.ddp)
    world_size: int
    per_rank: list[RankSamples]
    total_items_per_s: float
    ddp: DdpTimings
    strategy: str  # ddp / fsdp / dp
    gpus: int  # DataParallel's
    # collectives
    ranks: int
    backend: str
    algbw_Bps: float
    busbw_Bps: float
    bus_factor: float
    # your model (user.bench) and tune
    inputs: str
    energy: Energy
    first_call_s: float | None
    baseline_samples_s: list[float]
    speedup: float | None
    verdict: str | None
    config: dict[str, Any]
    # input pipelines
    input: InputBreakdown
    loader: str
    steps_per_epoch: int


__all__ = [
    "AloneTimes",
    "DdpTimings",
    "Energy",
    "InputBreakdown",
    "RankSamples",
    "ResultExtra",
    "TimerCheck",
]
