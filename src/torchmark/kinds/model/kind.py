"""Benchmark the user's own model over a batch sweep on every device.

    preflight: one call per device at the smallest batch -> which devices run it, the
               reference output, FLOPs per item (an input the model rejects everywhere is
               a user error: one line with the shapes tried and the model's error)
    for device, batch, view (device-only / end-to-end):
        prepare (inputs made outside the timed region) -> guard -> measure -> energy
        -> store the result as it lands
    analyse: break-even per GPU, cost per million items (pure functions of the results)

The baseline is how most people run inference: ``model.eval()`` under ``torch.no_grad()``
in fp32; ``torchmark tune`` measures what beats it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, InputError, TorchmarkError, WrongResultError
from torchmark.results import Ceiling, Result, RunRecord
from torchmark.results.payloads import BreakEven, CostTable, ModelInfo, ModelPayload
from torchmark.run import isolation
from torchmark.run.case import CALL_TIMED_OUT, run_case, skipped
from torchmark.run.config import RunConfig, validate
from torchmark.run.record import open_run
from torchmark.run.runner import check_reuse, run_planned
from torchmark.run.session import Events, Session
from torchmark.run.watchdog import CallTimedOut, Watchdog, call_bound
from torchmark.store.base import ResultStore
from torchmark.telemetry import energy
from torchmark.timing import preset
from torchmark.user import breakeven, cost
from torchmark.user.inputs import InputFactory, one_line, per_batch
from torchmark.user.workload import (
    Preflight,
    UserModel,
    _as_model,
    _eval,
    _factory,
    _host_alloc_failed,
    preflight,
)
from torchmark.workloads.base import Case, PlanOptions, Workload

if TYPE_CHECKING:
    from torchmark.results.extra import Energy

DEFAULT_BATCHES = (1, 2, 4, 8, 16)
# What the larger batches of a device whose sweep ran out of memory say.
LARGER_SKIPPED = "larger batches skipped"


@dataclass(frozen=True)
class ModelConfig:
    """What a ``model`` run measured, as its record stores it (``as_dict``)."""

    model: str  # the model's name in tables
    batches: tuple[int, ...]
    devices: tuple[str, ...]
    rule: str
    price: Mapping[str, float]  # currency per device-hour by kind or name
    energy: bool
    given: Mapping[str, Any] = field(default_factory=dict)  # the caller's own (CLI: SPEC)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["batches"], d["devices"] = list(self.batches), list(self.devices)
        d.update(d.pop("given"))
        return d


def _trace_energy(result: Result, batch: int) -> dict[str, Any]:
    """Energy per item from the NVML total-energy readings of the case's telemetry trace,
    over the timed samples (first sample's start to the last one's end)."""
    tel = result.telemetry
    if tel is None:
        return {"available": False, "reason": "telemetry off: GPU energy is read through it"}
    joules = tel.get("energy_j")
    if joules is None:
        return {"available": False, "reason": "no NVML energy counter in the telemetry"}
    calls = len(result.samples_s) * result.calls_per_sample
    region_s = sum(result.samples_s) * result.calls_per_sample
    source = "NVML total energy of the board (telemetry readings around the samples)"
    return energy.per_item(source, joules, region_s, calls, calls * batch, [])


def benchmark_model(
    model: nn.Module | str,
    example_inputs: Any = None,
    *,
    devices: Sequence[str] | str | None = None,
    batches: Sequence[int] | None = None,
    rule: str = "model",
    price: Mapping[str, float] | str | None = None,
    store: ResultStore | None = None,
    events: Events | None = None,
    name: str | None = None,
    measure_energy: bool = True,
    telemetry: bool = True,
    config: Mapping[str, Any] | None = None,
    loader: Callable[[], Any] | None = None,
    ceilings: bool = True,
    ceilings_from: str | None = None,
) -> RunRecord:
    """Measure ``model`` over a batch sweep on each device; break-even, energy and cost.

    ``loader``: a function returning a DataLoader or any iterable of batches: the model is
    fed your batches instead, and the run holds the input pipeline's breakdown and advice
    (``torchmark.kinds.loader.kind``); ``example_inputs`` is then not needed.

    ``example_inputs``: a tensor, tuple (positional) or dict (keyword) of tensors whose first
    dimension is the batch (rows are resampled for other batch sizes), or a callable
    ``batch -> inputs``. ``devices``: names as for ``--device`` (default: all).
    ``price``: currency per device-hour by device kind or name, e.g. ``{"cpu": 0.1}``.
    ``ceilings``: measure each device's ceilings (quick; reused from the store's cache
    for this machine, said so), so each result reads as % of the peak its FLOPs run
    against (MFU). ``ceilings_from``: reuse a stored quiet set instead (``quiet``: the
    cache; or a run id).
    Returns the RunRecord; its ``payload`` (``ModelPayload``) holds ``break_even``,
    ``cost`` and the ``model`` facts.
    """
    module, label = _as_model(model)
    label = name or label
    _eval(module)
    if loader is not None:
        from torchmark.kinds.loader.kind import benchmark_loader

        return benchmark_loader(
            module, loader, devices=devices, what=label, rule=rule, telemetry=telemetry,
            store=store, events=events, config=dict(config or {}),
        )  # fmt: skip
    if example_inputs is None:
        raise InputError("give the model's example_inputs, or a loader")
    preset(rule)  # an unknown rule fails here, naming the valid ones, before any work
    factory, example_batch = _factory(example_inputs)
    batch_list = sorted(set(batches or ((example_batch,) if example_batch else DEFAULT_BATCHES)))
    # the reference is computed once, on the first device: every device must get the same
    # inputs at each batch, which an unseeded user factory does not give on its own
    factory = per_batch(factory)
    prices = cost.parse_price(price) if isinstance(price, str) or price is None else dict(price)
    devs = resolve(devices)
    cfg = RunConfig(
        devices=tuple(d.name for d in devs),
        batches=tuple(batch_list),
        rule=rule,
        # MFU needs the matmul peak: the quick ceilings (~15 s on 2 CPU cores, once per
        # machine: the store caches them per device fingerprint)
        ceilings=ceilings,
        ceilings_from=ceilings_from,
        suite="quick",
        telemetry=telemetry,
    )
    validate(cfg)  # batch sizes >= 1, as for `torchmark run`: before the preflight's calls
    check_reuse(cfg, devs, store)  # --ceilings RUN|quiet: before the run opens

    bound = call_bound(preset(rule).max_time_s)
    settings = ModelConfig(
        label, tuple(batch_list), cfg.devices, rule, prices, measure_energy, dict(config or {})
    )
    # break-even and cost are analysed from what was measured, complete or not
    session = open_run(
        "model", settings, devs, store, events, analyse=lambda r: analyse(r, devs, prices)
    )
    # the user's calls in a child process where one can be forked: bounded even where a
    # call holds the GIL (run/isolation.py); else here, under the watchdog thread. The
    # child is forked after the session is made: its copy measures with it.
    apart = isolation.refusal(devs) is None
    served = partial(
        _serve, label, module, factory, devs, batch_list, bound, rule, cfg, measure_energy, session
    )
    worker = isolation.Worker(served) if apart else None
    with contextlib.closing(worker) if worker else contextlib.nullcontext():
        if worker is not None:
            pf = _preflight_apart(worker, factory(batch_list[0]).describe())
        else:
            pf = preflight(module, factory, devs, batch_list[0], bound)
        workload = UserModel(label, factory, batch_list, pf, rule, measure_energy)
        cases = [c for d in devs for c in workload.cases(d, PlanOptions())]
        return _measure(session, module, label, pf, workload, cases, cfg, worker)


def _measure(
    session: Session,
    module: nn.Module,
    label: str,
    pf: Preflight,
    workload: UserModel,
    cases: list[Case],
    cfg: RunConfig,
    worker: isolation.Worker | None,
) -> RunRecord:
    session.record.payload = ModelPayload(
        model=ModelInfo(
            name=label,
            parameters=sum(p.numel() for p in module.parameters()),
            flops_per_item=pf.flops_per_item or None,
            inputs_at_smallest_batch=pf.inputs,
            mode="eval, torch.no_grad(), fp32 (the usual baseline)",
        )
    )
    run_one = _run_one if worker is None else partial(_run_apart, worker, cases)
    return run_planned(
        session, cases, {label: workload}, cfg, run_one=run_one, oom_says=LARGER_SKIPPED
    )


def _serve(
    label: str,
    model: nn.Module,
    factory: InputFactory,
    devices: Sequence[Device],
    batches: Sequence[int],
    bound: float,
    rule: str,
    cfg: RunConfig,
    measure_energy: bool,
    session: Session,
    request: Any,
    dog: Watchdog,
) -> Any:
    """In the child process (run/isolation.py): its own preflight, done once, then the case
    asked for by its index in the plan. Returns what the parent needs, never a model."""
    if "workload" not in _SERVED:
        pf = preflight(model, factory, devices, batches[0], bound, dog)
        _SERVED["workload"] = UserModel(label, factory, batches, pf, rule, measure_energy)
        # the child's copy of the run's session: beats go to the parent, which holds the
        # bound; telemetry opens afresh (no sampler thread survives a fork); nothing stored
        session.watchdog, session.store = dog, None
        session._sources = {}
    workload: UserModel = _SERVED["workload"]
    if request == "preflight":  # what the parent needs of it: never the placed models
        # names only: the parent never prepares a case (mypy: placed holds modules)
        names = dict.fromkeys(workload.pf.placed, None)
        return dataclasses.replace(workload.pf, placed=names)  # type: ignore[arg-type]
    cases = [c for d in devices for c in workload.cases(d, PlanOptions())]
    index, ceilings = request  # the parent's ceilings: the child measures none of its own
    return _run_one(workload, cases[index], ceilings, cfg, session)


_SERVED: dict[str, Any] = {}  # the child's state between requests (a fresh fork: empty)


def _preflight_apart(worker: isolation.Worker, inputs: str) -> Preflight:
    try:
        pf: Preflight = worker.ask("preflight")
    except CallTimedOut as e:
        raise InputError(f"the model failed on inputs {inputs}: {e}") from None
    return pf


def _run_apart(
    worker: isolation.Worker,
    cases: Sequence[Case],
    workload: Workload,
    case: Case,
    ceilings: dict[str, Ceiling],
    *_: Any,
) -> Result:
    """One case measured by the child (``run_planned``'s hook: the device's ceilings sent
    with it, config and session the child's copies): timed out, or the child died, said as
    the case's."""
    index = next(i for i, c in enumerate(cases) if c is case)
    try:
        result: Result = worker.ask((index, ceilings))
    except CallTimedOut as e:
        return skipped(case, str(e), flag=CALL_TIMED_OUT)
    except isolation.ChildDied as e:
        return skipped(case, f"while measuring {case.label}, {e}")
    return result


def _run_one(
    workload: Workload,
    case: Case,
    ceilings: dict[str, Ceiling],
    cfg: RunConfig,
    session: Session,
) -> Result:
    """One case of the sweep (``run_planned``'s hook): measured under ``torch.no_grad()``,
    the user's own code failing at one batch recorded as a skip, GPU energy read."""
    assert isinstance(workload, UserModel)
    b = case.param_dict["batch"]
    try:
        with torch.no_grad():
            result = run_case(workload, case, ceilings, cfg, session)
    except CaseSkipped as e:
        return skipped(case, str(e))
    except WrongResultError as e:
        return skipped(case, str(e), status="wrong")
    except InputError as e:  # the user's inputs factory failing at this batch: it says so
        return skipped(case, str(e))
    except TorchmarkError:
        raise  # torchmark's own failure (a bad rule, a store error): not the model's fault
    except Exception as e:  # the user's code failing at one batch: recorded, the sweep goes on
        case.device.empty_cache()
        if _host_alloc_failed(e):
            return skipped(case, f"out of memory at batch {b} on {case.device.name}", oom=True)
        return skipped(case, f"the model raised {one_line(e)} at batch {b}")
    if result.ok and workload.measure_energy and case.device.is_accelerator:
        result.extra["energy"] = cast("Energy", _trace_energy(result, int(b)))
    return result


def analyse(record: RunRecord, devices: Sequence[Device], prices: Mapping[str, float]) -> None:
    """Break-even per accelerator and cost per million items, into the run's payload."""
    p = record.payload
    assert isinstance(p, ModelPayload)
    cpus = [d for d in devices if not d.is_accelerator]
    gpus = [d for d in devices if d.is_accelerator]
    if not gpus:
        p.break_even, p.break_even_note = {}, breakeven.NO_GPU
    elif not cpus:
        p.break_even = {}
        p.break_even_note = "the CPU was not measured: break-even not available"
    else:
        found = breakeven.break_even(
            record.results, cpus[0].name, [g.name for g in gpus], {g.name: g.label() for g in gpus}
        )
        p.break_even = {gpu: BreakEven.model_validate(e) for gpu, e in found.items()}
    if prices:
        priced = cost.device_prices(prices, devices)
        p.cost = CostTable.model_validate(cost.cost_table(record.results, priced))
